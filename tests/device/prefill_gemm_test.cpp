// The Hopper prefill kernels (fp4gap-prefill-w4a16 / -w4a4) against the CPU reference on the GPU:
// shapes with tails in M, N and K, every output type, random and exact-grid data, every compiled
// tile configuration and split-K factor, poisoned outputs, bitwise-repeatable runs, graph replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/tune_cache.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::gpu;
using test::repro;
using test::synchronize_within;
using test::expect_exact;
using test::sweep_ms_from_env;

// Device tests run where a GPU exists: without one they fail with the reason, never skip. These
// kernels need sm_90a: elsewhere the backends must say so, which SupportsNamesItsRules checks.
#define REQUIRE_HOPPER()                                                                         \
  do {                                                                                           \
    ASSERT_TRUE(gpu().available) << "device tests need a CUDA device: " << gpu().unavailable_reason; \
    const Status avail = prefill::kernels_available();                                          \
    ASSERT_TRUE(avail.is_ok()) << "prefill kernels need an sm_90a device: " << avail.reason;    \
  } while (0)

GemmBackend& backend(const char* name) { return test::registered_backend(name); }

GemmProblem make_problem(std::int64_t m, std::int64_t n, std::int64_t k, bool w4a4, OutputType out) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_format = w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16;
  p.b_format = OperandFormat::nvfp4;
  p.out_type = out;
  return p;
}

// test::check_backend, and on exact-grid inputs every output equal to the rounded reference.
void check_backend(const char* name, const GemmProblem& p, std::uint64_t seed, InputDistribution dist) {
  test::check_backend(name, p, seed, dist, [&](const std::vector<float>& got, const ReferenceResult& ref) {
    if (dist == InputDistribution::exact_grid) expect_exact(got, ref, p.out_type);
  });
}

const std::int64_t kRows[] = {1, 64, 128, 129, 512};
const std::int64_t kCols[] = {128, 256, 2048};
const std::int64_t kDepths[] = {64, 192, 6144};
const OutputType kOutputs[] = {OutputType::bf16, OutputType::f32, OutputType::f16};

TEST(PrefillW4A16, EveryShapeBf16Output) {
  REQUIRE_HOPPER();
  std::uint64_t seed = 7000;
  for (std::int64_t m : kRows) {
    for (std::int64_t n : kCols) {
      for (std::int64_t k : kDepths) {
        check_backend("fp4gap-prefill-w4a16", make_problem(m, n, k, false, OutputType::bf16), ++seed,
                      InputDistribution::random);
      }
    }
  }
}

TEST(PrefillW4A16, EveryOutputType) {
  REQUIRE_HOPPER();
  std::uint64_t seed = 7100;
  for (OutputType out : kOutputs) {
    check_backend("fp4gap-prefill-w4a16", make_problem(129, 256, 192, false, out), ++seed, InputDistribution::random);
    check_backend("fp4gap-prefill-w4a16", make_problem(512, 2048, 6144, false, out), ++seed, InputDistribution::random);
    check_backend("fp4gap-prefill-w4a16", make_problem(64, 200, 96, false, out), ++seed, InputDistribution::random);
    // N % 8 != 0: rows cannot take 16-byte stores, the epilogue stores element by element.
    check_backend("fp4gap-prefill-w4a16", make_problem(129, 130, 96, false, out), ++seed, InputDistribution::random);
    check_backend("fp4gap-prefill-w4a16", make_problem(300, 130, 64, false, out), ++seed,
                  InputDistribution::exact_grid);
  }
}

TEST(PrefillW4A16, ExactGridEqualsTheRoundedReference) {
  REQUIRE_HOPPER();
  std::uint64_t seed = 7200;
  for (OutputType out : kOutputs) {
    check_backend("fp4gap-prefill-w4a16", make_problem(129, 256, 192, false, out), ++seed, InputDistribution::exact_grid);
    check_backend("fp4gap-prefill-w4a16", make_problem(512, 2048, 6144, false, out), ++seed,
                  InputDistribution::exact_grid);
  }
}

TEST(PrefillW4A4, EveryShapeAndOutputType) {
  REQUIRE_HOPPER();
  std::uint64_t seed = 7300;
  for (std::int64_t m : kRows) {
    for (std::int64_t n : kCols) {
      for (std::int64_t k : kDepths) {
        check_backend("fp4gap-prefill-w4a4", make_problem(m, n, k, true, OutputType::bf16), ++seed,
                      InputDistribution::random);
      }
    }
  }
  for (OutputType out : kOutputs) {
    check_backend("fp4gap-prefill-w4a4", make_problem(129, 2048, 6144, true, out), ++seed, InputDistribution::random);
    check_backend("fp4gap-prefill-w4a4", make_problem(300, 256, 192, true, out), ++seed, InputDistribution::exact_grid);
  }
}

// ---- every compiled configuration and split factor, through the launch interface ----

struct DeviceGemm {
  cuda::DeviceBuffer<std::uint16_t> act;
  cuda::DeviceBuffer<std::uint8_t> packed;
  cuda::DeviceBuffer<std::uint8_t> out;
  cuda::DeviceBuffer<std::uint8_t> workspace;  // a workspace split's partials and counters
  prefill::ActivationMaps map;
};

DeviceGemm upload(const GemmInputs& in, const prefill::Plan& plan) {
  DeviceGemm d;
  d.act = cuda::DeviceBuffer<std::uint16_t>(in.a_bf16);
  d.packed = cuda::DeviceBuffer<std::uint8_t>(prefill::pack_weights(in.b_fp4).bytes);
  d.out = cuda::DeviceBuffer<std::uint8_t>(
      static_cast<std::size_t>(in.problem.m * in.problem.n * output_type_bytes(in.problem.out_type)));
  d.map = prefill::make_activation_maps(d.act.get(), in.problem.m, in.problem.k, plan.config);
  d.workspace = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(plan.workspace_bytes()));
  d.workspace.fill_bytes(0);
  return d;
}

std::vector<float> read_floats(const cuda::DeviceBuffer<std::uint8_t>& d_out, const GemmProblem& p) {
  synchronize_within(nullptr);
  const std::vector<std::uint8_t> raw = d_out.download();
  std::vector<float> out(static_cast<std::size_t>(p.m * p.n));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (p.out_type == OutputType::f32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = p.out_type == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return out;
}

std::vector<float> read_floats(const DeviceGemm& d, const GemmProblem& p) { return read_floats(d.out, p); }

void launch(const DeviceGemm& d, const GemmInputs& in, const prefill::Plan& plan, cudaStream_t stream,
            std::uint64_t* timeline = nullptr) {
  prefill::launch_gemm(plan, d.map, d.packed.get(), d.out.get(), in.problem.out_type, in.problem.m, in.problem.n,
                       static_cast<float>(in.alpha), stream, timeline, false, d.workspace.get());
}

// Runs `plan` on poisoned output `runs` times: the first run within the gamma(k) bound, finite and
// equal to the exactly rounded reference (exact-grid inputs), every later run bitwise equal to it.
void expect_exact_and_repeatable(const GemmInputs& in, const ReferenceResult& ref, const prefill::Plan& plan, int runs) {
  const GemmProblem& p = in.problem;
  DeviceGemm d = upload(in, plan);
  d.out.fill_bytes(0xFF);
  launch(d, in, plan, nullptr);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<float> first = read_floats(d, p);
  const VerifyResult v = verify_gemm_output(first.data(), ref, p.k, p.out_type);
  EXPECT_TRUE(v.passed) << v.message;
  EXPECT_EQ(v.non_finite, 0);
  expect_exact(first, ref, p.out_type);
  for (int run = 2; run <= runs; ++run) {
    d.out.fill_bytes(0xFF);
    launch(d, in, plan, nullptr);
    const std::vector<float> next = read_floats(d, p);
    ASSERT_EQ(std::memcmp(next.data(), first.data(), next.size() * sizeof(float)), 0)
        << "run " << run << " differs bitwise from run 1";
  }
  if (plan.config.persistent && plan.workspace_bytes() > 0) {
    // A last wave split along K: each pair's counter (after the partial tiles) went up by 2 per run,
    // the others stayed 0.
    const std::vector<std::uint8_t> ws = d.workspace.download();
    const std::int64_t tiles = plan.m_tiles * plan.n_tiles;
    const std::int64_t bound = prefill::persistent_pairs_bound(tiles);
    const std::int64_t counters = prefill::persistent_pair_counters_offset(tiles, plan.config.block_m);
    const std::int64_t pairs = prefill::persistent_schedule(plan.ctas(), prefill::launch_ctas(plan)).halved_tiles;
    for (std::int64_t i = 0; i < bound; ++i) {
      std::uint32_t count = 0;
      std::memcpy(&count, ws.data() + counters + 4 * i, 4);
      ASSERT_EQ(count, i < pairs ? 2u * static_cast<std::uint32_t>(runs) : 0u) << "pair " << i << " of " << pairs;
    }
  }
  if (plan.workspace_reduction()) {
    // The counters (after the partial tiles) are back at zero for the next launch.
    const std::vector<std::uint8_t> ws = d.workspace.download();
    const std::size_t tiles = static_cast<std::size_t>(plan.m_tiles * plan.n_tiles);
    for (std::size_t i = ws.size() - 4 * tiles; i < ws.size(); ++i) {
      ASSERT_EQ(ws[i], 0) << "counter byte " << i - (ws.size() - 4 * tiles) << " after " << runs << " runs";
    }
  }
}

TEST(PrefillKernel, EveryConfigurationAndSplitIsExactAndRepeatable) {
  REQUIRE_HOPPER();
  // 300 rows: one full and one partial activation tile of either width; 200 weight rows: a
  // partial weight tile; K = 576, 448, 384: 9, 7 and 6 K blocks, split unevenly, so that every
  // way a CTA's K blocks can end (after whole two-group rounds, then 0-3 blocks; after whole copy
  // groups, then a partial one) is met; K = 608: a partial last K block (32 columns), which a
  // config copying several K blocks at once copies on its own.
  for (const std::int64_t k : {576, 448, 384, 608}) {
    const GemmProblem p = make_problem(300, 200, k, false, OutputType::f32);
    const std::uint64_t seed = 7400 + static_cast<std::uint64_t>(k);
    const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::exact_grid);
    const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      for (int split : {1, 2, 3, 4, 5, 8}) {
        if (!c.splits() && split > 1) continue;  // make_plan refuses it (host-tested)
        for (const prefill::SplitReduction reduction :
             {prefill::SplitReduction::cluster, prefill::SplitReduction::workspace}) {
          if (reduction == prefill::SplitReduction::workspace && (split == 1 || !c.workspace_split())) continue;
          const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, split, reduction);
          SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
          if (prefill::concurrent_ctas(c, plan.cluster_size()) < plan.cluster_size()) {
            ADD_FAILURE() << "a cluster of " << split << " CTAs of " << c.name() << " cannot run on " << gpu().name;
            continue;
          }
          expect_exact_and_repeatable(in, ref, plan, 4);
        }
      }
    }
  }
}

// W4A4 with the activations dequantized by the kernel (check_activation_dequant_in_kernel): every
// config that can, splits and both reductions, against the same plan behind the separate bf16
// pass. The wgmmas read the same bits either way, so the outputs must be bitwise equal; on
// exact-grid inputs equal to the rounded reference, and repeated runs (one programmatic) bitwise
// equal. M = 300, 40, 1: several activation tiles with a partial last one, one partial tile, one
// row; N = 224, 544: a partial weight tile; K = 576, 384, 64: 9, 6 and 1 K blocks, uneven splits;
// K = 1280 unsplit: 20 K blocks, more resident tiles than the ring has stages; workspace split 8:
// more partial tiles than fit the m32 / m64 rings at once.
TEST(PrefillKernel, ActivationsDequantizedInTheKernelEqualTheSeparatePass) {
  REQUIRE_HOPPER();
  struct Shape {
    std::int64_t m, n, k;
  };
  std::uint64_t seed = 7900;
  for (const Shape s : {Shape{300, 224, 576}, Shape{40, 544, 384}, Shape{1, 224, 64}, Shape{40, 224, 1280}}) {
    for (const OutputType out : {OutputType::f32, OutputType::bf16}) {
      const GemmProblem p = make_problem(s.m, s.n, s.k, true, out);
      const GemmInputs in = make_gemm_inputs(p, ++seed, InputDistribution::exact_grid);
      const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
      const Nvfp4Matrix a = with_layout(in.a_fp4, ScaleLayout::linear);
      const cuda::DeviceBuffer<std::uint8_t> codes(a.codes), scales(a.scales);
      const prefill::Nvfp4Activations act{codes.get(), scales.get(), s.m, s.k};
      cuda::DeviceBuffer<std::uint16_t> a_bf16(static_cast<std::size_t>(s.m * s.k));
      prefill::launch_dequantize_bf16(codes.get(), scales.get(), a_bf16.get(), s.m, s.k, nullptr);
      const cuda::DeviceBuffer<std::uint8_t> packed(prefill::pack_weights(in.b_fp4).bytes);
      cuda::DeviceBuffer<std::uint8_t> d_pass(static_cast<std::size_t>(s.m * s.n * output_type_bytes(out)));
      cuda::DeviceBuffer<std::uint8_t> d_kernel(d_pass.bytes());
      const auto alpha = static_cast<float>(in.alpha);
      int checked = 0;
      for (const prefill::TileConfig& c : prefill::tile_configs()) {
        if (!c.dequantizes_activations()) continue;
        const prefill::ActivationMaps maps = prefill::make_activation_maps(a_bf16.get(), s.m, s.k, c);
        for (int split : {1, 2, 3, 8, -3, -8}) {  // negative: a workspace reduction
          if (std::abs(split) > s.k / prefill::kBlockK || (s.k > 1000 && split != 1)) continue;
          const prefill::Plan plan = prefill::make_plan(
              s.m, s.n, s.k, c, std::abs(split),
              split < 0 ? prefill::SplitReduction::workspace : prefill::SplitReduction::cluster);
          SCOPED_TRACE(repro("w4a4, activations dequantized in the kernel, " + plan.describe() + ", " + p.label(), seed));
          const Status can = prefill::check_activation_dequant_on_device(plan, s.k);
          ASSERT_TRUE(can.is_ok()) << can.reason;
          cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(plan.workspace_bytes()));
          workspace.fill_bytes(0);
          d_pass.fill_bytes(0xFF);
          prefill::launch_gemm(plan, maps, packed.get(), d_pass.get(), out, s.m, s.n, alpha, nullptr, nullptr, false,
                               workspace.get());
          const std::vector<float> through_pass = read_floats(d_pass, p);
          for (int run = 1; run <= 3; ++run) {
            d_kernel.fill_bytes(0xFF);
            prefill::launch_gemm(plan, act, packed.get(), d_kernel.get(), out, s.m, s.n, alpha, nullptr, nullptr,
                                 run == 3, workspace.get());
            CUDA_CHECK(cudaGetLastError());
            const std::vector<float> got = read_floats(d_kernel, p);
            ASSERT_EQ(std::memcmp(got.data(), through_pass.data(), got.size() * sizeof(float)), 0)
                << "run " << run << (run == 3 ? " (programmatic)" : "")
                << " differs bitwise from the same plan behind the separate pass";
          }
          const VerifyResult v = verify_gemm_output(through_pass.data(), ref, p.k, out);
          EXPECT_TRUE(v.passed) << v.message;
          expect_exact(through_pass, ref, out);
          ++checked;
        }
      }
      EXPECT_GT(checked, 0) << "no config dequantizes activations in the kernel";
    }
  }
}

// The in-kernel activation launch refuses, naming the rule, plans and K it cannot take and
// activations that do not fit the plan or are misaligned, before anything is launched.
TEST(PrefillKernel, LaunchRefusesNvfp4ActivationsItCannotDequantize) {
  REQUIRE_HOPPER();
  const std::int64_t m = 16, n = 128, k = 640;
  cuda::DeviceBuffer<std::uint8_t> codes(static_cast<std::size_t>(m * k / 2 + 16)),
      scales(static_cast<std::size_t>(m * k / 16 + 4));
  cuda::DeviceBuffer<std::uint8_t> packed(static_cast<std::size_t>(prefill::kChunkBytes * (k / prefill::kBlockK)));
  cuda::DeviceBuffer<float> out(static_cast<std::size_t>(m * n));
  out.fill_bytes(0xFF);
  const prefill::TileConfig narrow{16, 12, false, 4};
  auto refused = [&](const prefill::Plan& plan, const prefill::Nvfp4Activations& act, const std::string& rule) {
    try {
      prefill::launch_gemm(plan, act, packed.get(), out.get(), OutputType::f32, m, n, 1.0f, nullptr);
      ADD_FAILURE() << "launched " << plan.describe() << " with NVFP4 activations [" << act.m << ", " << act.k << "]";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    }
  };
  const prefill::Nvfp4Activations act{codes.get(), scales.get(), m, k};
  refused(prefill::make_plan(m, n, k, prefill::TileConfig{128, 9}, 1), act, "at most 64 activation rows");
  refused(prefill::make_plan(m, n, k, prefill::TileConfig{256, 4, true}, 1), act, "persistent");
  refused(prefill::make_plan(m, n, k - 32, narrow, 1), prefill::Nvfp4Activations{codes.get(), scales.get(), m, k - 32},
          "not a multiple of 64");
  refused(prefill::make_plan(m, n, k, narrow, 1), prefill::Nvfp4Activations{codes.get() + 8, scales.get(), m, k},
          "16-byte aligned");
  refused(prefill::make_plan(m, n, k, narrow, 1), prefill::Nvfp4Activations{codes.get(), scales.get() + 1, m, k},
          "2-byte aligned");
  refused(prefill::make_plan(m, n, k, narrow, 1), prefill::Nvfp4Activations{codes.get(), scales.get(), m, k - 64},
          "do not fit");
  // 16 x 128 x 65536 unsplit: 1024 resident K blocks of 2 KB, more than any device's shared memory.
  refused(prefill::make_plan(m, n, 65536, narrow, 1), prefill::Nvfp4Activations{codes.get(), scales.get(), m, 65536},
          "K blocks of resident activations per CTA need");
  synchronize_within(nullptr);
  const std::vector<float> untouched = out.download();
  for (float x : untouched) ASSERT_TRUE(std::isnan(x)) << "a refused launch wrote the output";
}

TEST(PrefillKernel, TmaStoreEpilogueIsExactAtEveryEdge) {
  REQUIRE_HOPPER();
  // 16-bit outputs with N % 8 == 0 leave through the copy engine: whole tiles (unsplit, or added
  // up by the last CTA of a workspace split) and the bands of a cluster split where every CTA gets
  // a pair of quads (Plan::cluster_band_rows: m128 at split 3 as 48 + 48 + 32 rows, m208 at split 2
  // as 112 + 96, stored in 16-row boxes; m64 at split 8 has too few and stays staged). At split 2
  // the bands are exchanged through L2 (the plan's workspace), at the other splits through
  // distributed shared memory.
  // N = 264: two full weight tiles and one of 8 columns (its second 64-column half lies wholly
  // beyond N); M = 300, 129 and 1: partial activation tiles, so some bands lie partly or wholly
  // beyond M; N = 8: the smallest row the tensor map allows.
  struct Shape {
    std::int64_t m, n, k;
  };
  std::uint64_t seed = 7700;
  for (const Shape s : {Shape{300, 264, 448}, Shape{1, 8, 64}, Shape{129, 136, 576}}) {
    for (const OutputType out : {OutputType::bf16, OutputType::f16}) {
      const GemmProblem p = make_problem(s.m, s.n, s.k, false, out);
      const GemmInputs in = make_gemm_inputs(p, ++seed, InputDistribution::exact_grid);
      const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
      for (const prefill::TileConfig& c : prefill::tile_configs()) {
        const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, 1);
        SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
        expect_exact_and_repeatable(in, ref, plan, 2);
        if (c.splits()) {
          for (const int n_split : {2, 3, 4, 8}) {
            const prefill::Plan cluster = prefill::make_plan(p.m, p.n, p.k, c, n_split);
            SCOPED_TRACE(repro(cluster.describe() + " (band rows " + std::to_string(cluster.cluster_band_rows()) + "), " +
                               p.label(), seed));
            if (prefill::concurrent_ctas(c, n_split) < n_split) continue;  // EveryConfigurationAndSplit... says so
            expect_exact_and_repeatable(in, ref, cluster, 2);
          }
        }
        if (!c.workspace_split() || plan.k_blocks < 2) continue;
        const prefill::Plan split = prefill::make_plan(p.m, p.n, p.k, c, std::min<int>(3, static_cast<int>(plan.k_blocks)),
                                                       prefill::SplitReduction::workspace);
        SCOPED_TRACE(repro(split.describe() + ", " + p.label(), seed));
        expect_exact_and_repeatable(in, ref, split, 2);
      }
    }
  }
}

TEST(PrefillKernel, PersistentCtasLoopOverMoreTilesThanTheyAre) {
  REQUIRE_HOPPER();
  // 9 x 24 = 216 tiles of 256 x 128 for at most 132 resident CTAs: each CTA runs one or two tiles,
  // and its ring position carries over from one tile to the next. K = 192 and 64: 3 and 1 K
  // blocks, so the ring's stage and phase at a tile's start vary from tile to tile. N = 3000:
  // the TMA-store epilogue (bf16, f16); N = 2999: rows without 16-byte alignment; f32: both
  // leave straight from the fragments. K = 832: 13 K blocks, at least a ring for every persistent
  // config but no whole number of rings (or of 2-block groups), so the CTAs whose ring runs unrolled
  // close each ring unloaded after a tile and start the next at stage 0.
  struct Shape {
    std::int64_t n, k;
    OutputType out;
  };
  std::uint64_t seed = 7800;
  for (const Shape s : {Shape{3000, 192, OutputType::bf16}, Shape{3000, 64, OutputType::f16},
                        Shape{2999, 192, OutputType::bf16}, Shape{3000, 192, OutputType::f32},
                        Shape{3000, 832, OutputType::bf16}}) {
    const GemmProblem p = make_problem(2300, s.n, s.k, false, s.out);
    const GemmInputs in = make_gemm_inputs(p, ++seed, InputDistribution::exact_grid);
    const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      if (!c.persistent) continue;
      const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, 1);
      SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
      ASSERT_LT(prefill::launch_ctas(plan), plan.ctas()) << "the shape no longer makes CTAs loop";
      expect_exact_and_repeatable(in, ref, plan, 3);
    }
  }
}

TEST(PrefillKernel, PersistentCtasRunTheLastWaveAsHalfTiles) {
  REQUIRE_HOPPER();
  // 4 x 40 = 160 tiles of block_m x 128 on 132 resident CTAs: a full wave, then 28 tiles (the last
  // activation tile row) run as 56 half tiles (persistent_schedule). The last tile row holds
  // block_m - 24 rows (the second half partial), block_m / 2 + 4 (the second half 4 rows) or 32
  // (the second half empty and skipped). N = 5000: the TMA-store epilogue (bf16, f16) with a
  // partial weight tile; N = 4999 and f32: the fragment stores.
  struct Shape {
    int (*last_rows)(int block_m);  // rows of the last activation tile row
    std::int64_t n, k;
    OutputType out;
  };
  const auto almost_full = [](int block_m) { return block_m - 24; };
  const auto four_past_half = [](int block_m) { return block_m / 2 + 4; };
  const auto under_half = [](int) { return 32; };
  std::uint64_t seed = 7900;
  for (const Shape s : {Shape{almost_full, 5000, 192, OutputType::bf16}, Shape{four_past_half, 5000, 64, OutputType::f16},
                        Shape{under_half, 5000, 192, OutputType::bf16}, Shape{almost_full, 4999, 192, OutputType::bf16},
                        Shape{four_past_half, 5000, 128, OutputType::f32}}) {
    ++seed;
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      if (!c.persistent) continue;
      const GemmProblem p = make_problem(3 * c.block_m + s.last_rows(c.block_m), s.n, s.k, false, s.out);
      const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::exact_grid);
      const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
      const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, 1);
      SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
      const prefill::PersistentSchedule sched = prefill::persistent_schedule(plan.ctas(), prefill::launch_ctas(plan));
      ASSERT_GT(sched.halved_tiles, 0) << "the shape no longer halves the last wave on " << gpu().name;
      ASSERT_FALSE(prefill::last_wave_splits_k(plan.k_blocks));
      expect_exact_and_repeatable(in, ref, plan, 3);
    }
  }
}

TEST(PrefillKernel, PersistentLastWaveSplitsAlongKFromSixtyFourBlocks) {
  REQUIRE_HOPPER();
  // From 64 K blocks a last wave's tile runs as two units over the halves of K that exchange partial
  // tiles (last_wave_splits_k). One row of 157 tiles: a full wave, then 25 tiles as 25 pairs; or
  // 133 tiles: one pair. Rows: 40 (the second band past M: its CTA still sends the first band's
  // partial), block_m / 2 + 4 (the second band 4 rows), block_m - 8. K: 65 blocks (the halves 32
  // and 33), 65 with a partial last block (k_tail), 64. N = 16999 and f32: the fragment stores.
  struct Shape {
    int (*rows)(int block_m);
    std::int64_t n, k;
    OutputType out;
  };
  const auto forty = [](int) { return 40; };
  const auto four_past_half = [](int block_m) { return block_m / 2 + 4; };
  const auto almost_full = [](int block_m) { return block_m - 8; };
  std::uint64_t seed = 7950;
  for (const Shape s : {Shape{forty, 20000, 4160, OutputType::bf16}, Shape{four_past_half, 16999, 4128, OutputType::f32},
                        Shape{almost_full, 17000, 4096, OutputType::f16}}) {
    ++seed;
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      if (!c.persistent) continue;
      const GemmProblem p = make_problem(s.rows(c.block_m), s.n, s.k, false, s.out);
      const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::exact_grid);
      const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
      const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, 1);
      SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
      const prefill::PersistentSchedule sched = prefill::persistent_schedule(plan.ctas(), prefill::launch_ctas(plan));
      ASSERT_GT(sched.halved_tiles, 0) << "the shape no longer pairs a last wave on " << gpu().name;
      ASSERT_TRUE(prefill::last_wave_splits_k(plan.k_blocks));
      ASSERT_GT(plan.workspace_bytes(), 0);
      expect_exact_and_repeatable(in, ref, plan, 3);
    }
  }
}

TEST(PrefillKernel, RandomDataWithSplitKMatchesTheReferenceRepeatably) {
  REQUIRE_HOPPER();
  const GemmProblem p = make_problem(512, 2048, 6144, false, OutputType::bf16);
  const std::uint64_t seed = 7500;
  const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::random);
  const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
  for (const prefill::TileConfig& c : prefill::tile_configs()) {
    for (int split : {1, 4}) {
      if (!c.splits() && split > 1) continue;  // make_plan refuses it (host-tested)
      const prefill::Plan plan = prefill::make_plan(p.m, p.n, p.k, c, split);
      SCOPED_TRACE(repro(plan.describe() + ", " + p.label(), seed));
      DeviceGemm d = upload(in, plan);
      d.out.fill_bytes(0xFF);
      launch(d, in, plan, nullptr);
      const std::vector<float> first = read_floats(d, p);
      const VerifyResult v = verify_gemm_output(first.data(), ref, p.k, p.out_type);
      EXPECT_TRUE(v.passed) << v.message;
      EXPECT_EQ(v.non_finite, 0);
      d.out.fill_bytes(0xFF);
      launch(d, in, plan, nullptr);
      const std::vector<float> second = read_floats(d, p);
      EXPECT_EQ(std::memcmp(second.data(), first.data(), second.size() * sizeof(float)), 0)
          << "two runs differ bitwise";
    }
  }
}

// Tuning data, not a test of speed: every configuration x split-K factor on the shapes,
// graph-timed with cold weights and activations (rotating input sets), beside the policy's pick
// and the number of CTAs the occupancy API lets run at once. Run by hand on the GPU
// (FP4GAP_SWEEP_MAX_M=64 bounds the rows, e.g. to sweep the decode sizes only;
// FP4GAP_SWEEP_M=768,1536 sweeps those M instead of the default list; FP4GAP_SWEEP_MAX_BLOCK_M=128
// leaves out the wider tiles, FP4GAP_SWEEP_MIN_BLOCK_M=128 the narrower ones;
// FP4GAP_SWEEP_MAX_SPLIT=1 the split plans; FP4GAP_SWEEP_SUSTAIN_MS=1000 also replays each plan's
// graph for that long and prints its time per launch at the power and clock it settles at,
// the figure that counts at M >= 2048, where graph bursts and sustained load disagree):
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillKernel.DISABLED_Sweep*'
TEST(PrefillKernel, DISABLED_SweepConfigsAndSplits) {
  REQUIRE_HOPPER();
  struct Nk {
    std::int64_t n, k;
  };
  const char* max_m_env = std::getenv("FP4GAP_SWEEP_MAX_M");
  const std::int64_t max_m = max_m_env != nullptr ? std::atoll(max_m_env) : 4096;
  const char* max_block_m_env = std::getenv("FP4GAP_SWEEP_MAX_BLOCK_M");
  const int max_block_m = max_block_m_env != nullptr ? std::atoi(max_block_m_env) : 256;
  const char* min_block_m_env = std::getenv("FP4GAP_SWEEP_MIN_BLOCK_M");
  const int min_block_m = min_block_m_env != nullptr ? std::atoi(min_block_m_env) : 1;
  const char* max_split_env = std::getenv("FP4GAP_SWEEP_MAX_SPLIT");
  const int max_split = max_split_env != nullptr ? std::atoi(max_split_env) : prefill::kMaxSplitK;
  const char* sustain_env = std::getenv("FP4GAP_SWEEP_SUSTAIN_MS");
  TimingOptions sustained_options;
  sustained_options.sustain_ms = sustain_env != nullptr ? std::atof(sustain_env) : 0.0;
  validate_sustain_options(sustained_options);
  const std::vector<std::int64_t> ms = sweep_ms_from_env({4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 1});
  for (const Nk s : {Nk{2048, 6144}, Nk{4096, 6144}, Nk{6144, 2048}}) {
    for (std::int64_t m : ms) {
      if (m > max_m) continue;
      const GemmProblem p = make_problem(m, s.n, s.k, false, OutputType::bf16);
      const GemmInputs in = make_gemm_inputs(p, 1, InputDistribution::random);
      const std::vector<std::uint8_t> packed = prefill::pack_weights(in.b_fp4).bytes;
      const double set_bytes = static_cast<double>(packed.size()) + static_cast<double>(in.a_bf16.size()) * 2;
      const int sets = input_sets_for_cold_cache(set_bytes, gpu().l2_bytes, 16);
      std::vector<cuda::DeviceBuffer<std::uint16_t>> acts;
      std::vector<cuda::DeviceBuffer<std::uint8_t>> weights;
      for (int i = 0; i < sets; ++i) {
        acts.emplace_back(in.a_bf16);
        weights.emplace_back(packed);
      }
      cuda::DeviceBuffer<std::uint8_t> out(static_cast<std::size_t>(m * s.n * 2));
      const prefill::Plan chosen = prefill::choose_plan(m, s.n, s.k, gpu(), prefill::concurrent_ctas);
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
      std::printf("\n%s: %d input sets; policy: %s\n", p.label().c_str(), sets, chosen.describe().c_str());
      // Left out to bound the run: splits 5 and 7 above M = 64, and tiles wider than 64 rows that
      // are at least twice as wide as M.
      for (const prefill::PlanCandidate& cand : prefill::plan_candidates(m, s.n, s.k, gpu(), prefill::concurrent_ctas)) {
        if (!cand.status.is_ok() || (m > 64 && (cand.split_k == 5 || cand.split_k == 7))) continue;
        if (cand.config.block_m > 64 && cand.config.block_m >= 2 * m) continue;
        if (cand.config.block_m > max_block_m || cand.config.block_m < min_block_m) continue;
        if (cand.split_k > max_split) continue;
        const prefill::Plan& plan = cand.plan;
        cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(plan.workspace_bytes()));
        workspace.fill_bytes(0);
        std::vector<prefill::ActivationMaps> maps;
        for (int i = 0; i < sets; ++i) maps.push_back(prefill::make_activation_maps(acts[i].get(), m, s.k, plan.config));
        prefill::prepare_launch(plan);
        auto timed = [&](bool programmatic, const TimingOptions& options = TimingOptions{}) {
          return time_launch(
              [&](int set, void* stream) {
                prefill::launch_gemm(plan, maps[static_cast<std::size_t>(set)],
                                     weights[static_cast<std::size_t>(set)].get(), out.get(), OutputType::bf16, m, s.n,
                                     static_cast<float>(in.alpha), static_cast<cudaStream_t>(stream), nullptr,
                                     programmatic, workspace.get());
              },
              sets, gpu(), options);
        };
        const Timing t = timed(false, sustained_options);
        const Timing t_pdl = timed(true);
        std::printf("  %s%-62s %5lld CTAs (%3d at once)  graph %8.2f us %6.0f TFLOP/s  event %8.2f us  model %8.2f us"
                    "  graph with programmatic launches %8.2f us\n",
                    plan.describe() == chosen.describe() ? "* " : "  ", plan.describe().c_str(),
                    static_cast<long long>(prefill::launch_ctas(plan)), cand.concurrent_ctas, t.graph.median_us,
                    flops / t.graph.median_us * 1e-6, t.event.median_us, cand.predicted_us, t_pdl.graph.median_us);
        if (t.sustained) {
          std::printf("      sustained %8.2f us (%d replays over %.0f ms) at %d MHz, %.0f W, clock events: %s\n",
                      t.sustained->per_launch_us, t.sustained->replays, t.sustained->window_ms,
                      t.sustained->device.sm_clock_mhz, t.sustained->device.power_w,
                      clock_event_reason_names(t.sustained->device.clock_event_reasons).c_str());
        }
      }
    }
  }
}

// Diagnostic, not a test of speed: where a CTA's time goes (first stage's arrival, main loop,
// epilogue) and how long an SM waits between CTAs, from the kernel's optional timeline, with L2
// flushed before the launch (cold weights and activations). Where M leaves the last row of tiles
// partly empty, its CTAs are also summarized apart from the others. Run by hand on the GPU
// (FP4GAP_TIMELINE_M=96,128 times the three glm5 shapes at those M instead of the default list;
// FP4GAP_TIMELINE_SIBLINGS=1 also times the other configs of the pick's tile rows at its split;
// FP4GAP_TIMELINE_SPLITS=256:2,192:2 also times every unpersistent config of 256 rows at a cluster
// split of 2, and of 192 rows, where they run):
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='PrefillKernel.DISABLED_Timeline'
TEST(PrefillKernel, DISABLED_Timeline) {
  REQUIRE_HOPPER();
  struct Shape {
    std::int64_t m, n, k;
  };
  std::vector<Shape> shapes = {Shape{4096, 6144, 2048}, Shape{4096, 4096, 6144}, Shape{1024, 4096, 6144},
                               Shape{512, 2048, 6144},  Shape{512, 6144, 2048},  Shape{128, 6144, 2048},
                               Shape{64, 4096, 6144},   Shape{64, 2048, 6144},   Shape{32, 2048, 6144},
                               Shape{32, 6144, 2048},   Shape{16, 4096, 6144},   Shape{16, 2048, 6144},
                               Shape{16, 6144, 2048}};
  if (std::getenv("FP4GAP_TIMELINE_M") != nullptr) {
    shapes.clear();
    for (const std::int64_t m : sweep_ms_from_env({}, "FP4GAP_TIMELINE_M")) {
      for (const Shape glm5 : {Shape{m, 4096, 6144}, Shape{m, 6144, 2048}, Shape{m, 2048, 6144}}) shapes.push_back(glm5);
    }
  }
  const bool siblings = std::getenv("FP4GAP_TIMELINE_SIBLINGS") != nullptr;
  std::vector<std::pair<int, int>> forced;  // (block_m, split_k) from FP4GAP_TIMELINE_SPLITS
  if (const char* e = std::getenv("FP4GAP_TIMELINE_SPLITS")) {
    std::stringstream list(e);
    for (std::string item; std::getline(list, item, ',');) {
      const std::size_t colon = item.find(':');
      ASSERT_NE(colon, std::string::npos) << "FP4GAP_TIMELINE_SPLITS items are block_m:split, not " << item;
      forced.emplace_back(std::stoi(item.substr(0, colon)), std::stoi(item.substr(colon + 1)));
    }
  }
  cuda::DeviceBuffer<std::uint8_t> flush(static_cast<std::size_t>(2 * gpu().l2_bytes));
  std::vector<std::pair<Shape, prefill::Plan>> runs;
  for (const Shape s : shapes) {
    const prefill::Plan pick = prefill::choose_plan(s.m, s.n, s.k, gpu(), prefill::concurrent_ctas);
    runs.emplace_back(s, pick);
    for (const auto& [block_m, split] : forced) {
      for (const prefill::TileConfig& c : prefill::tile_configs()) {
        if (c.block_m != block_m || !c.splits() || !prefill::check_tile_config(c, gpu()).is_ok()) continue;
        const prefill::Plan plan = prefill::make_plan(s.m, s.n, s.k, c, split, prefill::SplitReduction::cluster);
        if (plan.describe() != pick.describe()) runs.emplace_back(s, plan);
      }
    }
    if (!siblings || pick.config.persistent) continue;
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      if (c.block_m != pick.config.block_m || c.persistent || c.name() == pick.config.name() ||
          (pick.split_k > 1 && !c.splits()) ||
          !prefill::check_tile_config(c, gpu()).is_ok() ||
          (pick.reduction == prefill::SplitReduction::workspace && !c.workspace_split())) {
        continue;
      }
      runs.emplace_back(s, prefill::make_plan(s.m, s.n, s.k, c, pick.split_k, pick.reduction));
    }
  }
  for (const auto& [s, plan] : runs) {
    const GemmProblem p = make_problem(s.m, s.n, s.k, false, OutputType::bf16);
    const GemmInputs in = make_gemm_inputs(p, 1, InputDistribution::random);
    const DeviceGemm d = upload(in, plan);
    const auto ctas = static_cast<std::size_t>(prefill::launch_ctas(plan));
    cuda::DeviceBuffer<std::uint64_t> timeline(ctas * (prefill::kTimelineFields + prefill::kTimelineArrivals));
    for (int warm = 0; warm < 2; ++warm) launch(d, in, plan, nullptr);
    flush.fill_bytes(0x5A);
    launch(d, in, plan, nullptr, timeline.get());
    synchronize_within(nullptr);
    const std::vector<std::uint64_t> t = timeline.download();
    auto field = [&](std::size_t cta, int f) { return static_cast<double>(t[cta * prefill::kTimelineFields + f]); };
    double begin = field(0, 0), end = field(0, 3);
    std::vector<double> first, main_loop, epilogue, gaps, block_cycles, clock_ghz;
    std::vector<double> exchange, reduce, last_barrier;  // a cluster split's epilogue, in parts
    std::vector<std::vector<std::size_t>> per_sm(static_cast<std::size_t>(gpu().sm_count));
    for (std::size_t c = 0; c < ctas; ++c) {
      ASSERT_LE(field(c, 0), field(c, 1)) << "CTA " << c;
      ASSERT_LE(field(c, 1), field(c, 2)) << "CTA " << c;
      ASSERT_LE(field(c, 2), field(c, 6)) << "CTA " << c;
      ASSERT_LE(field(c, 6), field(c, 7)) << "CTA " << c;
      ASSERT_LE(field(c, 7), field(c, 3)) << "CTA " << c;
      const auto sm = static_cast<std::size_t>(field(c, 4));
      ASSERT_LT(sm, per_sm.size()) << "CTA " << c;
      begin = std::min(begin, field(c, 0));
      end = std::max(end, field(c, 3));
      first.push_back((field(c, 1) - field(c, 0)) * 1e-3);
      main_loop.push_back((field(c, 2) - field(c, 1)) * 1e-3);
      epilogue.push_back((field(c, 3) - field(c, 2)) * 1e-3);
      exchange.push_back((field(c, 6) - field(c, 2)) * 1e-3);
      reduce.push_back((field(c, 7) - field(c, 6)) * 1e-3);
      last_barrier.push_back((field(c, 3) - field(c, 7)) * 1e-3);
      // A persistent CTA's main-loop span covers several tiles: per K block only for the others.
      const prefill::KRange kr = prefill::split_k_range(plan.k_blocks, plan.split_k,
                                                        static_cast<int>(c % static_cast<std::size_t>(plan.split_k)));
      // The wide tiles' kernel does not count its main loop's SM cycles (field 5 is 0).
      if (!plan.config.persistent && kr.end > kr.begin && field(c, 5) > 0) {
        block_cycles.push_back(field(c, 5) / static_cast<double>(kr.end - kr.begin));
      }
      if (field(c, 2) > field(c, 1) && field(c, 5) > 0) clock_ghz.push_back(field(c, 5) / (field(c, 2) - field(c, 1)));
      per_sm[sm].push_back(c);
    }
    for (std::vector<std::size_t>& on_sm : per_sm) {
      std::sort(on_sm.begin(), on_sm.end(), [&](std::size_t a, std::size_t b) { return field(a, 0) < field(b, 0); });
      for (std::size_t i = 1; i < on_sm.size(); ++i) gaps.push_back((field(on_sm[i], 0) - field(on_sm[i - 1], 3)) * 1e-3);
    }
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    auto largest = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
    std::printf("%-40s %-45s %5zu CTAs: span %7.2f us | first stage median %5.2f max %5.2f | main loop median %7.2f max "
                "%7.2f | epilogue median %5.2f max %5.2f | SM gap between CTAs median %5.2f max %5.2f us | main loop "
                "%s SM cycles per K block at %4.2f GHz (medians)\n",
                p.label().c_str(), plan.describe().c_str(), ctas, (end - begin) * 1e-3, median(first), largest(first),
                median(main_loop), largest(main_loop), median(epilogue), largest(epilogue), median(gaps), largest(gaps),
                block_cycles.empty() ? "     -" : std::to_string(std::lround(median(block_cycles))).c_str(),
                median(clock_ghz));
    if (plan.split_k > 1 && plan.reduction == prefill::SplitReduction::cluster) {
      std::printf("  cluster epilogue, medians / max: partials written and the cluster's barrier passed %5.2f / %5.2f "
                  "us, share reduced and stored %5.2f / %5.2f us, last barrier %5.2f / %5.2f us\n",
                  median(exchange), largest(exchange), median(reduce), largest(reduce), median(last_barrier),
                  largest(last_barrier));
    }
    // A non-persistent grid runs CTA c on row tile c / split_k / n_tiles: where M is not a multiple
    // of the tile, the last row of tiles (zeros loaded beyond M) apart from the full ones.
    const std::int64_t block_m = plan.config.block_m, row_tiles = (s.m + block_m - 1) / block_m;
    if (!plan.config.persistent && s.m % block_m != 0) {
      const std::int64_t n_tiles = (s.n + prefill::kBlockN - 1) / prefill::kBlockN;
      for (const bool last : {true, false}) {
        std::vector<double> f, ml, ep, cyc;
        for (std::size_t c = 0; c < ctas; ++c) {
          const std::int64_t row_tile = static_cast<std::int64_t>(c) / plan.split_k / n_tiles;
          if ((row_tile == row_tiles - 1) != last) continue;
          f.push_back(first[c]);
          ml.push_back(main_loop[c]);
          ep.push_back(epilogue[c]);
          const prefill::KRange kr = prefill::split_k_range(plan.k_blocks, plan.split_k,
                                                            static_cast<int>(c % static_cast<std::size_t>(plan.split_k)));
          if (kr.end > kr.begin && field(c, 5) > 0) cyc.push_back(field(c, 5) / static_cast<double>(kr.end - kr.begin));
        }
        if (f.empty()) continue;  // one row of tiles: it is the last
        const std::string what = last ? "last row of tiles (" + std::to_string(s.m % block_m) + " of " +
                                            std::to_string(block_m) + " rows hold data)"
                                      : std::string("full rows of tiles");
        std::printf("  %s, %zu CTAs: first stage median %5.2f max %5.2f | main loop median %7.2f max %7.2f | "
                    "epilogue median %5.2f max %5.2f | %ld SM cycles per K block (median)\n",
                    what.c_str(), f.size(), median(f), largest(f), median(ml), largest(ml), median(ep), largest(ep),
                    std::lround(median(cyc)));
      }
    }
    // When the first pass's K blocks arrive, in us from the CTA's start (medians over CTAs, at the
    // CTAs' median clock): a steady spacing after the first is the rate the CTA's stream delivers.
    const double ghz = median(clock_ghz);
    std::printf("  K block arrivals, us after the CTA's start (median over CTAs):");
    for (int j = 0; j < prefill::kTimelineArrivals; ++j) {
      std::vector<double> at;
      for (std::size_t c = 0; c < ctas; ++c) {
        const std::uint64_t cycles = t[ctas * prefill::kTimelineFields + c * prefill::kTimelineArrivals + j];
        if (cycles > 0) at.push_back(static_cast<double>(cycles) / ghz * 1e-3);
      }
      if (!at.empty()) std::printf(" %.2f", median(at));
    }
    std::printf("\n");
  }
}

TEST(PrefillKernel, GraphReplayWritesTheSameBits) {
  REQUIRE_HOPPER();
  for (const char* name : {"fp4gap-prefill-w4a16", "fp4gap-prefill-w4a4"}) {
    const bool w4a4 = std::string(name) == "fp4gap-prefill-w4a4";
    const GemmProblem p = make_problem(512, 2048, 6144, w4a4, OutputType::bf16);
    const std::uint64_t seed = 7600;
    SCOPED_TRACE(repro(std::string(name) + ", " + p.label(), seed));
    auto runner = backend(name).prepare(make_gemm_inputs(p, seed, InputDistribution::random), 2);
    cuda::Stream stream;
    runner->poison_output();
    runner->run(0, stream.as_void());
    runner->run(1, stream.as_void());
    synchronize_within(stream.get());
    const std::vector<float> direct0 = runner->read_output(0), direct1 = runner->read_output(1);
    runner->poison_output();
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    runner->run(0, stream.as_void());
    runner->run(1, stream.as_void());
    CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    synchronize_within(stream.get());
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    const std::vector<float> replay0 = runner->read_output(0), replay1 = runner->read_output(1);
    EXPECT_EQ(std::memcmp(replay0.data(), direct0.data(), replay0.size() * sizeof(float)), 0) << "set 0";
    EXPECT_EQ(std::memcmp(replay1.data(), direct1.data(), replay1.size() * sizeof(float)), 0) << "set 1";
    std::int64_t nan_count = 0;
    for (float x : replay1) nan_count += std::isnan(x) ? 1 : 0;
    EXPECT_EQ(nan_count, 0);
  }
}

// The launcher refuses activation maps made for another tile or copy group, or another shape,
// naming both, before anything is launched.
// The host plans with kKernelStaticSmemBytes for the kernel's own shared memory (check_tile_config,
// `fp4gap plan`, the dequantizing kernels' limit): every compiled instantiation must stay within it.
TEST(PrefillKernel, StaticSharedMemoryWithinTheHostBound) {
  REQUIRE_HOPPER();
  for (const prefill::TileConfig& c : prefill::tile_configs()) {
    for (const bool dequant_act : {false, true}) {
      if (dequant_act && !c.dequantizes_activations()) continue;
      EXPECT_LE(prefill::kernel_static_smem_bytes(c, dequant_act), prefill::kKernelStaticSmemBytes)
          << c.name() << (dequant_act ? " (dequantizing activations)" : "");
    }
  }
}

TEST(PrefillKernel, LaunchRefusesActivationMapsOfAnotherConfig) {
  REQUIRE_HOPPER();
  const std::int64_t m = 64, n = 128, k = 256;
  cuda::DeviceBuffer<std::uint16_t> act(static_cast<std::size_t>(m * k));
  cuda::DeviceBuffer<std::uint8_t> packed(static_cast<std::size_t>(prefill::kChunkBytes * (k / prefill::kBlockK)));
  cuda::DeviceBuffer<float> out(static_cast<std::size_t>(m * n));
  const prefill::TileConfig plain{128, 9}, grouped{128, 9, false, 3};
  const prefill::Plan plan = prefill::make_plan(m, n, k, grouped, 1);
  auto launch_with = [&](const prefill::ActivationMaps& maps, std::int64_t launch_m) {
    prefill::launch_gemm(plan, maps, packed.get(), out.get(), OutputType::f32, launch_m, n, 1.0f, nullptr);
  };
  for (const auto& [maps, launch_m] :
       {std::pair{prefill::make_activation_maps(act.get(), m, k, plain), m},
        std::pair{prefill::make_activation_maps(act.get(), m, k - 64, grouped), m},
        std::pair{prefill::make_activation_maps(act.get(), m, k, grouped), m - 1}}) {
    try {
      launch_with(maps, launch_m);
      ADD_FAILURE() << "launched with maps for m" << maps.block_m << ", " << maps.copy_group << " K blocks per copy, ["
                    << maps.m << ", " << maps.k << "] at M = " << launch_m;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("do not fit " + plan.describe()), std::string::npos) << e.what();
    }
  }
  launch_with(prefill::make_activation_maps(act.get(), m, k, grouped), m);  // the matching maps launch
  synchronize_within(nullptr);
}

TEST(PrefillBackends, SupportsNamesItsRules) {
  ASSERT_TRUE(gpu().available) << "device tests need a CUDA device: " << gpu().unavailable_reason;
  GemmBackend& w4a16 = backend("fp4gap-prefill-w4a16");
  GemmBackend& w4a4 = backend("fp4gap-prefill-w4a4");

  GemmProblem bf16_bf16 = make_problem(128, 128, 64, false, OutputType::bf16);
  bf16_bf16.b_format = OperandFormat::bf16;
  EXPECT_EQ(w4a16.supports(bf16_bf16, gpu()).code, StatusCode::not_supported);
  EXPECT_EQ(w4a4.supports(make_problem(128, 128, 64, false, OutputType::bf16), gpu()).code,
            StatusCode::not_supported);
  EXPECT_EQ(w4a16.supports(make_problem(128, 128, 100, false, OutputType::bf16), gpu()).code,
            StatusCode::invalid_problem);

  DeviceContext blackwell = gpu();
  blackwell.available = true;
  blackwell.name = "RTX PRO 6000";
  blackwell.cc_major = 12;
  blackwell.cc_minor = 0;
  const Status s = w4a16.supports(make_problem(128, 128, 64, false, OutputType::bf16), blackwell);
  EXPECT_EQ(s.code, StatusCode::not_supported);
  EXPECT_NE(s.reason.find("needs wgmma (sm_90a)"), std::string::npos) << s.reason;

  const bool hopper = gpu().cc_major == 9 && gpu().cc_minor == 0;
  const Status here = w4a16.supports(make_problem(129, 200, 96, false, OutputType::f16), gpu());
  if (hopper) {
    EXPECT_TRUE(here.is_ok()) << here.reason;
  } else {
    EXPECT_EQ(here.code, StatusCode::not_supported);
    EXPECT_NE(here.reason.find("sm_90a"), std::string::npos) << here.reason;
  }
}

// A tune cache entry (fp4gap tune) for the device at hand names a plan the policy would not pick:
// both prefill backends and the dispatching one run that plan, exactly, and say so; without the
// cache they run the policy's pick again.
TEST(PrefillBackends, RunTheTunedPlanOfTheActiveCache) {
  REQUIRE_HOPPER();
  const std::int64_t m = 96, n = 256, k = 512;
  const std::string path = (std::filesystem::temp_directory_path() / "fp4gap-tuned-plan-test.json").string();
  std::uint64_t seed = 7900;
  for (const bool w4a4 : {false, true}) {
    const char* name = w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16";
    const GemmProblem p = make_problem(m, n, k, w4a4, OutputType::bf16);
    const std::vector<prefill::PlanCandidate> candidates =
        prefill::plan_candidates(m, n, k, gpu(), prefill::concurrent_ctas);
    const prefill::PlanCandidate* policy = prefill::best_candidate(candidates);
    ASSERT_NE(policy, nullptr);
    // The slowest-predicted runnable plan: surely not the policy's.
    const prefill::PlanCandidate* other = nullptr;
    for (const prefill::PlanCandidate& c : candidates) {
      if (c.status.is_ok() && (other == nullptr || c.predicted_us > other->predicted_us)) other = &c;
    }
    ASSERT_NE(other->plan.describe(), policy->plan.describe());
    tune::Entry e;
    e.device = tune::device_key(gpu());
    e.problem = tune::ProblemKey{name, m, n, k, OutputType::bf16};
    e.policy_config = policy->config.name();
    e.policy_split_k = policy->split_k;
    auto measured = [](const prefill::PlanCandidate& c, double us) {
      tune::MeasuredPlan mp;
      mp.config = c.config.name();
      mp.split_k = c.split_k;
      mp.workspace_reduction = c.plan.workspace_reduction();
      mp.passed = true;
      mp.graph_us = us;
      return mp;
    };
    e.measured = {measured(*policy, 2.0), measured(*other, 1.0)};
    tune::Cache cache;
    cache.put(e);
    cache.save(path);
    tune::use_cache_file(path);

    const GemmInputs inputs = make_gemm_inputs(p, ++seed, InputDistribution::exact_grid);
    const std::string tuned_config = backend(name).prepare(inputs, 1)->config();
    EXPECT_NE(tuned_config.find(other->plan.describe()), std::string::npos) << tuned_config;
    EXPECT_NE(tuned_config.find("tuned on this device: 1.00 us against the policy's pick's 2.00"), std::string::npos)
        << tuned_config;
    check_backend(name, p, ++seed, InputDistribution::exact_grid);
    const char* dispatching = w4a4 ? "fp4gap-w4a4" : "fp4gap-w4a16";
    const std::string dispatched = backend(dispatching).prepare(inputs, 1)->config();
    EXPECT_NE(dispatched.find(other->plan.describe()), std::string::npos) << dispatching << ": " << dispatched;
    check_backend(dispatching, p, ++seed, InputDistribution::random);

    // M = 95 has the same row tiles as 96 for every tile size (16 to 256 rows): it follows the entry
    // of 96 where the policy's plan there is one the entry measured.
    const GemmProblem p95 = make_problem(m - 1, n, k, w4a4, OutputType::bf16);
    const std::vector<prefill::PlanCandidate> at_95 =
        prefill::plan_candidates(m - 1, n, k, gpu(), prefill::concurrent_ctas);
    const prefill::Plan policy_95 =
        prefill::policy_plan(at_95, w4a4, k, prefill::activation_dequant_smem_limit(), gpu()).plan;
    const std::string neighbour =
        backend(name).prepare(make_gemm_inputs(p95, ++seed, InputDistribution::exact_grid), 1)->config();
    if (policy_95.describe() == policy->plan.describe() || policy_95.describe() == other->plan.describe()) {
      EXPECT_NE(neighbour.find(other->config.name() + ", split-k " + std::to_string(other->split_k)), std::string::npos)
          << neighbour;
      EXPECT_NE(neighbour.find("tuned on this device at M = 96 (the same tiles as at M = 95): 1.00 us"),
                std::string::npos)
          << neighbour;
    } else {
      EXPECT_EQ(neighbour.find("tuned"), std::string::npos) << "policy at M = 95: " << policy_95.describe() << "; "
                                                            << neighbour;
    }
    check_backend(name, p95, ++seed, InputDistribution::random);

    // A forced plan (fp4gap tune's) runs only on the problem it was made for.
    const prefill::Plan for_other_m = prefill::make_plan(4 * m, n, k, other->config, other->split_k, other->reduction);
    EXPECT_THROW(make_prefill_plan_backend(w4a4, for_other_m)->prepare(inputs, 1), InvalidArgument);
    EXPECT_NE(make_prefill_plan_backend(w4a4, other->plan)->prepare(inputs, 1)->config().find("plan forced by fp4gap tune"),
              std::string::npos);

    tune::clear_active_cache();
    const std::string untuned = backend(name).prepare(inputs, 1)->config();
    EXPECT_EQ(untuned.find("tuned"), std::string::npos) << untuned;
    EXPECT_EQ(untuned.find(other->plan.describe()), std::string::npos) << untuned;
  }
}

// A wide tile the policy launches plainly, which the tune cache measured faster launched
// programmatically (fp4gap tune times the policy's pick both ways): the backend runs it that way,
// says so, and computes the same result.
TEST(PrefillBackends, RunTheLaunchModeATuneCacheMeasuredFaster) {
  REQUIRE_HOPPER();
  // N = 2048 gives 16 column tiles: at these M the policy's pick is an m192 / m256 tile (one that
  // launches plainly) on the H100 and the H200 alike.
  const std::int64_t n = 2048, k = 2048;
  const std::string path = (std::filesystem::temp_directory_path() / "fp4gap-tuned-launch-test.json").string();
  std::optional<prefill::Plan> plain;
  std::int64_t m = 0;
  for (const std::int64_t candidate_m : {384, 768, 2048, 4096}) {
    const auto candidates = prefill::plan_candidates(candidate_m, n, k, gpu(), prefill::concurrent_ctas);
    const prefill::Plan pick = prefill::best_candidate(candidates)->plan;
    if (!pick.programmatic) {
      plain = pick;
      m = candidate_m;
      break;
    }
  }
  ASSERT_TRUE(plain.has_value()) << "no M of 384-4096 at N = 2048, K = 2048 where the policy launches plainly";
  tune::Entry e;
  e.device = tune::device_key(gpu());
  e.problem = tune::ProblemKey{"fp4gap-prefill-w4a16", m, n, k, OutputType::bf16};
  e.policy_config = plain->config.name();
  e.policy_split_k = plain->split_k;
  tune::MeasuredPlan as_configured;
  as_configured.config = plain->config.name();
  as_configured.split_k = plain->split_k;
  as_configured.passed = true;
  as_configured.graph_us = 2.0;
  tune::MeasuredPlan programmatic = as_configured;
  programmatic.programmatic = true;
  programmatic.graph_us = 1.0;
  e.measured = {as_configured, programmatic};
  tune::Cache cache;
  cache.put(e);
  cache.save(path);
  tune::use_cache_file(path);
  const GemmProblem p = make_problem(m, n, k, false, OutputType::bf16);
  const GemmInputs inputs = make_gemm_inputs(p, 7950, InputDistribution::exact_grid);
  const std::string config = backend("fp4gap-prefill-w4a16").prepare(inputs, 1)->config();
  EXPECT_NE(config.find(plain->describe() + ", programmatic launch"), std::string::npos) << config;
  EXPECT_NE(config.find("tuned on this device: 1.00 us against the policy's pick's 2.00"), std::string::npos) << config;
  check_backend("fp4gap-prefill-w4a16", p, 7951, InputDistribution::exact_grid);
  check_backend("fp4gap-prefill-w4a16", p, 7952, InputDistribution::random);
  tune::clear_active_cache();
  const std::string untuned = backend("fp4gap-prefill-w4a16").prepare(inputs, 1)->config();
  EXPECT_EQ(untuned.find("programmatic launch"), std::string::npos) << untuned;
}

}  // namespace
}  // namespace fp4gap
