// Tile configurations of the Hopper prefill kernels, their shared-memory feasibility, and the
// dispatch policy choosing a tile and split-K factor per shape.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gap/device_specs.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/report.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap::prefill {

std::string TileConfig::name() const {
  std::ostringstream os;
  os << "sm90a bf16 x nvfp4 m" << block_m << "n" << weight_rows << "k" << kBlockK << " " << stages << " stages";
  if (persistent) os << " persistent";
  if (copy_group > 1) os << ", " << copy_group << " K blocks per copy";
  return os.str();
}

std::int64_t TileConfig::stage_bytes() const {
  return static_cast<std::int64_t>(block_m) * kBlockK * 2 + (weight_rows == kBlockN ? 1 : 2) * kChunkBytes;
}

std::int64_t TileConfig::smem_bytes() const {
  const std::int64_t barriers = 2 * static_cast<std::int64_t>(stages) * 8;  // full + empty mbarriers
  return persistent_staging_bytes() + stages * stage_bytes() + barriers + 1024;
}

std::int64_t TileConfig::persistent_staging_bytes() const {
  return persistent ? static_cast<std::int64_t>(block_m) * kBlockN * 2 : 0;
}

std::int64_t TileConfig::partial_tile_bytes() const {
  // Each of the 2 x 128 consumer threads holds block_m / 2 fp32 accumulators.
  return static_cast<std::int64_t>(kConsumerWarpgroups) * 128 * (block_m / 2) * 4;
}

std::int64_t TileConfig::staged_tile_bytes() const { return static_cast<std::int64_t>(block_m) * kStagedStride * 4; }

std::int64_t TileConfig::split_epilogue_bytes() const {
  return partial_tile_bytes() + static_cast<std::int64_t>(block_m / 2) * kStagedStride * 4;
}

const std::vector<TileConfig>& tile_configs() {
  // Must match the instantiations in src/cuda/prefill/prefill_gemm.cu.
  static const std::vector<TileConfig> configs = {
      {256, 6},  // 225,376 B of shared memory: the large-M workhorse
      {128, 9},  // 190,096 B: more tiles for small M; 9 stages, a multiple of its 3 fragment buffers
      {64, 12},  // 154,816 B: M <= 64 (decode-sized batches, MoE experts), twice the tiles again
      // 216,128 B: M >= 1024: the next tile's first stages load during this tile's epilogue; 4
      // stages leave room for the 64 KB output staging (and measured ~7% faster than 6 stages at
      // one tile per CTA, run 13).
      {256, 4, true},
      // 3/4 of the m256 tile's tensor work per K block, still above the consumers'
      // dequantization: M = 384, 768, 1536 fill the H200's 132 SMs with whole tiles where m256
      // leaves a quarter of a wave idle.
      // 176,224 B: a multiple of its 2 fragment buffers, so the ring unrolls. 2 K blocks per copy
      // since run 187 (an H100): 3-6% faster than one (W13 M = 768: 53.4 -> 51.0 us).
      {192, 6, false, 2},
      // 225,376 B (48 KB of output staging). 2 K blocks per copy since run 194 (an H100): 2-4%
      // faster at W2 M = 768 (33.8 / 33.2 -> 32.9 / 32.6 us), 1% at deepseek-v3 W2 M = 1248-1344,
      // 3.5-6% at two and three waves with K = 6144 (M = 2080), 1-5% slower at W2 M = 1472 until
      // every whole tile started at stage 0 (run 196: 57.5 -> 54.1 us there).
      {192, 6, true, 2},
      // m128 with 3 K blocks per copy (190,096 B): ~10% less per K block, ~0.4 us more per CTA
      // (PERF-LOG runs 43-45), so it wins from ~20 K blocks per CTA (the seed shape, M = 512:
      // 48). Copy groups of 3 measured slower for m192 / m256 (6 stages, refilled 3 at a time; 2
      // at a time has been faster for m192 since run 187).
      {128, 9, false, 3},
      // Decode-sized batches (M <= 32), the ring unrolled (12 stages, a multiple of 3 fragment
      // buffers), 4 K blocks per copy: with one copy per K block a narrow tile receives one K block
      // per ~0.35 us (PERF-LOG run 52). 3-13% faster than the tiles with twice the consumer warps
      // (4 warpgroups at 96 registers, removed) in the same sweep (run 52).
      {32, 12, false, 4},  // 105,664 B
      {16, 12, false, 4},  // 81,088 B
      // m64 with 4 K blocks per copy: ~19% less per K block than the plain m64, more per CTA and
      // per cluster reduction (runs 53-54), so it wins from ~30 K blocks per CTA (M = 33-64 at
      // N x K = 4096 x 6144: 13.98 against 14.78 us in the same sweep).
      {64, 12, false, 4},  // 154,816 B
      // m128 G3 and 16 activation rows more (the wgmma N: 128 + 16 as two wgmmas): the M just past
      // a multiple of 128 (M = 520: 4 x 144 rows) without a fifth row of m128 tiles (a second wave
      // at N = 4096) or m192 / m256 tiles that leave a quarter of the SMs idle (PERF-LOG run 135).
      {144, 9, false, 3},  // 208,528 B
      // The same for M just past a multiple of 64 (m64 G4 + 16 rows): PERF-LOG run 139 (an H100)
      // timed the glm5 points it takes 3-17% faster than main's picks (M = 72: W13 16.6 -> 14.4 us;
      // M = 150: W2 15.6 -> 13.0). (m128 G3 + 32 rows spilled with two wgmma groups in flight.)
      {80, 12, false, 4},  // 179,392 B
      // m64 G4 with 32 rows more, for M = 81-96 (one row of tiles where m64 needs two and m128
      // carries 32-47 idle rows): runs 145-146 (an H100) timed the glm5 points it takes 5-12% faster
      // than main's picks (M = 96: W13 16.6 -> 15.8 us, seed 12.8 -> 11.7; seed M = 360 22.9 -> 20.8).
      {96, 12, false, 4},  // 203,968 B
      // m192 with 16 rows more, for M just past a multiple of 192: M = 400 is 2 x 208 rows where
      // m192 needs a third row of tiles and m256 leaves SMs idle. Runs 145-146: 1-7% faster where the
      // policy takes it (W2 M = 400: 24.0 -> 22.4 us; W13 M = 800: 64.1 -> 61.1).
      {208, 6},  // 188,512 B
      // m192 with 32 rows fewer and two stages more (one wgmma group in flight, as m192), for M =
      // 289-320, 577-640 and 1153-1280: 2, 4 or 8 rows of 160 where m144 needs another row and
      // m192 / m256 leave SMs idle. Run 148 (an H100): 1.5-9.7% faster at the 13 glm5 points the
      // policy takes it (W13 M = 640: 51.6 -> 49.5 us; M = 1280: 108.3 -> 97.8).
      // 8 stages since run 179 (7 before): a multiple of its 2 fragment buffers, so the ring
      // unrolls, and one stage deeper; 3.5-4.4% faster at W13 / seed M = 600-640 (an H100). 2 K
      // blocks per copy since run 185 (an H100): 687 SM cycles per K block instead of 760, 5-9%
      // faster at all five glm5 points timed (W13 M = 640: 47.0 -> 44.0 us).
      {160, 8, false, 2},  // 201,856 B
      // m128 on a deeper ring: 10 stages of 2 K blocks per copy (one wgmma group in flight, so the
      // ring unrolls by its 2 fragment buffers) instead of G3's 9 of 3 with two in flight. The
      // consumers' loop fed through the producer loses what the ring's depth does not hide of the
      // copies' round trip (PERF-LOG runs 157-158: 8 stages instead of 6 took 8% off).
      {128, 10, false, 2},  // 211,104 B
      // Wide tiles (KERNELS-prefill item 1f): 192 weight rows, three consumer warpgroups, 8 stages
      // of 2 K blocks per copy, unsplit. Shapes whose N is a multiple of 192 get 4 rows of them on
      // 132 SMs where the 128-row tiles fit 3 or 5: W2 (N = 6144) at M = 385-512, 128 tiles where
      // m256 runs 96. PERF-LOG run 167 (an H100): 13-19% faster than main's picks at W2 M =
      // 400-512 (M = 512: 19.99 us against m256's 24.52; cuBLAS BF16 19.7).
      {128, 8, false, 2, kWideWeightRows},  // 205,952 B
      {112, 8, false, 2, kWideWeightRows},  // 189,568 B
      // 96 activation rows: 4 rows of them are M = 384 exactly, where m112 carries 64 idle rows, and
      // its K block costs 879 SM cycles against m112's 969 (run 166's prototype at W2 M = 384).
      // Run 178 (an H100): 6.6-8% faster than the picks it displaced at W2 M = 300-384.
      {96, 8, false, 2, kWideWeightRows},  // 173,184 B
      // m128 with 2 K blocks per copy, persistent: 8 stages beside the 32 KB output staging
      // (201,856 B). Two or more waves of m128 tiles at K = 2048, where each non-persistent CTA
      // spends ~3.6 us of ~15 outside its main loop (PERF-LOG run 184): here the next tile's first
      // copy groups load during the epilogue, and the ring, 4 whole rounds of a 32-block range,
      // still unrolls. Run 189 (an H100): 7-11% faster than the picks it displaced (W2 M = 640
      // 28.4 -> 26.0 us; M = 1344 55.7 -> 50.8).
      {128, 8, true, 2},
      // Wide tiles of 160 and 192 activation rows: W2 (N = 6144) at M = 513-768 as 4 rows of them,
      // 128 CTAs, where the 128-row tiles take 1.5 waves (m192: 192 tiles) or leave SMs idle. Their
      // 80 / 96 accumulators need more than the 128 registers 512 threads get at launch: the
      // producer warpgroup hands registers to the consumers (setmaxnreg, 32 and 160). 6 stages
      // (8 do not fit), as deep in time as m128n192's 8: a K block holds 1.25 / 1.5 times its tensor work.
      {192, 6, false, 2, kWideWeightRows},  // 203,872 B
      {160, 6, false, 2, kWideWeightRows},  // 179,296 B
      // 176 rows where m192's rows of tiles carry 64-127 idle rows and m256 needs another row of
      // tiles: W13 (N = 4096, 22 tiles of 192 weight rows) M = 1025-1056 as 6 rows, 132 CTAs; W2 M =
      // 641-704 (4 rows of 32). One m64n176k16 per step (run 204: 4.4-6.9% faster than m192n192).
      {176, 6, false, 2, kWideWeightRows},  // 191,584 B
  };
  return configs;
}

Status check_tile_config(const TileConfig& c, const DeviceContext& device) {
  if (c.copy_group < 1 || c.stages % c.copy_group != 0) {
    // A group's copies fill whole ring stages in one round: the ring must hold whole groups.
    std::ostringstream os;
    os << c.name() << ": " << c.copy_group << " K blocks per copy must divide the " << c.stages << " stages";
    return Status::not_supported(os.str());
  }
  const std::int64_t need = c.smem_bytes() + kKernelStaticSmemBytes;
  if (need > device.smem_per_block_optin) {
    std::ostringstream os;
    os << c.name() << " needs " << need << " bytes of shared memory per block (" << c.smem_bytes()
       << " requested + up to " << kKernelStaticSmemBytes << " of the kernel's own); " << device.name << " allows "
       << device.smem_per_block_optin;
    return Status::not_supported(os.str());
  }
  const std::int64_t ring = c.stages * c.stage_bytes();
  // A persistent config's epilogue never touches the ring (the producer is refilling it) and it
  // never splits; a wide tile stages its 16-bit tile there or stores fp32 from its fragments.
  if (c.splits() && (c.split_epilogue_bytes() > ring || c.staged_tile_bytes() > ring)) {
    std::ostringstream os;
    os << c.name() << ": the split-K epilogue (" << c.split_epilogue_bytes() << " bytes) or the staged output tile ("
       << c.staged_tile_bytes() << " bytes) does not fit in the stage ring (" << ring << " bytes)";
    return Status::not_supported(os.str());
  }
  return Status::ok();
}

std::int64_t activation_dequant_smem_bytes(const Plan& plan) {
  const TileConfig& c = plan.config;
  const std::int64_t range = ceil_div(plan.k_blocks, plan.split_k);
  return c.smem_bytes() + std::max<std::int64_t>(0, range - c.stages) * c.block_m * kBlockK * 2;
}

Status check_activation_dequant_in_kernel(const Plan& plan, std::int64_t k, std::int64_t smem_per_block) {
  const TileConfig& c = plan.config;
  std::ostringstream os;
  if (c.persistent) {
    os << c.name() << ": a persistent config's tiles take their activations from the tensor copy only";
  } else if (!c.dequantizes_activations()) {
    os << c.name() << ": only tiles of at most 64 activation rows dequantize NVFP4 activations in the kernel";
  } else if (k % kBlockK != 0) {
    os << "K = " << k << " is not a multiple of " << kBlockK
       << ": the kernel dequantizes whole K blocks of activations (32-byte code rows, 4-byte scale rows)";
  } else if (activation_dequant_smem_bytes(plan) > smem_per_block) {
    os << plan.describe() << ": " << ceil_div(plan.k_blocks, plan.split_k)
       << " K blocks of resident activations per CTA need " << activation_dequant_smem_bytes(plan)
       << " bytes of shared memory per block; " << smem_per_block << " available";
  } else {
    return Status::ok();
  }
  return Status::not_supported(os.str());
}

bool prefers_activation_dequant_in_kernel(const Plan& plan) {
  return plan.config.block_m * ceil_div(plan.k_blocks, plan.split_k) <= kActivationDequantMaxRowBlocks;
}

bool w4a4_dequantizes_in_kernel(const Plan& plan, std::int64_t k, std::int64_t smem_per_block) {
  return prefers_activation_dequant_in_kernel(plan) && check_activation_dequant_in_kernel(plan, k, smem_per_block).is_ok();
}

std::string Plan::describe() const {
  std::ostringstream os;
  os << config.name() << ", split-k " << split_k;
  if (split_k > 1 && reduction == SplitReduction::workspace) os << " (partials in global memory)";
  return os.str();
}

std::int64_t Plan::workspace_bytes() const {
  const std::int64_t tiles = m_tiles * n_tiles;
  if (config.persistent) {
    return last_wave_splits_k(k_blocks)
               ? persistent_pair_counters_offset(tiles, config.block_m) + 4 * persistent_pairs_bound(tiles)
               : 0;
  }
  if (split_k == 2 && reduction == SplitReduction::cluster) return tiles * config.block_m * kBlockN * 4;
  if (split_k == 1 || reduction != SplitReduction::workspace) return 0;
  return tiles * split_k * config.block_m * kBlockN * 4 + tiles * 4;
}

int Plan::cluster_band_rows() const {
  if (split_k == 1 || reduction != SplitReduction::cluster) return 0;
  if (config.block_m / 16 < split_k) return 0;
  const ItemRange first = cluster_band_pairs(config.block_m, split_k, 0);
  return static_cast<int>(16 * (first.end - first.begin));
}

Plan make_plan(std::int64_t m, std::int64_t n, std::int64_t k, const TileConfig& config, int split_k,
               SplitReduction reduction) {
  if (split_k < 1 || split_k > kMaxSplitK) {
    std::ostringstream os;
    os << "split_k outside [1, " << kMaxSplitK << "]: split_k = " << split_k;
    throw InvalidArgument(os.str());
  }
  if (!config.splits() && split_k != 1) {
    throw InvalidArgument(config.name() + " runs unsplit: split_k = " + std::to_string(split_k));
  }
  if (split_k > 1 && reduction == SplitReduction::workspace && !config.workspace_split()) {
    throw InvalidArgument(config.name() +
                          ": a workspace split-K reduction needs a tile of at most 64 rows, not persistent");
  }
  if (m < 1 || n < 1 || k < 1) {
    std::ostringstream os;
    os << "prefill plan needs M, N, K >= 1: M = " << m << ", N = " << n << ", K = " << k;
    throw InvalidArgument(os.str());
  }
  Plan p;
  p.config = config;
  p.split_k = split_k;
  p.reduction = split_k > 1 ? reduction : SplitReduction::cluster;
  p.m_tiles = ceil_div(m, config.block_m);
  p.n_tiles = ceil_div(n, config.weight_rows);
  p.k_blocks = ceil_div(k, kBlockK);
  p.programmatic = launches_programmatically(config);
  return p;
}

std::string launch_override(const Plan& plan) {
  if (plan.programmatic == launches_programmatically(plan.config)) return {};
  return std::string(launch_label(plan.programmatic));
}

std::string_view launch_label(bool programmatic) {
  return programmatic ? ", launched programmatically" : ", launched plainly";
}

namespace {

// Per-CTA time of each tile on the H200, fitted (least squares on relative error) to sweeps of
// every configuration x split on the glm5 shapes: a fixed part (the first stage's arrival, the
// epilogue, the CTA's share of the launch), a split-K reduction through DSMEM, and the main loop
// per K block. A persistent CTA pays the fixed part once per tile it runs. The m128 / m256 entries
// come from the run-14 sweep at M = 32..4096 (median error 3-4.5%; the pick is the sweep's best or
// within 2% at 21 of 24 points, the other three at M = 1024-2048 where graph replays run
// power-limited and the two m256 kernels trade places from run to run, within 10%; the backends
// now launch m128 programmatically, 3-9% faster at M = 128). The narrow tiles (block_m <= 64)
// from the run-16 sweep at M = 1..128, timed as the backends launch them (programmatic,
// launches_programmatically): median error 2.4-3.2%. Only the ranking matters for
// the choice; other GPUs scale all of them alike. A persistent CTA's half tiles
// (persistent_schedule) from run 33's sweep at M = 768-1536: ~0.47 us per K block (more than the
// m128 kernel's: one wgmma group in flight, 4 stages) and no fixed part of their own (their first
// stages load during the previous tile's epilogue).
struct TileCost {
  int block_m;
  bool persistent;
  int copy_group;
  double fixed_us, split_us, per_k_block_us;
  double half_per_k_block_us = 0.0;  // persistent half tiles (no fixed part of their own)
  // A split plan's reduction through the workspace (the tiles that offer it: TileConfig::workspace_split).
  double workspace_split_us = 0.0;
  // What a cluster split saves per 64 rows of band where the band is stored through TMA
  // (Plan::cluster_band_rows), for the entries fitted before it was (run 105).
  double tma_band_saving_us_per_64_rows = 0.0;
  int weight_rows = kBlockN;
};
// Run 105 reduced and stored m128 split 2's 64-row band in 2.05 us instead of 2.82: a cluster split
// whose band leaves through TMA (Plan::cluster_band_rows) is charged that much less per 64 rows of
// band. The m128 and m192 entries take it (run 111's sweep: any value in [0.5, 1.0] ranks it
// right). m64 with copy groups has taken it since run 113's sweep (an H100). With it, m64 G4
// split 2 displaces m128 G3 split 3 at glm5 W13 M = 65-128 and seed M = 193-256 (predicted 18.0
// against 18.3 us). Through `fp4gap gemm` on the H200 that was 5.3-6.2% faster (run 119: 16.28
// against 17.35 us at W13 M = 128). The 6-stage m256 does not take it. With it the policy ran
// m256 split 2 at glm5 W13 M = 385-512 and seed M = 769-1024, which `fp4gap gemm` timed 4.2-4.6%
// slower than the m128 G3 unsplit plans it displaced, on the H200 (run 119: 38.6 against 37.0 us
// at W13 M = 512) as on an H100 (run 113). The other narrow tiles keep entries set within runs
// 53-54's spread.
// Run 150 (an H100) stored every cluster split whose CTAs each get a pair of quads through TMA
// (cluster_band_pairs), not only those sharing the quads evenly in even shares. The plans the
// policy already ran with such bands were 2.5-2.8% faster for it (m144 split 2 at W13 M = 264,
// m208 split 2 at W13 M = 400 and seed M = 800; the rest within +-1%). Charging the saving on them
// moved five picks to plans that ran 2-10% slower (seed M = 200: m208 split 6 18.4 us against m64
// G4 split 2's 16.7), so the saving is charged only on the bands the entries were fitted with
// (fitted_band_rows) until a sweep refits them.
constexpr double kTmaBandSaving = 0.77;
// Since run 173 a cluster split of 2 whose bands leave through TMA exchanges them through L2 and
// no longer waits on a closing barrier: `fp4gap tune` (an H100, two rounds, same call as the old
// kernel) timed the same plans 0.55-1.06 us faster (m64 G4 1.06, m128 0.75-1.03, m160 0.87, m192
// 0.61-0.83, m208 0.55-0.67). The entries that take the band saving take this too; m256 split 2
// (not timed that way) keeps its entry, which run 170 timed 2.3 us slower than m128 G3 unsplit at
// W13 M = 512 before the change.
constexpr double kL2ExchangeSaving = 0.8;
constexpr TileCost kTileCosts[] = {
    {256, false, 1, 2.97, 5.94, 0.638},  // main loop at ~92% of the bf16 tensor rate
    {128, false, 1, 2.92, 2.73, 0.410, 0.0, 0.0, kTmaBandSaving},  // ~77%
    // 3 K blocks per copy: run 44's sweep of both m128 configs at M = 128 and 512 (36 plans each,
    // same run) fits them with +0.37 us fixed, +0.37 us for a split and 0.904x per K block
    // (0.350 against 0.387 us; median error 2.6%): applied to the m128 entry above.
    {128, false, 3, 3.29, 3.10, 0.371, 0.0, 0.0, kTmaBandSaving},  // ~85%
    {64, false, 1, 3.38, 1.25, 0.311, 0.0, 2.60},  // ~51%
    // Unsplit only. Its fixed part was 3.83 (run 14, graph bursts, where it and the 6-stage m256
    // traded places by +-5%): refitted to 2.9 on run 112, both replayed for 1 s at M = 2048 and
    // 4096, the state a long prefill runs in (power-capped). There it was 1.6-7.2% faster at all
    // five glm5 points where both run (W2 M = 4096: 155.9 against 168.0 us), 2.9 being the median
    // of the fixed parts that reproduce each ratio; in the ~0.2 s graph burst, which caps it sooner,
    // it can be up to 6% slower (W2 M = 4096: 151.0 against 141.8).
    {256, true, 1, 2.90, 0.0, 0.613, 0.47},
    // Run 34's sweep at M = 384, 768, 1536 (54 plans, median error 3.0%): ~84% of m192's tensor
    // rate (0.537 us per K block against m256's 0.613-0.638 for 4/3 the work). The persistent
    // one's 0.545 (least squares: 0.537, within the spread of its one-wave points, 0.51-0.56)
    // kept (until run 188) the m256 persistent plan at M = 1536, N = 4096, K = 6144, where two waves of m192
    // measured 6% slower than the model says (power-limited, as the m256 kernels at M >= 1024).
    // 2 K blocks per copy since run 187, 3-6% faster than the one-block m192 the entry (3.81 us
    // fixed, K block 0.537) was fitted to. Run 188 (an H100, fp4gap tune, two rounds) timed where a
    // lower K block moves picks: 96-block tiles 6-12% faster than the picks displaced (W13 M = 1400
    // 99.8 / 101.1 us against the persistent m256's 112.8 / 107.4; W13 M = 2200 167.1 / 164.4
    // against the persistent m192's 170.1 / 179.7, replayed for 1 s 172.5 against 183.1; seed M =
    // 2800 98.4 against the persistent m256's 109.4 / 112.3, for 1 s 114.5 against 120.5), but
    // 32-block tiles not: deepseek-v3 W2 M = 360 19.8 / 20.0 against the wide m128n192's 19.5 /
    // 19.7, and W2 M = 160 at split 2 20% behind m80 G4. Refit on both kinds: at the H100's ~0.94
    // of the H200 entries, M = 1400 / 2800 and W13 M = 768 put a 96-block tile at ~53 us, deepseek-v3
    // W2 M = 360 a 32-block one at ~21.2 and W2 M = 3200 (7 waves) at ~20.9 each. Fixed 4.70, K block
    // 0.505 fits those within 2% and moves 192 of the 2560 picks of `fp4gap plan --device 'H200
    // SXM'`, each in a range run 188 timed faster: W13 M = 1288-1536 and 2056-2304 (glm5, deepseek-v3;
    // from the persistent m256 / m192 and m144 G3), seed M = 2568-3072 (from the persistent m256).
    {192, false, 2, 4.70, 2.52, 0.505, 0.0, 0.0, kTmaBandSaving},
    // The persistent m192's, fitted on its one-block kernel (run 34), kept for the one with 2 K
    // blocks per copy: run 194 (an H100, sweep and tune, two rounds) timed it at 0.97-1.03 of the
    // one-block kernel where the policy takes it (W2 M = 768, 1472, 2080; deepseek-v3 W2 M = 1248,
    // 1344), median 0.99.
    {192, true, 2, 2.35, 0.0, 0.545, 0.42},
    // m128 G2 persistent: the 10-stage G2's K block (the same unrolled loop); fixed part and half
    // tile fitted to run 189 (an H100, fp4gap tune, two rounds): at six W2-like points it ran at
    // 0.90-0.96 of the provisional entry (fixed 1.8, half 0.27) where the plans beside it ran at
    // 0.93-1.05 of theirs. Fixed 1.5 keeps its ratio to the 10-stage G2 at M = 640 (26.0 against
    // 28.4 us); half 0.315 puts three waves at W2 M = 768 (two whole, one of halves) where it
    // measured, 3% behind the persistent m192. It takes 52 of the 2560 glm5 / deepseek-v3 picks
    // of `fp4gap plan --device 'H200 SXM'`, each in a range run 189 timed faster (7-11%): glm5 W2
    // M = 520-640 and 1288-1408, deepseek-v3 W2 M = 776-896 and 1128-1152. At W2 M = 1024 it ran
    // 4% under the persistent m256's plain launch and is not picked (the model puts it 8% over).
    {128, true, 2, 1.50, 0.0, 0.3775, 0.315},
    // The narrow tiles with 4 K blocks per copy, from run 52's sweep at M = 16, 32, 64 (median
    // error 2.6-4.0%), scaled by their fitted ratios to the tiles with twice the consumer warps
    // (removed since), whose entries came from runs 16 and 38, so that they keep the calibration
    // of the other tiles (runs 14-45). The m32 cluster reduction's ratio is the least certain.
    // The workspace reduction (the last entry of the m16 - m64 tiles): run 64's sweep at M = 16,
    // 32, 64 (the last CTA bringing the partials back with bulk copies), set to the cluster
    // reduction's entry plus the median of (workspace - cluster) over the plans where both run in
    // one wave: +0.21 (m16), +0.37 (m32), +0.69 (m64), +0.83 (m64 with copy groups) us. The
    // difference shrinks with the split (m16: +0.47 at split 2, -0.03 at 6), which one constant
    // cannot follow; the policy picks the sweep's fastest plan at 7 of its 9 points with these,
    // within 0.7% at the other two, as with any value in [1.1, 1.9] (m16) and [1.7, 2.4] (m32).
    // For the plain m64 its median, 1.94, picked its workspace plans where its cluster plans were
    // 0.3-1.1 us faster: raised to 2.6 (the sweep never had it win).
    {32, false, 4, 3.04, 1.62, 0.219, 0.0, 2.00},
    {16, false, 4, 2.70, 1.07, 0.225, 0.0, 1.30},
    {64, false, 4, 4.30, 2.10, 0.250, 0.0, 2.90, kTmaBandSaving},
    // m128 G3's entry with the K block scaled by 1.06 (the dequantization, which bounds m128's
    // block, is the same; the tensor work 1.125x), set before any measurement and not refitted:
    // run 138's `fp4gap tune` (an H100, the glm5 shapes at M = 264, 520, 1040) timed the 9 m144
    // plans the policy picked within 1.5-3.3% of it, each the fastest of the five plans timed.
    {144, false, 3, 3.29, 3.10, 0.394, 0.0, 0.0, kTmaBandSaving},
    // Set from m64 G4's before any run (K block x 1.04: dequantization-bound). Run 139's tune (10
    // plans at glm5 M = 72) measured the workspace-reduced splits 0.57 us further above this
    // entry than the cluster ones on average, so its workspace reduction is 3.5 us, not m64's 2.90
    // (its partial tiles are 80/64 as large): with 2.90 the policy ran seed M = 72 at split 8
    // through the workspace, 8.7% slower than split 6 in a cluster.
    {80, false, 4, 4.30, 2.10, 0.260, 0.0, 3.50, kTmaBandSaving},
    // Set before any run: the K block between m80's (0.26 us, run 139 within 3-7%) and m128 G3's
    // (0.371) in proportion to the rows; runs 145-146 (tune) measured its picks 1-6% above it. No
    // workspace split (block_m > 80).
    {96, false, 4, 4.30, 2.10, 0.300, 0.0, 0.0, kTmaBandSaving},
    // m192's entry with the K block x 208 / 192 (m192's block is mostly tensor work, which grows
    // with the rows): runs 145-146 (tune) measured the unsplit plans 0-2% above it. Its split bands
    // (104 rows at split 2) are not whole 16-row warp slices, so they do not leave through TMA
    // (Plan::cluster_band_rows) and its cluster reduction costs 4.90 us, not m192's 2.52: the median
    // over its four split plans timed in runs 145-146 (4.05-5.34). With m192's 2.52 the policy ran seed
    // M = 200 at split 6, 11% slower than the m64 G4 plan it displaced. Even so it runs seed M = 800
    // at split 2, which runs 145-146 timed 3% slower than m128 G3 unsplit (the H100 runs m128 G3 5-9%
    // faster than its H200-fitted entry). Since run 180 (its ring unrolled) it runs ~6% under this
    // entry, and m160 (8 stages since run 179) ~4% under its own. Run 182 (fp4gap tune, an H100)
    // timed the points a full refit would move: two waves at K = 2048 ran 5-9% faster on m160 /
    // m208 than the picks they would displace (glm5 W2 M = 784: m160 35.2 us against the persistent
    // m256's 37.0-38.8; deepseek-v3 W2 M = 600: m160 35.0 against 37.1-38.4; M = 800: m208 41.3
    // against m128 G2's 43.6); one wave of m160 at W2 M = 304 ran 2.6% slower than the wide m96
    // (18.1 against 17.7); m208 at W13 M = 3200 was 1-4% faster in graph bursts but, replayed for
    // 1 s, 1.3% faster at glm5 and 5% slower at deepseek-v3 (K = 7168: 325.6 against 309.2 us).
    // So both K blocks are lowered only as far as moves the two-wave W2 points (m208 0.582 ->
    // 0.579, m160 0.470 -> 0.465): 28 of the 2560 glm5 / deepseek-v3 picks of `fp4gap plan --device
    // 'H200 SXM'` (M = 8-4096 step 8): glm5 W2 M = 776-800, deepseek-v3 W2 M = 584-640 and 776-832.
    // (m160's entry has been run 185's since, for its copy-grouped kernel.)
    {208, false, 1, 3.81, 4.90, 0.579, 0.0, 0.0, kTmaBandSaving},
    // Set from m192's with the K block x 160 / 192 (0.448), then refit on run 148's tune: the K
    // block the median over its five unsplit plans timed (0.448-0.476), the cluster reduction the
    // median over its four split-2 plans (3.09-4.16, each charged m192's TMA band saving of 0.96
    // us). With the first guess (0.455, 2.52) the policy ran seed M = 152-160 at m160, 7.7%
    // slower than the m80 plan it displaced; after the refit it leaves W2 M = 769-800 to the
    // persistent m256 (by 0.1 us predicted), which run 148 timed 4.9% slower than m160. Lowered
    // from 0.470 by run 182 (the m208 entry's comment says why and how far).
    // 2 K blocks per copy since run 185 (an H100, fp4gap tune, both configs in one binary, two
    // rounds): the K block that keeps each of its five points (W13 M = 300 / 640 / 1280, seed M =
    // 640 split 2, W2 M = 784) at the measured / predicted ratio the one-block config had there,
    // median 0.432 (0.427-0.434; its timeline: 687 against 760 SM cycles per K block). It moves 36
    // of 2560 picks of `fp4gap plan --device 'H200 SXM'` to m160, which run 186 (an H100) timed
    // faster: glm5 W2 M = 296-320 from the wide m96 (M = 304: 17.35 against 17.62 us) and W13 M =
    // 3080-3200 (glm5, deepseek-v3) from the persistent m256 (M = 3200: 236.6 against 254.7 and
    // 267.9 against 294.9; glm5 replayed for 1 s 250.5 against 260.1).
    {160, false, 2, 3.81, 3.68, 0.432, 0.0, 0.0, kTmaBandSaving},
    // m128 on 10 stages, 2 K blocks per copy. Run 160's sweep (an H100: the glm5 shapes at M =
    // 128-1024, m128's three configs at splits 1-4, two rounds; relative least squares, median error
    // 2.3%) fits it 2.89 us fixed against G3's 3.50 (its first copy brings 2 K blocks, not 3), K block
    // 0.352 against 0.346, split 3.05 against 3.01: the deeper ring shortens the start, not the main
    // loop. Applied to G3's H200 entry: K block 0.3775 (the ratio); split 3.26 (G3's plus the same
    // run's fitted difference, +0.16); fixed 2.85, not the ratio's 2.72, which ran G2 where runs
    // 161-162 (fp4gap tune, an H100) timed it 1-3% slower: split 2 at K = 6144 (seed M = 448,
    // W13 M = 208, against G3), four waves at K = 2048 (glm5 W2 M = 1344, deepseek-v3 W2 M = 1136,
    // against the persistent m192). Any fixed part in [2.82, 2.88] keeps every point those runs timed
    // on its fastest plan or within 1%; with the ratio's split term (3.14) G2 split 3 displaced m64 G4
    // split 2 at W13 M = 128 and seed M = 200-256, 0.5-2.8% slower.
    {128, false, 2, 2.85, 3.26, 0.3775, 0.0, 0.0, kTmaBandSaving},
    // The wide tiles, unsplit. K block: run 166's prototype counted 887 / 903 SM cycles per K block
    // at K = 6144 (m128 / m112 x 192; 953 / 969 at K = 2048), 0.54 / 0.55 us at the 1.65 GHz that
    // m256's entry implies (1053 cycles, 0.638 us), raised to 0.56 / 0.57 so that no K = 6144 point
    // moves to them untimed (the prototype tied m192 at 768 x 4224 x 6144). Fixed part: run 167's
    // kernel at W2 M = 400-512 (an H100, K = 2048: 19.6-20.0 us) less 32 blocks of 0.54 / 0.55 us.
    {128, false, 2, 2.50, 0.0, 0.560, 0.0, 0.0, 0.0, kWideWeightRows},
    {112, false, 2, 2.10, 0.0, 0.570, 0.0, 0.0, 0.0, kWideWeightRows},
    // m96: no K = 6144 count; m128's entry scaled by the prototype's K = 2048 ratio (879 / 953
    // cycles), m112's fixed part. Run 178 (an H100) timed it 17.5-17.9 us at W2 M = 300-384, where
    // this predicts 18.6 and m112's 20.3 (timed 19.0-19.5): the same ratio to the time.
    {96, false, 2, 2.10, 0.0, 0.516, 0.0, 0.0, 0.0, kWideWeightRows},
    // m192n192 / m160n192 (6 stages, rounds of the fragment buffers at a runtime stage): fitted to
    // run 203's `fp4gap tune` on an H200, the mean of two W2 points at 32 K blocks (M = 704 / 768:
    // 27.69 / 28.12 us; M = 576 / 640: 24.00 / 24.26) and one W13 point at 96 (M = 1152: 75.83; M =
    // 960: 62.95). Per K block 1236 / 1001 SM cycles at 1.65 GHz, 93% / 96% of the tensor work.
    {192, false, 2, 3.93, 0.0, 0.749, 0.0, 0.0, 0.0, kWideWeightRows},
    {160, false, 2, 4.72, 0.0, 0.607, 0.0, 0.0, 0.0, kWideWeightRows},
    // m176n192: run 204 (an H100, `fp4gap tune`) timed it at 0.931-0.956 of m192n192 at the same
    // shapes (median 0.94 at 96 K blocks, 0.938 at 32; W13 M = 1040 / 1056, W2 M = 672 / 704, seed M =
    // 2112, deepseek-v3 W13 M = 1040), applied to m192's entry: 71.5 us at 96 blocks, 26.17 at 32.
    {176, false, 2, 3.51, 0.0, 0.708, 0.0, 0.0, 0.0, kWideWeightRows},
};

const TileCost& tile_cost(const TileConfig& config) {
  for (const TileCost& c : kTileCosts) {
    if (c.block_m == config.block_m && c.persistent == config.persistent && c.copy_group == config.copy_group &&
        c.weight_rows == config.weight_rows) {
      return c;
    }
  }
  throw InvalidArgument("no prefill cost entry for " + config.name());
}

// The band rows the cost entries were fitted with a TMA store for: every CTA's share of the
// block_m / 8 quads the same even number (the kernel's rule before run 150).
int fitted_band_rows(const Plan& p) {
  if (p.cluster_band_rows() == 0) return 0;
  const int quads = p.config.block_m / 8;
  return quads % p.split_k == 0 && (quads / p.split_k) % 2 == 0 ? 8 * (quads / p.split_k) : 0;
}

double plan_cost(const Plan& p, int concurrent_ctas) {
  const TileCost& c = tile_cost(p.config);
  const double kb_per_cta = static_cast<double>(ceil_div(p.k_blocks, p.split_k));
  double split = 0.0;
  if (p.split_k > 1) {
    split = p.reduction == SplitReduction::cluster ? c.split_us : c.workspace_split_us;
    split -= c.tma_band_saving_us_per_64_rows * fitted_band_rows(p) / 64.0;
    if (p.split_k == 2 && p.reduction == SplitReduction::cluster && p.cluster_band_rows() > 0 &&
        c.tma_band_saving_us_per_64_rows > 0.0) {
      split -= kL2ExchangeSaving;
    }
  }
  const double tile_us = c.fixed_us + split + c.per_k_block_us * kb_per_cta;
  if (p.config.persistent) {
    // Whole waves of whole tiles, then at most one wave of half tiles.
    const PersistentSchedule s = persistent_schedule(p.ctas(), concurrent_ctas);
    const double half_wave = s.halved_tiles > 0 ? c.half_per_k_block_us * kb_per_cta : 0.0;
    return static_cast<double>(ceil_div(s.whole_tiles, concurrent_ctas)) * tile_us + half_wave;
  }
  return static_cast<double>(ceil_div(p.ctas(), concurrent_ctas)) * tile_us;
}

}  // namespace

LaunchFill launch_fill(const Plan& plan, int ctas_at_once) {
  if (ctas_at_once < 1) {
    throw InvalidArgument("launch_fill needs ctas_at_once >= 1: " + std::to_string(ctas_at_once) + " for " +
                          plan.describe());
  }
  LaunchFill f;
  f.tiles = plan.ctas();
  f.ctas = plan.config.persistent ? std::min<std::int64_t>(f.tiles, ctas_at_once) : f.tiles;
  f.ctas_at_once = ctas_at_once;
  f.tile_rows = plan.config.block_m;
  f.row_tiles = plan.m_tiles;
  if (plan.config.persistent && persistent_schedule(f.tiles, f.ctas).halved_tiles > 0) {
    const TileCost& c = tile_cost(plan.config);
    f.halved_wave_cost = c.half_per_k_block_us / c.per_k_block_us;
  }
  return f;
}

int default_concurrent_ctas(const DeviceContext& device, int split) {
  const int sms = device.sm_count > 0 ? device.sm_count : 1;
  return sms / split * split;
}

ConcurrentCtas datasheet_concurrent_ctas(const DeviceSpec& spec) {
  if (spec.cluster_ctas_at_once.size() < static_cast<std::size_t>(kMaxSplitK)) return {};
  return [table = spec.cluster_ctas_at_once](const TileConfig&, int split) {
    return table[static_cast<std::size_t>(split - 1)];
  };
}

std::vector<PlanCandidate> plan_candidates(std::int64_t m, std::int64_t n, std::int64_t k, const DeviceContext& device,
                                           const ConcurrentCtas& concurrent) {
  std::vector<PlanCandidate> out;
  const std::int64_t k_blocks = ceil_div(k, kBlockK);
  const int max_split = static_cast<int>(std::min<std::int64_t>(kMaxSplitK, k_blocks));
  for (const TileConfig& c : tile_configs()) {
    PlanCandidate base;
    base.config = c;
    base.status = check_tile_config(c, device);
    if (!base.status.is_ok()) {
      out.push_back(base);
      continue;
    }
    for (int split = 1; split <= (c.splits() ? max_split : 1); ++split) {
      for (const SplitReduction reduction : {SplitReduction::cluster, SplitReduction::workspace}) {
        if (reduction == SplitReduction::workspace && (split == 1 || !c.workspace_split())) continue;
        PlanCandidate cand = base;
        cand.split_k = split;
        cand.reduction = reduction;
        const int cluster = reduction == SplitReduction::cluster ? split : 1;
        cand.concurrent_ctas = concurrent ? concurrent(c, cluster) : default_concurrent_ctas(device, cluster);
        if (cand.concurrent_ctas < cluster) {
          std::ostringstream os;
          os << "a cluster of " << cluster << " CTAs of " << c.name() << " cannot run at once on " << device.name;
          cand.status = Status::not_supported(os.str());
        } else {
          cand.plan = make_plan(m, n, k, c, split, reduction);
          cand.waves = ceil_div(cand.plan.ctas(), cand.concurrent_ctas);
          cand.predicted_us = plan_cost(cand.plan, cand.concurrent_ctas);
          if (c.persistent && cand.waves == 1) {
            // One tile per CTA: nothing to overlap. Every such plan measured slower than the plain
            // kernel of the same tile (PERF-LOG runs 45 and 48: m192 by ~5%, m256 by 1-2%), which
            // the cost model, fitted where CTAs run several tiles, does not see.
            std::ostringstream os;
            os << "persistent: its " << cand.plan.ctas() << " tiles fit one wave of " << cand.concurrent_ctas
               << " CTAs, which the non-persistent m" << c.block_m << " kernel runs faster";
            cand.status = Status::not_supported(os.str());
          } else if (c.weight_rows == kWideWeightRows && cand.waves > 1) {
            // Measured only where their tiles make one wave: at two or more the persistent tiles ran
            // 1-11% faster (PERF-LOG run 202: W2 M = 1152-1920, W13 M = 1920), which the cost model,
            // charging every wave a whole tile, does not see.
            std::ostringstream os;
            os << "wide: its " << cand.plan.ctas() << " tiles need " << cand.waves << " waves of " << cand.concurrent_ctas
               << " CTAs; the wide tiles run one";
            cand.status = Status::not_supported(os.str());
          }
        }
        out.push_back(cand);
      }
    }
  }
  return out;
}

namespace {
// The ok candidate that `allowed` admits with the smallest predicted time; strictly better only,
// so ties keep the earlier candidate (tile_configs() order, smaller split).
template <typename Allowed>
const PlanCandidate* best_allowed(const std::vector<PlanCandidate>& candidates, Allowed allowed) {
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : candidates) {
    if (!c.status.is_ok() || !allowed(c)) continue;
    if (best == nullptr || c.predicted_us < best->predicted_us * (1.0 - 1e-9)) best = &c;
  }
  return best;
}
}  // namespace

const PlanCandidate* best_candidate(const std::vector<PlanCandidate>& candidates) {
  return best_allowed(candidates, [](const PlanCandidate&) { return true; });
}

const PlanCandidate* best_candidate_behind_activation_pass(const std::vector<PlanCandidate>& candidates) {
  return best_allowed(candidates, [](const PlanCandidate& c) {
    return c.split_k == 1 || c.reduction != SplitReduction::workspace;
  });
}

Plan w4a4_plan(const Plan& chosen, bool dequantizes_in_kernel, const std::vector<PlanCandidate>& candidates) {
  if (dequantizes_in_kernel) return chosen;
  const PlanCandidate* behind = best_candidate_behind_activation_pass(candidates);
  return behind != nullptr ? behind->plan : chosen;
}

namespace {

const PlanCandidate& best_or_throw(const std::vector<PlanCandidate>& candidates, const DeviceContext& device) {
  const PlanCandidate* best = best_candidate(candidates);
  if (best == nullptr) {
    std::int64_t smallest = std::numeric_limits<std::int64_t>::max();
    for (const TileConfig& c : tile_configs()) smallest = std::min(smallest, c.smem_bytes() + kKernelStaticSmemBytes);
    std::ostringstream os;
    os << "no prefill tile configuration fits in " << device.smem_per_block_optin
       << " bytes of shared memory per block (the smallest needs " << smallest << ")";
    throw InvalidArgument(os.str());
  }
  return *best;
}

}  // namespace

PolicyPlan policy_plan(const std::vector<PlanCandidate>& candidates, bool w4a4, std::int64_t k,
                       std::int64_t smem_per_block, const DeviceContext& device) {
  const Plan& pick = best_or_throw(candidates, device).plan;
  if (!w4a4) return {pick, false};
  const bool in_kernel = w4a4_dequantizes_in_kernel(pick, k, smem_per_block);
  return {w4a4_plan(pick, in_kernel, candidates), in_kernel};
}

Plan choose_plan(std::int64_t m, std::int64_t n, std::int64_t k, const DeviceContext& device,
                 const ConcurrentCtas& concurrent) {
  return best_or_throw(plan_candidates(m, n, k, device, concurrent), device).plan;
}

NamedCandidate find_candidate(const std::vector<PlanCandidate>& candidates, const std::string& config_name,
                              int split_k, bool workspace_reduction) {
  const SplitReduction reduction = workspace_reduction ? SplitReduction::workspace : SplitReduction::cluster;
  const PlanCandidate* same_config = nullptr;
  for (const PlanCandidate& c : candidates) {
    if (c.config.name() != config_name) continue;
    if (c.split_k == split_k && (split_k == 1 || c.reduction == reduction)) {
      return c.status.is_ok() ? NamedCandidate{Status::ok(), &c} : NamedCandidate{c.status, nullptr};
    }
    if (same_config == nullptr) same_config = &c;
  }
  // A configuration that does not fit the device is listed once, with its reason.
  if (same_config != nullptr && !same_config->status.is_ok()) return {same_config->status, nullptr};
  std::ostringstream os;
  if (same_config == nullptr) {
    os << "configuration '" << config_name << "' is not in this build (fp4gap plan lists the ones it has)";
  } else {
    os << config_name << " takes no split-k " << split_k << (workspace_reduction ? " with a workspace reduction" : "")
       << " for this shape";
  }
  return {Status::not_supported(os.str()), nullptr};
}

bool measures(const tune::MeasuredPlan& measured, const Plan& plan) {
  return measured.config == plan.config.name() && measured.split_k == plan.split_k &&
         measured.workspace_reduction == plan.workspace_reduction() &&
         measured.programmatic.value_or(launches_programmatically(plan.config)) == plan.programmatic;
}

namespace {

// Whether `entry`, measured at another M, timed the launches its plans make at `m`: every plan's
// configuration is in this build and tiles M into as many row tiles at `m` as at the entry's M (N
// and K are the entry's, so the grid, the split and each CTA's K range are the same; only the rows
// of data in the last row of tiles differ), and the policy's pick at `m` is one of them, so the
// measured order between the pick and the fastest holds here.
bool times_the_same_launches(const tune::Entry& entry, std::int64_t m, const Plan& policy) {
  const std::vector<TileConfig>& configs = tile_configs();
  bool has_policy = false;
  for (const tune::MeasuredPlan& measured : entry.measured) {
    const auto config = std::find_if(configs.begin(), configs.end(),
                                     [&](const TileConfig& c) { return c.name() == measured.config; });
    if (config == configs.end()) return false;
    if (ceil_div(m, config->block_m) != ceil_div(entry.problem.m, config->block_m)) return false;
    has_policy = has_policy || measures(measured, policy);
  }
  return has_policy;
}

}  // namespace

const tune::Entry* tuned_entry(const tune::Cache& cache, const tune::DeviceKey& device, const tune::ProblemKey& problem,
                               const Plan& policy) {
  if (const tune::Entry* exact = cache.find(device, problem)) return exact;
  const tune::Entry* nearest = nullptr;
  for (const tune::Entry& e : cache.entries()) {
    tune::ProblemKey same_but_m = e.problem;
    same_but_m.m = problem.m;
    if (!(e.device == device) || !(same_but_m == problem) || !times_the_same_launches(e, problem.m, policy)) continue;
    const std::int64_t distance = std::abs(e.problem.m - problem.m);
    const std::int64_t best = nearest == nullptr ? -1 : std::abs(nearest->problem.m - problem.m);
    if (nearest == nullptr || distance < best || (distance == best && e.problem.m > nearest->problem.m)) nearest = &e;
  }
  return nearest;
}

TunedChoice tuned_plan(const std::string& backend, std::int64_t m, std::int64_t n, std::int64_t k, OutputType out,
                       const DeviceContext& device, const std::vector<PlanCandidate>& candidates, const Plan& policy) {
  const tune::Cache* cache = tune::active_cache();
  if (cache == nullptr) return {};
  const tune::Entry* entry =
      tuned_entry(*cache, tune::device_key(device), tune::ProblemKey{backend, m, n, k, out}, policy);
  if (entry == nullptr) return {};
  // An entry of another M says which one, so a row names the measurement it follows.
  const std::string at = entry->problem.m == m ? std::string()
                                               : " at M = " + std::to_string(entry->problem.m) +
                                                     " (the same tiles as at M = " + std::to_string(m) + ")";
  const std::optional<std::size_t> best = entry->best();
  if (!best) return {std::nullopt, "tuned entry" + at + " has no verified plan: the policy's pick", entry};
  const tune::MeasuredPlan& measured = entry->measured[*best];
  const NamedCandidate named =
      find_candidate(candidates, measured.config, measured.split_k, measured.workspace_reduction);
  if (!named.status.is_ok()) {
    return {std::nullopt, "tuned plan" + at + " not used (" + named.status.reason + "): the policy's pick", entry};
  }
  // The pick's time: the plan the policy runs here where the entry measured it, else the entry's
  // own record of its pick (the policy may have changed since the entry was measured).
  std::optional<double> pick_us;
  for (const tune::MeasuredPlan& p : entry->measured) {
    if (measures(p, policy)) pick_us = p.graph_us;
  }
  if (!pick_us && entry->policy()) pick_us = entry->measured[*entry->policy()].graph_us;
  std::ostringstream os;
  os << "tuned on this device" << at;
  if (entry->timed_after != "itself") os << " (timed after " << entry->timed_after << ")";
  os << ": " << format_fixed(*measured.graph_us, 2) << " us";
  if (pick_us) os << " against the policy's pick's " << format_fixed(*pick_us, 2);
  Plan plan = named.candidate->plan;
  if (measured.programmatic) plan.programmatic = *measured.programmatic;
  return {plan, os.str(), entry};
}

}  // namespace fp4gap::prefill
