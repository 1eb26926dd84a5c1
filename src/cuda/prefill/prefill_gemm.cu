// Hopper (sm_90a) NVFP4 prefill GEMM: D[M, N] = alpha * A[M, K] * W[N, K]^T with bf16 activations A
// and an NVFP4 weight W, exact on BF16 tensor cores (every E2M1 x E4M3 product is a bf16).
//
// The kernel computes D^T = W * A^T so that the weight is wgmma's register operand: each consumer
// thread dequantizes its own A fragment (8 codes, 2 scales per k16 step) straight into registers,
// and nothing dequantized ever goes through shared memory. The activations are wgmma's shared-memory
// operand, loaded by the tensor copy engine with the 128-byte swizzle.
//
// CTA = 3 warpgroups. The last one (producer, one thread) fills a ring of `STAGES` stages, each
// one activation tile [BM rows][64 k] (TMA) plus one packed weight chunk [128 rows][64 k] (one
// bulk copy), completing on the stage's "full" mbarrier. The two consumer warpgroups each own 64
// weight rows: per K block they dequantize, issue wgmma m64nBMk16 and keep one or two K blocks'
// wgmmas in flight while dequantizing the next; each consumer warp arrives on the stage's "empty"
// mbarrier once its wgmmas reading the stage have completed. Copy groups bring G K blocks per pair
// of copies. Under a programmatic launch the first weight stages load before the previous kernel
// has completed. Split-K CTAs of one tile form a cluster and add their fp32 partial tiles in a
// fixed order through distributed shared memory (deterministic; a split of 2 with 16-bit output
// exchanges its bands through L2 instead), or (narrow tiles) the last of them adds all partials
// from a global workspace. A
// persistent instantiation runs one CTA per SM over many tiles: the producer keeps loading the next
// tile while the consumers store this one (16-bit outputs through stmatrix + TMA store), and a
// small last wave runs as half tiles, or from 64 K blocks as pairs of units over the halves of K
// that exchange partial tiles through a workspace (persistent_schedule, last_wave_splits_k).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "cuda/prefill/prefill_ptx.cuh"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"

namespace fp4gap::prefill {
namespace {

#if FP4GAP_PREFILL_SM90A

// The kinds of work unit a CTA runs (the consumers' run_unit compiles once per kind it meets).
constexpr int kWholeTile = 0;
constexpr int kHalfTile = 1;  // a persistent last wave's tile halved by rows
constexpr int kKHalf = 2;     // a persistent last wave's tile halved along K (last_wave_splits_k)

constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;  // 2 x 128 x 232 + 128 x 40 <= 65536

__device__ __forceinline__ void store_output(void* out, OutputType type, std::int64_t idx, float v) {
  switch (type) {
    case OutputType::f32: static_cast<float*>(out)[idx] = v; break;
    case OutputType::bf16: static_cast<__nv_bfloat16*>(out)[idx] = __float2bfloat16_rn(v); break;
    case OutputType::f16: static_cast<__half*>(out)[idx] = __float2half_rn(v); break;
  }
}

// Two outputs of a 16-bit type, rounded to nearest even, in one register (lo in the low half).
__device__ __forceinline__ std::uint32_t pack_output_pair(OutputType type, float lo, float hi) {
  std::uint32_t v;
  if (type == OutputType::bf16) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    v = *reinterpret_cast<const std::uint32_t*>(&p);
  } else {
    const __half2 p = __floats2half2_rn(lo, hi);
    v = *reinterpret_cast<const std::uint32_t*>(&p);
  }
  return v;
}

// The shared-memory address a lane hands stmatrix .x4 .trans for quads j and j + 1 of its warp's
// 64 output columns in a part of 128-byte rows at `part`: row 8j + 8 (q / 2) + r, chunk
// 2 warp + q % 2 (lane = 8q + r), swizzled to chunk ^ (row % 8) as the TMA store's 128-byte
// swizzle reads it.
__device__ __forceinline__ std::uint32_t stmatrix_pair_addr(std::uint32_t part, int j, int warp, int lane) {
  const int q = lane / 8, r = lane % 8;
  const int row = 8 * (j + q / 2) + r;
  const std::uint32_t chunk = static_cast<std::uint32_t>(2 * warp + (q & 1));
  return part + static_cast<std::uint32_t>(row) * 128u + ((chunk ^ (row & 7)) << 4);
}

// Writes one consumer warpgroup's accumulators (a thread's W / 2, W = the tile's activation rows)
// as its 64 output columns x W output rows of a 16-bit tile at `part`, in the 128-byte swizzle
// (chunk c of row r at chunk c ^ (r % 8)), alpha applied, for a TMA store (box 64 columns): each
// warp transposes its fragments with stmatrix (the D^T fragment of a thread is word t of row g of
// an 8x8 block; .trans writes D rows).
template <int kAcc>
__device__ __forceinline__ void stage_output_part(std::uint32_t part, const float (&acc)[kAcc], int warp, int lane,
                                                  OutputType out_type, float alpha) {
  auto pack = [&](float lo, float hi) { return pack_output_pair(out_type, alpha * lo, alpha * hi); };
#pragma unroll
  for (int i = 0; i < kAcc / 4; i += 2) {
    ptx::stmatrix_x4_trans(stmatrix_pair_addr(part, i, warp, lane), pack(acc[4 * i], acc[4 * i + 1]),
                           pack(acc[4 * i + 2], acc[4 * i + 3]), pack(acc[4 * i + 4], acc[4 * i + 5]),
                           pack(acc[4 * i + 6], acc[4 * i + 7]));
  }
}

// Stores rows [0, rows) of the staged fp32 tile (alpha applied) to D[m0 + r][n0 + c], 16 bytes per
// thread and store where the row allows it (N a multiple of 8 elements for 16-bit outputs, 4 for
// f32), element by element at the N edge otherwise.
__device__ __forceinline__ void store_staged_tile(const float* staged, void* out, OutputType type, int m, int n,
                                                  int m0, int n0, int rows, int thread) {
  constexpr int kThreads = kConsumerWarpgroups * 128;
  const int per_store = type == OutputType::f32 ? 4 : 8;  // elements in 16 bytes
  const int chunks_per_row = kBlockN / per_store;
  const bool vector_rows = n % per_store == 0;
  for (int chunk = thread; chunk < rows * chunks_per_row; chunk += kThreads) {
    const int r = chunk / chunks_per_row;
    const int c = (chunk % chunks_per_row) * per_store;
    const int gm = m0 + r, gn = n0 + c;
    if (gm >= m || gn >= n) continue;
    const float* src = staged + r * kStagedStride + c;
    const std::int64_t idx = static_cast<std::int64_t>(gm) * n + gn;
    if (vector_rows && gn + per_store <= n) {
      if (type == OutputType::f32) {
        *reinterpret_cast<float4*>(static_cast<float*>(out) + idx) = *reinterpret_cast<const float4*>(src);
      } else {
        const float4 lo = *reinterpret_cast<const float4*>(src);
        const float4 hi = *reinterpret_cast<const float4*>(src + 4);
        *reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(out) + idx) =
            make_uint4(pack_output_pair(type, lo.x, lo.y), pack_output_pair(type, lo.z, lo.w),
                       pack_output_pair(type, hi.x, hi.y), pack_output_pair(type, hi.z, hi.w));
      }
    } else {
      for (int e = 0; e < per_store && gn + e < n; ++e) store_output(out, type, idx + e, src[e]);
    }
  }
}

#endif  // FP4GAP_PREFILL_SM90A

// DEQUANT_ACT: NVFP4 activations (`act_codes`, `act_scales`: row-major [m, k_blocks * 64] codes and
// linear E4M3 scales) that the consumers dequantize into resident tiles before their first K
// block (check_activation_dequant_in_kernel); the activation tensor maps are then unused.
template <int BM, int STAGES, bool PERSISTENT, int GROUP, bool DEQUANT_ACT = false>
__global__ void __launch_bounds__(128 * (kConsumerWarpgroups + 1), 1)
    prefill_gemm_kernel(const __grid_constant__ CUtensorMap act_map, const __grid_constant__ CUtensorMap act_half_map,
                        const __grid_constant__ CUtensorMap act_group_map,
                        const __grid_constant__ CUtensorMap act_edge_map,
                        const __grid_constant__ CUtensorMap act_half_edge_map, int k_tail,
                        const std::uint8_t* __restrict__ weights, void* __restrict__ out, OutputType out_type, int m,
                        int n, int k_blocks, int split_k, float alpha, std::uint64_t* __restrict__ timeline,
                        const __grid_constant__ CUtensorMap out_map, const __grid_constant__ CUtensorMap out_part_map,
                        int tma_store, int programmatic, std::uint8_t* __restrict__ workspace,
                        const std::uint8_t* __restrict__ act_codes, const std::uint8_t* __restrict__ act_scales) {
#if FP4GAP_PREFILL_SM90A
  // Optional per-CTA timeline (kTimelineFields words per CTA, prefill_gemm.cuh), written by thread 0
  // as it goes: no timestamp stays live in a register across the main loop.
  auto timeline_field = [&](int f) -> std::uint64_t& {
    return timeline[static_cast<std::size_t>(blockIdx.x) * kTimelineFields + f];
  };
  if (timeline != nullptr && threadIdx.x == 0) timeline_field(0) = ptx::global_timer();
  constexpr int kActStageBytes = BM * kBlockK * 2;
  static_assert(STAGES % GROUP == 0, "copy groups fill whole rounds of the ring");
  static_assert(!DEQUANT_ACT || TileConfig::dequantizes_activations(BM, PERSISTENT), "see TileConfig");
  constexpr int kSteps = 4;  // k16 steps of a K block
  constexpr int kConsumerThreads = kConsumerWarpgroups * 128;
  // A persistent CTA's output staging comes first and is its own: the ring keeps filling with the
  // next tile while the epilogue runs. The others stage in the (then idle) ring.
  constexpr std::uint32_t kStagingBytes = PERSISTENT ? BM * kBlockN * 2 : 0;

  // wgmma groups (one per K block) left in flight after each commit. With one, a warpgroup
  // waits for block it - 1 as soon as block it is issued, and block it + 1's dequantization
  // must fit in block it's tensor time; the m64 / m128 tiles' blocks are short (64-128
  // tensor-core cycles per wgmma, shared by both warpgroups), so they keep two (PERF-LOG run 26:
  // ~1% faster; not tried on m256, whose blocks are twice as long). m144 keeps two as m128 (its
  // 9-stage ring then unrolls with 3 fragment buffers).
  // The 10-stage m128 keeps one, so that its ring unrolls by 2 buffers.
  constexpr int kInFlight = BM <= 144 && STAGES % 3 == 0 ? 2 : 1;
  constexpr int kBuffers = kInFlight + 1;
  // A non-persistent CTA starts its one tile at stage 0, so whole passes over the ring can be
  // unrolled with every stage a constant (the stage's addresses, the released stage, the
  // fragment buffer): ~106 instructions per K block and warp instead of 115-117 (PERF-LOG run
  // 32). Needs the buffer sequence to repeat with the ring (m192 runs 6 stages, not 7, for it:
  // run 41, 3-4% faster; m160 8: run 179). Up to m208 (run 180: ~6% faster unrolled); m256's
  // blocks hide their loop overhead behind twice the tensor work, and unrolled, the m256 kernel
  // spilled registers (outside the main loop, measured with -Xptxas -v).
  // A persistent CTA's whole tiles run their passes unrolled from stage 0 (whole_tiles_from_stage_0).
  constexpr bool kUnrollRing = BM <= 208 && STAGES % kBuffers == 0;

  extern __shared__ std::uint8_t smem_raw[];
  __shared__ int workspace_last_cta;  // SplitReduction::workspace: this CTA adds the partial tiles
  // SplitReduction::workspace: split s's partial tile has landed in the ring (the last CTA's copies).
  __shared__ alignas(8) std::uint64_t partial_bars[kMaxSplitK];
  const std::uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const std::uint32_t base = (raw_addr + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1 KB
  std::uint8_t* const base_ptr = smem_raw + (base - raw_addr);
  const std::uint32_t act_smem = base + kStagingBytes;
  // Activation tiles: the ring's stages, or with DEQUANT_ACT one resident tile per K block of the
  // CTA's range, at least as many as the ring has stages (activation_dequant_smem_bytes).
  const int act_tiles = DEQUANT_ACT ? max(STAGES, (k_blocks + split_k - 1) / split_k) : STAGES;
  const std::uint32_t wgt_offset = kStagingBytes + static_cast<std::uint32_t>(act_tiles) * kActStageBytes;
  const std::uint32_t bar_base = base + wgt_offset + STAGES * kChunkBytes;
  auto full_bar = [&](int s) { return bar_base + 8u * s; };
  auto empty_bar = [&](int s) { return bar_base + 8u * (STAGES + s); };

  // A non-persistent grid has one CTA per (tile, split): CTA = tile * split_k + split. A
  // persistent one (split_k == 1) strides over the work units of persistent_schedule (whole
  // tiles, then maybe the last wave's tiles in halves). Producer and consumers each carry the
  // ring position (stage, phase) of the next K block in registers, advanced by one per K block
  // across all the CTA's units, so a unit's first block can be at any stage and phase.
  // Split CTAs of a tile are consecutive; they form a cluster or meet in the workspace
  // (Plan::reduction). A cluster split of 2 exchanges its bands through the workspace too.
  const bool cluster_split = split_k > 1 && ptx::cluster_size() > 1;
  const int split = cluster_split ? static_cast<int>(ptx::cluster_rank()) : static_cast<int>(blockIdx.x) % split_k;
  const int n_tiles = (n + kBlockN - 1) / kBlockN;
  const int tiles = ((m + BM - 1) / BM) * n_tiles;
  const KRange kr = split_k_range(k_blocks, split_k, split);
  const int iters = static_cast<int>(kr.end - kr.begin);
  // A persistent CTA whose K range is at least a ring long starts every whole tile at stage 0, so
  // that its whole passes run unrolled: after a unit that ends inside the ring, the producer
  // closes the ring's remaining groups without loading them (it arrives on their full barriers
  // once the consumers have released them) and the consumers release them unread (PERF-LOG run
  // 195: W2 M = 1472, three waves, 3-4% faster). A half tile, and every unit of a shorter range,
  // starts wherever the previous unit left the ring and runs unrolled only from stage 0: a half
  // tile's first copies then go out before that unit's last blocks are consumed (aligned too, W2
  // M = 768 ran 1-2% slower, run 195).
  const bool whole_tiles_from_stage_0 = PERSISTENT && kUnrollRing && iters >= STAGES;
  const PersistentSchedule schedule = PERSISTENT ? persistent_schedule(tiles, gridDim.x) : PersistentSchedule{tiles, 0};
  const int units = static_cast<int>(schedule.units());
  const int whole_tiles = static_cast<int>(schedule.whole_tiles);
  const int first_unit = static_cast<int>(blockIdx.x) / split_k;  // a whole tile (2 halves only follow a full wave)
  const int unit_stride = PERSISTENT ? static_cast<int>(gridDim.x) : units;
  // Whether the unit after unit u starts at stage 0 (whole_tiles_from_stage_0): producer and
  // consumers close the ring after u by this one rule.
  auto next_starts_at_stage_0 = [&](int u) { return whole_tiles_from_stage_0 && u + unit_stride < whole_tiles; };
  // The last wave's pairs split their tile along K, or else by rows (last_wave_splits_k).
  const bool pairs_split_k = PERSISTENT && last_wave_splits_k(k_blocks);
  struct Unit {
    int nt;    // weight tile
    int row0;  // first activation (output) row
    int part;  // -1: a whole tile; 0 / 1: the first or second unit of a last-wave pair (persistent only)
    int pair;  // the pair's index in the last wave (part >= 0)
  };
  auto unit_at = [&](int u) -> Unit {
    if (!PERSISTENT || u < whole_tiles) return {u % n_tiles, (u / n_tiles) * BM, -1, 0};
    const int h = u - whole_tiles, pair = h / 2, tile = whole_tiles + pair;
    return {tile % n_tiles, (tile / n_tiles) * BM + (pairs_split_k ? 0 : (h % 2) * (BM / 2)), h % 2, pair};
  };
  // Half tiles: BM / 2 rows over the whole K range.
  auto half_tile = [&](const Unit& unit) { return unit.part >= 0 && !pairs_split_k; };
  auto unit_range = [&](const Unit& unit) {
    return unit.part < 0 || !pairs_split_k ? kr : split_k_range(k_blocks, 2, unit.part);
  };

  int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbarrier_init(full_bar(s), 1);                             // the producer's arrive + bytes
      ptx::mbarrier_init(empty_bar(s), kConsumerThreads / 32);         // one arrive per consumer warp
    }
    if (split_k > 1 && !cluster_split) {
      for (int s = 0; s < split_k; ++s) ptx::mbarrier_init(ptx::smem_addr(&partial_bars[s]), 1);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == kConsumerWarpgroups) {
    // ---- producer ----
    ptx::release_registers<kProducerRegisters>();
    if (threadIdx.x == kConsumerThreads) {
      if constexpr (!DEQUANT_ACT) {
        ptx::prefetch_tensor_map(&act_map);
        if constexpr (GROUP > 1) ptx::prefetch_tensor_map(&act_group_map);
      }
      // The weight is not written by the previous kernel: under a programmatic launch the weight
      // chunks of the first tile's first K blocks are requested before waiting for that kernel
      // to complete (it may still run), the activations after. The ring starts empty, so these
      // stages need no wait. Otherwise each stage's activations go first with its weights: all
      // weights first would queue the first stage's activations behind them (measured +1.5 us to
      // the first stage at decode sizes). Hence only 4 K blocks' weights before the wait, not the
      // ring's: behind a kernel that has already completed (a norm in a serving graph) the wait
      // returns at once, and the activations queued behind the ring's weights came 0.3-1.1 us
      // later (PERF-LOG run 89, `fp4gap gemm --after norm`; back to back even or faster). The
      // plain m64 tile keeps the ring's: its one-block copies stream slowly without them (run 89:
      // +0.3-0.4 us at M = 64 both ways).
      constexpr int kPrefetchGroups = BM == 64 && GROUP == 1 ? STAGES : (4 + GROUP - 1) / GROUP;
      // A copy group: GROUP K blocks from `kb` (fewer at the end of the CTA's range) in GROUP ring
      // stages from `stage`, counted on the first stage's full barrier. Their activations come in
      // one 3D copy (blocks beyond K read as zeros), except for a group holding a partial last K
      // block (k_tail), whose blocks come one 2D copy each: the 3D map has no column bound inside
      // a block.
      auto group_blocks = [&](int kb, int end) { return min(GROUP, end - kb); };
      // A unit at the edge of M (the last row of tiles, or a persistent CTA's half of it, where M
      // ends inside it) copies only the rows that exist, one 2D copy per K block, through the map
      // whose box is that many rows (act_edge_map: m % BM rows; act_half_edge_map: m % (BM / 2)).
      // A box reaching past M has the copy engine write zeros for the missing rows, and those
      // copies cost up to 21% of the launch back to back (W13 at M = 65 on m64 G4 split 2, PERF-LOG
      // runs 127-129). The stage's rows past M keep whatever they held: they feed only output rows
      // past M, which are never stored.
      auto unit_rows = [&](const Unit& unit) { return half_tile(unit) ? BM / 2 : BM; };
      auto at_edge = [&](const Unit& unit) { return unit.row0 + unit_rows(unit) > m; };
      auto act_tile_2d = [&](int kb, int nb) { return GROUP == 1 || (k_tail && kb + nb == k_blocks); };
      // The activation bytes a group of `nb` K blocks from `kb` of `unit` brings into its stages.
      auto act_bytes = [&](const Unit& unit, int kb, int nb) -> std::uint32_t {
        if (DEQUANT_ACT) return 0u;
        const int rows = min(unit_rows(unit), m - unit.row0);
        if (rows < BM || act_tile_2d(kb, nb)) return static_cast<std::uint32_t>(nb * rows * kBlockK * 2);
        return GROUP * kActStageBytes;  // one 3D box, blocks past the range or K included
      };
      const int range_groups = (iters + GROUP - 1) / GROUP;
      const int prefetched = programmatic && first_unit < units ? min(range_groups, kPrefetchGroups) : 0;
      for (int g = 0; g < prefetched; ++g) {
        const int kb = static_cast<int>(kr.begin) + g * GROUP, nb = group_blocks(kb, static_cast<int>(kr.end));
        ptx::mbarrier_arrive_expect_tx(full_bar(g * GROUP), act_bytes(unit_at(first_unit), kb, nb) + nb * kChunkBytes);
        ptx::bulk_load(base + wgt_offset + g * GROUP * kChunkBytes,
                       weights + chunk_offset(first_unit % n_tiles, kb, k_blocks), nb * kChunkBytes,
                       full_bar(g * GROUP));
      }
      cuda::wait_for_previous_grid();
      int stage = 0;            // ring position of the next K block to load
      std::uint32_t phase = 0;  // ... and the phase its stage's barriers are in
      int loaded = 0;           // copy groups loaded so far
      // One copy group along the ring (the phase flips after its last group).
      auto next_group = [&] {
        const bool wrap = stage == STAGES - GROUP;
        stage = wrap ? 0 : stage + GROUP;
        phase ^= wrap ? 1u : 0u;
      };
      for (int u = first_unit; u < units; u += unit_stride) {
        const Unit unit = unit_at(u);
        if (unit.row0 >= m) continue;  // an empty half tile
        const KRange range = unit_range(unit);
        // A half tile's activations fill the first half of the stage's tile, an edge unit's its
        // first rows.
        const bool edge = at_edge(unit), half = half_tile(unit);
        const CUtensorMap* map = half ? (edge ? &act_half_edge_map : &act_half_map) : (edge ? &act_edge_map : &act_map);
        for (int kb = static_cast<int>(range.begin); kb < static_cast<int>(range.end); kb += GROUP, ++loaded) {
          const int nb = group_blocks(kb, static_cast<int>(range.end));
          // The group map's box is a whole tile's rows: a half tile's blocks come one 2D copy each.
          const bool act_2d = edge || half || act_tile_2d(kb, nb);
          if (loaded >= prefetched) {
            // Released in order: the group's last stage free means all of its stages are.
            ptx::mbarrier_wait(empty_bar(stage + GROUP - 1), phase ^ 1);
            ptx::mbarrier_arrive_expect_tx(full_bar(stage), act_bytes(unit, kb, nb) + nb * kChunkBytes);
          }
          if constexpr (DEQUANT_ACT) {
            // The consumers write the activation tiles.
          } else if (act_2d) {
            for (int j = 0; j < nb; ++j) {
              ptx::tma_load_2d(act_smem + (stage + j) * kActStageBytes, map, full_bar(stage), (kb + j) * kBlockK,
                               unit.row0);
            }
          } else {
            ptx::tma_load_3d(act_smem + stage * kActStageBytes, &act_group_map, full_bar(stage), 0, unit.row0, kb);
          }
          if (loaded >= prefetched) {
            ptx::bulk_load(base + wgt_offset + stage * kChunkBytes, weights + chunk_offset(unit.nt, kb, k_blocks),
                           nb * kChunkBytes, full_bar(stage));
          }
          // A whole group's stages even where the range ends inside it (a persistent CTA's next
          // unit starts at a group's first stage; the consumers release the unused ones).
          next_group();
        }
        while (next_starts_at_stage_0(u) && stage != 0) {
          ptx::mbarrier_wait(empty_bar(stage + GROUP - 1), phase ^ 1);
          ptx::mbarrier_arrive(full_bar(stage));  // no bytes: the phase completes unloaded
          next_group();
        }
      }
    } else if (timeline != nullptr && threadIdx.x == kConsumerThreads + 32) {
      // Diagnostic: when each K block of the first pass over the ring arrives (its copy group's
      // full barrier completes). Waiting on a barrier does not change it; within the first pass
      // each barrier completes once, so the phase is 0.
      const long long start = clock64();
      std::uint64_t* arrivals = timeline + static_cast<std::size_t>(gridDim.x) * kTimelineFields +
                                static_cast<std::size_t>(blockIdx.x) * kTimelineArrivals;
      const int observed = first_unit < units ? min(iters, min(STAGES, kTimelineArrivals)) : 0;
      for (int j = 0; j < observed; ++j) {
        ptx::mbarrier_wait(full_bar(j - j % GROUP), 0);
        arrivals[j] = static_cast<std::uint64_t>(clock64() - start);
      }
      for (int j = observed; j < kTimelineArrivals; ++j) arrivals[j] = 0;
    }
    if (cluster_split) {
      __syncwarp();         // the elected thread rejoins its warp: cluster barriers are .aligned
      ptx::cluster_sync();  // partial tiles written (see the consumers)
      ptx::cluster_sync();  // partial tiles read
    }
  } else {
    // ---- consumers ----
    ptx::claim_registers<kConsumerRegisters>();
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    // Warpgroup w owns weight rows 64 w .. 64 w + 63.
    const int frag_row = 64 * warpgroup + 16 * warp + g;  // this thread's first weight row in the tile

    // Fragments of kBuffers K blocks: block it is dequantized into frag[it % kBuffers] while the
    // wgmmas of the kInFlight blocks before it still run. The buffer index must be a compile-time
    // constant (registers), hence the loop below unrolled by kBuffers.
    std::uint32_t frag[kBuffers][kSteps][4];

    // Per-thread shared addresses in stage 0 and the descriptor of stage 0, computed once: per K
    // block only the stage's offset is added (32-bit ld.shared, see ptx::ld_shared_u32).
    const std::uint32_t code_addr = base + wgt_offset + chunk_code_word_offset(warpgroup, tid, 0);
    const std::uint32_t scale_addr = base + wgt_offset + chunk_scale_offset(frag_row, 0);
    constexpr std::uint32_t kScaleRow8 = chunk_scale_offset(8, 0) - chunk_scale_offset(0, 0);  // row + 8
    // The descriptor's start-address field is the low word's bits 0-13 (address bits 4-17): a
    // tile's offset in the CTA's shared memory stays below 256 KB, so stage and k16 step offsets
    // are plain 32-bit additions that never carry out of the field, and the high word (stride,
    // swizzle) is the same for all.
    const std::uint64_t desc0 = ptx::sw128_kmajor_desc(act_smem);
    const std::uint32_t desc_lo = static_cast<std::uint32_t>(desc0);
    const std::uint64_t desc_hi = desc0 & ~std::uint64_t{0xFFFFFFFFu};

    // Ring position of the next K block (stage, phase), the same sequence as the producer's, and
    // the stages of the kInFlight blocks before it, oldest first: a block's stage goes back to the
    // producer once its wgmmas have completed (see below).
    int stage = 0;
    std::uint32_t phase = 0;
    int pending[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) pending[j] = 0;

    // Waits for K block data in stage `stg`, dequantizes it into fragment buffer `buffer` and
    // issues and commits its wgmmas into `acc`, as many activation rows wide as acc holds (BM, or
    // BM / 2 for a persistent CTA's half tile). Called with a constant `stg` by the ring-unrolled
    // loop, where every stage offset folds into an immediate.
    // `block`: the K block's index in the CTA's range, which picks its resident activation tile
    // under DEQUANT_ACT (otherwise the stage's tile holds it).
    auto issue_block = [&](int stg, int block, auto buffer, auto& acc) {
      constexpr int b = decltype(buffer)::value;
      constexpr int W = 2 * static_cast<int>(std::extent_v<std::remove_reference_t<decltype(acc)>>);
      ptx::mbarrier_wait(full_bar(stg - stg % GROUP), phase);  // the stage's copy group has arrived
      const std::uint32_t wgt_stage = static_cast<std::uint32_t>(stg) * kChunkBytes;  // the stage's chunk
      std::uint32_t words[kSteps];
      const uint4 codes = ptx::ld_shared_v4_u32(code_addr + wgt_stage);
      words[0] = codes.x, words[1] = codes.y, words[2] = codes.z, words[3] = codes.w;
      const std::uint32_t scales_lo = ptx::ld_shared_u32(scale_addr + wgt_stage);
      const std::uint32_t scales_hi = ptx::ld_shared_u32(scale_addr + wgt_stage + kScaleRow8);
      decode::dequant_block_fragments<decode::Math::w4a16>(words, scales_lo, scales_hi, frag[b]);
      // Every wgmma input (fragments, descriptors) is pinned before the fence: the compiler would
      // otherwise sink its computation between the wgmmas, and ptxas then serializes the group
      // (warning C7513). Step j reads 32 bytes further along the 128-byte row.
      const std::uint32_t act_desc_lo =
          desc_lo + static_cast<std::uint32_t>(DEQUANT_ACT ? block : stg) * (kActStageBytes >> 4);
      std::uint64_t desc[kSteps];
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        desc[j] = desc_hi | (act_desc_lo + (32u >> 4) * j);
        ptx::fence_register(desc[j]);
#pragma unroll
        for (int r = 0; r < 4; ++r) ptx::fence_register(frag[b][j][r]);
      }
      ptx::wgmma_fence();
#pragma unroll
      for (int j = 0; j < kSteps; ++j) ptx::wgmma_rs<W>(acc, frag[b][j], desc[j]);
      ptx::wgmma_commit();
    };
    // One stage along the ring (the phase flips after its last stage).
    auto next_stage = [&] {
      const bool wrap = stage == STAGES - 1;
      stage = wrap ? 0 : stage + 1;
      phase ^= wrap ? 1u : 0u;
    };
    // The next K block of the current tile at the ring position (stage, phase); `release`: the
    // block kInFlight before it belongs to this tile.
    auto consume = [&](bool release, int block, auto buffer, auto& acc) {
      issue_block(stage, block, buffer, acc);
      // The block kInFlight before is complete: its stage goes back to the producer and its
      // fragment buffer is free for the block after.
      ptx::wgmma_wait<kInFlight>();
      if (release && lane == 0) ptx::mbarrier_arrive(empty_bar(pending[0]));
#pragma unroll
      for (int j = 0; j + 1 < kInFlight; ++j) pending[j] = pending[j + 1];
      pending[kInFlight - 1] = stage;
      next_stage();
    };
    // The same at a constant ring stage S (the ring-unrolled loop; the phase flips after the
    // ring's last stage).
    auto consume_at = [&](bool release, int block, auto stage_constant, auto& acc) {
      constexpr int S = decltype(stage_constant)::value;
      issue_block(S, block, std::integral_constant<int, S % kBuffers>{}, acc);
      ptx::wgmma_wait<kInFlight>();
      if (release && lane == 0) ptx::mbarrier_arrive(empty_bar((S + STAGES - kInFlight) % STAGES));
      if constexpr (S == STAGES - 1) phase ^= 1u;
    };
    if constexpr (DEQUANT_ACT) {
      // The CTA's activations, all of its K range, dequantized into resident tiles laid out as the
      // tensor copy would have written them (row r's 16-byte chunk c at chunk c ^ (r % 8) of its
      // 128-byte row; rows beyond M zero) while the first weight copies are in flight. A work item
      // is 16 bytes of one row's codes (32 values: half a K block, chunks 4h .. 4h + 3) and their two
      // scale bytes; consecutive threads take consecutive items of a row, kBatch loads in flight
      // before the first is used. The previous kernel may have written them (programmatic launch).
      cuda::wait_for_previous_grid();
      const int row0 = unit_at(first_unit).row0;
      const int row_items = 2 * iters, items = BM * row_items;
      const std::int64_t code_row = static_cast<std::int64_t>(k_blocks) * (kBlockK / 2);
      const std::int64_t scale_row = static_cast<std::int64_t>(k_blocks) * (kBlockK / kBlockSize);
      const int thread = warpgroup * 128 + tid;
      constexpr int kBatch = 8;
      for (int i0 = thread; i0 < items; i0 += kBatch * kConsumerThreads) {
        uint4 codes[kBatch];
        std::uint32_t scales[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = i0 + j * kConsumerThreads, gm = row0 + i / row_items;
          codes[j] = make_uint4(0u, 0u, 0u, 0u);
          scales[j] = 0u;  // zero codes and scales dequantize to zeros
          if (i < items && gm < m) {
            const std::int64_t half = 2 * kr.begin + i % row_items;  // in the row, in units of 32 values
            codes[j] = __ldg(reinterpret_cast<const uint4*>(act_codes + gm * code_row + half * 16));
            scales[j] = __ldg(reinterpret_cast<const unsigned short*>(act_scales + gm * scale_row + half * 2));
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = i0 + j * kConsumerThreads;
          if (i < items) {
            const int r = i / row_items, h = i % row_items;
            const std::uint32_t row_addr = act_smem + static_cast<std::uint32_t>((h / 2) * kActStageBytes + r * 128);
            const std::uint32_t word[4] = {codes[j].x, codes[j].y, codes[j].z, codes[j].w};
            // Words 0-1 are the first 16 values (scale byte 0), words 2-3 the next 16 (byte 1).
            const std::uint32_t scale[2] = {e4m3_to_bf16x2(scales[j] & 0xFFu), e4m3_to_bf16x2(scales[j] >> 8)};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              std::uint32_t v[4];
              dequant_e2m1x8_bf16(word[q], scale[q / 2], scale[q / 2], v);
              const std::uint32_t chunk = static_cast<std::uint32_t>(4 * (h % 2) + q);
              ptx::st_shared_v4_u32(row_addr + ((chunk ^ static_cast<std::uint32_t>(r & 7)) << 4), v[0], v[1], v[2],
                                    v[3]);
            }
          }
        }
      }
      ptx::fence_proxy_async();  // generic writes, read by the wgmmas through the async proxy
      ptx::named_barrier(1, kConsumerThreads);
    }
    std::uint32_t c_first_data = 0;  // 32-bit SM clock: wraps after seconds, not microseconds
    if (timeline != nullptr && threadIdx.x == 0) {
      if (iters > 0 && first_unit < units) ptx::mbarrier_wait(full_bar(0), 0);
      timeline_field(1) = ptx::global_timer();
      c_first_data = static_cast<std::uint32_t>(clock());
    }
    // A unit's `iters` K blocks into `acc`. No condition inside the loop body: with one there,
    // ptxas cannot see where each wgmma group ends and serializes every wgmma (C7513). The unit's
    // first kInFlight blocks have nothing to release (the previous unit released its last blocks
    // after its main loop).
    auto main_loop = [&](auto& acc, int iters) {
      int it = 0;
      if constexpr (kUnrollRing) {
        // A bound, not a branch around the loop: ptxas then keeps the wgmmas in flight across the
        // join (a branch serialized them, C7515).
        const int unrolled = !PERSISTENT || stage == 0 ? iters : 0;
        for (; it + STAGES <= unrolled; it += STAGES) {
          [&]<int... U>(std::integer_sequence<int, U...>) {
            (consume_at(it + U >= kInFlight, it + U, std::integral_constant<int, U>{}, acc), ...);
          }(std::make_integer_sequence<int, STAGES>{});
        }
        // Back at stage 0; the blocks still in flight are the ring's last kInFlight stages.
        if (it > 0) {
#pragma unroll
          for (int j = 0; j < kInFlight; ++j) pending[j] = STAGES - kInFlight + j;
        }
      }
      for (; it + kBuffers - 1 < iters; it += kBuffers) {
        [&]<int... U>(std::integer_sequence<int, U...>) {
          (consume(it + U >= kInFlight, it + U, std::integral_constant<int, U>{}, acc), ...);
        }(std::make_integer_sequence<int, kBuffers>{});
      }
      // At most kBuffers - 1 blocks left.
      [&]<int... U>(std::integer_sequence<int, U...>) {
        ((it + U < iters ? consume(it + U >= kInFlight, it + U, std::integral_constant<int, U>{}, acc) : void()), ...);
      }(std::make_integer_sequence<int, kBuffers - 1>{});
    };
    // Split-K through the workspace (SplitReduction::workspace), called by the 256 consumer
    // threads: stores this CTA's partial tile; the CTA that brings the tile's counter to split_k
    // (the last to arrive) resets it and adds every split's partial in split order into `acc`,
    // the same bits whichever CTA that is. Returns whether this CTA now holds the tile's sum.
    auto add_partials_in_workspace = [&](auto& acc, int tile) -> bool {
      constexpr int kQuads = static_cast<int>(std::extent_v<std::remove_reference_t<decltype(acc)>>) / 4;
      constexpr int kThreads = kConsumerWarpgroups * 128;
      constexpr std::int64_t kTileQuads = static_cast<std::int64_t>(kQuads) * kThreads;
      const int thread = warpgroup * 128 + tid;
      float4* const partials = reinterpret_cast<float4*>(workspace);
      unsigned int* const counters =
          reinterpret_cast<unsigned int*>(partials + static_cast<std::int64_t>(tiles) * split_k * kTileQuads);
      float4* const tile_partials = partials + static_cast<std::int64_t>(tile) * split_k * kTileQuads;
#pragma unroll
      for (int i = 0; i < kQuads; ++i) {
        __stcg(tile_partials + split * kTileQuads + i * kThreads + thread,
               make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
      }
      ptx::fence_proxy_async_global();  // the last CTA reads these through the copy engine
      __threadfence();
      ptx::named_barrier(1, kThreads);
      if (thread == 0) {
        const unsigned int arrived = atomicAdd(&counters[tile], 1u);
        const bool last = arrived == static_cast<unsigned int>(split_k - 1);
        if (last) atomicExch(&counters[tile], 0u);  // every split has arrived: zero for the next launch
        workspace_last_cta = last ? 1 : 0;
      }
      ptx::named_barrier(1, kThreads);
      if (workspace_last_cta == 0) return false;
      // Every split's partial (this CTA's own too: the same bits whichever CTA arrives last) comes
      // back into the idle ring by one bulk copy each, kSlots at a time, and is added in split
      // order. Loads into registers kept four requests in flight per thread, ~6 L2 round trips
      // at split 8 (PERF-LOG run 63); the copy engine has all of them in flight at once.
      constexpr std::uint32_t kPartialBytes = static_cast<std::uint32_t>(kTileQuads) * 16u;
      constexpr int kSlots = static_cast<int>(STAGES * (kActStageBytes + kChunkBytes) / kPartialBytes);
      static_assert(kSlots >= 1, "a partial tile fits in the stage ring (check_tile_config)");
      auto slot_addr = [&](int s) { return act_smem + static_cast<std::uint32_t>(s % kSlots) * kPartialBytes; };
      auto fetch = [&](int s) {
        const std::uint32_t bar = ptx::smem_addr(&partial_bars[s]);
        ptx::mbarrier_arrive_expect_tx(bar, kPartialBytes);
        ptx::bulk_load(slot_addr(s), tile_partials + s * kTileQuads, kPartialBytes, bar);
      };
      if (thread == 0) {
        __threadfence();                  // acquire: every split's partial, after the counter
        ptx::fence_proxy_async_global();  // ... and for the copy engine's reads
        for (int s = 0; s < min(split_k, kSlots); ++s) fetch(s);
      }
      for (int s = 0; s < split_k; ++s) {
        ptx::mbarrier_wait(ptx::smem_addr(&partial_bars[s]), 0);
        const std::uint32_t slot = slot_addr(s) + static_cast<std::uint32_t>(thread) * 16u;
#pragma unroll
        for (int i = 0; i < kQuads; ++i) {
          const uint4 v = ptx::ld_shared_v4_u32(slot + static_cast<std::uint32_t>(i * kThreads) * 16u);
          const float p[4] = {__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[4 * i + e] = s == 0 ? p[e] : acc[4 * i + e] + p[e];
        }
        if (s + kSlots < split_k) {
          // The slot is read by every consumer thread: then it takes split s + kSlots.
          ptx::named_barrier(1, kThreads);
          if (thread == 0) {
            ptx::fence_proxy_async();
            fetch(s + kSlots);
          }
        }
      }
      return true;
    };
    // One work unit: its main loop over the unit's K range and its epilogue, compiled once per kind
    // of unit (`kind`): kWholeTile, kHalfTile (BM / 2 rows) or kKHalf (half of the K range, one of a
    // last-wave pair that exchanges partial tiles; persistent_schedule, last_wave_splits_k).
    // `align_next`: the next unit starts at stage 0 (next_starts_at_stage_0).
    auto run_unit = [&](const Unit& unit, auto kind, bool align_next) {
      constexpr bool kPairHalf = decltype(kind)::value == kKHalf;
      constexpr int W = decltype(kind)::value == kHalfTile ? BM / 2 : BM;
      constexpr int kAccW = W / 2;  // fp32 accumulators per consumer thread (m64 x W / 128 threads)
      const int nt = unit.nt;
      const KRange range = unit_range(unit);
      const int unit_iters = static_cast<int>(range.end - range.begin);
      // A cluster split's band, staged by stmatrix as two 64-column halves of `band_rows` rows at
      // `staged`, stored through out_part_map in boxes of `box_rows` (the band, or 16-row slices
      // where the bands differ; a slice starts at a multiple of 2048 bytes, whole swizzle periods).
      auto store_band = [&](std::uint32_t staged, int row0, int band_rows, int box_rows) {
        ptx::fence_proxy_async();  // the generic-proxy writes, before the copy engine reads them
        ptx::named_barrier(1, kConsumerWarpgroups * 128);
        if (threadIdx.x == 0) {
          for (int r = 0; r < band_rows; r += box_rows) {
            const std::uint32_t slice = static_cast<std::uint32_t>(r * 128);
            ptx::tma_store_2d(&out_part_map, staged + slice, nt * kBlockN, row0 + r);
            ptx::tma_store_2d(&out_part_map, staged + static_cast<std::uint32_t>(band_rows * 128) + slice,
                              nt * kBlockN + 64, row0 + r);
          }
          ptx::bulk_commit_group();
          ptx::bulk_wait_group_read_all();  // the band outlives the copy engine's reads
        }
      };
      float acc[kAccW];
#pragma unroll
      for (int i = 0; i < kAccW; ++i) acc[i] = 0.0f;
      main_loop(acc, unit_iters);
      ptx::wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < kAccW; ++i) ptx::fence_register(acc[i]);
      // The tile's last stages go back too (the producer may be loading the next tile).
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        if (unit_iters - kInFlight + j >= 0 && lane == 0) ptx::mbarrier_arrive(empty_bar(pending[j]));
      }
      if constexpr (PERSISTENT) {
        // Stages the producer skips, released unread: the rest of a copy group that the range
        // ends inside (the next unit starts at a group's first stage), and with `align_next` the
        // rest of the ring.
        while (stage % GROUP != 0 || (align_next && stage != 0)) {
          if (lane == 0) ptx::mbarrier_arrive(empty_bar(stage));
          next_stage();
        }
      }
      if (timeline != nullptr && threadIdx.x == 0) {
        const std::uint64_t now = ptx::global_timer();
        timeline_field(2) = now;
        timeline_field(6) = now;  // the cluster split's marks (below), if any
        timeline_field(7) = now;
        timeline_field(5) = static_cast<std::uint32_t>(clock()) - c_first_data;
      }
      // Every K block of this CTA has arrived: the next kernel may start its prologue on SMs
      // that free up (first call per CTA counts).
      if (threadIdx.x == 0) cuda::allow_dependent_launch();

      // Rows row0 .. of the output tile nt from `tile_acc` (BM rows, or BM / 2: a pair's band).
      auto store_tile = [&](auto& tile_acc, int row0) {
        constexpr int kTileAcc = static_cast<int>(std::extent_v<std::remove_reference_t<decltype(tile_acc)>>);
        if (tma_store) {
          // 16-bit output through the tensor copy engine: each warp transposes its accumulator
          // fragments into the tile [rows][128 columns] with stmatrix (the D^T fragment of a thread
          // is word t of row g of an 8x8 block; .trans writes D rows), staged as two halves of 64
          // columns in the 128-byte swizzle (chunk c of row r at chunk c ^ (r % 8)), then one thread
          // stores both halves with TMA, which also clips rows >= M and columns >= N.
          if constexpr (PERSISTENT) {
            // The staging is free once the copy engine has read the previous tile out of it.
            if (threadIdx.x == 0) ptx::bulk_wait_group_read_all();
          } else {
            ptx::fence_proxy_async();  // the ring: wgmma read it through the async proxy
          }
          ptx::named_barrier(1, kConsumerWarpgroups * 128);
          // A half tile's or a band's rows are the staging's first BM / 2 rows of each 64-column
          // half, which its tensor map (box BM / 2 rows) stores.
          stage_output_part(base + static_cast<std::uint32_t>(warpgroup) * (BM * 128u), tile_acc, warp, lane, out_type,
                            alpha);
          ptx::fence_proxy_async();  // the generic-proxy writes above, before the copy engine reads them
          ptx::named_barrier(1, kConsumerWarpgroups * 128);
          if (threadIdx.x == 0) {
            const CUtensorMap* map = 2 * kTileAcc == BM ? &out_map : &out_part_map;
            ptx::tma_store_2d(map, base, nt * kBlockN, row0);
            ptx::tma_store_2d(map, base + BM * 128u, nt * kBlockN + 64, row0);
            ptx::bulk_commit_group();
            // Shared memory must outlive the copy engine's reads: a persistent CTA waits before it
            // next writes the staging, and before it exits (below).
            if (!PERSISTENT) ptx::bulk_wait_group_read_all();
          }
        } else if constexpr (PERSISTENT) {
          // f32 output, or rows without 16-byte alignment: straight from the fragments (the ring is
          // being refilled, and the staging holds only a 16-bit tile). D^T fragment element e of
          // quad i is output row 8i + 2t + e % 2, column frag_row + 8 (e / 2).
          const int col0 = nt * kBlockN + frag_row;
#pragma unroll
          for (int i = 0; i < kTileAcc / 4; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int gm = row0 + 8 * i + 2 * t + (e & 1), gn = col0 + ((e >> 1) << 3);
              if (gm < m && gn < n) {
                store_output(out, out_type, static_cast<std::int64_t>(gm) * n + gn, alpha * tile_acc[4 * i + e]);
              }
            }
          }
        }
      };
      if constexpr (kPairHalf) {
        // A pair of the split last wave: each CTA has added half of the tile's K range. Each stores
        // the other's band of its partial tile (part 0 keeps rows 0 .. BM / 2 - 1, part 1 the rest)
        // to the pair's workspace (quad i at [pair][i][thread]), counts itself on the pair's
        // counter, waits for the other's count, adds the other's partial of its band from L2 and
        // stores the band. Both CTAs are resident (a persistent grid, the pair's units on
        // consecutive CTAs), so the wait ends. The counter goes up by 2 per pair and launch, so it
        // needs no reset: the first to arrive sees it even. The sum of two partials is the same
        // bits in either order.
        constexpr int kBandQuads = kAccW / 8;
        const int thread = warpgroup * 128 + tid;
        constexpr int kThreads = kConsumerWarpgroups * 128;
        float4* const pair_ws = reinterpret_cast<float4*>(workspace) +
                                static_cast<std::size_t>(unit.pair) * (kAccW / 4) * kThreads;
        unsigned int* const counter =
            reinterpret_cast<unsigned int*>(workspace + persistent_pair_counters_offset(tiles, BM)) + unit.pair;
        auto exchange = [&](auto part) {
          constexpr int kOwn = decltype(part)::value * kBandQuads, kOther = kBandQuads - kOwn;
#pragma unroll
          for (int j = 0; j < kBandQuads; ++j) {
            const int i = kOther + j;
            __stcg(&pair_ws[i * kThreads + thread], make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
          }
          __threadfence();  // release: the band before the count
          ptx::named_barrier(1, kThreads);
          if (thread == 0) {
            const unsigned int before = atomicAdd(counter, 1u);
            if ((before & 1u) == 0u) {
              while (ptx::ld_acquire_gpu(counter) == before + 1u) {
              }
            }
            __threadfence();
          }
          ptx::named_barrier(1, kThreads);
          float4 theirs[kBandQuads];
#pragma unroll
          for (int j = 0; j < kBandQuads; ++j) theirs[j] = __ldcg(&pair_ws[(kOwn + j) * kThreads + thread]);
#pragma unroll
          for (int j = 0; j < kBandQuads; ++j) {
            acc[4 * (kOwn + j)] += theirs[j].x;
            acc[4 * (kOwn + j) + 1] += theirs[j].y;
            acc[4 * (kOwn + j) + 2] += theirs[j].z;
            acc[4 * (kOwn + j) + 3] += theirs[j].w;
          }
          store_tile(*reinterpret_cast<float(*)[kAccW / 2]>(&acc[4 * kOwn]), unit.row0 + 8 * kOwn);
        };
        if (unit.part == 0) {
          exchange(std::integral_constant<int, 0>{});
        } else {
          exchange(std::integral_constant<int, 1>{});
        }
        return;
      }
      if constexpr (PERSISTENT) {
        store_tile(acc, unit.row0);
        return;
      }
      // A workspace reduction leaves the whole tile with the split CTA that arrives last.
      bool whole_tile = split_k == 1;
      if constexpr (TileConfig::workspace_split(BM, PERSISTENT)) {
        if (split_k > 1 && !cluster_split) {
          if (!add_partials_in_workspace(acc, (unit.row0 / BM) * n_tiles + nt)) return;
          whole_tile = true;
        }
      }
      if (whole_tile && tma_store) {
        store_tile(acc, unit.row0);
      } else if (whole_tile) {
        // Staged through shared memory so that global stores are 16-byte and row-contiguous: the
        // fragment layout alone gives 4 rows x 16 bytes per warp store. The stage ring is free once
        // both consumer warpgroups are done reading it (through the async proxy).
        ptx::fence_proxy_async();
        ptx::named_barrier(1, kConsumerWarpgroups * 128);
        float* staged = reinterpret_cast<float*>(base_ptr);
#pragma unroll
        for (int i = 0; i < kAccW / 4; ++i) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = 8 * i + 2 * t + (e & 1);  // activation row in the tile (output row)
            const int col = frag_row + ((e >> 1) << 3);  // weight row in the tile (output column)
            staged[row * kStagedStride + col] = alpha * acc[4 * i + e];
          }
        }
        ptx::named_barrier(1, kConsumerWarpgroups * 128);
        store_staged_tile(staged, out, out_type, m, n, unit.row0, nt * kBlockN, BM, warpgroup * 128 + tid);
      } else if (split_k == 2 && tma_store) {
        // A cluster split of 2 with 16-bit output through the copy engine: each CTA stores the
        // other's band of its partial tile to the workspace (quad i of the tile at [tile][i][thread];
        // the launcher has checked that there is one, Plan::workspace_bytes) and keeps its own band
        // in registers; after the cluster's barrier it adds the other's partial of its band from L2
        // and stores the band through TMA. The exchange is bound by the
        // bytes crossing between the SMs, which this path moves faster than distributed shared
        // memory (PERF-LOG run 171b: 2856 against 3644 SM cycles at m128 with every SM exchanging),
        // and no CTA waits for another to leave. The sum acc + other is the two ranks' partials
        // added in either order: the same bits as the shared-memory path.
        const int thread = warpgroup * 128 + tid;
        constexpr int kThreads = kConsumerWarpgroups * 128;
        float4* const tile_ws = reinterpret_cast<float4*>(workspace) +
                                static_cast<std::size_t>((unit.row0 / BM) * n_tiles + nt) * (kAccW / 4) * kThreads;
        ptx::fence_proxy_async();  // the ring (read by wgmma through the async proxy) takes the band
        auto exchange = [&](auto rank) {
          constexpr int kRank = decltype(rank)::value;
          constexpr ItemRange own = cluster_band_pairs(BM, 2, kRank), other = cluster_band_pairs(BM, 2, 1 - kRank);
#pragma unroll
          for (int i = 2 * static_cast<int>(other.begin); i < 2 * static_cast<int>(other.end); ++i) {
            tile_ws[i * kThreads + thread] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
          }
          ptx::cluster_sync();  // release / acquire at cluster scope: the other's band is in L2
          if (timeline != nullptr && threadIdx.x == 0) timeline_field(6) = ptx::global_timer();
          // Every load before the first stmatrix (ordered asm), so one L2 round trip in all.
          constexpr int kOwnQuads = 2 * static_cast<int>(own.end - own.begin);
          float4 theirs[kOwnQuads > 0 ? kOwnQuads : 1];  // none for m16's rank 1, which never runs this (no pair)
#pragma unroll
          for (int j = 0; j < kOwnQuads; ++j) {
            theirs[j] = __ldcg(&tile_ws[(2 * static_cast<int>(own.begin) + j) * kThreads + thread]);
          }
          constexpr int band_rows = 8 * kOwnQuads;
          const std::uint32_t half_base = base + static_cast<std::uint32_t>(warpgroup * band_rows * 128);
          auto pack = [&](int j, int e) {
            const int i = 2 * static_cast<int>(own.begin) + j;
            const float lo = acc[4 * i + e] + (e == 0 ? theirs[j].x : theirs[j].z);
            const float hi = acc[4 * i + e + 1] + (e == 0 ? theirs[j].y : theirs[j].w);
            return pack_output_pair(out_type, alpha * lo, alpha * hi);
          };
#pragma unroll
          for (int j = 0; j < kOwnQuads; j += 2) {
            ptx::stmatrix_x4_trans(stmatrix_pair_addr(half_base, j, warp, lane), pack(j, 0), pack(j, 2), pack(j + 1, 0),
                                   pack(j + 1, 2));
          }
          store_band(base, unit.row0 + 16 * static_cast<int>(own.begin), band_rows, cluster_band_box_rows(BM, 2));
        };
        // The ring must be free of both warpgroups' wgmma reads before the band is staged in it.
        ptx::named_barrier(1, kThreads);
        if (split == 0) {
          exchange(std::integral_constant<int, 0>{});
        } else {
          exchange(std::integral_constant<int, 1>{});
        }
        if (timeline != nullptr && threadIdx.x == 0) timeline_field(7) = ptx::global_timer();
      } else {
        // The partial tile reuses the stage ring: both consumer warpgroups must be done reading it
        // (their wgmmas read it through the async proxy; the partials are ordinary stores).
        ptx::fence_proxy_async();
        ptx::named_barrier(1, kConsumerWarpgroups * 128);
        float4* partial = reinterpret_cast<float4*>(base_ptr);
        const int thread = warpgroup * 128 + tid;
#pragma unroll
        for (int i = 0; i < kAccW / 4; ++i) {
          partial[i * (kConsumerWarpgroups * 128) + thread] =
              make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
        }
        ptx::cluster_sync();
        if (timeline != nullptr && threadIdx.x == 0) timeline_field(6) = ptx::global_timer();
        // This CTA reduces its share of the accumulator quads, adding the partials of ranks 0, 1, ...
        // in that order whatever the rank: the sum is the same bits on every run. Quad i holds
        // output rows 8i .. 8i + 7, so a share is a band of whole rows, staged after the partials
        // (which other CTAs still read).
        // With the copy engine storing them, the quads are shared two at a time (whole 16-row
        // slices: cluster_band_pairs), otherwise one at a time.
        const KRange share = tma_store ? cluster_band_pairs(BM, split_k, split) : split_k_range(kAccW / 4, split_k, split);
        const int per_item = tma_store ? 2 : 1;
        const int share_begin = per_item * static_cast<int>(share.begin);
        const int share_quads = per_item * static_cast<int>(share.end - share.begin);
        auto reduce_quad = [&](int i) {
          const std::uint32_t local = ptx::smem_addr(&partial[i * (kConsumerWarpgroups * 128) + thread]);
          // The ranks' quads are requested four at a time before any is added: one distributed-
          // shared-memory round trip per four ranks instead of one per rank in a chain (PERF-LOG
          // run 26: 2-6% per split launch). Four, not all eight: more would spill the narrow
          // tiles' 96 registers. Adding in rank order keeps repeated runs bitwise equal.
          constexpr int kBatch = 4;
          float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
          for (int q0 = 0; q0 < kMaxSplitK; q0 += kBatch) {
            if (q0 >= split_k) break;
            float4 part[kBatch];
#pragma unroll
            for (int q = 0; q < kBatch; ++q) {
              if (q0 + q < split_k) part[q] = ptx::load_cluster_f4(ptx::map_to_rank(local, static_cast<std::uint32_t>(q0 + q)));
            }
#pragma unroll
            for (int q = 0; q < kBatch; ++q) {
              if (q0 + q >= split_k) break;
              if (q0 + q == 0) {
                sum = part[0];
              } else {
                sum.x += part[q].x;
                sum.y += part[q].y;
                sum.z += part[q].z;
                sum.w += part[q].w;
              }
            }
          }
          return sum;
        };
        const std::uint32_t band_base = base + static_cast<std::uint32_t>(BM * kBlockN * 4);
        if (tma_store) {
          // 16-bit output through the copy engine, as the whole tile's (above): the launcher sets
          // tma_store for a cluster split only where every CTA has a pair of quads
          // (cluster_band_rows), so the band [8 share_quads rows][128 columns] is written by
          // stmatrix two quads at a time, as two 64-column halves in the 128-byte swizzle, and
          // stored by store_band.
          const int band_rows = 8 * share_quads;
          const std::uint32_t half_base = band_base + static_cast<std::uint32_t>(warpgroup * band_rows * 128);
          auto pack = [&](float lo, float hi) { return pack_output_pair(out_type, alpha * lo, alpha * hi); };
          for (int j = 0; j < share_quads; j += 2) {
            const float4 a = reduce_quad(share_begin + j), b = reduce_quad(share_begin + j + 1);
            ptx::stmatrix_x4_trans(stmatrix_pair_addr(half_base, j, warp, lane), pack(a.x, a.y), pack(a.z, a.w),
                                   pack(b.x, b.y), pack(b.z, b.w));
          }
          store_band(band_base, unit.row0 + 8 * share_begin, band_rows, cluster_band_box_rows(BM, split_k));
        } else {
          // Stored 16 bytes at a time like the unsplit staged tile.
          float* staged = reinterpret_cast<float*>(base_ptr + BM * kBlockN * 4);
          for (int j = 0; j < share_quads; ++j) {
            const float4 sum = reduce_quad(share_begin + j);
            const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
            const int band_row = 8 * j + 2 * t;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              staged[(band_row + (e & 1)) * kStagedStride + frag_row + ((e >> 1) << 3)] = alpha * vals[e];
            }
          }
          ptx::named_barrier(1, kConsumerWarpgroups * 128);
          store_staged_tile(staged, out, out_type, m, n, unit.row0 + 8 * share_begin, nt * kBlockN, 8 * share_quads, thread);
        }
        if (timeline != nullptr && threadIdx.x == 0) timeline_field(7) = ptx::global_timer();
        ptx::cluster_sync();  // no CTA leaves while another still reads its shared memory
      }
    };
    int u = first_unit;
    for (; u < whole_tiles; u += unit_stride) {
      run_unit(unit_at(u), std::integral_constant<int, kWholeTile>{}, next_starts_at_stage_0(u));
    }
    if constexpr (PERSISTENT) {
      // At most one last-wave unit per CTA (2R <= G).
      if (u < units) {
        const Unit unit = unit_at(u);
        if (pairs_split_k) {
          run_unit(unit, std::integral_constant<int, kKHalf>{}, false);
        } else if (unit.row0 < m) {  // else an empty half tile
          run_unit(unit, std::integral_constant<int, kHalfTile>{}, false);
        }
      }
    }
    if (PERSISTENT && threadIdx.x == 0) ptx::bulk_wait_group_read_all();
    if (timeline != nullptr && threadIdx.x == 0) {
      // A persistent CTA: first data of its first tile, main loop end of its last.
      timeline_field(3) = ptx::global_timer();
      timeline_field(4) = ptx::sm_id();
    }
  }
#else
  // Built without sm_90a: kernels_available() reports it before anything launches this.
  (void)weights, (void)out, (void)out_type, (void)m, (void)n, (void)k_blocks, (void)split_k, (void)alpha,
      (void)timeline, (void)out_map, (void)tma_store, (void)programmatic;
  __trap();
#endif
}

// A wide tile (KERNELS-prefill item 1f): kWideWeightRows = 192 weight rows x BM activation rows, three
// consumer warpgroups and a producer warpgroup, unsplit, one tile per CTA (CTA = row tile x n tiles
// + weight tile). The consumers' loop is the m128 kernel's (register-A m64nBMk16, one wgmma group in
// flight, the ring unrolled by its 2 fragment buffers); copy groups of GROUP K blocks bring the
// activations in one 3D tensor copy (2D copies where the group holds a partial last K block) and
// each of the two packed 128-row chunks that the tile's 64-row slices lie in with one bulk copy (a
// chunk past N is not copied: the slices in it lie past N, and their outputs are not stored). Same
// parameters as prefill_gemm_kernel so that one launch serves both; the half-tile, edge and split
// arguments are unused. 512 threads get 128 registers each at launch (the launch bound); the tiles of
// more than 128 activation rows need more accumulators, so there the producer warpgroup gives
// registers back to the consumers (setmaxnreg: 128 x 32 + 384 x 160 = 65536).
template <int BM, int STAGES, int GROUP>
__global__ void __launch_bounds__(128 * (kWideWeightRows / 64 + 1), 1)
    prefill_wide_kernel(const __grid_constant__ CUtensorMap act_map, const __grid_constant__ CUtensorMap act_half_map,
                        const __grid_constant__ CUtensorMap act_group_map,
                        const __grid_constant__ CUtensorMap act_edge_map,
                        const __grid_constant__ CUtensorMap act_half_edge_map, int k_tail,
                        const std::uint8_t* __restrict__ weights, void* __restrict__ out, OutputType out_type, int m,
                        int n, int k_blocks, int split_k, float alpha, std::uint64_t* __restrict__ timeline,
                        const __grid_constant__ CUtensorMap out_map, const __grid_constant__ CUtensorMap out_part_map,
                        int tma_store, int programmatic, std::uint8_t* __restrict__ workspace,
                        const std::uint8_t* __restrict__ act_codes, const std::uint8_t* __restrict__ act_scales) {
#if FP4GAP_PREFILL_SM90A
  constexpr int kWarpgroups = kWideWeightRows / 64;
  constexpr int kBuffers = 2;  // one wgmma group in flight
  static_assert(STAGES % kBuffers == 0 && STAGES % GROUP == 0, "the ring unrolls by whole buffer and copy groups");
  constexpr std::uint32_t kActStageBytes = BM * kBlockK * 2;
  constexpr int kAccW = BM / 2;
  constexpr bool kWideRegisterSplit = BM > 128;  // more accumulators than 128 registers a thread hold
  constexpr int kWideProducerRegisters = 32, kWideConsumerRegisters = 160;
  if (timeline != nullptr && threadIdx.x == 0) {
    timeline[static_cast<std::size_t>(blockIdx.x) * kTimelineFields] = ptx::global_timer();
  }
  extern __shared__ std::uint8_t smem_raw[];
  const std::uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const std::uint32_t act_smem = (raw_addr + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1 KB
  // Weight chunks chunk-major ([2][STAGES][kChunkBytes]): a group's stages of one chunk are contiguous.
  const std::uint32_t wgt_smem = act_smem + STAGES * kActStageBytes;
  const std::uint32_t bar_base = wgt_smem + 2 * STAGES * kChunkBytes;
  auto full_bar = [&](int s) { return bar_base + 8u * s; };
  auto empty_bar = [&](int s) { return bar_base + 8u * (STAGES + s); };
  const int n_tiles = (n + kWideWeightRows - 1) / kWideWeightRows;
  const int tile = static_cast<int>(blockIdx.x) % n_tiles;
  const int row0 = static_cast<int>(blockIdx.x) / n_tiles * BM;
  const WideTileChunks tile_chunks = wide_tile_chunks(tile, n);
  const int chunk0 = tile_chunks.first, chunks = tile_chunks.count;
  // The consumers' loop unrolled by the ring's stages (every stage a constant) runs the K range in
  // whole passes: none padded at the presets' 32, 96 and 112 blocks on 8 stages, but 32 become 36 on
  // 6 (K = 2048). So the 6-stage tiles run rounds of the fragment buffers at a runtime stage instead,
  // in whole copy groups (PERF-LOG run 203, an H200: 7.5-8.7% faster at K = 2048, 1.4-2.1% slower at
  // K = 6144; the 8-stage tiles ran 2-16% slower that way).
  constexpr bool kUnrolledRing = STAGES == 8;
  static_assert(GROUP % kBuffers == 0, "a copy group is whole rounds of the fragment buffers");
  // The blocks past K get zero activations (the tensor copy fills what lies past K with zeros) and no
  // weight copy, so their wgmmas add only zero products to finite weights: the weight stages are
  // zeroed first, and then only ever hold dequantizable chunks (pack_weights refuses NaN scales).
  const int pass_blocks = kUnrolledRing ? STAGES : GROUP;
  const int padded_blocks = (k_blocks + pass_blocks - 1) / pass_blocks * pass_blocks;
  for (int i = static_cast<int>(threadIdx.x); i < 2 * STAGES * kChunkBytes / 16; i += static_cast<int>(blockDim.x)) {
    ptx::st_shared_v4_u32(wgt_smem + 16u * static_cast<std::uint32_t>(i), 0u, 0u, 0u, 0u);
  }
  ptx::fence_proxy_async();  // the generic-proxy zeros, before the copy engine writes these bytes
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbarrier_init(full_bar(s), 1);
      ptx::mbarrier_init(empty_bar(s), 4 * kWarpgroups);  // one arrival per consumer warp
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const int warpgroup = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup == kWarpgroups) {
    // ---- producer ----
    if constexpr (kWideRegisterSplit) ptx::release_registers<kWideProducerRegisters>();
    if (tid != 0) return;
    ptx::prefetch_tensor_map(&act_group_map);
    cuda::wait_for_previous_grid();  // the activations may come from the previous kernel
    int stage = 0;
    std::uint32_t phase = 0;
    for (int kb = 0; kb < padded_blocks; kb += GROUP) {
      const int nb = max(0, min(GROUP, k_blocks - kb));  // blocks inside K: their weights are copied
      // A group holding a partial last K block comes one 2D copy per block: the 3D map has no
      // column bound inside a block. Either way all GROUP stages get activations, zeros past K.
      const bool act_2d = k_tail && kb < k_blocks && kb + GROUP >= k_blocks;
      ptx::mbarrier_wait(empty_bar(stage + GROUP - 1), phase ^ 1);  // released in order
      ptx::mbarrier_arrive_expect_tx(full_bar(stage),
                                     GROUP * kActStageBytes + static_cast<std::uint32_t>(chunks * nb * kChunkBytes));
      // The group's other stages: the consumers pass them once the group's first has completed.
      for (int j = 1; j < GROUP; ++j) ptx::mbarrier_arrive(full_bar(stage + j));
      if (act_2d) {
        for (int j = 0; j < GROUP; ++j) {
          ptx::tma_load_2d(act_smem + (stage + j) * kActStageBytes, &act_map, full_bar(stage), (kb + j) * kBlockK, row0);
        }
      } else {
        ptx::tma_load_3d(act_smem + stage * kActStageBytes, &act_group_map, full_bar(stage), 0, row0, kb);
      }
      for (int c = 0; c < chunks && nb > 0; ++c) {
        ptx::bulk_load(wgt_smem + static_cast<std::uint32_t>((c * STAGES + stage) * kChunkBytes),
                       weights + chunk_offset(chunk0 + c, kb, k_blocks), nb * kChunkBytes, full_bar(stage));
      }
      const bool wrap = stage == STAGES - GROUP;
      stage = wrap ? 0 : stage + GROUP;
      phase ^= wrap ? 1u : 0u;
    }
    return;
  }
  // ---- consumers ---- Warpgroup w owns the tile's 64-row slice 3 tile + w.
  if constexpr (kWideRegisterSplit) ptx::claim_registers<kWideConsumerRegisters>();
  const int chunk = wide_slice_chunk(tile, warpgroup), half = wide_slice_half(tile, warpgroup);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const std::uint32_t chunk_smem = wgt_smem + static_cast<std::uint32_t>(chunk * STAGES * kChunkBytes);
  const std::uint32_t code_addr = chunk_smem + chunk_code_word_offset(half, tid, 0);
  const std::uint32_t scale_addr = chunk_smem + chunk_scale_offset(64 * half + 16 * warp + g, 0);
  constexpr std::uint32_t kScaleRow8 = chunk_scale_offset(8, 0) - chunk_scale_offset(0, 0);
  const std::uint64_t desc0 = ptx::sw128_kmajor_desc(act_smem);
  const std::uint32_t desc_lo = static_cast<std::uint32_t>(desc0);
  const std::uint64_t desc_hi = desc0 & ~std::uint64_t{0xFFFFFFFFu};
  float acc[kAccW];
#pragma unroll
  for (int i = 0; i < kAccW; ++i) acc[i] = 0.0f;
  std::uint32_t frag[kBuffers][4][4];
  std::uint32_t phase = 0;
  // K block `block` at ring stage `stg` into fragment buffer B: wait, dequantize, issue, commit;
  // then the block before is complete and its stage goes back to the producer.
  auto consume = [&](int stg, auto buffer, int block) {
    constexpr int B = decltype(buffer)::value;
    ptx::mbarrier_wait(full_bar(stg), phase);
    const std::uint32_t wgt_stage = static_cast<std::uint32_t>(stg) * kChunkBytes;
    const uint4 codes = ptx::ld_shared_v4_u32(code_addr + wgt_stage);
    const std::uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    decode::dequant_block_fragments<decode::Math::w4a16>(words, ptx::ld_shared_u32(scale_addr + wgt_stage),
                                                         ptx::ld_shared_u32(scale_addr + wgt_stage + kScaleRow8),
                                                         frag[B]);
    const std::uint32_t act_desc_lo = desc_lo + static_cast<std::uint32_t>(stg) * (kActStageBytes >> 4);
    std::uint64_t desc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      desc[j] = desc_hi | (act_desc_lo + (32u >> 4) * j);
      ptx::fence_register(desc[j]);
#pragma unroll
      for (int r = 0; r < 4; ++r) ptx::fence_register(frag[B][j][r]);
    }
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) ptx::wgmma_rs<BM>(acc, frag[B][j], desc[j]);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();
    if (block > 0 && lane == 0) ptx::mbarrier_arrive(empty_bar(stg == 0 ? STAGES - 1 : stg - 1));
    if (stg == STAGES - 1) phase ^= 1u;
  };
  if (timeline != nullptr && threadIdx.x == 0) {
    ptx::mbarrier_wait(full_bar(0), 0);
    timeline[static_cast<std::size_t>(blockIdx.x) * kTimelineFields + 1] = ptx::global_timer();
  }
  // (A tail after whole passes, at a runtime stage or as unrolled prefixes or suffixes, made ptxas
  // serialize the wgmmas: C7511 / C7512 / C7520.)
  if constexpr (kUnrolledRing) {
    for (int it = 0; it < padded_blocks; it += STAGES) {
      [&]<int... S>(std::integer_sequence<int, S...>) {
        (consume(S, std::integral_constant<int, S % kBuffers>{}, it + S), ...);
      }(std::make_integer_sequence<int, STAGES>{});
    }
  } else {
    for (int it = 0, stg = 0; it < padded_blocks; it += kBuffers) {
      [&]<int... B>(std::integer_sequence<int, B...>) {
        (consume(stg + B, std::integral_constant<int, B>{}, it + B), ...);
      }(std::make_integer_sequence<int, kBuffers>{});
      stg = stg + kBuffers == STAGES ? 0 : stg + kBuffers;
    }
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < kAccW; ++i) ptx::fence_register(acc[i]);
  if (timeline != nullptr && threadIdx.x == 0) {
    std::uint64_t* f = timeline + static_cast<std::size_t>(blockIdx.x) * kTimelineFields;
    const std::uint64_t now = ptx::global_timer();
    f[2] = f[6] = f[7] = now;
    f[5] = 0;  // SM cycles of the main loop: not counted (a register the 512 threads cannot spare)
  }
  if (threadIdx.x == 0) cuda::allow_dependent_launch();
  const int frag_col = tile * kWideWeightRows + 64 * warpgroup + 16 * warp + g;  // output column of acc[4i]
  if (tma_store) {
    // As the m128 kernel's whole tile: stmatrix into the (now idle) ring as three 64-column parts in
    // the 128-byte swizzle, one per warpgroup, then one thread stores them through the output map
    // (box 64 x BM), which clips rows >= M and columns >= N.
    ptx::fence_proxy_async();  // the ring: wgmma read it through the async proxy
    ptx::named_barrier(1, kWarpgroups * 128);
    stage_output_part(act_smem + static_cast<std::uint32_t>(warpgroup) * (BM * 128u), acc, warp, lane, out_type, alpha);
    ptx::fence_proxy_async();  // the generic-proxy writes above, before the copy engine reads them
    ptx::named_barrier(1, kWarpgroups * 128);
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarpgroups; ++w) {
        ptx::tma_store_2d(&out_map, act_smem + static_cast<std::uint32_t>(w) * (BM * 128u),
                          tile * kWideWeightRows + 64 * w, row0);
      }
      ptx::bulk_commit_group();
      ptx::bulk_wait_group_read_all();  // shared memory outlives the copy engine's reads
    }
  } else {
    // f32 output, or rows without 16-byte alignment: element stores straight from the fragments
    // (not tuned). Element e of quad i is output row 8i + 2t + e % 2, column frag_col + 8 (e / 2).
#pragma unroll
    for (int i = 0; i < kAccW / 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int gm = row0 + 8 * i + 2 * t + (e & 1), gn = frag_col + ((e >> 1) << 3);
        if (gm < m && gn < n) store_output(out, out_type, static_cast<std::int64_t>(gm) * n + gn, alpha * acc[4 * i + e]);
      }
    }
  }
  if (timeline != nullptr && threadIdx.x == 0) {
    std::uint64_t* f = timeline + static_cast<std::size_t>(blockIdx.x) * kTimelineFields;
    f[3] = ptx::global_timer();
    f[4] = ptx::sm_id();
    // No arrivals watched (prefill_gemm_kernel's producer thread 32 writes them).
    std::uint64_t* arrivals = timeline + static_cast<std::size_t>(gridDim.x) * kTimelineFields +
                              static_cast<std::size_t>(blockIdx.x) * kTimelineArrivals;
    for (int j = 0; j < kTimelineArrivals; ++j) arrivals[j] = 0;
  }
#else
  __trap();
#endif
  (void)act_half_map, (void)act_edge_map, (void)act_half_edge_map, (void)split_k, (void)out_part_map,
      (void)programmatic, (void)workspace, (void)act_codes, (void)act_scales;
#if !FP4GAP_PREFILL_SM90A
  (void)act_map, (void)act_group_map, (void)k_tail, (void)weights, (void)out, (void)out_type, (void)m, (void)n,
      (void)k_blocks, (void)alpha, (void)timeline, (void)out_map, (void)tma_store;
#endif
}

// Writes 1 when the device code of this file was built for sm_90a.
__global__ void sm90a_probe_kernel(int* flag) { *flag = FP4GAP_PREFILL_SM90A; }

// One 16-element NVFP4 block per thread: 8 code bytes and one scale in, 32 bytes of bf16 out.
__global__ void dequantize_bf16_kernel(const std::uint8_t* __restrict__ codes, const std::uint8_t* __restrict__ scales,
                                       std::uint16_t* __restrict__ out, std::int64_t blocks) {
  // A GEMM launched programmatically behind this pass may start once every CTA of it has started
  // (so none waits for an SM the GEMM holds); it reads the bf16 activations only after this grid
  // has completed. Launched programmatically itself (behind the previous GEMM, which may still
  // read `out`, or the kernel that wrote `codes`), the pass reads and writes only after that
  // kernel has completed: what it saves is its launch, not its work.
  cuda::allow_dependent_launch();
  cuda::wait_for_previous_grid();
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const uint2 c = *reinterpret_cast<const uint2*>(codes + b * 8);
  const std::uint32_t s = e4m3_to_bf16x2(scales[b]);
  std::uint32_t v[8];
  dequant_e2m1x8_bf16(c.x, s, s, v);
  dequant_e2m1x8_bf16(c.y, s, s, v + 4);
  uint4* dst = reinterpret_cast<uint4*>(out + b * 16);
  dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
  dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

using KernelFn = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, int, const std::uint8_t*,
                          void*, OutputType, int, int, int, int, float, std::uint64_t*, CUtensorMap, CUtensorMap, int,
                          int, std::uint8_t*, const std::uint8_t*, const std::uint8_t*);

// `dequant_act`: the instantiation taking NVFP4 activations (TileConfig::dequantizes_activations).
KernelFn kernel_for(const TileConfig& c, bool dequant_act = false) {
  auto is = [&](int block_m, int stages, bool persistent, int copy_group, int weight_rows = kBlockN) {
    return c.block_m == block_m && c.stages == stages && c.persistent == persistent && c.copy_group == copy_group &&
           c.weight_rows == weight_rows;
  };
  if (dequant_act) {
    if (is(64, 12, false, 1)) return prefill_gemm_kernel<64, 12, false, 1, true>;
    if (is(32, 12, false, 4)) return prefill_gemm_kernel<32, 12, false, 4, true>;
    if (is(16, 12, false, 4)) return prefill_gemm_kernel<16, 12, false, 4, true>;
    if (is(64, 12, false, 4)) return prefill_gemm_kernel<64, 12, false, 4, true>;
    throw InvalidArgument("no prefill kernel dequantizing NVFP4 activations compiled for " + c.name());
  }
  if (is(256, 6, false, 1)) return prefill_gemm_kernel<256, 6, false, 1>;
  if (is(192, 6, false, 2)) return prefill_gemm_kernel<192, 6, false, 2>;
  if (is(128, 9, false, 1)) return prefill_gemm_kernel<128, 9, false, 1>;
  if (is(64, 12, false, 1)) return prefill_gemm_kernel<64, 12, false, 1>;
  if (is(256, 4, true, 1)) return prefill_gemm_kernel<256, 4, true, 1>;
  if (is(192, 6, true, 2)) return prefill_gemm_kernel<192, 6, true, 2>;
  if (is(128, 8, true, 2)) return prefill_gemm_kernel<128, 8, true, 2>;
  if (is(128, 9, false, 3)) return prefill_gemm_kernel<128, 9, false, 3>;
  if (is(144, 9, false, 3)) return prefill_gemm_kernel<144, 9, false, 3>;
  if (is(80, 12, false, 4)) return prefill_gemm_kernel<80, 12, false, 4>;
  if (is(96, 12, false, 4)) return prefill_gemm_kernel<96, 12, false, 4>;
  if (is(208, 6, false, 1)) return prefill_gemm_kernel<208, 6, false, 1>;
  if (is(160, 8, false, 2)) return prefill_gemm_kernel<160, 8, false, 2>;
  if (is(128, 10, false, 2)) return prefill_gemm_kernel<128, 10, false, 2>;
  if (is(128, 8, false, 2, kWideWeightRows)) return prefill_wide_kernel<128, 8, 2>;
  if (is(112, 8, false, 2, kWideWeightRows)) return prefill_wide_kernel<112, 8, 2>;
  if (is(96, 8, false, 2, kWideWeightRows)) return prefill_wide_kernel<96, 8, 2>;
  if (is(192, 6, false, 2, kWideWeightRows)) return prefill_wide_kernel<192, 6, 2>;
  if (is(160, 6, false, 2, kWideWeightRows)) return prefill_wide_kernel<160, 6, 2>;
  if (is(176, 6, false, 2, kWideWeightRows)) return prefill_wide_kernel<176, 6, 2>;
  if (is(32, 12, false, 4)) return prefill_gemm_kernel<32, 12, false, 4>;
  if (is(16, 12, false, 4)) return prefill_gemm_kernel<16, 12, false, 4>;
  if (is(64, 12, false, 4)) return prefill_gemm_kernel<64, 12, false, 4>;
  throw InvalidArgument("no prefill kernel compiled for " + c.name() + " (see prefill_tile_configs())");
}

}  // namespace

// Dynamic shared memory an instantiation that dequantizes activations may request on the current
// device (dynamic_smem_limit, as `fp4gap plan` and `fp4gap tune` compute it, so all agree). Asked
// once per device: every launch checks against it.
std::int64_t activation_dequant_smem_limit() {
  static std::mutex mutex;
  static std::vector<std::pair<int, std::int64_t>> cache;  // device, bytes
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, bytes] : cache) {
    if (d == dev) return bytes;
  }
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const std::int64_t bytes = dynamic_smem_limit(optin);
  cache.emplace_back(dev, bytes);
  return bytes;
}

namespace {

// Raises the kernel's dynamic shared-memory limit once per process (not a stream operation, so
// it must not first happen inside a graph capture: the runners call it when they prepare). The
// instantiations dequantizing activations get all the device allows: their need depends on the
// plan (activation_dequant_smem_bytes).
void ensure_smem_attribute(const TileConfig& c) {
  static std::mutex mutex;
  static std::vector<KernelFn> done;
  static bool pass_done = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!pass_done) {
    cuda::set_shared_memory_attributes(dequantize_bf16_kernel, 0);  // the W4A4 activation pass, before a GEMM
    pass_done = true;
  }
  for (const bool dequant_act : {false, true}) {
    if (dequant_act && !c.dequantizes_activations()) continue;
    const KernelFn fn = kernel_for(c, dequant_act);
    if (std::find(done.begin(), done.end(), fn) != done.end()) continue;
    const std::int64_t bytes = dequant_act ? activation_dequant_smem_limit() : c.smem_bytes();
    cuda::set_shared_memory_attributes(fn, bytes);
    done.push_back(fn);
  }
}

}  // namespace

Status kernels_available() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      status = Status::not_supported("no CUDA device");
      return;
    }
    if (prop.major != 9 || prop.minor != 0) {
      std::ostringstream os;
      os << "needs wgmma (sm_90a): " << prop.name << " is compute capability " << prop.major << "." << prop.minor;
      status = Status::not_supported(os.str());
      return;
    }
    int* flag = nullptr;
    int host_flag = 0;
    cudaError_t err = cudaMalloc(&flag, sizeof(int));
    if (err == cudaSuccess) {
      sm90a_probe_kernel<<<1, 1>>>(flag);
      err = cudaGetLastError();
      if (err == cudaSuccess) err = cudaMemcpy(&host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost);
      static_cast<void>(cudaFree(flag));
    }
    if (err != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      status = Status::not_supported(std::string("prefill kernels not loadable on this device: ") +
                                     cudaGetErrorString(err));
      return;
    }
    if (host_flag != 1) {
      status = Status::not_supported(
          "needs wgmma (sm_90a): this build has no sm_90a device code (add 90a to CMAKE_CUDA_ARCHITECTURES)");
      return;
    }
    status = Status::ok();
  });
  return status;
}

int concurrent_ctas(const TileConfig& config, int split) {
  if (split < 1 || split > kMaxSplitK) {
    throw InvalidArgument("concurrent_ctas: split outside [1, " + std::to_string(kMaxSplitK) +
                          "]: split = " + std::to_string(split));
  }
  ensure_smem_attribute(config);
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  struct Entry {
    int dev, block_m, stages;
    bool persistent;
    int copy_group, split, ctas;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (const Entry& e : cache) {
    if (e.dev == dev && e.block_m == config.block_m && e.stages == config.stages && e.persistent == config.persistent &&
        e.copy_group == config.copy_group && e.split == split) {
      return e.ctas;
    }
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(split * 1024));
  cfg.blockDim = dim3(static_cast<unsigned>(config.threads()));
  cfg.dynamicSmemBytes = static_cast<std::size_t>(config.smem_bytes());
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(split);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel_for(config), &cfg));
  cache.push_back({dev, config.block_m, config.stages, config.persistent, config.copy_group, split, clusters * split});
  return clusters * split;
}

void prepare_launch(const Plan& plan) { ensure_smem_attribute(plan.config); }

std::int64_t launch_ctas(const Plan& plan) {
  if (!plan.config.persistent) return plan.ctas();
  return launch_fill(plan, concurrent_ctas(plan.config, 1)).ctas;
}

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult query{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &query));
    if (query != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw RuntimeError("cuTensorMapEncodeTiled is not available from the CUDA driver");
    }
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

// The output [m, n] of 16-bit elements as boxes of 64 columns x block_m rows in the 128-byte
// swizzle, for the kernel's TMA-store epilogue. n % 8 == 0 (16-byte row stride).
CUtensorMap make_output_map(void* out, OutputType type, std::int64_t m, std::int64_t n, int block_m) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(n) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(block_m)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type == OutputType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                    2, out, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << "cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(r) << ") for the output [" << m << ", " << n
       << "], box 64 x " << block_m;
    throw RuntimeError(os.str());
  }
  return map;
}

// `box_rows`: a tile's rows, half of them, or the rows an edge unit holds (ActivationMaps).
// `group` 0: 2D, boxes of kBlockK x box_rows. Otherwise 3D [K / kBlockK whole K blocks][m][kBlockK]
// (strides 128 bytes and k * 2 bytes), boxes of `group` K blocks x box_rows x kBlockK: what
// `group` 2D boxes at consecutive K blocks would write, in one copy. A partial last K block is
// outside it (the kernel copies it through the 2D map).
CUtensorMap make_activation_map(const void* act_bf16, std::int64_t m, std::int64_t k, int box_rows, int group = 0) {
  const EncodeTiled encode = encode_tiled();
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(group > 0 ? kBlockK : k), static_cast<cuuint64_t>(m),
                              static_cast<cuuint64_t>(std::max<std::int64_t>(1, k / kBlockK))};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(k) * 2, static_cast<cuuint64_t>(kBlockK) * 2};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kBlockK), static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(group)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, group > 0 ? 3 : 2, const_cast<void*>(act_bf16),
                            dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << "cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(r) << ") for bf16 [" << m << ", " << k
       << "], box " << kBlockK << " x " << box_rows;
    if (group > 0) os << " x " << group << " K blocks";
    throw RuntimeError(os.str());
  }
  return map;
}

}  // namespace

ActivationMaps make_activation_maps(const void* act_bf16, std::int64_t m, std::int64_t k, const TileConfig& config) {
  if ((k * 2) % 16 != 0 || m < 1) {
    std::ostringstream os;
    os << "activation tensor map needs m >= 1 and k * 2 % 16 == 0: m = " << m << ", k = " << k;
    throw InvalidArgument(os.str());
  }
  const int block_m = config.block_m;
  ActivationMaps maps;
  maps.tile = make_activation_map(act_bf16, m, k, block_m);
  maps.half_tile = make_activation_map(act_bf16, m, k, block_m / 2);
  if (config.copy_group > 1) maps.group = make_activation_map(act_bf16, m, k, block_m, config.copy_group);
  // The units where M ends inside them copy only the rows that exist: a tile of the last row of
  // tiles m % block_m rows, a persistent CTA's half of it m % (block_m / 2).
  if (m % block_m != 0) maps.edge = make_activation_map(act_bf16, m, k, static_cast<int>(m % block_m));
  if (config.persistent && m % (block_m / 2) != 0) {
    maps.half_edge = make_activation_map(act_bf16, m, k, static_cast<int>(m % (block_m / 2)));
  }
  maps.m = m;
  maps.k = k;
  maps.block_m = block_m;
  maps.copy_group = config.copy_group;
  return maps;
}

namespace {

// Launches the kernel for `plan` with its activations through the tensor maps (`maps`) or as NVFP4
// that the kernel dequantizes (`nvfp4`), the other nullptr; the caller has checked them.
void launch_kernel(const Plan& plan, const ActivationMaps* maps, const Nvfp4Activations* nvfp4,
                   const std::uint8_t* packed, void* out, OutputType out_type, std::int64_t m, std::int64_t n,
                   float alpha, cudaStream_t stream, std::uint64_t* timeline, bool programmatic, void* workspace) {
  if (plan.workspace_bytes() > 0 && workspace == nullptr) {
    throw InvalidArgument(plan.describe() + " needs a workspace of " + std::to_string(plan.workspace_bytes()) +
                          " bytes; none given");
  }
  prepare_launch(plan);
  const std::int64_t ctas = launch_ctas(plan);
  if (plan.config.persistent && ctas > kMaxPersistentCtas) {
    throw InvalidArgument(plan.describe() + ": " + std::to_string(ctas) + " persistent CTAs at once, more than the " +
                          std::to_string(kMaxPersistentCtas) + " its workspace is sized for (kMaxPersistentCtas)");
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(static_cast<unsigned>(plan.config.threads()));
  cfg.dynamicSmemBytes =
      static_cast<std::size_t>(nvfp4 != nullptr ? activation_dequant_smem_bytes(plan) : plan.config.smem_bytes());
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster_size());
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1] = cuda::programmatic_launch_attribute();
  cfg.attrs = attrs;
  cfg.numAttrs = programmatic ? 2 : 1;
  // The dequantized weight carries 2^-7 (prefill.hpp, packed layout): the epilogue gives it back.
  const float kernel_alpha = static_cast<float>(static_cast<double>(alpha) * decode::kernel_alpha_factor(decode::Math::w4a16));
  // 16-bit outputs with 16-byte rows leave through the copy engine (the kernel's TMA-store
  // epilogues) from whole output tiles (unsplit, or added up by a workspace split's last CTA) and
  // from a cluster split's bands where every CTA has whole 16-row slices (Plan::cluster_band_rows);
  // the rest through the staged fp32 tile. out_part_map stores the parts: a persistent CTA's half
  // tiles, or the bands (cluster_band_box_rows at a time).
  const bool whole_tiles = plan.split_k == 1 || plan.reduction == SplitReduction::workspace;
  const int band_rows = plan.cluster_band_rows();
  const bool tma_store = (whole_tiles || band_rows > 0) && out_type != OutputType::f32 && n % 8 == 0 &&
                         reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const int block_m = plan.config.block_m;
  const CUtensorMap out_map = tma_store && whole_tiles ? make_output_map(out, out_type, m, n, block_m) : CUtensorMap{};
  const int part_rows = !tma_store             ? 0
                        : plan.config.persistent ? block_m / 2
                        : whole_tiles            ? 0
                                                 : cluster_band_box_rows(block_m, plan.split_k);
  const CUtensorMap out_part_map = part_rows > 0 ? make_output_map(out, out_type, m, n, part_rows) : CUtensorMap{};
  const ActivationMaps none{};
  const ActivationMaps& am = maps != nullptr ? *maps : none;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_for(plan.config, nvfp4 != nullptr), am.tile, am.half_tile, am.group,
                                am.edge, am.half_edge, am.k % kBlockK != 0 ? 1 : 0, packed, out, out_type,
                                static_cast<int>(m), static_cast<int>(n), static_cast<int>(plan.k_blocks), plan.split_k,
                                kernel_alpha, timeline, out_map, out_part_map, tma_store ? 1 : 0, programmatic ? 1 : 0,
                                plan.workspace_bytes() > 0 ? static_cast<std::uint8_t*>(workspace) : nullptr,
                                nvfp4 != nullptr ? nvfp4->codes : nullptr, nvfp4 != nullptr ? nvfp4->scales : nullptr));
}

}  // namespace

void launch_gemm(const Plan& plan, const ActivationMaps& act_maps, const std::uint8_t* packed, void* out,
                 OutputType out_type, std::int64_t m, std::int64_t n, float alpha, cudaStream_t stream,
                 std::uint64_t* timeline, bool programmatic, void* workspace) {
  if (act_maps.block_m != plan.config.block_m || act_maps.copy_group != plan.config.copy_group || act_maps.m != m ||
      ceil_div(act_maps.k, kBlockK) != plan.k_blocks) {
    std::ostringstream os;
    os << "activation maps of [" << act_maps.m << ", " << act_maps.k << "] for m" << act_maps.block_m << " tiles, "
       << act_maps.copy_group << " K blocks per copy, do not fit " << plan.describe() << " at M = " << m
       << " with " << plan.k_blocks << " K blocks";
    throw InvalidArgument(os.str());
  }
  launch_kernel(plan, &act_maps, nullptr, packed, out, out_type, m, n, alpha, stream, timeline, programmatic,
                workspace);
}

namespace {

// What a dequantizing launch of `plan` may request on the current device (0 where no such kernel
// exists: check_activation_dequant_in_kernel names the tile rule first).
std::int64_t activation_dequant_limit(const Plan& plan) {
  return plan.config.dequantizes_activations() ? activation_dequant_smem_limit() : 0;
}

}  // namespace

std::int64_t kernel_static_smem_bytes(const TileConfig& config, bool dequant_act) {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel_for(config, dequant_act)));
  return static_cast<std::int64_t>(attr.sharedSizeBytes);
}

Status check_activation_dequant_on_device(const Plan& plan, std::int64_t k) {
  return check_activation_dequant_in_kernel(plan, k, activation_dequant_limit(plan));
}

bool w4a4_dequantizes_in_kernel(const Plan& plan, std::int64_t k) {
  return w4a4_dequantizes_in_kernel(plan, k, activation_dequant_limit(plan));
}

void launch_gemm(const Plan& plan, const Nvfp4Activations& act, const std::uint8_t* packed, void* out,
                 OutputType out_type, std::int64_t m, std::int64_t n, float alpha, cudaStream_t stream,
                 std::uint64_t* timeline, bool programmatic, void* workspace) {
  const Status can = check_activation_dequant_on_device(plan, act.k);
  if (!can.is_ok()) throw InvalidArgument(can.reason);
  std::ostringstream os;
  if (act.m != m || ceil_div(act.k, kBlockK) != plan.k_blocks) {
    os << "NVFP4 activations [" << act.m << ", " << act.k << "] do not fit " << plan.describe() << " at M = " << m
       << " with " << plan.k_blocks << " K blocks";
  } else if (reinterpret_cast<std::uintptr_t>(act.codes) % 16 != 0) {
    os << "NVFP4 activation codes must be 16-byte aligned (the kernel's 16-byte loads): " << static_cast<const void*>(act.codes);
  } else if (reinterpret_cast<std::uintptr_t>(act.scales) % 2 != 0) {
    os << "NVFP4 activation scales must be 2-byte aligned (the kernel's 2-byte loads): " << static_cast<const void*>(act.scales);
  } else {
    launch_kernel(plan, nullptr, &act, packed, out, out_type, m, n, alpha, stream, timeline, programmatic, workspace);
    return;
  }
  throw InvalidArgument(os.str());
}

void launch_dequantize_bf16(const std::uint8_t* codes, const std::uint8_t* scales, std::uint16_t* out,
                            std::int64_t m, std::int64_t k, cudaStream_t stream, bool programmatic) {
  const std::int64_t blocks = m * (k / kBlockSize);
  if (blocks == 0) return;
  constexpr unsigned kThreads = 256;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(cuda::grid_size_1d(blocks, kThreads));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr = cuda::programmatic_launch_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, dequantize_bf16_kernel, codes, scales, out, blocks));
}

}  // namespace fp4gap::prefill

namespace fp4gap {

prefill::ConcurrentCtas prefill_occupancy(std::string* why_not) {
  const Status available = prefill::kernels_available();
  if (!available.is_ok()) {
    if (why_not != nullptr) *why_not = available.reason;
    return {};
  }
  return prefill::concurrent_ctas;
}

}  // namespace fp4gap
