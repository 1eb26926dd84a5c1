#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/verify.hpp"

namespace fp4gap {
namespace {

struct Case {
  GemmProblem problem;
  std::uint64_t seed;
  ReferenceResult ref;
  std::vector<float> out;  // the reference rounded to the output type: a correct kernel's output

  std::string repro() const {
    return "problem " + problem.label() + ", seed " + std::to_string(seed) +
           "; repro: fp4gap_host_tests --gtest_filter=" +
           ::testing::UnitTest::GetInstance()->current_test_suite()->name() + "." +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
};

Case make_case(OutputType out, std::uint64_t seed = 3) {
  Case c;
  c.problem.m = 17;
  c.problem.n = 64;
  c.problem.k = 160;
  c.problem.out_type = out;
  c.seed = seed;
  const GemmInputs in = make_gemm_inputs(c.problem, seed);
  c.ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
  for (double v : c.ref.d) c.out.push_back(round_to_output(v, out));
  return c;
}

ReferenceResult one_element(double d, double abs_sum) {
  ReferenceResult r;
  r.m = 1;
  r.n = 1;
  r.d = {d};
  r.abs_sum = {abs_sum};
  return r;
}

TEST(ElementTolerance, FormulaByHand) {
  // bf16, ref 2, abs_sum 3, k 1024: 2 * 2^-8 + gamma * 3 with k*u = 2^10 * 2^-24 = 2^-14 and
  // gamma = 2^-14 / (1 - 2^-14) = 1 / (2^14 - 1) = 1/16383.
  EXPECT_DOUBLE_EQ(element_tolerance(2.0, 3.0, 1024, OutputType::bf16), 2.0 / 256.0 + 3.0 / 16383.0);
  // f32, ref -4, abs_sum 4, k 1: |-4| * 2^-24 + 2^-24 / (1 - 2^-24) * 4 = 4 * 2^-24 + 4 / (2^24 - 1).
  EXPECT_DOUBLE_EQ(element_tolerance(-4.0, 4.0, 1, OutputType::f32), 4.0 * 0x1p-24 + 4.0 / (16777216.0 - 1.0));
  // f16, ref 1, abs_sum 0: only the output rounding, 2^-11.
  EXPECT_DOUBLE_EQ(element_tolerance(1.0, 0.0, 32, OutputType::f16), 0x1p-11);
  // ref 0, abs_sum 10, k 6144 (f16): gamma(6144) * 10 with k*u = 6144 / 2^24 = 3/8192:
  // (3/8192) / (1 - 3/8192) = 3 / 8189.
  EXPECT_DOUBLE_EQ(element_tolerance(0.0, 10.0, 6144, OutputType::f16), 30.0 / 8189.0);
}

TEST(VerifyGemmOutput, PassesTheRoundedReference) {
  for (OutputType out : {OutputType::f32, OutputType::bf16, OutputType::f16}) {
    const Case c = make_case(out);
    SCOPED_TRACE(c.repro());
    const VerifyResult v = verify_gemm_output(c.out.data(), c.ref, c.problem.k, out);
    EXPECT_TRUE(v.passed) << v.message;
    EXPECT_EQ(v.checked, 17 * 64);
    EXPECT_EQ(v.mismatches, 0);
    EXPECT_EQ(v.non_finite, 0);
    EXPECT_EQ(v.first_bad, -1);
    EXPECT_FALSE(v.all_zero);
    EXPECT_TRUE(v.message.empty());
    // A correct output is at most half an output ulp away.
    EXPECT_LE(v.max_rel_error, out == OutputType::bf16 ? 0x1p-8 : out == OutputType::f16 ? 0x1p-11 : 0x1p-24);
  }
}

TEST(VerifyGemmOutput, CatchesOnePerturbedElement) {
  for (OutputType out : {OutputType::f32, OutputType::bf16, OutputType::f16}) {
    Case c = make_case(out);
    SCOPED_TRACE(c.repro());
    const std::size_t bad = 5 * 64 + 7;  // row 5, col 7
    const double tol = element_tolerance(c.ref.d[bad], c.ref.abs_sum[bad], c.problem.k, out);
    c.out[bad] = static_cast<float>(c.ref.d[bad] + 3.0 * tol);
    const VerifyResult v = verify_gemm_output(c.out.data(), c.ref, c.problem.k, out);
    EXPECT_FALSE(v.passed);
    EXPECT_EQ(v.mismatches, 1);
    EXPECT_EQ(v.non_finite, 0);
    EXPECT_EQ(v.first_bad, static_cast<std::int64_t>(bad));
    EXPECT_NE(v.message.find("(row 5, col 7)"), std::string::npos) << v.message;
    EXPECT_NE(v.message.find("tolerance"), std::string::npos) << v.message;
    EXPECT_EQ(v.message.find('\n'), std::string::npos) << v.message;
    EXPECT_GE(v.max_abs_error, 2.0 * tol);
  }
}

TEST(VerifyGemmOutput, JustInsideAndJustOutsideTheTolerance) {
  // ref 1, abs_sum 1, k 32, f32: tol = 2^-24 + gamma(32) = 2^-24 + 2^-19 / (1 - 2^-19).
  const ReferenceResult r = one_element(1.0, 1.0);
  const float within = 1.0f + 8 * 0x1p-23f;    // 2^-20 away: inside
  const float outside = 1.0f + 32 * 0x1p-23f;  // 2^-18 away: outside
  EXPECT_TRUE(verify_gemm_output(&within, r, 32, OutputType::f32).passed);
  EXPECT_FALSE(verify_gemm_output(&outside, r, 32, OutputType::f32).passed);
}

TEST(VerifyGemmOutput, CatchesNaNAndInf) {
  for (float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()}) {
    Case c = make_case(OutputType::bf16);
    SCOPED_TRACE(c.repro() + ", poison " + std::to_string(poison));
    c.out[2 * 64 + 63] = poison;  // row 2, col 63
    const VerifyResult v = verify_gemm_output(c.out.data(), c.ref, c.problem.k, OutputType::bf16);
    EXPECT_FALSE(v.passed);
    EXPECT_EQ(v.non_finite, 1);
    EXPECT_EQ(v.mismatches, 1);
    EXPECT_EQ(v.first_bad, 2 * 64 + 63);
    EXPECT_NE(v.message.find("(row 2, col 63)"), std::string::npos) << v.message;
    EXPECT_NE(v.message.find("non-finite"), std::string::npos) << v.message;
  }
}

TEST(VerifyGemmOutput, PoisonedOutputFailsEverywhere) {
  const Case c = make_case(OutputType::bf16);
  SCOPED_TRACE(c.repro());
  const std::vector<float> poisoned(c.out.size(), std::numeric_limits<float>::quiet_NaN());
  const VerifyResult v = verify_gemm_output(poisoned.data(), c.ref, c.problem.k, OutputType::bf16);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.non_finite, static_cast<std::int64_t>(c.out.size()));
  EXPECT_EQ(v.first_bad, 0);
}

TEST(VerifyGemmOutput, CatchesAllZeroOutput) {
  const Case c = make_case(OutputType::f32);
  SCOPED_TRACE(c.repro());
  const std::vector<float> zeros(c.out.size(), 0.0f);
  const VerifyResult v = verify_gemm_output(zeros.data(), c.ref, c.problem.k, OutputType::f32);
  EXPECT_FALSE(v.passed);
  EXPECT_TRUE(v.all_zero);
  EXPECT_NE(v.message.find("all zero"), std::string::npos) << v.message;
  EXPECT_GE(v.first_bad, 0);
}

TEST(VerifyGemmOutput, ZeroOutputOfZeroReferencePasses) {
  ReferenceResult r;
  r.m = 2;
  r.n = 2;
  r.d.assign(4, 0.0);
  r.abs_sum.assign(4, 0.0);
  const std::vector<float> zeros(4, 0.0f);
  const VerifyResult v = verify_gemm_output(zeros.data(), r, 32, OutputType::bf16);
  EXPECT_TRUE(v.passed) << v.message;
  EXPECT_FALSE(v.all_zero);
  // With nothing to accumulate the tolerance is zero: any non-zero output is wrong.
  const std::vector<float> tiny{0.0f, 0.0f, 0x1p-140f, 0.0f};
  const VerifyResult w = verify_gemm_output(tiny.data(), r, 32, OutputType::bf16);
  EXPECT_FALSE(w.passed);
  EXPECT_EQ(w.first_bad, 2);
  EXPECT_NE(w.message.find("(row 1, col 0)"), std::string::npos) << w.message;
}

TEST(VerifyGemmOutput, RejectsAMalformedReference) {
  ReferenceResult r = one_element(1.0, 1.0);
  r.n = 2;  // d holds one value for a [1, 2] result
  const float got[2] = {1.0f, 1.0f};
  EXPECT_THROW(verify_gemm_output(got, r, 32, OutputType::f32), InvalidArgument);
}

TEST(Verify, TensorCoreErrorWidensTheBoundByItsShareOfTheAbsoluteSum) {
  // k = 512, abs_sum 64, f32 output, ref 1: 1 * 2^-24 + (512*2^-24/(1-512*2^-24) + 2^-9) * 64.
  const double ku = 512.0 * 0x1p-24;
  const double expected = 0x1p-24 + (ku / (1.0 - ku) + 0x1p-9) * 64.0;
  EXPECT_DOUBLE_EQ(element_tolerance(1.0, 64.0, 512, OutputType::f32, 0x1p-9), expected);
  // An error of 2^-10 * abs_sum fails the float32 bound and passes the widened one.
  ReferenceResult ref;
  ref.m = 1;
  ref.n = 1;
  ref.d = {1.0};
  ref.abs_sum = {64.0};
  const float got = static_cast<float>(1.0 + 64.0 * 0x1p-10);
  EXPECT_FALSE(verify_gemm_output(&got, ref, 512, OutputType::f32).passed);
  EXPECT_TRUE(verify_gemm_output(&got, ref, 512, OutputType::f32, 0x1p-9).passed);
}

}  // namespace
}  // namespace fp4gap
