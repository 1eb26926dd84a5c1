// The decode GEMM kernels (src/cuda/decode) and their backends against the CPU reference:
// random data within the accumulation bound, exact-grid data bit-equal, poisoned outputs, the M
// list 1..64, minimum N and K, K not a multiple of the tile, both weight layouts, both scale
// layouts, every output type, forced split-K factors, bitwise repeatable runs, graph capture.
// Needs a CUDA device; skips without one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap::decode {
namespace {

using test::gpu;
using test::repro;
using test::synchronize_within;
using test::sweep_ms_from_env;
using test::output_as_float;

constexpr OutputType kOutputs[] = {OutputType::bf16, OutputType::f16, OutputType::f32};
constexpr ScaleLayout kLayouts[] = {ScaleLayout::linear, ScaleLayout::swizzled_128x4};

GemmProblem problem_of(Math math, std::int64_t m, std::int64_t n, std::int64_t k, OutputType out) {
  return GemmProblem{m, n, k, math == Math::w4a16 ? OperandFormat::bf16 : OperandFormat::nvfp4, OperandFormat::nvfp4,
                     out};
}

// The inputs of one problem, its reference (with the float alpha the kernel multiplies by), and
// everything a launch needs on the device, in the chosen layouts.
struct Case {
  Math math;
  GemmInputs in;
  float alpha = 1.0f;
  ReferenceResult ref;

  Case(Math mth, std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, InputDistribution dist)
      : math(mth), in(make_gemm_inputs(problem_of(mth, m, n, k, OutputType::f32), seed, dist)) {
    alpha = static_cast<float>(in.alpha);
    ref = reference_gemm(in.a_view(), in.b_view(), static_cast<double>(alpha));
  }
  std::string label(const Plan& plan, OutputType out) const {
    std::ostringstream os;
    os << "m" << in.problem.m << " n" << in.problem.n << " k" << in.problem.k << " " << plan.describe() << " -> "
       << to_string(out);
    return os.str();
  }
};

struct Layouts {
  WeightLayout weight = WeightLayout::shuffled;
  ScaleLayout weight_scales = ScaleLayout::swizzled_128x4;
  ScaleLayout activation_scales = ScaleLayout::swizzled_128x4;
};

// Operands of a Case on the device.
struct DeviceCase {
  cuda::DeviceBuffer<std::uint8_t> a, a_scales, w_codes, w_scales, workspace, d;
  GemmArgs args;

  DeviceCase(const Case& c, const Plan& plan, const Layouts& l, OutputType out) {
    if (c.math == Math::w4a16) {
      a = cuda::DeviceBuffer<std::uint8_t>(c.in.a_bf16.size() * 2);
      a.upload(reinterpret_cast<const std::uint8_t*>(c.in.a_bf16.data()), a.size());
    } else {
      const Nvfp4Matrix am = with_layout(c.in.a_fp4, l.activation_scales);
      a = cuda::DeviceBuffer<std::uint8_t>(am.codes);
      a_scales = cuda::DeviceBuffer<std::uint8_t>(am.scales);
    }
    const Nvfp4Matrix wm = with_layout(c.in.b_fp4, l.weight_scales);
    if (l.weight == WeightLayout::plain) {
      w_codes = cuda::DeviceBuffer<std::uint8_t>(wm.codes);
      w_scales = cuda::DeviceBuffer<std::uint8_t>(wm.scales);
    } else {
      const ShuffledWeight s = shuffle_weight_for_decode(wm, c.math);
      w_codes = cuda::DeviceBuffer<std::uint8_t>(s.codes);
      w_scales = cuda::DeviceBuffer<std::uint8_t>(s.scales);
    }
    if (plan.workspace_bytes() > 0) {
      workspace = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(plan.workspace_bytes()));
      workspace.fill_bytes(0);
    }
    d = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(c.in.problem.m * c.in.problem.n * output_type_bytes(out)));
    args.a = a.get();
    args.a_scales = c.math == Math::w4a4 ? a_scales.get() : nullptr;
    args.a_scale_layout = l.activation_scales;
    args.w_codes = w_codes.get();
    args.w_scales = w_scales.get();
    args.w_scale_layout = l.weight_scales;
    args.alpha = c.alpha;
    args.d = d.get();
    args.out_type = out;
    args.workspace = workspace.get();
    args.workspace_bytes = static_cast<std::int64_t>(workspace.bytes());
  }

  // Poisons the output (NaN in every type), launches, returns the raw output bytes.
  std::vector<std::uint8_t> run(const Plan& plan) {
    cuda::Stream stream;
    CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, d.bytes(), stream.get()));
    launch_gemm(plan, args, stream.as_void());
    synchronize_within(stream.get());
    return d.download();
  }
};


// Launches the plan and checks the output: within the accumulation bound (random data) or equal
// to the reference rounded once (exact-grid data).
void check(const Case& c, const Plan& plan, const Layouts& l, OutputType out, std::uint64_t seed) {
  DeviceCase dc(c, plan, l, out);
  const std::vector<float> got = output_as_float(dc.run(plan), out);
  std::ostringstream what;
  what << c.label(plan, out) << " weight " << to_string(l.weight_scales) << " scales, activation "
       << to_string(l.activation_scales) << " scales, " << (c.in.distribution == InputDistribution::exact_grid ? "exact grid" : "random");
  if (c.in.distribution == InputDistribution::exact_grid) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], round_to_output(c.ref.d[i], out))
          << "element " << i << " (row " << i / c.in.problem.n << ", col " << i % c.in.problem.n << ") of "
          << repro(what.str(), seed);
    }
  } else {
    const VerifyResult v = verify_gemm_output(got.data(), c.ref, c.in.problem.k, out);
    ASSERT_TRUE(v.passed) << v.message << " for " << repro(what.str(), seed);
  }
}

// The issue's correctness list: every M of {1, 2, 3, 7, 17, 63, 64} with N in {32, 96, 2048} and
// K in {32, 96, 6144} (K = 32, 96: one partial window; 6144: many chunks and split-K), the plan
// the policy chooses, the shuffled weight and swizzled scales as users pass them.
TEST(DecodeGemm, EveryMnkOfTheIssueMatchesTheReference) {
  REQUIRE_GPU();
  std::uint64_t seed = 100;
  int out_index = 0;
  for (Math math : {Math::w4a16, Math::w4a4}) {
    for (std::int64_t m : {1, 2, 3, 7, 17, 63, 64}) {
      for (std::int64_t n : {32, 96, 2048}) {
        for (std::int64_t k : {32, 96, 6144}) {
          ++seed;
          const Case c(math, m, n, k, seed, InputDistribution::random);
          const Plan plan = choose_plan(m, n, k, math, WeightLayout::shuffled, gpu());
          check(c, plan, Layouts{}, kOutputs[out_index++ % 3], seed);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// W4A16 has no N % 32 rule: N = 1 and N = 17 (a partial 16-row tile) and K = 32.
TEST(DecodeGemm, W4a16TakesAnyN) {
  REQUIRE_GPU();
  std::uint64_t seed = 200;
  for (std::int64_t n : {1, 17, 80, 1000}) {
    for (std::int64_t m : {1, 9, 64}) {
      ++seed;
      const Case c(Math::w4a16, m, n, 160, seed, InputDistribution::random);
      for (WeightLayout wl : {WeightLayout::plain, WeightLayout::shuffled}) {
        const Plan plan = choose_plan(m, n, 160, Math::w4a16, wl, gpu());
        check(c, plan, Layouts{wl, ScaleLayout::linear, ScaleLayout::linear}, OutputType::f32, seed);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Both weight layouts x both weight scale layouts x both activation scale layouts x every
// output type, on shapes with a partial last window and one with many chunks.
TEST(DecodeGemm, EveryLayoutAndOutputTypeMatchesTheReference) {
  REQUIRE_GPU();
  struct Mnk {
    std::int64_t m, n, k;
  };
  std::uint64_t seed = 300;
  for (Math math : {Math::w4a16, Math::w4a4}) {
    for (const Mnk s : {Mnk{7, 96, 96}, Mnk{17, 2048, 6144}, Mnk{64, 160, 416}}) {
      ++seed;
      const Case c(math, s.m, s.n, s.k, seed, InputDistribution::random);
      for (WeightLayout wl : {WeightLayout::plain, WeightLayout::shuffled}) {
        const Plan plan = choose_plan(s.m, s.n, s.k, math, wl, gpu());
        for (ScaleLayout ws : kLayouts) {
          for (ScaleLayout as : kLayouts) {
            if (math == Math::w4a16 && as == ScaleLayout::linear) continue;  // no activation scales
            for (OutputType out : kOutputs) {
              check(c, plan, Layouts{wl, ws, as}, out, seed);
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Exact-grid data: every fp32 partial sum is exact whatever the order, so every configuration and
// split-K factor must give the reference rounded once, bit for bit.
TEST(DecodeGemm, ExactGridIsBitExactForEveryConfigAndSplit) {
  REQUIRE_GPU();
  struct Mnk {
    std::int64_t m, n, k;
  };
  std::uint64_t seed = 400;
  for (Math math : {Math::w4a16, Math::w4a4}) {
    for (const Mnk s : {Mnk{1, 32, 32}, Mnk{7, 96, 6144}, Mnk{17, 2048, 1056}, Mnk{64, 256, 2080}}) {
      ++seed;
      const Case c(math, s.m, s.n, s.k, seed, InputDistribution::exact_grid);
      for (int ci = 0; ci < static_cast<int>(tile_configs().size()); ++ci) {
        const TileConfig& config = tile_configs()[static_cast<std::size_t>(ci)];
        if (config.max_m() < s.m || !config.serves(WeightLayout::shuffled)) continue;
        const Plan one = make_plan(s.m, s.n, s.k, math, WeightLayout::shuffled, ci, 1);
        for (int split : {1, 2, 3, static_cast<int>(one.k_chunks)}) {
          if (split > one.k_chunks) continue;
          for (WeightLayout wl : {WeightLayout::plain, WeightLayout::shuffled}) {
            if (!config.serves(wl)) continue;
            const Plan plan = make_plan(s.m, s.n, s.k, math, wl, ci, split);
            check(c, plan, Layouts{wl, ScaleLayout::swizzled_128x4, ScaleLayout::linear}, kOutputs[split % 3], seed);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Forced split-K factors on random data stay within the bound.
TEST(DecodeGemm, ForcedSplitsMatchTheReference) {
  REQUIRE_GPU();
  std::uint64_t seed = 500;
  for (Math math : {Math::w4a16, Math::w4a4}) {
    ++seed;
    const Case c(math, 16, 2048, 6144, seed, InputDistribution::random);
    for (int ci = 0; ci < static_cast<int>(tile_configs().size()); ++ci) {
      const TileConfig& config = tile_configs()[static_cast<std::size_t>(ci)];
      if (config.max_m() < 16 || !config.serves(WeightLayout::shuffled)) continue;
      const Plan one = make_plan(16, 2048, 6144, math, WeightLayout::shuffled, ci, 1);
      for (int split : {1, 5, 8, static_cast<int>(one.k_chunks)}) {
        if (split > one.k_chunks) continue;
        const Plan plan = make_plan(16, 2048, 6144, math, WeightLayout::shuffled, ci, split);
        check(c, plan, Layouts{}, OutputType::f32, seed);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The same launch repeated (poisoned in between) gives the same bytes: the split-K counters are
// left at zero by every launch and the reduction orders (k parts, splits) are fixed. Config 6
// splits K over 2 warps per row group as well; W4A16 also runs the first streaming config that
// holds M = 16 (k parts in every warp).
TEST(DecodeGemm, RepeatedRunsAreBitwiseEqual) {
  REQUIRE_GPU();
  std::uint64_t seed = 600;
  int streaming = -1;
  for (int ci = 0; ci < static_cast<int>(tile_configs().size()) && streaming < 0; ++ci) {
    const TileConfig& config = tile_configs()[static_cast<std::size_t>(ci)];
    if (config.streaming() && config.max_m() >= 16) streaming = ci;
  }
  ASSERT_GE(streaming, 0) << "no streaming config holds M = 16";
  struct Run {
    Math math;
    int config;
    std::int64_t m;
  };
  for (const Run run : {Run{Math::w4a16, 6, 17}, Run{Math::w4a4, 6, 17}, Run{Math::w4a16, streaming, 16}}) {
    ++seed;
    const Math math = run.math;
    const Case c(math, run.m, 2048, 6144, seed, InputDistribution::random);
    for (int split : {1, 7}) {
      const Plan plan = make_plan(run.m, 2048, 6144, math, WeightLayout::shuffled, run.config, split);
      DeviceCase dc(c, plan, Layouts{}, OutputType::f32);
      const std::vector<std::uint8_t> first = dc.run(plan);
      const VerifyResult v = verify_gemm_output(output_as_float(first, OutputType::f32).data(), c.ref, 6144, OutputType::f32);
      ASSERT_TRUE(v.passed) << v.message << " for " << repro(c.label(plan, OutputType::f32), seed);
      for (int r = 0; r < 4; ++r) {
        ASSERT_EQ(dc.run(plan), first) << "run " << r + 2 << " differs: " << repro(c.label(plan, OutputType::f32), seed);
      }
      if (plan.split_k > 1) {
        const auto counters = dc.workspace.download();
        for (std::size_t i = static_cast<std::size_t>(plan.workspace_partial_floats() * 4); i < counters.size(); ++i) {
          ASSERT_EQ(counters[i], 0) << "split-K counter byte " << i << " left nonzero";
        }
      }
    }
  }
}

// launch_gemm captured into a CUDA graph and replayed.
TEST(DecodeGemm, GraphReplayMatchesTheReference) {
  REQUIRE_GPU();
  const std::uint64_t seed = 700;
  const Case c(Math::w4a16, 3, 2048, 6144, seed, InputDistribution::random);
  const Plan plan = make_plan(3, 2048, 6144, Math::w4a16, WeightLayout::shuffled, 1, 3);
  DeviceCase dc(c, plan, Layouts{}, OutputType::bf16);
  prepare_launch(plan);
  cuda::Stream stream;
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i) launch_gemm(plan, dc.args, stream.as_void());
  CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaMemsetAsync(dc.d.get(), 0xFF, dc.d.bytes(), stream.get()));
  for (int r = 0; r < 3; ++r) CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
  synchronize_within(stream.get());
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  const std::vector<float> got = output_as_float(dc.d.download(), OutputType::bf16);
  const VerifyResult v = verify_gemm_output(got.data(), c.ref, 6144, OutputType::bf16);
  ASSERT_TRUE(v.passed) << v.message << " for " << repro(c.label(plan, OutputType::bf16), seed);
}

TEST(DecodeGemm, LaunchRejectsBadArguments) {
  REQUIRE_GPU();
  const Plan plan = make_plan(4, 64, 512, Math::w4a16, WeightLayout::shuffled, 2, 2);
  GemmArgs args;
  try {
    launch_gemm(plan, args, nullptr);
    FAIL() << "null pointers accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("A (bf16 activations) is null [M = 4, N = 64, K = 512"), std::string::npos)
        << e.what();
  }
}

// ---- The backends, through the registry ----

GemmBackend* backend(const char* name) {
  register_cuda_backends();
  GemmBackend* b = find_gemm_backend(name);
  EXPECT_NE(b, nullptr) << name << " is not registered";
  return b;
}

TEST(DecodeBackends, SupportSaysWhyNot) {
  REQUIRE_GPU();
  for (const char* name : {"fp4gap-decode-w4a16", "fp4gap-decode-w4a4"}) {
    GemmBackend* b = backend(name);
    ASSERT_NE(b, nullptr);
    const Math math = std::string(name).find("w4a16") != std::string::npos ? Math::w4a16 : Math::w4a4;
    EXPECT_TRUE(b->supports(problem_of(math, 64, 4096, 6144, OutputType::bf16), gpu()).is_ok()) << name;
    const Status big = b->supports(problem_of(math, 65, 4096, 6144, OutputType::bf16), gpu());
    EXPECT_EQ(big.code, StatusCode::not_supported) << name;
    EXPECT_NE(big.reason.find("decode kernel serves M <= 64"), std::string::npos) << big.reason;
    GemmProblem wrong = problem_of(math, 4, 64, 64, OutputType::bf16);
    wrong.a_format = math == Math::w4a16 ? OperandFormat::nvfp4 : OperandFormat::bf16;
    EXPECT_EQ(b->supports(wrong, gpu()).code, StatusCode::not_supported) << name;
  }
  EXPECT_EQ(backend("fp4gap-decode-w4a4")->supports(problem_of(Math::w4a4, 4, 48, 64, OutputType::f16), gpu()).code,
            StatusCode::invalid_problem);
}

// prepare() on two input sets, poison, run each set, verify against the runner's own operands.
TEST(DecodeBackends, RunnersMatchTheReferenceOnEverySet) {
  REQUIRE_GPU();
  std::uint64_t seed = 800;
  for (const char* name : {"fp4gap-decode-w4a16", "fp4gap-decode-w4a4"}) {
    GemmBackend* b = backend(name);
    ASSERT_NE(b, nullptr);
    const Math math = std::string(name).find("w4a16") != std::string::npos ? Math::w4a16 : Math::w4a4;
    for (OutputType out : kOutputs) {
      ++seed;
      const GemmProblem p = problem_of(math, 5, 2048, 6144, out);
      ASSERT_TRUE(b->supports(p, gpu()).is_ok());
      const GemmInputs in = make_gemm_inputs(p, seed);
      auto runner = b->prepare(in, 2);
      ASSERT_EQ(runner->input_sets(), 2);
      EXPECT_FALSE(runner->config().empty());
      const ReferenceResult ref = reference_gemm(runner->a_operand(), runner->b_operand(), runner->alpha());
      runner->poison_output();
      for (int set = 0; set < 2; ++set) {
        const std::vector<float> poisoned = runner->read_output(set);
        EXPECT_TRUE(poisoned[0] != poisoned[0]) << "poison_output left a number in set " << set;
      }
      cuda::Stream stream;
      for (int set = 0; set < 2; ++set) runner->run(set, stream.as_void());
      synchronize_within(stream.get());
      for (int set = 0; set < 2; ++set) {
        const std::vector<float> got = runner->read_output(set);
        const VerifyResult v = verify_gemm_output(got.data(), ref, p.k, out);
        ASSERT_TRUE(v.passed) << v.message << " for " << repro(std::string(name) + " set " + std::to_string(set) + " " +
                                                                   runner->config(), seed);
      }
    }
  }
}

// ---- Tuning data (not a check): run with --gtest_also_run_disabled_tests ----

// Every configuration and a range of split-K factors on the issue's shapes, graph-timed over
// rotated weight copies (cold weights), printed beside the policy's choice and its model estimate:
// the data to refit the cost model in src/tune/decode_plan.cpp (docs/KERNELS-decode.md).
// FP4GAP_SWEEP_FAMILY=streaming sweeps only the streaming configs (both maths), =register-w4a4 only
// the register-prefetch configs with W4A4, both at M = 1, 4, 8, 16 (the policy's fits).
// FP4GAP_SWEEP_AFTER=quantize times every W4A4 plan behind fp4gap's NVFP4 quantizer, less the
// quantizer alone: the order of a W4A4 layer in a serving graph (`fp4gap gemm --after quantize`),
// where the policy, fit back to back, missed by ~3 us at 8192^2 M = 12 (PERF-LOG run 94); =norm
// and =norm-pdl every W4A16 plan behind the stand-in norm writing its activations (`--after`'s).
// Behind a predecessor that lets it (quantize, norm-pdl) the plan launches programmatically; the
// other math is left out. FP4GAP_SWEEP_M=1,12 replaces the list of M. FP4GAP_SWEEP_CSV=FILE also
// writes every plan as a row of docs/data/decode-sweep-*.csv (the format the cost fit's host test
// reads: math, m, n, k, family, tile "nR mM kC", warps, split, graph_us, model_us, policy_pick).
TEST(DecodeGemm, DISABLED_SweepConfigsAndSplits) {
  REQUIRE_GPU();
  const char* family_env = std::getenv("FP4GAP_SWEEP_FAMILY");
  const std::string family = family_env != nullptr ? family_env : "";
  const bool only_streaming = family == "streaming", only_register_w4a4 = family == "register-w4a4";
  const char* after_env = std::getenv("FP4GAP_SWEEP_AFTER");
  const Predecessor after = after_env != nullptr ? parse_predecessor(after_env) : Predecessor::itself;
  const bool after_quantizer = after == Predecessor::quantize;
  const bool after_norm = after == Predecessor::norm || after == Predecessor::norm_pdl;
  std::ofstream csv;
  if (const char* path = std::getenv("FP4GAP_SWEEP_CSV")) {
    csv.open(path);
    ASSERT_TRUE(csv.good()) << "FP4GAP_SWEEP_CSV: cannot write " << path;
    csv << "math,m,n,k,family,tile,warps,split,graph_us,model_us,policy_pick\n";
  }
  std::optional<DeviceQuantizeWorkspace> quantize_workspace;
  if (after_quantizer) quantize_workspace.emplace();
  const std::string after_note =
      after == Predecessor::itself
          ? ""
          : "; behind " + std::string(predecessor_description(after)) +
                (predecessor_allows_early_launch(after) ? ", launched programmatically" : "") + ", less it";
  const std::vector<std::int64_t> ms = sweep_ms_from_env(only_streaming || only_register_w4a4
                                                              ? std::vector<std::int64_t>{1, 4, 8, 16}
                                                              : std::vector<std::int64_t>{1, 8, 16, 32, 64});
  struct Nk {
    std::int64_t n, k;
  };
  for (Math math : {Math::w4a16, Math::w4a4}) {
    if ((only_register_w4a4 || after_quantizer) && math != Math::w4a4) continue;
    if (after_norm && math != Math::w4a16) continue;
    for (const Nk s : {Nk{2048, 6144}, Nk{4096, 6144}, Nk{6144, 2048}, Nk{8192, 8192}}) {
      for (const std::int64_t m : ms) {
        const GemmInputs in = make_gemm_inputs(problem_of(math, m, s.n, s.k, OutputType::bf16), 1);
        const ShuffledWeight w = shuffle_weight_for_decode(in.b_fp4, math);
        const double weight_bytes = static_cast<double>(w.codes.size() + w.scales.size());
        const int sets = input_sets_for_cold_cache(weight_bytes, gpu().l2_bytes, 64);
        const std::size_t stride = (w.codes.size() + w.scales.size() + 255) / 256 * 256;
        cuda::DeviceBuffer<std::uint8_t> weights(stride * static_cast<std::size_t>(sets));
        for (int i = 0; i < sets; ++i) {
          CUDA_CHECK(cudaMemcpy(weights.get() + stride * i, w.codes.data(), w.codes.size(), cudaMemcpyHostToDevice));
          CUDA_CHECK(cudaMemcpy(weights.get() + stride * i + w.codes.size(), w.scales.data(), w.scales.size(),
                                cudaMemcpyHostToDevice));
        }
        cuda::DeviceBuffer<std::uint8_t> a, a_scales, norm_source;
        if (math == Math::w4a16) {
          a = cuda::DeviceBuffer<std::uint8_t>(in.a_bf16.size() * 2);
          a.upload(reinterpret_cast<const std::uint8_t*>(in.a_bf16.data()), a.size());
          if (after_norm) {  // the norm rewrites the activations with their own values, as --after norm does
            norm_source = cuda::DeviceBuffer<std::uint8_t>(a.size());
            norm_source.upload(reinterpret_cast<const std::uint8_t*>(in.a_bf16.data()), a.size());
          }
        } else {
          const Nvfp4Matrix am = with_layout(in.a_fp4, ScaleLayout::swizzled_128x4);
          a = cuda::DeviceBuffer<std::uint8_t>(am.codes);
          a_scales = cuda::DeviceBuffer<std::uint8_t>(am.scales);
        }
        cuda::DeviceBuffer<std::uint8_t> d(static_cast<std::size_t>(m * s.n * 2));
        // The quantizer's own buffers (0x3F3F: 0.746 in bf16), not the GEMM's input.
        cuda::DeviceBuffer<std::uint8_t> q_in, q_codes, q_scales;
        Timing predecessor;  // zero unless timed
        const auto run_predecessor = [&](void* stream) {
          if (after_quantizer) {
            quantize_nvfp4_device(q_in.get(), ElementType::bf16, m, s.k, ScaleLayout::swizzled_128x4, 1.0f,
                                  q_codes.get(), q_scales.get(), *quantize_workspace, stream);
          } else if (after_norm) {
            launch_norm_stand_in(reinterpret_cast<const std::uint16_t*>(norm_source.get()),
                                 reinterpret_cast<std::uint16_t*>(a.get()), m * s.k, after == Predecessor::norm_pdl, gpu(),
                                 stream);
          }
        };
        if (after_quantizer) {
          q_in = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(m * s.k * 2));
          q_in.fill_bytes(0x3F);
          q_codes = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(m * s.k / 2));
          q_scales = cuda::DeviceBuffer<std::uint8_t>(
              static_cast<std::size_t>(scale_shape(ScaleLayout::swizzled_128x4, m, s.k).bytes()));
        }
        if (after != Predecessor::itself) {
          predecessor = time_launch([&](int, void* stream) { run_predecessor(stream); }, sets, gpu(), TimingOptions{});
        }
        const Plan chosen = choose_plan(m, s.n, s.k, math, WeightLayout::shuffled, gpu());
        const double floor_us = weight_bytes / 4.27e6;
        std::printf("\n%s m%lld n%lld k%lld: weight floor %.2f us at 4.27 TB/s, %d weight sets; policy: %s%s\n",
                    std::string(to_string(math)).c_str(), static_cast<long long>(m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), floor_us, sets, chosen.describe().c_str(),
                    after_note.c_str());
        for (int ci = 0; ci < static_cast<int>(tile_configs().size()); ++ci) {
          const TileConfig& config = tile_configs()[static_cast<std::size_t>(ci)];
          if (config.max_m() < m || !config.serves(WeightLayout::shuffled)) continue;
          if ((only_streaming && !config.streaming()) || (only_register_w4a4 && config.streaming())) continue;
          const Plan one = make_plan(m, s.n, s.k, math, WeightLayout::shuffled, ci, 1);
          for (int split = 1; split <= one.k_chunks; split = next_swept_split(split)) {
            const Plan plan = make_plan(m, s.n, s.k, math, WeightLayout::shuffled, ci, split);
            cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(std::max<std::int64_t>(plan.workspace_bytes(), 256)));
            workspace.fill_bytes(0);
            GemmArgs args;
            args.a = a.get();
            args.a_scales = a_scales.get();
            args.d = d.get();
            args.alpha = static_cast<float>(in.alpha);
            args.out_type = OutputType::bf16;
            args.workspace = workspace.get();
            args.workspace_bytes = static_cast<std::int64_t>(workspace.bytes());
            args.programmatic_launch = predecessor_allows_early_launch(after);
            Timing t = time_launch(
                [&](int set, void* stream) {
                  run_predecessor(stream);
                  GemmArgs x = args;
                  x.w_codes = weights.get() + stride * static_cast<std::size_t>(set);
                  x.w_scales = x.w_codes + w.codes.size();
                  launch_gemm(plan, x, stream);
                },
                sets, gpu(), TimingOptions{});
            t.graph.median_us -= predecessor.graph.median_us;
            t.event.median_us -= predecessor.event.median_us;
            const bool picked = plan.config_index == chosen.config_index && plan.split_k == chosen.split_k;
            const double model_us = estimate_plan_us(plan, gpu());
            std::printf("  %s%-118s graph %7.2f us (%5.1f%% of floor)  event %7.2f us  model %6.2f us\n",
                        picked ? "* " : "  ", plan.describe().c_str(), t.graph.median_us,
                        100.0 * floor_us / t.graph.median_us, t.event.median_us, model_us);
            if (csv.is_open()) {
              char row[256];
              std::snprintf(row, sizeof row, "%s,%lld,%lld,%lld,%s,%s,%d,%d,%.2f,%.2f,%d\n",
                            std::string(to_string(math)).c_str(), static_cast<long long>(m),
                            static_cast<long long>(s.n), static_cast<long long>(s.k),
                            config.streaming() ? "streaming" : "register", config.tile().c_str(), config.warps,
                            plan.split_k, t.graph.median_us, model_us, picked ? 1 : 0);
              csv << row;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fp4gap::decode
