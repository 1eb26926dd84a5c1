// Diagnostic (disabled), a prototype not used by the library: KERNELS-prefill item 1f's tile of 192
// weight rows x BM activation rows (BM = 64-128), three consumer warpgroups and a producer
// warpgroup (512 threads), written as the m128 kernel's main loop is (register-A m64nBMk16, the weight
// dequantized by decode::dequant_block_fragments, one wgmma group in flight, the 8-stage ring
// unrolled by its 2 fragment buffers, copy groups of 2 K blocks: one 3D tensor copy of the
// activations, one bulk copy of each of the two packed 128-row weight chunks the tile's three
// 64-row slices lie in). It answers whether that tile keeps the tensor rate the fed diagnostic
// loop reached (TensorRate.DISABLED_DequantizingConsumerLoop: 93% with 8 stages), where W2 at
// M = 4 BM gets 128 such tiles on 132 SMs (m256 at M = 512: 96). Its epilogue stores fp32 straight
// from the fragments (not tuned); only unsplit tiles, M % BM == 0, N % 192 == 0, K % 512 == 0. It
// first checks its output on exact-grid data against the reference (equal after rounding) and on
// random data (within the bound), then times it beside the policy's plan. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='WideTilePrototype.DISABLED_*'
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "cuda/prefill/prefill_ptx.cuh"
#include "device_test_support.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/verify.hpp"

namespace fp4gap::test {
namespace {

template <int BM>
struct WideTile {
  static constexpr int kWarpgroups = 3, kWeightRows = 64 * kWarpgroups, kRows = BM;
  static constexpr int kStages = 8, kGroup = 2;
  static constexpr std::uint32_t kActBytes = kRows * prefill::kBlockK * 2;
  // Both weight chunks of every stage, chunk-major so that a group's stages of one chunk are
  // contiguous (one bulk copy each).
  static constexpr std::uint32_t kWeightBytes = 2u * kStages * prefill::kChunkBytes;
  static constexpr int kSmemBytes = kStages * static_cast<int>(kActBytes) + static_cast<int>(kWeightBytes) + 1024;
  // The shapes it takes.
  static bool takes(std::int64_t m, std::int64_t n, std::int64_t k) {
    return m % kRows == 0 && n % kWeightRows == 0 && k % (kStages * prefill::kBlockK) == 0;
  }
};

// m64nNk16 with the A fragment from registers for N = 64-128 in steps of 16: the largest power of
// two first, then the rest on the next rows of the activation tile (as the kernel's Wgmma<N>).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t desc) {
#if FP4GAP_PREFILL_SM90A
  if constexpr (N == 16) {
    prefill::ptx::wgmma_m64n16k16_rs(d, a, desc);
  } else if constexpr (N == 32) {
    prefill::ptx::wgmma_m64n32k16_rs(d, a, desc);
  } else if constexpr (N == 64) {
    prefill::ptx::wgmma_m64n64k16_rs(d, a, desc);
  } else if constexpr (N == 128) {
    prefill::ptx::wgmma_m64n128k16_rs(d, a, desc);
  } else {
    constexpr int kFirst = N >= 128 ? 128 : N >= 64 ? 64 : 32;
    wgmma_rs<kFirst>(*reinterpret_cast<float(*)[kFirst / 2]>(&d[0]), a, desc);
    wgmma_rs<N - kFirst>(*reinterpret_cast<float(*)[(N - kFirst) / 2]>(&d[kFirst / 2]), a, desc + (kFirst * 128 >> 4));
  }
#else
  (void)d, (void)a, (void)desc;
#endif
}

// cycles[cta] = SM cycles of warpgroup 0's main loop.
template <int BM>
__global__ void __launch_bounds__(128 * (WideTile<BM>::kWarpgroups + 1), 1)
    wide_tile_kernel(const __grid_constant__ CUtensorMap act_group_map, const std::uint8_t* __restrict__ weights,
                     float* __restrict__ out, int n, int k_blocks, float alpha, std::uint64_t* __restrict__ cycles) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  using prefill::kChunkBytes;
  using Tile = WideTile<BM>;
  constexpr int kStages = Tile::kStages, kGroup = Tile::kGroup;
  constexpr std::uint32_t kActBytes = Tile::kActBytes;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ alignas(8) std::uint64_t bars[2 * kStages];  // full, then empty
  auto full_bar = [&](int s) { return ptx::smem_addr(&bars[s]); };
  auto empty_bar = [&](int s) { return ptx::smem_addr(&bars[kStages + s]); };
  const std::uint32_t act = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t wgt = act + kStages * kActBytes;
  const int n_tiles = n / Tile::kWeightRows;
  const int tile = static_cast<int>(blockIdx.x) % n_tiles;
  const int row0 = static_cast<int>(blockIdx.x) / n_tiles * Tile::kRows;
  const int chunk0 = 3 * tile / 2;  // the 128-row chunk holding the tile's first 64-row slice
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full_bar(s), 1);
      ptx::mbarrier_init(empty_bar(s), 4 * Tile::kWarpgroups);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const int warpgroup = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup == Tile::kWarpgroups) {
    if (tid != 0) return;
    for (int kb = 0; kb < k_blocks; kb += kGroup) {
      const int stage = kb % kStages, round = kb / kStages;
      if (round > 0) ptx::mbarrier_wait(empty_bar(stage + kGroup - 1), static_cast<std::uint32_t>(round - 1) & 1u);
      ptx::mbarrier_arrive_expect_tx(full_bar(stage), kGroup * (kActBytes + 2 * kChunkBytes));
      for (int j = 1; j < kGroup; ++j) ptx::mbarrier_arrive(full_bar(stage + j));
      ptx::tma_load_3d(act + stage * kActBytes, &act_group_map, full_bar(stage), 0, row0, kb);
      for (int c = 0; c < 2; ++c) {
        ptx::bulk_load(wgt + static_cast<std::uint32_t>((c * kStages + stage) * kChunkBytes),
                       weights + prefill::chunk_offset(chunk0 + c, kb, k_blocks), kGroup * kChunkBytes,
                       full_bar(stage));
      }
    }
    return;
  }
  // Warpgroup w owns slice 3 tile + w: half `slice % 2` of chunk `slice / 2`.
  const int slice = 3 * tile + warpgroup, chunk = slice / 2 - chunk0, half = slice % 2;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int chunk_row = 64 * half + 16 * warp + g;
  const std::uint32_t chunk_base = wgt + static_cast<std::uint32_t>(chunk * kStages * kChunkBytes);
  const std::uint32_t code_addr = chunk_base + prefill::chunk_code_word_offset(half, tid, 0);
  const std::uint32_t scale_addr = chunk_base + prefill::chunk_scale_offset(chunk_row, 0);
  constexpr std::uint32_t kScaleRow8 = prefill::chunk_scale_offset(8, 0) - prefill::chunk_scale_offset(0, 0);
  const std::uint64_t desc0 = ptx::sw128_kmajor_desc(act);
  const std::uint32_t desc_lo = static_cast<std::uint32_t>(desc0);
  const std::uint64_t desc_hi = desc0 & ~std::uint64_t{0xFFFFFFFFu};
  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.0f;
  std::uint32_t frag[2][4][4];
  std::uint32_t phase = 0;
  auto consume = [&](auto stage_constant, auto buffer_constant, int block) {
    constexpr int S = decltype(stage_constant)::value, b = decltype(buffer_constant)::value;
    ptx::mbarrier_wait(full_bar(S), phase);
    const uint4 codes = ptx::ld_shared_v4_u32(code_addr + S * kChunkBytes);
    const std::uint32_t scales_lo = ptx::ld_shared_u32(scale_addr + S * kChunkBytes);
    const std::uint32_t scales_hi = ptx::ld_shared_u32(scale_addr + S * kChunkBytes + kScaleRow8);
    const std::uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    decode::dequant_block_fragments<decode::Math::w4a16>(words, scales_lo, scales_hi, frag[b]);
    std::uint64_t desc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      desc[j] = desc_hi | (desc_lo + S * (kActBytes >> 4) + 2u * j);
      ptx::fence_register(desc[j]);
#pragma unroll
      for (int r = 0; r < 4; ++r) ptx::fence_register(frag[b][j][r]);
    }
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) wgmma_rs<BM>(acc, frag[b][j], desc[j]);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();
    // The block before is complete: its stage goes back to the producer.
    if (block > 0 && lane == 0) ptx::mbarrier_arrive(empty_bar((S + kStages - 1) % kStages));
    if constexpr (S == kStages - 1) phase ^= 1u;
  };
  const long long start = clock64();
  for (int it = 0; it < k_blocks; it += kStages) {
    [&]<int... S>(std::integer_sequence<int, S...>) {
      (consume(std::integral_constant<int, S>{}, std::integral_constant<int, S % 2>{}, it + S), ...);
    }(std::make_integer_sequence<int, kStages>{});
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) ptx::fence_register(acc[i]);
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
  // Accumulator 4i + e: activation (output) row 8i + 2t + (e & 1), weight (output) column
  // 16 warp + g + 8 (e >> 1) of the warpgroup's 64.
  const int col = tile * Tile::kWeightRows + 64 * warpgroup + 16 * warp + g;
#pragma unroll
  for (int i = 0; i < BM / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t row = row0 + 8 * i + 2 * t + (e & 1);
      out[row * n + col + 8 * (e >> 1)] = alpha * acc[4 * i + e];
    }
  }
#else
  (void)act_group_map, (void)weights, (void)out, (void)n, (void)k_blocks, (void)alpha, (void)cycles;
#endif
}

GemmProblem make_bf16_problem(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_format = OperandFormat::bf16;
  p.b_format = OperandFormat::nvfp4;
  p.out_type = OutputType::f32;
  return p;
}

template <int BM>
struct WideTileInputs {
  GemmProblem problem;
  GemmInputs in;
  std::vector<cuda::DeviceBuffer<std::uint16_t>> acts;
  std::vector<cuda::DeviceBuffer<std::uint8_t>> weights;
  std::vector<prefill::ActivationMaps> maps;

  WideTileInputs(std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, InputDistribution dist, int sets)
      : problem(make_bf16_problem(m, n, k)), in(make_gemm_inputs(problem, seed, dist)) {
    const std::vector<std::uint8_t> packed = prefill::pack_weights(in.b_fp4).bytes;
    for (int i = 0; i < sets; ++i) {
      acts.emplace_back(in.a_bf16);
      weights.emplace_back(packed);
      // A config of BM rows copying 2 K blocks at a time: its 3D map has the prototype's box.
      maps.push_back(prefill::make_activation_maps(acts.back().get(), m, k, prefill::TileConfig{BM, 10, false, 2}));
    }
  }
  int ctas() const { return static_cast<int>(problem.m / BM * (problem.n / WideTile<BM>::kWeightRows)); }
  void launch(int set, float* out, std::uint64_t* cycles, cudaStream_t stream) const {
    wide_tile_kernel<BM><<<ctas(), 128 * (WideTile<BM>::kWarpgroups + 1), WideTile<BM>::kSmemBytes, stream>>>(
        maps[static_cast<std::size_t>(set)].group, weights[static_cast<std::size_t>(set)].get(), out,
        static_cast<int>(problem.n), static_cast<int>(problem.k / prefill::kBlockK),
        static_cast<float>(in.alpha * decode::kernel_alpha_factor(decode::Math::w4a16)), cycles);
  }
};

template <int BM>
std::vector<float> run_once(const WideTileInputs<BM>& w, cuda::DeviceBuffer<float>& out,
                            cuda::DeviceBuffer<std::uint64_t>& cycles) {
  out.fill_bytes(0xFF);  // NaN
  w.launch(0, out.get(), cycles.get(), nullptr);
  CUDA_CHECK(cudaGetLastError());
  synchronize_within(nullptr);
  return out.download();
}

// Exact on the grid (equal to the rounded reference) and repeatable, then random data within the
// bound: two row tiles, four weight tiles (both parities), 16 K blocks; then timed as the sweep
// times plans (graph replays over input sets that together exceed 2x L2) at M = 4 BM (128 tiles
// at N = 6144), beside the policy's plan on the same inputs (bf16 output, its own epilogue).
template <int BM>
void check_and_time() {
  CUDA_CHECK(cudaFuncSetAttribute(wide_tile_kernel<BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  WideTile<BM>::kSmemBytes));
  for (const InputDistribution dist : {InputDistribution::exact_grid, InputDistribution::random}) {
    const std::uint64_t seed = 9100 + BM;
    const WideTileInputs<BM> w(2 * BM, 768, 1024, seed, dist, 1);
    SCOPED_TRACE(repro("wide tile prototype m" + std::to_string(BM) + ", " + w.problem.label(), seed));
    const ReferenceResult ref = reference_gemm(w.in.a_view(), w.in.b_view(), w.in.alpha);
    cuda::DeviceBuffer<float> out(static_cast<std::size_t>(w.problem.m * w.problem.n));
    cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(w.ctas()));
    const std::vector<float> first = run_once(w, out, cycles);
    const VerifyResult v = verify_gemm_output(first.data(), ref, w.problem.k, w.problem.out_type);
    ASSERT_TRUE(v.passed) << v.message;
    ASSERT_EQ(v.non_finite, 0);
    if (dist == InputDistribution::exact_grid) expect_exact(first, ref, w.problem.out_type);
    ASSERT_EQ(run_once(w, out, cycles), first) << "a second run differs";
  }
  // glm5's W2, and N = 4224 (22 tiles of 192) at K = 6144 for a main loop three times as long.
  const std::int64_t m = 4 * BM;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{6144, 2048}, {4224, 6144}};
  for (const auto& [n, k] : shapes) {
    const GemmProblem p = make_bf16_problem(m, n, k);
    const double set_bytes = static_cast<double>(n * k) * 0.5625 + static_cast<double>(m * k) * 2;
    const int sets = input_sets_for_cold_cache(set_bytes, gpu().l2_bytes, 16);
    const WideTileInputs<BM> w(m, n, k, 1, InputDistribution::random, sets);
    cuda::DeviceBuffer<float> out(static_cast<std::size_t>(m * n));
    cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(w.ctas()));
    const double flops = 2.0 * static_cast<double>(m * n * k);
    const Timing t = time_launch(
        [&](int set, void* stream) { w.launch(set, out.get(), cycles.get(), static_cast<cudaStream_t>(stream)); },
        sets, gpu(), TimingOptions{});
    std::vector<std::uint64_t> c = cycles.download();
    std::sort(c.begin(), c.end());
    const double per_block = static_cast<double>(c[c.size() / 2]) / static_cast<double>(k / prefill::kBlockK);
    const std::string name = "prototype m" + std::to_string(BM) + "n192k64 8 stages, 2 K blocks per copy";
    std::printf("%-34s %-66s %9.2f %8.0f %9.0f %5.0f%%\n", p.label().c_str(), name.c_str(), t.graph.median_us,
                flops / t.graph.median_us * 1e-6, per_block, 100.0 * 6 * BM / per_block);
    const prefill::Plan plan = prefill::choose_plan(m, n, k, gpu(), prefill::concurrent_ctas);
    std::vector<prefill::ActivationMaps> maps;
    for (int i = 0; i < sets; ++i) {
      maps.push_back(prefill::make_activation_maps(w.acts[static_cast<std::size_t>(i)].get(), m, k, plan.config));
    }
    cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(plan.workspace_bytes()));
    workspace.fill_bytes(0);
    prefill::prepare_launch(plan);
    const Timing tp = time_launch(
        [&](int set, void* stream) {
          prefill::launch_gemm(plan, maps[static_cast<std::size_t>(set)], w.weights[static_cast<std::size_t>(set)].get(),
                               out.get(), OutputType::bf16, m, n, static_cast<float>(w.in.alpha),
                               static_cast<cudaStream_t>(stream), nullptr, plan.programmatic, workspace.get());
        },
        sets, gpu(), TimingOptions{});
    std::printf("%-34s %-66s %9.2f %8.0f %9s %6s\n", p.label().c_str(), plan.describe().c_str(), tp.graph.median_us,
                flops / tp.graph.median_us * 1e-6, "-", "-");
  }
}

TEST(WideTilePrototype, DISABLED_ExactThenTimedBesideThePolicy) {
  ASSERT_TRUE(gpu().available) << gpu().unavailable_reason;
  if (gpu().cc_major != 9) GTEST_SKIP() << "wgmma is sm_90a code";
  std::printf("%-34s %-66s %9s %8s %9s %6s\n", "shape", "plan", "graph us", "TFLOP/s", "cycles/KB", "tensor");
  check_and_time<64>();
  check_and_time<80>();
  check_and_time<96>();
  check_and_time<112>();
  check_and_time<128>();
}

}  // namespace
}  // namespace fp4gap::test
