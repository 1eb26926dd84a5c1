// The cuBLAS baselines against the CPU reference, on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::check_backend;
using test::gpu;

GemmBackend& backend(const char* name) { return test::registered_backend(name); }

struct Case {
  OperandFormat a, b;
  OutputType out;
};
const Case kCases[] = {
    {OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::bf16},
    {OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::f32},
    {OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::f16},
    {OperandFormat::bf16, OperandFormat::nvfp4, OutputType::bf16},
    {OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f32},
    {OperandFormat::bf16, OperandFormat::bf16, OutputType::bf16},
    {OperandFormat::bf16, OperandFormat::bf16, OutputType::f32},
};
const std::int64_t kRows[] = {1, 7, 64, 129};

GemmProblem problem(std::int64_t m, const Case& c) {
  GemmProblem p;
  p.m = m;
  p.n = 256;
  p.k = 512;
  p.a_format = c.a;
  p.b_format = c.b;
  p.out_type = c.out;
  return p;
}

TEST(CublasBf16, MatchesReferenceOnSmallAndOddShapes) {
  REQUIRE_GPU();
  std::uint64_t seed = 1000;
  for (const Case& c : kCases) {
    for (std::int64_t m : kRows) {
      check_backend("cublas-bf16", problem(m, c), ++seed, InputDistribution::random);
    }
  }
}

TEST(CublasBf16, ExactGridInputs) {
  REQUIRE_GPU();
  check_backend("cublas-bf16", problem(129, kCases[1]), 77, InputDistribution::exact_grid);
}

TEST(CublasBf16, Fp16OutputNeedsNvfp4Operands) {
  REQUIRE_GPU();
  const Status s = backend("cublas-bf16").supports(problem(64, {OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f16}), gpu());
  EXPECT_EQ(s.code, StatusCode::not_supported);
  EXPECT_NE(s.reason.find("FP16"), std::string::npos) << s.reason;
}

// dequant-cublas-bf16: the NVFP4 operands' formats and the outputs cuBLAS writes from bf16.
const Case kDequantCases[] = {
    {OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::bf16},
    {OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::f32},
    {OperandFormat::bf16, OperandFormat::nvfp4, OutputType::bf16},
    {OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f32},
};

TEST(DequantCublasBf16, MatchesReferenceOnSmallAndOddShapes) {
  REQUIRE_GPU();
  std::uint64_t seed = 3000;
  for (const Case& c : kDequantCases) {
    for (std::int64_t m : kRows) check_backend("dequant-cublas-bf16", problem(m, c), ++seed, InputDistribution::random);
    // The smallest K NVFP4 allows (two scale blocks per row); N as small as each format allows.
    GemmProblem small = problem(3, c);
    small.n = c.a == OperandFormat::nvfp4 ? 32 : 40;
    small.k = 32;
    check_backend("dequant-cublas-bf16", small, ++seed, InputDistribution::random);
  }
}

// Exact-grid inputs: every partial sum is exact in fp32, so cuBLAS on the dequantized scratch must
// give the reference rounded once, bit for bit; a pass that dropped a scale or a sign would not.
TEST(DequantCublasBf16, ExactGridEqualsTheRoundedReference) {
  REQUIRE_GPU();
  std::uint64_t seed = 3100;
  for (const Case& c : kDequantCases) {
    const GemmProblem p = problem(129, c);
    check_backend("dequant-cublas-bf16", p, ++seed, InputDistribution::exact_grid,
                  [&](const std::vector<float>& got, const ReferenceResult& ref) { test::expect_exact(got, ref, p.out_type); });
  }
}

// Each run rewrites the scratch that the one before left: a run after runs on either set gives
// the same bits again, and writes an output that was poisoned in between.
TEST(DequantCublasBf16, RepeatedRunsAreBitwiseEqual) {
  REQUIRE_GPU();
  const GemmProblem p = problem(64, kDequantCases[0]);
  SCOPED_TRACE(test::repro("backend dequant-cublas-bf16, " + p.label(), 11));
  auto runner = backend("dequant-cublas-bf16").prepare(make_gemm_inputs(p, 11), 2);
  cuda::Stream stream;
  runner->run(0, stream.as_void());
  runner->run(1, stream.as_void());
  const std::vector<float> first = runner->read_output(0);
  runner->poison_output();
  runner->run(1, stream.as_void());
  runner->run(0, stream.as_void());
  const std::vector<float> again = runner->read_output(0);
  ASSERT_EQ(first.size(), again.size());
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < first.size(); ++i) differ += float_bits(first[i]) != float_bits(again[i]) ? 1 : 0;
  EXPECT_EQ(differ, 0);
  EXPECT_FALSE(std::isnan(again[0]));
}

TEST(DequantCublasBf16, SaysWhatItCannotRun) {
  REQUIRE_GPU();
  GemmBackend& b = backend("dequant-cublas-bf16");
  const Status f16 = b.supports(problem(64, kCases[2]), gpu());
  EXPECT_EQ(f16.code, StatusCode::not_supported);
  EXPECT_NE(f16.reason.find("FP16"), std::string::npos) << f16.reason;
  const Status bf16_weight = b.supports(problem(64, kCases[5]), gpu());
  EXPECT_EQ(bf16_weight.code, StatusCode::not_supported);
  EXPECT_NE(bf16_weight.reason.find("nvfp4 weight"), std::string::npos) << bf16_weight.reason;
}

TEST(CublasLtFp8, MatchesReferenceOfItsOwnOperands) {
  REQUIRE_GPU();
  std::uint64_t seed = 2000;
  for (const Case& c : kCases) {
    for (std::int64_t m : kRows) {
      check_backend("cublaslt-fp8", problem(m, c), ++seed, InputDistribution::random);
    }
  }
}

TEST(CublasLtFp8, OperandsAreE4m3WithAlphaCarryingTheScales) {
  REQUIRE_GPU();
  const GemmProblem p = problem(7, kCases[0]);
  const GemmInputs inputs = make_gemm_inputs(p, 31);
  auto runner = backend("cublaslt-fp8").prepare(inputs, 1);
  const OperandView a = runner->a_operand();
  const OperandView b = runner->b_operand();
  EXPECT_EQ(a.format, OperandFormat::e4m3);
  EXPECT_EQ(b.format, OperandFormat::e4m3);
  EXPECT_EQ(a.rows, p.m);
  EXPECT_EQ(b.rows, p.n);
  // Scales 448/amax put the largest |code| at 448 (0x7E), and no code is the NaN byte.
  bool a_reaches_max = false;
  for (std::int64_t i = 0; i < p.m * p.k; ++i) {
    EXPECT_NE(a.codes[i] & 0x7F, 0x7F) << "NaN code at A[" << i << "]";
    a_reaches_max = a_reaches_max || (a.codes[i] & 0x7F) == 0x7E;
  }
  EXPECT_TRUE(a_reaches_max);
  // alpha folds in the dequantization scales 1/sa and 1/sb (float32 each), sa = 448/amax(A).
  const auto per_tensor_scale = [](const std::vector<std::uint16_t>& v) {
    float amax = 0.0f;
    for (std::uint16_t h : v) amax = std::max(amax, std::fabs(bf16_to_float(h)));
    return 448.0f / amax;
  };
  // cuBLASLt takes alpha as a float, so the runner reports the float-rounded alpha.
  const double expected_alpha = static_cast<double>(static_cast<float>(inputs.alpha)) *
                                static_cast<double>(1.0f / per_tensor_scale(inputs.a_bf16)) *
                                static_cast<double>(1.0f / per_tensor_scale(inputs.b_bf16));
  EXPECT_EQ(runner->alpha(), expected_alpha);
  EXPECT_EQ(runner->tensor_core_error_bound(), 0x1p-9);
}

TEST(CublasLtNvfp4, AnswersBySmVersion) {
  REQUIRE_GPU();
  const GemmProblem p = problem(64, kCases[0]);
  const Status s = backend("cublaslt-nvfp4").supports(p, gpu());
  if (gpu().cc_major < 10) {
    EXPECT_EQ(s.code, StatusCode::not_supported);
    EXPECT_NE(s.reason.find("sm_100"), std::string::npos) << s.reason;
    EXPECT_NE(s.reason.find("cuBLASLt"), std::string::npos) << s.reason;
  } else {
    std::uint64_t seed = 3000;
    for (const Case& c : kCases) {
      if (c.a != OperandFormat::nvfp4 || c.b != OperandFormat::nvfp4) continue;
      for (std::int64_t m : kRows) check_backend("cublaslt-nvfp4", problem(m, c), ++seed, InputDistribution::random);
    }
  }
}

TEST(CublasLtNvfp4, RejectsNonNvfp4Operands) {
  REQUIRE_GPU();
  const Status s = backend("cublaslt-nvfp4").supports(problem(64, kCases[3]), gpu());
  EXPECT_EQ(s.code, StatusCode::not_supported);
  EXPECT_NE(s.reason.find("nvfp4"), std::string::npos) << s.reason;
}

TEST(CublasBackends, PoisonedOutputIsDetectedWhenRunIsSkipped) {
  REQUIRE_GPU();
  for (const char* name : {"cublas-bf16", "cublaslt-fp8", "dequant-cublas-bf16"}) {
    for (OutputType out : {OutputType::bf16, OutputType::f16, OutputType::f32}) {
      if (out == OutputType::f16 && std::string(name) == "dequant-cublas-bf16") continue;  // not supported
      const GemmProblem p = problem(7, {OperandFormat::nvfp4, OperandFormat::nvfp4, out});
      SCOPED_TRACE(test::repro(std::string("backend ") + name + ", " + p.label(), 5));
      auto runner = backend(name).prepare(make_gemm_inputs(p, 5), 1);
      cuda::Stream stream;
      runner->run(0, stream.as_void());  // a good output first, then poison over it
      runner->poison_output();
      const std::vector<float> got = runner->read_output(0);
      const ReferenceResult ref = reference_gemm(runner->a_operand(), runner->b_operand(), runner->alpha());
      const VerifyResult v = verify_gemm_output(got.data(), ref, p.k, p.out_type);
      EXPECT_FALSE(v.passed);
      EXPECT_EQ(v.non_finite, p.m * p.n);
    }
  }
}

TEST(CublasBackends, BadArgumentsAreRejected) {
  REQUIRE_GPU();
  const GemmProblem p = problem(7, kCases[0]);
  const GemmInputs inputs = make_gemm_inputs(p, 9);
  EXPECT_THROW(backend("cublas-bf16").prepare(inputs, 0), InvalidArgument);
  auto runner = backend("cublas-bf16").prepare(inputs, 2);
  cuda::Stream stream;
  EXPECT_THROW(runner->run(2, stream.as_void()), InvalidArgument);
  EXPECT_THROW(runner->run(-1, stream.as_void()), InvalidArgument);
  EXPECT_THROW(runner->read_output(2), InvalidArgument);
}

TEST(CublasBackends, NoDeviceMeansNotSupportedWithTheReason) {
  DeviceContext none;
  none.unavailable_reason = "no CUDA device: test";
  for (const char* name : {"cublas-bf16", "cublaslt-fp8", "cublaslt-nvfp4", "dequant-cublas-bf16"}) {
    const Status s = backend(name).supports(problem(64, kCases[0]), none);
    EXPECT_EQ(s.code, StatusCode::not_supported) << name;
    EXPECT_EQ(s.reason, none.unavailable_reason) << name;
  }
}

TEST(CublasBackends, InvalidProblemIsInvalid) {
  GemmProblem p = problem(64, kCases[0]);
  p.k = 100;
  for (const char* name : {"cublas-bf16", "cublaslt-fp8", "cublaslt-nvfp4", "dequant-cublas-bf16"}) {
    EXPECT_EQ(backend(name).supports(p, gpu()).code, StatusCode::invalid_problem) << name;
  }
}

TEST(DeviceQuery, FillsEveryField) {
  REQUIRE_GPU();
  const DeviceContext& d = gpu();
  EXPECT_EQ(d.ordinal, 0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GE(d.cc_major, 7);
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GT(d.smem_per_block_optin, 48 * 1024);
  EXPECT_GT(d.l2_bytes, 0);
  EXPECT_GT(d.global_mem_bytes, d.l2_bytes);
  EXPECT_GT(d.sm_clock_mhz, 100);
  EXPECT_FALSE(d.driver_version.empty());
  EXPECT_FALSE(d.runtime_version.empty());
  EXPECT_FALSE(d.cublas_version.empty());
  EXPECT_NE(d.cublas_version, "unknown");
  EXPECT_TRUE(d.unavailable_reason.empty());
}

TEST(DeviceQuery, MissingOrdinalIsReportedNotThrown) {
  REQUIRE_GPU();
  const DeviceContext d = query_device(4096);
  EXPECT_FALSE(d.available);
  EXPECT_NE(d.unavailable_reason.find("4096"), std::string::npos) << d.unavailable_reason;
  EXPECT_FALSE(d.runtime_version.empty());
}

TEST(DeviceQuery, NeverThrowsAndExplainsAbsence) {
  // Holds on any machine: with or without a driver and a GPU.
  for (int ordinal : {0, 1, -1}) {
    DeviceContext d;
    ASSERT_NO_THROW(d = query_device(ordinal));
    EXPECT_EQ(d.ordinal, ordinal);
    EXPECT_EQ(d.available, d.unavailable_reason.empty()) << d.unavailable_reason;
    if (!d.available) {
      EXPECT_NE(d.unavailable_reason.find("no CUDA device"), std::string::npos) << d.unavailable_reason;
    }
  }
}

TEST(Registration, IsIdempotent) {
  register_cuda_backends();
  const std::size_t count = gemm_backends().size();
  EXPECT_NO_THROW(register_cuda_backends());
  EXPECT_EQ(gemm_backends().size(), count);
  for (const char* name : {"cublas-bf16", "cublaslt-fp8", "cublaslt-nvfp4", "dequant-cublas-bf16"}) {
    ASSERT_NE(find_gemm_backend(name), nullptr) << name;
    EXPECT_FALSE(find_gemm_backend(name)->description().empty()) << name;
  }
}

}  // namespace
}  // namespace fp4gap
