#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/reference.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::make_problem;
using test::repro;
using test::spec_e2m1;
using test::spec_bf16;

OperandView nvfp4_view(std::int64_t rows, std::int64_t k, const std::vector<std::uint8_t>& codes,
                       const std::vector<std::uint8_t>& scales, ScaleLayout layout = ScaleLayout::linear) {
  OperandView v;
  v.format = OperandFormat::nvfp4;
  v.rows = rows;
  v.k = k;
  v.codes = codes.data();
  v.scales = scales.data();
  v.layout = layout;
  return v;
}

// Values of an operand from its LINEAR-scale storage, decoded independently of the library.
std::vector<float> naive_values(OperandFormat format, std::int64_t rows, std::int64_t k, const Nvfp4Matrix& fp4,
                                const std::vector<std::uint16_t>& bf16) {
  std::vector<float> v(static_cast<std::size_t>(rows * k));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * k + c);
      if (format == OperandFormat::bf16) {
        v[i] = spec_bf16(bf16[i]);
      } else {
        const std::uint8_t byte = fp4.codes[static_cast<std::size_t>(r * k / 2 + c / 2)];
        const std::uint8_t code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        v[i] = spec_e2m1(code) * e4m3_to_float(fp4.scales[static_cast<std::size_t>(r * (k / 16) + c / 16)]);
      }
    }
  }
  return v;
}

// D = alpha * sum_k a*b in the plainest possible order.
ReferenceResult naive_gemm(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m, std::int64_t n,
                           std::int64_t k, double alpha) {
  ReferenceResult r;
  r.m = m;
  r.n = n;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0, abs_s = 0.0;
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(a[static_cast<std::size_t>(i * k + kk)]) *
                         static_cast<double>(b[static_cast<std::size_t>(j * k + kk)]);
        s += p;
        abs_s += std::fabs(p);
      }
      r.d.push_back(alpha * s);
      r.abs_sum.push_back(std::fabs(alpha) * abs_s);
    }
  }
  return r;
}

// A [1, 32] x B [1, 32] case worked by hand.
//   A: element 0 code 0x2 (1.0), element 1 code 0xB (-1.5), block 0 scale 0x40 (2^(8-7) = 2);
//      element 16 code 0x7 (6.0), block 1 scale 0x38 (1.0).  Values 2, -3, 6.
//   B: element 0 code 0x5 (3.0), element 1 code 0x4 (2.0), block 0 scale 0x30 (2^(6-7) = 0.5);
//      element 16 code 0xF (-6.0), block 1 scale 0x28 (2^(5-7) = 0.25).  Values 1.5, 1, -1.5.
//   sum a*b = 2*1.5 + (-3)*1 + 6*(-1.5) = 3 - 3 - 9 = -9;  sum |a*b| = 3 + 3 + 9 = 15.
// Packing: element 2j in the low nibble, 2j+1 in the high nibble, so A byte 0 = 0xB2, byte 8 = 0x07.
struct HandCase {
  std::vector<std::uint8_t> a_codes = std::vector<std::uint8_t>(16, 0);
  std::vector<std::uint8_t> b_codes = std::vector<std::uint8_t>(16, 0);
  std::vector<std::uint8_t> a_scales{0x40, 0x38};
  std::vector<std::uint8_t> b_scales{0x30, 0x28};
  HandCase() {
    a_codes[0] = 0xB2;
    a_codes[8] = 0x07;
    b_codes[0] = 0x45;
    b_codes[8] = 0x0F;
  }
};

TEST(OperandValues, Nvfp4HandCase) {
  HandCase h;
  const std::vector<float> a = operand_values(nvfp4_view(1, 32, h.a_codes, h.a_scales));
  const std::vector<float> b = operand_values(nvfp4_view(1, 32, h.b_codes, h.b_scales));
  ASSERT_EQ(a.size(), 32u);
  EXPECT_EQ(a[0], 2.0f);
  EXPECT_EQ(a[1], -3.0f);
  EXPECT_EQ(a[16], 6.0f);
  EXPECT_EQ(b[0], 1.5f);
  EXPECT_EQ(b[1], 1.0f);
  EXPECT_EQ(b[16], -1.5f);
  for (int i : {2, 3, 15, 17, 31}) EXPECT_EQ(a[static_cast<std::size_t>(i)], 0.0f) << i;
}

TEST(OperandValues, Bf16AndE4m3) {
  // bf16 0x3F80 = 1.0, 0xC040 = -(1 + 0.5) * 2 = -3, 0x3E00 = 0.125.
  const std::vector<std::uint16_t> bf{0x3F80, 0xC040, 0x3E00};
  OperandView v;
  v.format = OperandFormat::bf16;
  v.rows = 1;
  v.k = 3;
  v.bf16 = bf.data();
  EXPECT_EQ(operand_values(v), (std::vector<float>{1.0f, -3.0f, 0.125f}));
  // e4m3 0x38 = 1, 0xB8 = -1, 0x01 = 1 * 2^-9 (subnormal), 0x7E = 1.75 * 2^8 = 448.
  const std::vector<std::uint8_t> e{0x38, 0xB8, 0x01, 0x7E};
  OperandView w;
  w.format = OperandFormat::e4m3;
  w.rows = 2;
  w.k = 2;
  w.codes = e.data();
  EXPECT_EQ(operand_values(w), (std::vector<float>{1.0f, -1.0f, 0.001953125f, 448.0f}));
}

TEST(OperandValues, SwizzledScalesGiveTheSameValues) {
  // 130 rows crosses a 128-row swizzle tile; K = 96 has 6 blocks, padded to 8 in the swizzle.
  const GemmProblem p = make_problem(130, 32, 96, OperandFormat::nvfp4, OperandFormat::nvfp4);
  const GemmInputs in = make_gemm_inputs(p, 5);
  const Nvfp4Matrix sw = with_layout(in.a_fp4, ScaleLayout::swizzled_128x4);
  EXPECT_EQ(operand_values(nvfp4_view(130, 96, sw.codes, sw.scales, ScaleLayout::swizzled_128x4)),
            naive_values(OperandFormat::nvfp4, 130, 96, in.a_fp4, in.a_bf16))
      << repro(p, 5);
}

TEST(OperandValues, RejectsBadViews) {
  std::vector<std::uint8_t> codes(16), scales(2);
  EXPECT_THROW(operand_values(nvfp4_view(1, 24, codes, scales)), InvalidArgument);  // K % 16
  OperandView v = nvfp4_view(1, 32, codes, scales);
  v.scales = nullptr;
  EXPECT_THROW(operand_values(v), InvalidArgument);
  OperandView b;
  b.rows = 1;
  b.k = 4;  // bf16 with no data
  EXPECT_THROW(operand_values(b), InvalidArgument);
}

TEST(ReferenceGemm, HandCase) {
  HandCase h;
  const ReferenceResult r = reference_gemm(nvfp4_view(1, 32, h.a_codes, h.a_scales),
                                           nvfp4_view(1, 32, h.b_codes, h.b_scales), 0.25);
  ASSERT_EQ(r.m, 1);
  ASSERT_EQ(r.n, 1);
  EXPECT_EQ(r.d[0], -2.25);       // 0.25 * -9
  EXPECT_EQ(r.abs_sum[0], 3.75);  // 0.25 * 15
  // A negative alpha flips D, never abs_sum (it is |alpha| * sum |a*b|).
  const ReferenceResult neg = reference_gemm(nvfp4_view(1, 32, h.a_codes, h.a_scales),
                                             nvfp4_view(1, 32, h.b_codes, h.b_scales), -0.25);
  EXPECT_EQ(neg.d[0], 2.25);
  EXPECT_EQ(neg.abs_sum[0], 3.75);
}

TEST(ReferenceGemm, HandCaseTwoByTwoMixedFormats) {
  // A bf16 [2, 2] = [[1, 2], [-3, 0.5]], B bf16 [2, 2] = [[4, -1], [0.25, 8]] (rows of B are columns of D).
  // D[0][0] = 1*4 + 2*(-1) = 2;   D[0][1] = 1*0.25 + 2*8 = 16.25;
  // D[1][0] = -3*4 + 0.5*(-1) = -12.5; D[1][1] = -3*0.25 + 0.5*8 = 3.25.
  // abs: 6, 16.25, 12.5, 4.75.
  const std::vector<std::uint16_t> a{0x3F80, 0x4000, 0xC040, 0x3F00};
  const std::vector<std::uint16_t> b{0x4080, 0xBF80, 0x3E80, 0x4100};
  OperandView av, bv;
  av.rows = bv.rows = 2;
  av.k = bv.k = 2;
  av.bf16 = a.data();
  bv.bf16 = b.data();
  const ReferenceResult r = reference_gemm(av, bv, 1.0, 1);
  EXPECT_EQ(r.d, (std::vector<double>{2.0, 16.25, -12.5, 3.25}));
  EXPECT_EQ(r.abs_sum, (std::vector<double>{6.0, 16.25, 12.5, 4.75}));
}

TEST(ReferenceGemm, RejectsMismatchedK) {
  std::vector<std::uint8_t> codes(32), scales(4);
  try {
    reference_gemm(nvfp4_view(1, 32, codes, scales), nvfp4_view(1, 64, codes, scales), 1.0);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("A.k != B.k"), std::string::npos) << e.what();
  }
}

// Exact-grid inputs: every partial sum is exact in float32, so float32 accumulation in any order
// equals the double reference exactly.
TEST(ReferenceGemm, ExactGridEqualsFloatAccumulationInAnyOrder) {
  const std::uint64_t seed = 11;
  for (auto [af, bf] : {std::pair{OperandFormat::nvfp4, OperandFormat::nvfp4}, std::pair{OperandFormat::bf16, OperandFormat::nvfp4},
                        std::pair{OperandFormat::bf16, OperandFormat::bf16}}) {
    const GemmProblem p = make_problem(5, 64, 2048, af, bf);
    SCOPED_TRACE(repro(p, seed));
    const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::exact_grid);
    const std::vector<float> a = operand_values(in.a_view());
    const std::vector<float> b = operand_values(in.b_view());
    const ReferenceResult r = reference_gemm(in.a_view(), in.b_view(), in.alpha);
    const auto alpha = static_cast<float>(in.alpha);
    ASSERT_EQ(static_cast<double>(alpha), in.alpha);  // a power of two
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        float forward = 0.0f, backward = 0.0f, pairwise_even = 0.0f, pairwise_odd = 0.0f;
        for (std::int64_t kk = 0; kk < p.k; ++kk) {
          forward += a[static_cast<std::size_t>(i * p.k + kk)] * b[static_cast<std::size_t>(j * p.k + kk)];
          const std::int64_t rk = p.k - 1 - kk;
          backward += a[static_cast<std::size_t>(i * p.k + rk)] * b[static_cast<std::size_t>(j * p.k + rk)];
          (kk % 2 ? pairwise_odd : pairwise_even) +=
              a[static_cast<std::size_t>(i * p.k + kk)] * b[static_cast<std::size_t>(j * p.k + kk)];
        }
        const double ref = r.d[static_cast<std::size_t>(i * p.n + j)];
        ASSERT_EQ(static_cast<double>(alpha * forward), ref) << "(" << i << ", " << j << ")";
        ASSERT_EQ(static_cast<double>(alpha * backward), ref) << "(" << i << ", " << j << ")";
        ASSERT_EQ(static_cast<double>(alpha * (pairwise_even + pairwise_odd)), ref) << "(" << i << ", " << j << ")";
      }
    }
  }
}

// The blocked, threaded reference against the naive triple loop on odd shapes, every A/B format
// combination and both scale layouts. Each product is exact in double and both sum over k in
// order, so they agree bit for bit.
TEST(ReferenceGemm, MatchesNaiveTripleLoopOnOddShapes) {
  const OperandFormat formats[] = {OperandFormat::nvfp4, OperandFormat::bf16};
  std::uint64_t seed = 100;
  for (std::int64_t m : {1, 3, 17}) {
    for (std::int64_t n : {32, 96}) {
      for (std::int64_t k : {32, 64, 160}) {
        for (OperandFormat af : formats) {
          for (OperandFormat bf : formats) {
            for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
              if (layout == ScaleLayout::swizzled_128x4 && af != OperandFormat::nvfp4 && bf != OperandFormat::nvfp4) continue;
              ++seed;
              const GemmProblem p = make_problem(m, n, k, af, bf);
              SCOPED_TRACE(repro(p, seed) + ", layout " + std::string(to_string(layout)));
              const GemmInputs in = make_gemm_inputs(p, seed);
              const ReferenceResult expected =
                  naive_gemm(naive_values(af, m, k, in.a_fp4, in.a_bf16), naive_values(bf, n, k, in.b_fp4, in.b_bf16), m, n,
                             k, in.alpha);
              Nvfp4Matrix a_sw, b_sw;
              OperandView av = in.a_view(), bv = in.b_view();
              if (af == OperandFormat::nvfp4) {
                a_sw = with_layout(in.a_fp4, layout);
                av = nvfp4_view(m, k, a_sw.codes, a_sw.scales, layout);
              }
              if (bf == OperandFormat::nvfp4) {
                b_sw = with_layout(in.b_fp4, layout);
                bv = nvfp4_view(n, k, b_sw.codes, b_sw.scales, layout);
              }
              const ReferenceResult r = reference_gemm(av, bv, in.alpha, 2);
              ASSERT_EQ(r.m, m);
              ASSERT_EQ(r.n, n);
              ASSERT_EQ(r.d, expected.d);
              ASSERT_EQ(r.abs_sum, expected.abs_sum);
            }
          }
        }
      }
    }
  }
}

TEST(ReferenceGemm, ThreadCountDoesNotChangeTheResult) {
  // Several tiles in M and N and several K blocks, with ragged edges everywhere.
  const std::uint64_t seed = 7;
  const GemmProblem p = make_problem(133, 544, 800, OperandFormat::nvfp4, OperandFormat::nvfp4);
  SCOPED_TRACE(repro(p, seed));
  const GemmInputs in = make_gemm_inputs(p, seed);
  const ReferenceResult one = reference_gemm(in.a_view(), in.b_view(), in.alpha, 1);
  for (int threads : {2, 3, 8, 0}) {
    const ReferenceResult many = reference_gemm(in.a_view(), in.b_view(), in.alpha, threads);
    EXPECT_EQ(many.d, one.d) << threads << " threads";
    EXPECT_EQ(many.abs_sum, one.abs_sum) << threads << " threads";
  }
}

TEST(RoundToOutput, F32IsTheNearestFloat) {
  EXPECT_EQ(round_to_output(1.0 + 0x1p-30, OutputType::f32), 1.0f);
  EXPECT_EQ(round_to_output(1.0 + 0x1p-23, OutputType::f32), 1.0f + 0x1p-23f);
  EXPECT_EQ(round_to_output(-3.0, OutputType::f32), -3.0f);
}

TEST(RoundToOutput, Bf16RoundsOnceToNearestEven) {
  // bf16 has 8 significant bits: neighbours of 1 are 1 and 1 + 2^-7.
  EXPECT_EQ(round_to_output(1.0 + 0x1p-8, OutputType::bf16), 1.0f);                    // tie -> even
  EXPECT_EQ(round_to_output(1.0 + 0x1p-7 + 0x1p-8, OutputType::bf16), 1.0f + 0x1p-6f);  // tie -> even (up)
  // Just above the tie: going through float first would round to the tie 1 + 2^-8 and then to 1.
  EXPECT_EQ(round_to_output(1.0 + 0x1p-8 + 0x1p-30, OutputType::bf16), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_to_output(-(1.0 + 0x1p-8 + 0x1p-30), OutputType::bf16), -(1.0f + 0x1p-7f));
  EXPECT_EQ(round_to_output(1.0 + 0x1p-8 - 0x1p-30, OutputType::bf16), 1.0f);
  EXPECT_EQ(round_to_output(2.25, OutputType::bf16), 2.25f);
}

TEST(RoundToOutput, F16RoundsOnceToNearestEven) {
  // fp16 has 11 significant bits: neighbours of 1 are 1 and 1 + 2^-10.
  EXPECT_EQ(round_to_output(1.0 + 0x1p-11, OutputType::f16), 1.0f);
  EXPECT_EQ(round_to_output(1.0 + 0x1p-11 + 0x1p-40, OutputType::f16), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_to_output(70000.0, OutputType::f16), INFINITY);  // above 65520 overflows
  EXPECT_EQ(round_to_output(0x1p-24, OutputType::f16), 0x1p-24f);  // the smallest subnormal
}

}  // namespace
}  // namespace fp4gap
