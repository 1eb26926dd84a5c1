#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp4gap/backend.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::make_problem;
using test::repro;
using test::spec_e2m1;
using test::spec_bf16;

bool same_inputs(const GemmInputs& x, const GemmInputs& y) {
  return x.a_fp4.codes == y.a_fp4.codes && x.a_fp4.scales == y.a_fp4.scales &&
         x.a_fp4.global_scale == y.a_fp4.global_scale && x.b_fp4.codes == y.b_fp4.codes &&
         x.b_fp4.scales == y.b_fp4.scales && x.b_fp4.global_scale == y.b_fp4.global_scale && x.a_bf16 == y.a_bf16 &&
         x.b_bf16 == y.b_bf16 && x.alpha == y.alpha;
}

const std::pair<OperandFormat, OperandFormat> kCombos[] = {
    {OperandFormat::nvfp4, OperandFormat::nvfp4},
    {OperandFormat::bf16, OperandFormat::nvfp4},
    {OperandFormat::nvfp4, OperandFormat::bf16},
    {OperandFormat::bf16, OperandFormat::bf16},
};

std::string message_of(const GemmProblem& p) {
  try {
    make_gemm_inputs(p, 1);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(GemmInputs, SameSeedGivesIdenticalInputs) {
  for (auto [af, bf] : kCombos) {
    for (InputDistribution dist : {InputDistribution::random, InputDistribution::exact_grid}) {
      const GemmProblem p = make_problem(9, 64, 96, af, bf);
      SCOPED_TRACE(repro(p, 21));
      EXPECT_TRUE(same_inputs(make_gemm_inputs(p, 21, dist), make_gemm_inputs(p, 21, dist)));
    }
  }
}

TEST(GemmInputs, DifferentSeedsGiveDifferentInputs) {
  for (auto [af, bf] : kCombos) {
    for (InputDistribution dist : {InputDistribution::random, InputDistribution::exact_grid}) {
      const GemmProblem p = make_problem(9, 64, 96, af, bf);
      SCOPED_TRACE(repro(p, 21));
      const GemmInputs x = make_gemm_inputs(p, 21, dist);
      const GemmInputs y = make_gemm_inputs(p, 22, dist);
      EXPECT_NE(x.a_bf16, y.a_bf16);
      EXPECT_NE(x.b_bf16, y.b_bf16);
    }
  }
}

TEST(GemmInputs, RandomValuesArePlatformIndependent) {
  // The generator uses only mt19937_64 bits and correctly rounded IEEE arithmetic, so a seed
  // gives these exact bits on every platform; this pins them (FNV-1a over the bf16 bits).
  const GemmProblem p = make_problem(4, 32, 64, OperandFormat::bf16, OperandFormat::bf16);
  SCOPED_TRACE(repro(p, 42));
  const GemmInputs in = make_gemm_inputs(p, 42);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto* v : {&in.a_bf16, &in.b_bf16}) {
    for (std::uint16_t x : *v) h = (h ^ x) * 0x100000001b3ull;
  }
  EXPECT_EQ(h, 0xd99021d5c617b9f5ull);
}

TEST(GemmInputs, WeightsDoNotDependOnM) {
  // A and B come from separate streams of the seed: the same weights for every batch size.
  const GemmInputs small = make_gemm_inputs(make_problem(1, 64, 128, OperandFormat::nvfp4, OperandFormat::nvfp4), 8);
  const GemmInputs large = make_gemm_inputs(make_problem(40, 64, 128, OperandFormat::nvfp4, OperandFormat::nvfp4), 8);
  EXPECT_EQ(small.b_fp4.codes, large.b_fp4.codes);
  EXPECT_EQ(small.b_fp4.scales, large.b_fp4.scales);
  EXPECT_EQ(small.b_fp4.global_scale, large.b_fp4.global_scale);
}

TEST(GemmInputs, Nvfp4OperandsCarryTheirExactBf16Values) {
  for (InputDistribution dist : {InputDistribution::random, InputDistribution::exact_grid}) {
    const GemmProblem p = make_problem(5, 32, 160, OperandFormat::nvfp4, OperandFormat::nvfp4);
    SCOPED_TRACE(repro(p, 4));
    const GemmInputs in = make_gemm_inputs(p, 4, dist);
    for (const Nvfp4Matrix* q : {&in.a_fp4, &in.b_fp4}) {
      const std::vector<std::uint16_t>& bf = q == &in.a_fp4 ? in.a_bf16 : in.b_bf16;
      const std::int64_t rows = q == &in.a_fp4 ? p.m : p.n;
      ASSERT_EQ(q->rows, rows);
      ASSERT_EQ(q->cols, p.k);
      ASSERT_EQ(q->layout, ScaleLayout::linear);
      ASSERT_EQ(q->codes.size(), static_cast<std::size_t>(rows * p.k / 2));
      ASSERT_EQ(q->scales.size(), static_cast<std::size_t>(rows * p.k / 16));
      ASSERT_EQ(bf.size(), static_cast<std::size_t>(rows * p.k));
      for (std::int64_t i = 0; i < rows * p.k; ++i) {
        const std::uint8_t byte = q->codes[static_cast<std::size_t>(i / 2)];
        const float expected = spec_e2m1(i % 2 ? byte >> 4 : byte & 0xF) *
                               e4m3_to_float(q->scales[static_cast<std::size_t>(i / 16)]);
        ASSERT_EQ(spec_bf16(bf[static_cast<std::size_t>(i)]), expected) << "element " << i;
      }
    }
    EXPECT_EQ(in.alpha, 1.0 / (static_cast<double>(in.a_fp4.global_scale) * static_cast<double>(in.b_fp4.global_scale)));
  }
}

TEST(GemmInputs, AlphaFoldsOnlyTheNvfp4GlobalScales) {
  const GemmInputs w4a16 = make_gemm_inputs(make_problem(3, 32, 64, OperandFormat::bf16, OperandFormat::nvfp4), 2);
  EXPECT_EQ(w4a16.alpha, 1.0 / static_cast<double>(w4a16.b_fp4.global_scale));
  EXPECT_TRUE(w4a16.a_fp4.codes.empty());
  const GemmInputs dense = make_gemm_inputs(make_problem(3, 32, 64, OperandFormat::bf16, OperandFormat::bf16), 2);
  EXPECT_EQ(dense.alpha, 1.0);
}

TEST(GemmInputs, RandomValuesLookLikeNormalRowsOfVaryingScale) {
  const GemmProblem p = make_problem(64, 32, 2048, OperandFormat::bf16, OperandFormat::bf16);
  SCOPED_TRACE(repro(p, 77));
  const GemmInputs in = make_gemm_inputs(p, 77);
  double min_rms = INFINITY, max_rms = 0.0;
  for (std::int64_t r = 0; r < p.m; ++r) {
    double sum = 0.0, sq = 0.0;
    for (std::int64_t c = 0; c < p.k; ++c) {
      const double v = spec_bf16(in.a_bf16[static_cast<std::size_t>(r * p.k + c)]);
      sum += v;
      sq += v * v;
    }
    const double rms = std::sqrt(sq / static_cast<double>(p.k));
    std::int64_t within_one_sigma = 0;
    for (std::int64_t c = 0; c < p.k; ++c) {
      within_one_sigma += std::fabs(spec_bf16(in.a_bf16[static_cast<std::size_t>(r * p.k + c)])) < rms;
    }
    // Normal: mean 0 (standard error 1/sqrt(2048) ~ 0.022 sigma), 68.3% within one sigma.
    EXPECT_LT(std::fabs(sum / static_cast<double>(p.k)), 0.1 * rms) << "row " << r;
    EXPECT_NEAR(static_cast<double>(within_one_sigma) / static_cast<double>(p.k), 0.683, 0.04) << "row " << r;
    min_rms = std::fmin(min_rms, rms);
    max_rms = std::fmax(max_rms, rms);
  }
  // Row scales 2^e * (1 + u), e in [-3, 1]: 64 rows spread over several octaves.
  EXPECT_GT(max_rms / min_rms, 4.0);
  EXPECT_LT(max_rms / min_rms, 64.0);
}

TEST(GemmInputs, RandomNvfp4OperandsUseTheCodeRange) {
  const GemmProblem p = make_problem(16, 64, 1024, OperandFormat::nvfp4, OperandFormat::nvfp4);
  SCOPED_TRACE(repro(p, 9));
  const GemmInputs in = make_gemm_inputs(p, 9);
  int code_count[16] = {};
  for (std::uint8_t b : in.b_fp4.codes) {
    ++code_count[b & 0xF];
    ++code_count[b >> 4];
  }
  for (int c = 0; c < 16; ++c) EXPECT_GT(code_count[c], 0) << "code " << c << " never used";
  for (std::uint8_t s : in.b_fp4.scales) {
    ASSERT_NE(s, 0x7F);         // never a NaN scale
    ASSERT_EQ(s & 0x80, 0);     // scales are positive
    ASSERT_NE(s, 0x00);         // no all-zero blocks in normal data
  }
  EXPECT_GT(in.b_fp4.global_scale, 0.0f);
  EXPECT_TRUE(std::isfinite(in.b_fp4.global_scale));
}

TEST(GemmInputs, ExactGridUsesPowerOfTwoScales) {
  const GemmProblem p = make_problem(8, 64, 256, OperandFormat::nvfp4, OperandFormat::bf16);
  SCOPED_TRACE(repro(p, 6));
  const GemmInputs in = make_gemm_inputs(p, 6, InputDistribution::exact_grid);
  for (std::uint8_t s : in.a_fp4.scales) ASSERT_TRUE(s == 0x30 || s == 0x38) << int(s);  // 0.5 or 1
  int exponent = 0;
  EXPECT_EQ(std::frexp(in.a_fp4.global_scale, &exponent), 0.5f);
  EXPECT_EQ(std::frexp(in.alpha, &exponent), 0.5);
  // bf16 grid values: multiples of 2^-2 (E2M1 times 0.5 or 1), at most 6 in magnitude.
  for (std::uint16_t h : in.b_bf16) {
    const float v = spec_bf16(h);
    ASSERT_LE(std::fabs(v), 6.0f);
    ASSERT_EQ(v * 4.0f, std::trunc(v * 4.0f)) << v;
  }
}

TEST(GemmInputs, InvalidProblemsNameTheRule) {
  std::string m = message_of(make_problem(4, 64, 100, OperandFormat::nvfp4, OperandFormat::nvfp4));
  EXPECT_NE(m.find("K % 32 != 0: K = 100"), std::string::npos) << m;
  m = message_of(make_problem(0, 64, 64, OperandFormat::bf16, OperandFormat::bf16));
  EXPECT_NE(m.find("M < 1: M = 0"), std::string::npos) << m;
  m = message_of(make_problem(4, 40, 64, OperandFormat::nvfp4, OperandFormat::nvfp4));
  EXPECT_NE(m.find("N % 32 != 0: N = 40"), std::string::npos) << m;
}

TEST(GemmInputs, E4m3IsNotAnInputFormat) {
  for (auto [af, bf] : {std::pair{OperandFormat::e4m3, OperandFormat::nvfp4}, std::pair{OperandFormat::bf16, OperandFormat::e4m3}}) {
    const std::string m = message_of(make_problem(4, 64, 64, af, bf));
    EXPECT_NE(m.find("e4m3 is not an input format"), std::string::npos) << m;
  }
}

TEST(GemmInputs, ViewsPointAtTheOperands) {
  const GemmInputs in = make_gemm_inputs(make_problem(3, 32, 64, OperandFormat::bf16, OperandFormat::nvfp4), 1);
  const OperandView a = in.a_view();
  EXPECT_EQ(a.format, OperandFormat::bf16);
  EXPECT_EQ(a.rows, 3);
  EXPECT_EQ(a.k, 64);
  EXPECT_EQ(a.bf16, in.a_bf16.data());
  const OperandView b = in.b_view();
  EXPECT_EQ(b.format, OperandFormat::nvfp4);
  EXPECT_EQ(b.rows, 32);
  EXPECT_EQ(b.k, 64);
  EXPECT_EQ(b.codes, in.b_fp4.codes.data());
  EXPECT_EQ(b.scales, in.b_fp4.scales.data());
  EXPECT_EQ(b.layout, ScaleLayout::linear);
}

}  // namespace
}  // namespace fp4gap
