#pragma once
// Prefill GEMM on Hopper (sm_90a): the host-side contract of the wgmma NVFP4 kernels in
// src/cuda/prefill. Tile configurations and their shared-memory feasibility, the dispatch policy,
// the packed weight layout the kernels read, and the FP4 -> BF16 dequantization arithmetic the
// kernels run. The arithmetic is host/device so that host tests check it exhaustively.
//
// Operand roles. The problem is D[M, N] = alpha * A[M, K] * B[N, K]^T with B the NVFP4 weight.
// The kernels compute D^T = B * A^T: the weight is wgmma's A operand, dequantized into registers
// ("A from registers"), and the bf16 activations are wgmma's B operand, read from shared memory.
// So a CTA tile is kBlockN weight rows (two consumer warpgroups x wgmma M = 64) by block_m
// activation rows (wgmma N) by kBlockK.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/detail/byte_perm.hpp"
#include "fp4gap/detail/host_device.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/status.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap {
struct DeviceSpec;  // fp4gap/device_specs.hpp
}  // namespace fp4gap

namespace fp4gap::prefill {

inline constexpr int kBlockN = 128;  // weight rows per CTA: 2 row warpgroups x 64
inline constexpr int kBlockK = 64;   // 64 bf16 = one 128-byte swizzle row of activations
// Consumer warpgroups, each owning 64 weight rows of the tile.
inline constexpr int kConsumerWarpgroups = 2;
// Weight rows of a wide tile (TileConfig::weight_rows): three consumer warpgroups.
inline constexpr int kWideWeightRows = 192;
// One packed weight chunk (kBlockN rows x kBlockK columns): codes then scales, contiguous so that
// one bulk copy moves it.
inline constexpr int kChunkCodeBytes = kBlockN * kBlockK / 2;            // 4096
inline constexpr int kChunkScaleBytes = kBlockN * (kBlockK / kBlockSize);  // 512
inline constexpr int kChunkBytes = kChunkCodeBytes + kChunkScaleBytes;
// Largest split-K factor: split CTAs of one tile form a thread-block cluster and reduce their
// partial sums through distributed shared memory; 8 is the portable cluster size limit.
inline constexpr int kMaxSplitK = 8;
// Row stride, in floats, of the staged output tile [block_m][kBlockN]: 4 floats of padding make the
// consumers' fragment writes conflict-free (bank = (4 row + col) % 32 over a warp's lanes) and keep
// rows 16-byte aligned for the vector reads that feed the global stores.
inline constexpr int kStagedStride = kBlockN + 4;
// Upper bound on the prefill kernel's own (static) shared memory: its split-K barriers and flag
// (80 bytes from nvcc 13.0; a device test checks every instantiation against it). A block needs
// this beside its dynamic request, within the device's per-block opt-in limit.
inline constexpr int kKernelStaticSmemBytes = 128;
// The dynamic shared memory a block may request where the device's per-block opt-in limit is `optin`.
constexpr std::int64_t dynamic_smem_limit(std::int64_t optin) { return optin - kKernelStaticSmemBytes; }

// ---- Tile configurations ----

// One compiled kernel instantiation. The list is closed (prefill_tile_configs()): each entry is a
// template instantiation in src/cuda/prefill/prefill_gemm.cu.
struct TileConfig {
  int block_m = 256;  // activation rows per CTA (the wgmma N): 16 to 256, a multiple of 16
  int stages = 6;     // shared-memory pipeline depth
  // One CTA per SM loops over output tiles (unsplit only): its producer fills the ring with the
  // next tile's stages while the consumers run the epilogue of the current one, which stages the
  // 16-bit output tile in shared memory of its own (persistent_staging_bytes) instead of the ring.
  bool persistent = false;
  // K blocks that one pair of copies brings in (one bulk copy of their weight chunks, one 3D
  // tensor copy of their activation tiles), arriving on one barrier; they still occupy one ring
  // stage each. A CTA's copy engine keeps only a few copies in flight, whatever their size
  // (PERF-LOG run 42: a stream of 4.6 KB copies arrives at ~34 GB/s per CTA, of 37 KB ones at
  // ~165); m128 runs ~10% faster per K block with 3 (runs 43-45), the narrow tiles 19-25% with 4
  // (runs 52-53). Divides `stages`.
  int copy_group = 1;
  // Weight rows per CTA (the output columns of a tile): kBlockN, two consumer warpgroups of 64
  // rows, or kWideWeightRows, three (a wide tile, KERNELS-prefill item 1f: a 512-thread kernel of
  // its own that runs unsplit and reads the two packed chunks its three 64-row slices lie in).
  int weight_rows = kBlockN;

  // Consumer warpgroups: one per 64 weight rows.
  int consumer_warpgroups() const { return weight_rows / 64; }
  // Whether plans of this config may split K (the wide tiles and the persistent configs run unsplit).
  bool splits() const { return !persistent && weight_rows == kBlockN; }

  // Whether split plans of this config may add their partials in a global workspace
  // (SplitReduction::workspace): the tiles of at most 64 rows. There the last CTA to arrive brings
  // every split's partial tile (8-32 KB) back with bulk copies and adds them; for the wider tiles
  // the cluster reduction, which spreads the adding over all split CTAs, is left.
  FP4GAP_HD static constexpr bool workspace_split(int block_m, bool persistent) { return block_m <= 80 && !persistent; }
  bool workspace_split() const { return workspace_split(block_m, persistent); }

  // Whether this config's kernel can take NVFP4 activations and dequantize them itself (W4A4
  // without the separate bf16 pass; check_activation_dequant_in_kernel adds the rules on K and
  // shared memory): one tile per CTA of at most 64 activation rows. Its consumer warpgroups
  // dequantize the CTA's whole K range into shared memory before their first K block, while the
  // first weight copies are still in flight (~2.3 us at decode sizes, PERF-LOG run 61).
  FP4GAP_HD static constexpr bool dequantizes_activations(int block_m, bool persistent) {
    return block_m <= 64 && !persistent;
  }
  bool dequantizes_activations() const { return dequantizes_activations(block_m, persistent); }

  // e.g. "sm90a bf16 x nvfp4 m256n128k64 6 stages", "... 4 stages persistent",
  // "... m128n128k64 9 stages, 3 K blocks per copy"
  std::string name() const;
  // Threads per CTA: the consumer warpgroups and one producer warpgroup.
  int threads() const { return 128 * (consumer_warpgroups() + 1); }
  // Dynamic shared memory the kernel requests: the output staging of a persistent config, the
  // stage ring, its barriers, 1 KB of alignment slack (the 128-byte swizzle needs 1024-byte
  // aligned tiles).
  std::int64_t smem_bytes() const;
  // A persistent config's bf16/f16 output tile [block_m][kBlockN] for the TMA-store epilogue; 0
  // for the others (their epilogues reuse the ring).
  std::int64_t persistent_staging_bytes() const;
  // Shared memory a split-K reduction needs to hold one CTA's fp32 partial tile; it reuses the
  // stage ring, so it must fit in it.
  std::int64_t partial_tile_bytes() const;
  // Shared memory of the fp32 output tile staged for coalesced stores (rows padded to
  // kStagedStride floats); it reuses the stage ring too.
  std::int64_t staged_tile_bytes() const;
  // Shared memory of a split-K CTA's epilogue: its partial tile (read by the other CTAs of the
  // cluster) followed by its reduced share of the rows, staged; at most half the rows for
  // split >= 2. It reuses the stage ring.
  std::int64_t split_epilogue_bytes() const;
  // Bytes of one pipeline stage: the activation tile plus the packed weight chunks (one; a wide
  // tile two).
  std::int64_t stage_bytes() const;
};

const std::vector<TileConfig>& tile_configs();

// ok, or not_supported naming the bytes needed and available.
Status check_tile_config(const TileConfig& c, const DeviceContext& device);

// ---- Dispatch policy (plain C++, host-tested) ----

// How the split_k CTAs of one output tile add their partial sums (both in split order, so
// repeated runs are bitwise equal):
//   cluster:   the CTAs form a thread-block cluster and each adds a band of the tile from the
//              others' shared memory (a split of 2 with 16-bit outputs: the other's band through
//              L2, Plan::workspace_bytes). A cluster must fit in one GPC, so fewer CTAs run at once
//              (the H200 runs 102 CTAs in clusters of 6, 120 in clusters of 4 or 8).
//   workspace: each CTA stores its partial tile to a global workspace and the last of them to
//              arrive (a counter per tile) adds all and stores the tile; no cluster, so every SM
//              can run one. The adding is one CTA's, so it suits the narrow tiles.
enum class SplitReduction { cluster, workspace };

struct Plan {
  TileConfig config;
  int split_k = 1;           // CTAs sharing one output tile along K
  SplitReduction reduction = SplitReduction::cluster;  // when split_k > 1
  std::int64_t m_tiles = 0;  // ceil(M / block_m)
  std::int64_t n_tiles = 0;  // ceil(N / config.weight_rows)
  std::int64_t k_blocks = 0; // ceil(K / kBlockK)
  // Launched as a programmatic dependent launch (launch_gemm's `programmatic`): make_plan sets
  // launches_programmatically(config); a tune cache's plan may say otherwise (launch_override).
  bool programmatic = false;
  // Work units: output tiles x split_k. A persistent config launches at most one CTA per
  // concurrently resident slot and loops over them.
  std::int64_t ctas() const { return m_tiles * n_tiles * split_k; }
  // CTAs that form one cluster at launch: split_k with a cluster reduction, else 1.
  int cluster_size() const { return split_k > 1 && reduction == SplitReduction::cluster ? split_k : 1; }
  // Whether the split-K partials meet in a global workspace (a split plan with that reduction).
  bool workspace_reduction() const { return split_k > 1 && reduction == SplitReduction::workspace; }
  // Device memory launch_gemm needs (0: none): for a workspace reduction, the partial tiles
  // (fp32, tiles x split_k x block_m x kBlockN) followed by one 32-bit counter per tile, which
  // must be zero before the first launch; every launch leaves them zero. For a cluster split of
  // 2, one fp32 tile per output tile, through which the two CTAs exchange their bands (16-bit
  // outputs through the copy engine; the others exchange through distributed shared memory). For a
  // persistent plan of at least kPairSplitMinKBlocks K blocks, one fp32 tile and a 32-bit counter
  // per pair its last wave may split along K (persistent_pairs_bound: sized without knowing how
  // many CTAs run at once, so up to 16 MB at large M where the launch may use none of it); the
  // counters must be zero before the first launch and stay even after each.
  std::int64_t workspace_bytes() const;
  // Rows of the largest band that a CTA of a cluster split adds up and stores through the copy
  // engine (cluster_band_pairs: 16 rows per pair of accumulator quads); 0 where it is not a
  // cluster split or some CTA would get no pair (then the quads are shared one by one and stored
  // through the staged fp32 band).
  int cluster_band_rows() const;
  // config name plus split, e.g. "... 6 stages, split-k 4", "..., split-k 8 (partials in global memory)"
  std::string describe() const;
};

// CTAs of `config` that run at once when launched in clusters of `split` (one CTA per SM: the
// stage ring fills shared memory; a cluster must fit inside one GPC, so this can be below the SM
// count). The CUDA library answers it from the occupancy API.
using ConcurrentCtas = std::function<int(const TileConfig& config, int split)>;

// Without a device to ask: floor(sm_count / split) * split.
int default_concurrent_ctas(const DeviceContext& device, int split);

// For planning without the device: the datasheet entry's measured cluster occupancy
// (DeviceSpec::cluster_ctas_at_once; every prefill configuration runs one CTA per SM), or an
// empty function where the entry has none for some split up to kMaxSplitK.
ConcurrentCtas datasheet_concurrent_ctas(const fp4gap::DeviceSpec& spec);

// How a launch of `plan` fills the SMs when `ctas_at_once` of its CTAs (in its clusters) are
// resident, for the report's "why" (GemmRunner::launch_fill): a persistent plan launches at most
// that many CTAs over its tiles, and a halved last wave costs what the cost model charges a half
// tile's K block against a whole tile's.
LaunchFill launch_fill(const Plan& plan, int ctas_at_once);

// One (configuration, split) the policy weighs for a shape: not_supported with the reason
// (shared memory, a cluster that cannot run) or ok with the CTAs that run at once, the waves and
// the predicted time of the per-tile cost model (microseconds, fitted on the H200).
struct PlanCandidate {
  TileConfig config;
  int split_k = 1;
  SplitReduction reduction = SplitReduction::cluster;
  Status status;
  Plan plan;                  // valid when status is ok
  int concurrent_ctas = 0;
  std::int64_t waves = 0;
  double predicted_us = 0.0;
};

// Every configuration (one not_supported entry per configuration that does not fit the device)
// and every split 1..min(kMaxSplitK, K blocks) of the feasible ones (split 1 only for a persistent
// config), each split above 1 with a cluster and then a workspace reduction, in the policy's
// order: tile_configs() order, then smaller split. `concurrent` empty: default_concurrent_ctas.
std::vector<PlanCandidate> plan_candidates(std::int64_t m, std::int64_t n, std::int64_t k, const DeviceContext& device,
                                           const ConcurrentCtas& concurrent = {});

// The ok candidate with the smallest predicted time (ties keep the earlier one); nullptr when
// none is ok.
const PlanCandidate* best_candidate(const std::vector<PlanCandidate>& candidates);

// The ok candidate of `candidates` that a measured plan names (tune_cache.hpp: its configuration's
// name, split and reduction): ok with it, or not_supported naming why it cannot run here (a
// configuration this build does not have, a split the candidates do not list, the candidate's
// own reason such as shared memory or a cluster that cannot run).
struct NamedCandidate {
  Status status;
  const PlanCandidate* candidate = nullptr;
};
NamedCandidate find_candidate(const std::vector<PlanCandidate>& candidates, const std::string& config_name,
                              int split_k, bool workspace_reduction);

// The entry of `cache` that the prefill backends follow for `problem` on `device`: the one for
// exactly this problem; else an entry of another M (same device, backend, N, K, output) that timed
// the launches its plans make at this M: each of its plans has as many row tiles at both M (so the
// same grid, split and K range per CTA; only the rows of data in the last row of tiles differ) and
// `policy`, the plan the backend runs without a cache here, is one of them. Of those the nearest
// M, the larger on a tie: an entry at M = 128 whose plans have tiles of 64 and 128 rows serves M = 65-128, one
// that also measured a 32-row tile M = 97-128. nullptr: none.
const tune::Entry* tuned_entry(const tune::Cache& cache, const tune::DeviceKey& device, const tune::ProblemKey& problem,
                               const Plan& policy);

// Whether `measured` is a measurement of `plan`: the same configuration, split, reduction and
// launch (an absent MeasuredPlan::programmatic is the configuration's own launch).
bool measures(const tune::MeasuredPlan& measured, const Plan& plan);

// The plan the active tune cache (tune::active_cache) measured fastest for `problem` on `device`
// (tuned_entry), when that plan can run (find_candidate); `note` says what was used or why the
// entry was not (empty: no entry, the policy decides); `entry` is the entry followed (nullptr: none).
struct TunedChoice {
  std::optional<Plan> plan;
  std::string note;
  const tune::Entry* entry = nullptr;
};
TunedChoice tuned_plan(const std::string& backend, std::int64_t m, std::int64_t n, std::int64_t k, OutputType out,
                       const DeviceContext& device, const std::vector<PlanCandidate>& candidates, const Plan& policy);

// best_candidate of plan_candidates, as a plan. Throws
// InvalidArgument when no configuration fits (the message names the shared memory available).
Plan choose_plan(std::int64_t m, std::int64_t n, std::int64_t k, const DeviceContext& device,
                 const ConcurrentCtas& concurrent = {});

// Whether the backends launch `config` as a programmatic dependent launch (sm_90): its first
// weight stages load while the previous kernel in the stream finishes, and the next kernel may
// start once this one's main loops are done. Measured on the H200 (PERF-LOG run 16): 1.2-1.9 us
// faster per launch for the tiles of up to 64 activation rows at M <= 64, 3-9% for m128 at
// M = 128; mixed for the m256 tiles (up to 4 us slower at M <= 64, split 4) and not measured at
// large M, so those launch plainly (PERF-LOG run 142, an H100: programmatically they were 1-5%
// faster back to back but 0.3-2.4% slower behind a norm at M = 384-1024). m80, m96 and m144 (m64
// and m128 with rows more) launch as m64 and m128 do, not measured the other way.
constexpr bool launches_programmatically(const TileConfig& config) { return config.block_m <= 144; }

// ", launched programmatically" or ", launched plainly" where `plan` launches otherwise than
// launches_programmatically says for its configuration (a plan `fp4gap tune` measured the other
// way: PERF-LOG run 48 found single-wave m192 / m256 plans 0.8-1.5 us faster launched
// programmatically at the median, but some 1-8 us slower, which no rule by waves separated); empty
// otherwise.
std::string launch_override(const Plan& plan);
// The words launch_override uses for either launch.
std::string_view launch_label(bool programmatic);

// Dynamic shared memory of a launch of `plan` that dequantizes NVFP4 activations in the kernel:
// the CTA's activation tiles of all of its K blocks stay resident where the ring's activation
// stages are, which grow from `stages` to ceil(k_blocks / split_k) K blocks when the range is
// longer (the weight chunks keep their ring).
std::int64_t activation_dequant_smem_bytes(const Plan& plan);

// Whether a launch of `plan` can take NVFP4 activations [*, k] and dequantize them itself: ok, or
// not_supported naming the rule broken: TileConfig::dequantizes_activations, whole K blocks
// (k % 64 == 0), and activation_dequant_smem_bytes within `smem_per_block` (the device's opt-in
// limit).
Status check_activation_dequant_in_kernel(const Plan& plan, std::int64_t k, std::int64_t smem_per_block);

// Whether the W4A4 backends take the in-kernel dequantization for `plan` where it is possible:
// the consumers dequantize block_m x ceil(k_blocks / split_k) x 64 activations before their first
// K block (~5 instructions per value), which the first weight copies hide only when few. PERF-LOG
// run 65 (H200, against the separate pass in the same run): m16 with 12 K blocks per CTA (192
// row-blocks) 1.2-1.4 us faster; every plan from 256 row-blocks 0.4-2.1 us slower (but one point
// within noise).
inline constexpr std::int64_t kActivationDequantMaxRowBlocks = 192;
bool prefers_activation_dequant_in_kernel(const Plan& plan);

// Whether W4A4 on `plan` takes its activations dequantized in the kernel rather than behind the
// separate pass: preferred there and possible within `smem_per_block`. fp4gap-prefill-w4a4
// (through prefill::w4a4_dequantizes_in_kernel with the kernel's own limit) and `fp4gap plan`
// follow it.
bool w4a4_dequantizes_in_kernel(const Plan& plan, std::int64_t k, std::int64_t smem_per_block);

// The candidate the W4A4 backends run behind the separate activation pass (where
// w4a4_dequantizes_in_kernel does not take the chosen plan): best_candidate without the workspace
// split plans. Those hold one CTA per SM on up to every SM, so the pass, launched behind the
// previous kernel, finds no free SM until that kernel's CTAs exit: on the H200 they were 0.3-1.5
// us (W13, M = 16-64) and up to 2.7 us (seed shape, M = 24-32) slower there than the plans
// without them (PERF-LOG runs 66 and 84, the latter after the carveout fix). nullptr when no
// such candidate is ok.
const PlanCandidate* best_candidate_behind_activation_pass(const std::vector<PlanCandidate>& candidates);

// The plan W4A4 runs for a shape whose policy pick is `chosen` (best_candidate of `candidates`):
// `chosen` where its kernel dequantizes the activations (`dequantizes_in_kernel`, from
// w4a4_dequantizes_in_kernel), otherwise best_candidate_behind_activation_pass, or `chosen` when
// none is ok. fp4gap-prefill-w4a4 runs it and `fp4gap plan` shows it.
Plan w4a4_plan(const Plan& chosen, bool dequantizes_in_kernel, const std::vector<PlanCandidate>& candidates);

// The plan a prefill backend runs without a tune cache: best_candidate of `candidates`, and for
// W4A4 the plan w4a4_plan makes of it, its kernel dequantizing the activations where
// w4a4_dequantizes_in_kernel takes it within `smem_per_block` (the kernel's opt-in limit less its
// own shared memory). fp4gap-prefill-w4a4 runs it, `fp4gap plan` shows it, `fp4gap tune` measures it
// first. Throws InvalidArgument as choose_plan does when no candidate is ok.
struct PolicyPlan {
  Plan plan;
  bool w4a4_in_kernel = false;  // W4A4 only: the kernel dequantizes the activations (no separate pass)
};
PolicyPlan policy_plan(const std::vector<PlanCandidate>& candidates, bool w4a4, std::int64_t k,
                       std::int64_t smem_per_block, const DeviceContext& device);

// A plan for an explicit configuration and split (tests and the tuner); throws InvalidArgument
// when split_k is outside [1, kMaxSplitK], or above 1 for a persistent config.
Plan make_plan(std::int64_t m, std::int64_t n, std::int64_t k, const TileConfig& config, int split_k,
               SplitReduction reduction = SplitReduction::cluster);

// K blocks [begin, end) that split `s` of `split_k` accumulates; every split gets at most one
// block more than another, and none is empty while k_blocks >= split_k.
using KRange = ItemRange;
FP4GAP_HD constexpr KRange split_k_range(std::int64_t k_blocks, int split_k, int s) {
  return even_part(k_blocks, split_k, s);
}

// A cluster split's bands for the copy engine: the tile's accumulator quads (8 output rows each)
// shared out two at a time, as one stmatrix x4 writes them, so every band is whole 16-row slices
// of the tile; where the block_m / 16 pairs do not divide by split_k the first CTAs take one pair
// more (m208 at split 2: 112 and 96 rows). Pairs [begin, end) of CTA `rank`.
FP4GAP_HD constexpr ItemRange cluster_band_pairs(int block_m, int split_k, int rank) {
  return even_part(block_m / 16, split_k, rank);
}
// Rows of the tensor map's box that stores those bands: the band where all are alike, else one
// 16-row slice per store.
FP4GAP_HD constexpr int cluster_band_box_rows(int block_m, int split_k) {
  return (block_m / 16) % split_k == 0 ? 16 * (block_m / 16 / split_k) : 16;
}

// ---- Persistent schedule ----
//
// A persistent CTA b of G resident ones runs the work units b, b + G, b + 2G, ...: whole tiles in
// tile order (tile = m_tile * n_tiles + n_tile), except that when the tiles end in a partial wave of
// R tiles after at least one full wave and 2R <= G, those last R tiles run as 2R units of
// block_m / 2 activation rows each (first half, then second). The last wave then costs a half
// tile's main loop instead of a whole one's (~0.75x, run 33: 0.47 against 0.61-0.64 us per K block;
// the narrow wgmma is bound by the dequantization, docs/KERNELS-prefill.md) and no partial sums
// meet: each half is a complete output tile of its own. A half that starts at or beyond M is
// empty and skipped. From 64 K blocks the pair splits the tile along K instead
// (last_wave_splits_k, below).
struct PersistentSchedule {
  std::int64_t whole_tiles = 0;   // units [0, whole_tiles): tiles 0 .. whole_tiles - 1
  std::int64_t halved_tiles = 0;  // units whole_tiles + 2h, + 2h + 1: the two halves of tile whole_tiles + h
  FP4GAP_HD constexpr std::int64_t units() const { return whole_tiles + 2 * halved_tiles; }
};
FP4GAP_HD constexpr PersistentSchedule persistent_schedule(std::int64_t tiles, std::int64_t ctas) {
  const std::int64_t last = ctas > 0 ? tiles % ctas : 0;
  if (tiles > ctas && last > 0 && 2 * last <= ctas) return {tiles - last, last};
  return {tiles, 0};
}
// With at least kPairSplitMinKBlocks K blocks a last wave's tile is not halved by rows but by K:
// its two units each add half of the K range over all block_m rows, as fast per K block as a whole
// tile, and the pair's CTAs then exchange the halves of their partial tiles through the plan's
// workspace, each adding and storing one half of the rows (PERF-LOG run 199, an H100: the persistent
// m256 at glm5 W13 M = 2560, 96 K blocks, 4% faster, its last main loop 10.5 us shorter for an
// exchange of ~3.3 us; at 32 K blocks a tie).
inline constexpr int kPairSplitMinKBlocks = 64;
FP4GAP_HD constexpr bool last_wave_splits_k(std::int64_t k_blocks) { return k_blocks >= kPairSplitMinKBlocks; }
// A persistent launch runs at most this many CTAs (launch_gemm checks it), so that the workspace of
// a last wave split along K can be sized without the device: it has R <= tiles / 3 pairs
// (tiles >= G + R >= 3R) and R <= G / 2.
inline constexpr int kMaxPersistentCtas = 256;
FP4GAP_HD constexpr std::int64_t persistent_pairs_bound(std::int64_t tiles) {
  return tiles / 3 < kMaxPersistentCtas / 2 ? tiles / 3 : kMaxPersistentCtas / 2;
}
// That workspace: an fp32 partial tile per pair (block_m x kBlockN), then a 32-bit counter per pair
// from this byte offset.
FP4GAP_HD constexpr std::int64_t persistent_pair_counters_offset(std::int64_t tiles, int block_m) {
  return persistent_pairs_bound(tiles) * block_m * kBlockN * 4;
}

// ---- Packed weight layout ----
//
// The weight [N, K] is stored as chunks of kBlockN rows x kBlockK columns, chunk (nt, kb) at byte
// (nt * k_blocks + kb) * kChunkBytes. Rows >= N and columns >= K are zero codes with zero scales.
// Inside a chunk:
//   codes:  4 KB, one 32-bit word per (warpgroup wg, thread tid of the warpgroup, k16 step j) at
//           byte ((wg * 128 + tid) * 4 + j) * 4, so each consumer thread loads its 4 words with
//           one 16-byte load. The word holds the 8 codes of the thread's wgmma A fragment for
//           step j (with warp w = tid / 32, g = (tid % 32) / 4, t = tid % 4: register reg is row
//           r0 + 8 (reg & 1), r0 = 64 wg + 16 w + g, columns 16 j + 2t + 8 (reg >> 1) + {0, 1}) as
//           decode::pack_shuffled_word(w4a16) arranges them, so decode::unpack_shuffled_word
//           gives the 4 registers as e2m1 * 2^-126 in 11 integer operations. A zero-scale block
//           has zero codes; a negative scale's sign is folded into its codes.
//   scales: 512 bytes at kChunkCodeBytes, [128 rows][4 scale blocks] of
//           decode::encode_scale_multiplier(e4m3, w4a16) bytes, row-major: decode::scale_multipliers
//           turns a row's word into two registers of bf16 multipliers scale * 2^119 (bytes 0, 2
//           and 1, 3), each half read by HMUL2's half selector, and the product with the codes is
//           e2m1 * scale * 2^-7, exact. The kernels multiply alpha by 2^7 in the epilogue.
struct PackedWeights {
  std::int64_t n = 0, k = 0;
  std::int64_t n_tiles = 0, k_blocks = 0;
  std::vector<std::uint8_t> bytes;
};
// Accepts either scale layout. Throws InvalidArgument when cols % 16 != 0, the arrays are
// shorter than the shape says, or a scale byte is the E4M3 NaN (naming its row and block).
PackedWeights pack_weights(const Nvfp4Matrix& w);

FP4GAP_HD constexpr std::int64_t chunk_offset(std::int64_t nt, std::int64_t kb, std::int64_t k_blocks) {
  return (nt * k_blocks + kb) * kChunkBytes;
}

// A wide tile (TileConfig::weight_rows = kWideWeightRows) reads the packed chunks above: its
// 64-row slices 3 tile + w (w = its consumer warpgroup) lie in chunks `first` and `first + 1`,
// slice s being half s % 2 of chunk s / 2. A chunk past N (`count` 1) is not copied: the slices
// in it lie wholly past N.
struct WideTileChunks {
  int first = 0;  // chunk index (the `nt` of chunk_offset)
  int count = 0;  // chunks that exist: 1 or 2
};
FP4GAP_HD constexpr WideTileChunks wide_tile_chunks(int tile, int n) {
  const int first = 3 * tile / 2;
  const int chunks = (n + kBlockN - 1) / kBlockN - first;
  return {first, chunks < 2 ? chunks : 2};
}
// The chunk (0 or 1, counted from WideTileChunks::first) and the half (the chunk's warpgroup
// index) that warpgroup `w` of wide tile `tile` dequantizes.
FP4GAP_HD constexpr int wide_slice_chunk(int tile, int w) { return (3 * tile + w) / 2 - 3 * tile / 2; }
FP4GAP_HD constexpr int wide_slice_half(int tile, int w) { return (3 * tile + w) % 2; }
FP4GAP_HD constexpr int chunk_code_word_offset(int wg, int tid, int j) { return ((wg * 128 + tid) * 4 + j) * 4; }
FP4GAP_HD constexpr int chunk_scale_offset(int row, int j) { return kChunkCodeBytes + row * 4 + j; }

// ---- FP4 -> BF16 dequantization (exact), shared verbatim by the kernels and the host tests ----

// Two bf16 multiplied lane-wise, rounded to nearest even. Used here only on products that are
// exact (E2M1 value x E4M3 scale: at most 6 significant bits, within [2^-10, 2688]).
FP4GAP_HD std::uint32_t bf16x2_mul(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  std::uint32_t d;
#if __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  // -0.0 as the addend keeps the sign of a negative-zero product.
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
  return d;
#else
  const float lo = bits_float(a << 16) * bits_float(b << 16);
  const float hi = bits_float(a & 0xFFFF0000u) * bits_float(b & 0xFFFF0000u);
  return static_cast<std::uint32_t>(float_to_bf16(lo)) | (static_cast<std::uint32_t>(float_to_bf16(hi)) << 16);
#endif
}

// The E4M3 scale `byte` as a bf16 in both halves of a 32-bit word (exact: 4 significant bits).
// The 7 exponent+mantissa bits placed at float bits 26..20 give scale * 2^-120 exactly, E4M3
// subnormals landing on float subnormals; the multiply by 2^120 is exact. Needs float subnormals
// (nvcc's default -ftz=false). The NaN byte 0x7F never occurs in quantized data.
FP4GAP_HD std::uint32_t e4m3_to_bf16x2(std::uint32_t byte) {
  const float f = bits_float(((byte & 0x80u) << 24) | ((byte & 0x7Fu) << 20)) * 0x1p120f;
  const std::uint32_t u = float_bits(f);
  return (u & 0xFFFF0000u) | (u >> 16);
}

// BF16 encodings of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (0x0000, 0x3F00, 0x3F80,
// 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0), split into a low-byte and a high-byte table of 8
// entries each, as the two source registers of a byte permute.
inline constexpr std::uint32_t kE2m1Bf16Low0 = 0xC0800000u;   // magnitudes 3..0
inline constexpr std::uint32_t kE2m1Bf16Low1 = 0xC0804000u;   // magnitudes 7..4
inline constexpr std::uint32_t kE2m1Bf16High0 = 0x3F3F3F00u;
inline constexpr std::uint32_t kE2m1Bf16High1 = 0x40404040u;

// Dequantizes the 8 E2M1 codes of `q` (code i in bits 4i..4i+3) into 4 bf16x2 words:
// out[p] = {code 2p, code 2p+1} (low half first), times `scale_even` for p = 0, 2 and
// `scale_odd` for p = 1, 3 (bf16x2 broadcasts from e4m3_to_bf16x2). Exact: table lookups give the
// E2M1 values as bf16 (no subnormals), the sign is copied bitwise, and each product is exact.
FP4GAP_HD void dequant_e2m1x8_bf16(std::uint32_t q, std::uint32_t scale_even, std::uint32_t scale_odd,
                                   std::uint32_t out[4]) {
  const std::uint32_t mag = q & 0x77777777u;  // byte-permute selectors must have bit 3 clear
  const std::uint32_t mag_hi = mag >> 16;
  const std::uint32_t lo_a = byte_perm(kE2m1Bf16Low0, kE2m1Bf16Low1, mag);
  const std::uint32_t hi_a = byte_perm(kE2m1Bf16High0, kE2m1Bf16High1, mag);
  const std::uint32_t lo_b = byte_perm(kE2m1Bf16Low0, kE2m1Bf16Low1, mag_hi);
  const std::uint32_t hi_b = byte_perm(kE2m1Bf16High0, kE2m1Bf16High1, mag_hi);
  // Interleave low and high bytes: {lo0, hi0, lo1, hi1} and {lo2, hi2, lo3, hi3}.
  std::uint32_t v0 = byte_perm(lo_a, hi_a, 0x5140u);
  std::uint32_t v1 = byte_perm(lo_a, hi_a, 0x7362u);
  std::uint32_t v2 = byte_perm(lo_b, hi_b, 0x5140u);
  std::uint32_t v3 = byte_perm(lo_b, hi_b, 0x7362u);
  // Signs: byte b of q holds codes 2b (sign at bit 3) and 2b+1 (sign at bit 7); in q << 4 the sign
  // of code 2b is at bit 7 of byte b. One permute moves both signs of a pair to bits 15 and 31.
  const std::uint32_t qs = q << 4;
  v0 |= byte_perm(q, qs, 0x0040u) & 0x80008000u;
  v1 |= byte_perm(q, qs, 0x1050u) & 0x80008000u;
  v2 |= byte_perm(q, qs, 0x2060u) & 0x80008000u;
  v3 |= byte_perm(q, qs, 0x3070u) & 0x80008000u;
  out[0] = bf16x2_mul(v0, scale_even);
  out[1] = bf16x2_mul(v1, scale_odd);
  out[2] = bf16x2_mul(v2, scale_even);
  out[3] = bf16x2_mul(v3, scale_odd);
}

}  // namespace fp4gap::prefill
