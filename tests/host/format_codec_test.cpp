// E2M1 / E4M3 codecs (SPEC-nvfp4 sections 1-2) and the bf16 / fp16 conversions, checked against
// tables written from the SPEC and against independent formulas (std::ldexp, brute-force nearest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"

namespace fp4gap {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFloatMax = std::numeric_limits<float>::max();

float up(float v) { return std::nextafter(v, kInf); }
float down(float v) { return std::nextafter(v, -kInf); }

// ---------------------------------------------------------------- E2M1

// SPEC section 1: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8..15 the same negated.
constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

TEST(E2M1, DecodesAllSixteenCodes) {
  for (int code = 0; code < 16; ++code) {
    const float expected = (code & 8) ? -kE2M1Magnitudes[code & 7] : kE2M1Magnitudes[code & 7];
    const float got = e2m1_to_float(static_cast<std::uint8_t>(code));
    EXPECT_EQ(got, expected) << "code " << code;
    EXPECT_EQ(std::signbit(got), (code & 8) != 0) << "code " << code << " sign";
  }
}

TEST(E2M1, GridValuesEncodeToTheirCodes) {
  for (int code = 0; code < 16; ++code) {
    if (code == 8) continue;  // -0 is tested separately
    EXPECT_EQ(float_to_e2m1(e2m1_to_float(static_cast<std::uint8_t>(code))), code) << "code " << code;
  }
}

// SPEC section 1 thresholds on |v|, with the value at each threshold (a tie, to the even code)
// and the codes just below and just above.
struct Threshold {
  float t;
  std::uint8_t below, at, above;
};
constexpr Threshold kThresholds[] = {
    {0.25f, 0, 0, 1},  // 0.25 -> 0
    {0.75f, 1, 2, 2},  // 0.75 -> 1
    {1.25f, 2, 2, 3},  // 1.25 -> 1
    {1.75f, 3, 4, 4},  // 1.75 -> 2
    {2.5f, 4, 4, 5},   // 2.5 -> 2
    {3.5f, 5, 6, 6},   // 3.5 -> 4
    {5.0f, 6, 6, 7},   // 5 -> 4
};

TEST(E2M1, ThresholdsAndTiesRoundToNearestEven) {
  for (const Threshold& th : kThresholds) {
    EXPECT_EQ(float_to_e2m1(th.t), th.at) << "at " << th.t;
    EXPECT_EQ(float_to_e2m1(down(th.t)), th.below) << "just below " << th.t;
    EXPECT_EQ(float_to_e2m1(up(th.t)), th.above) << "just above " << th.t;
    EXPECT_EQ(float_to_e2m1(-th.t), th.at | 8) << "at " << -th.t;
    EXPECT_EQ(float_to_e2m1(-down(th.t)), th.below | 8) << "just above " << -th.t;
    EXPECT_EQ(float_to_e2m1(-up(th.t)), th.above | 8) << "just below " << -th.t;
  }
}

// Independent oracle: the nearest grid magnitude, ties to the even code, saturating at 6.
std::uint8_t nearest_e2m1(float v) {
  const double a = std::fabs(static_cast<double>(v));
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - kE2M1Magnitudes[c]);
    const double best_d = std::fabs(a - kE2M1Magnitudes[best]);
    if (d < best_d || (d == best_d && c % 2 == 0)) best = c;
  }
  return static_cast<std::uint8_t>(best | (std::signbit(v) ? 8 : 0));
}

TEST(E2M1, MatchesBruteForceNearestOnDenseSweep) {
  // Every multiple of 2^-10 in [-8, 8] hits each threshold exactly plus its neighbourhood.
  for (int i = -8192; i <= 8192; ++i) {
    const float v = static_cast<float>(i) * 0x1p-10f;
    ASSERT_EQ(float_to_e2m1(v), nearest_e2m1(v)) << "v = " << v;
  }
  const unsigned seed = 12345;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-7.0f, 7.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = dist(rng);
    ASSERT_EQ(float_to_e2m1(v), nearest_e2m1(v)) << "v = " << v << " seed " << seed << " i " << i;
  }
}

TEST(E2M1, SaturatesAtSix) {
  for (const float v : {6.0f, up(6.0f), 7.0f, 100.0f, 1e30f, kFloatMax, kInf}) {
    EXPECT_EQ(float_to_e2m1(v), 0x7) << v;
    EXPECT_EQ(float_to_e2m1(-v), 0xF) << -v;
  }
}

TEST(E2M1, NegativeZeroAndNaN) {
  EXPECT_EQ(float_to_e2m1(0.0f), 0x0);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);  // the sign is kept when rounding to zero
  EXPECT_EQ(float_to_e2m1(kNaN), 0x7);   // CUDA's rule; the quantizer counts NaN separately
  EXPECT_EQ(float_to_e2m1(-kNaN), 0x7);
}

// ---------------------------------------------------------------- E4M3

// Independent decode: bias 7, 3 mantissa bits, exponent 0 subnormal, 0x7F/0xFF NaN.
float e4m3_by_formula(int b) {
  const int e = (b >> 3) & 0xF;
  const int m = b & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 7 - 3);
  return static_cast<float>((b & 0x80) ? -mag : mag);
}

TEST(E4M3, DecodesAll256Bytes) {
  for (int b = 0; b < 256; ++b) {
    const float got = e4m3_to_float(static_cast<std::uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
      continue;
    }
    EXPECT_EQ(got, e4m3_by_formula(b)) << "byte " << b;
    EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << "byte " << b;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(E4M3, EncodeOfDecodeIsIdentityForFiniteBytes) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_e4m3_sat(e4m3_to_float(static_cast<std::uint8_t>(b))), b) << "byte " << b;
  }
}

TEST(E4M3, MidpointsRoundToEven) {
  // Neighbours b, b+1 for b = 0 .. 0x7D (0x7E = 448 is the largest finite byte). The midpoint of
  // two E4M3 values needs at most 5 significant bits: exact in float32.
  for (int b = 0; b < 0x7E; ++b) {
    const float lo = e4m3_to_float(static_cast<std::uint8_t>(b));
    const float hi = e4m3_to_float(static_cast<std::uint8_t>(b + 1));
    const float mid = (lo + hi) * 0.5f;
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << "byte " << b;
    const int even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(float_to_e4m3_sat(mid), even) << "midpoint above byte " << b;
    EXPECT_EQ(float_to_e4m3_sat(down(mid)), b) << "just below midpoint above byte " << b;
    EXPECT_EQ(float_to_e4m3_sat(up(mid)), b + 1) << "just above midpoint above byte " << b;
    EXPECT_EQ(float_to_e4m3_sat(-mid), even | 0x80) << "negative midpoint above byte " << b;
  }
}

TEST(E4M3, SaturatesAt448) {
  for (const float v : {448.0f, up(448.0f), 449.0f, 464.0f, 480.0f, 500.0f, 1e9f, kFloatMax, kInf}) {
    EXPECT_EQ(float_to_e4m3_sat(v), 0x7E) << v;
    EXPECT_EQ(float_to_e4m3_sat(-v), 0xFE) << -v;
  }
}

TEST(E4M3, SubnormalsAndTinyValues) {
  for (int m = 0; m < 8; ++m) {
    EXPECT_EQ(float_to_e4m3_sat(std::ldexp(static_cast<float>(m), -9)), m) << "m = " << m;
  }
  EXPECT_EQ(float_to_e4m3_sat(0x1p-6f), 0x08);                 // smallest normal
  EXPECT_EQ(float_to_e4m3_sat(down(0x1p-6f)), 0x08);           // rounds up into the normals
  EXPECT_EQ(float_to_e4m3_sat(15.0f * 0x1p-10f), 0x08);        // 7.5 * 2^-9: tie -> 8 (even)
  EXPECT_EQ(float_to_e4m3_sat(0x1p-10f), 0x00);                // half of 2^-9: tie -> 0
  EXPECT_EQ(float_to_e4m3_sat(up(0x1p-10f)), 0x01);
  EXPECT_EQ(float_to_e4m3_sat(3.0f * 0x1p-10f), 0x02);         // 1.5 * 2^-9: tie -> 2
  EXPECT_EQ(float_to_e4m3_sat(1e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3_sat(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_e4m3_sat(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3_sat(-0.0f), 0x80);
}

TEST(E4M3, NaNOnlyFromNaN) {
  EXPECT_EQ(float_to_e4m3_sat(kNaN), 0x7F);
  // Every float of every binade from 2^-12 to 2^9 at a stride, plus the whole range around 448.
  for (std::uint32_t bits = 0x39800000u; bits < 0x44000000u; bits += 0x1F1u) {
    const float v = bits_float(bits);
    const std::uint8_t b = float_to_e4m3_sat(v);
    ASSERT_NE(b & 0x7F, 0x7F) << "v = " << v;
    ASSERT_NE(float_to_e4m3_sat(-v) & 0x7F, 0x7F) << "v = " << -v;
  }
  for (float v = 400.0f; v < 600.0f; v = up(v)) ASSERT_NE(float_to_e4m3_sat(v), 0x7F) << "v = " << v;
}

TEST(E4M3, MatchesBruteForceNearest) {
  const unsigned seed = 777;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  double values[0x7F];
  for (int b = 0; b <= 0x7E; ++b) values[b] = e4m3_by_formula(b);
  for (int i = 0; i < 200000; ++i) {
    const float v = std::exp2(exponent(rng));
    // nearest finite positive byte, ties to the even byte, values above 448 saturate
    int best = 0;
    for (int b = 1; b <= 0x7E; ++b) {
      const double d = std::fabs(static_cast<double>(v) - values[b]);
      const double best_d = std::fabs(static_cast<double>(v) - values[best]);
      if (d < best_d || (d == best_d && b % 2 == 0)) best = b;
    }
    if (v > 448.0f) best = 0x7E;
    ASSERT_EQ(float_to_e4m3_sat(v), best) << "v = " << v << " seed " << seed << " i " << i;
  }
}

// ---------------------------------------------------------------- bf16 / fp16

bool fp16_is_nan(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool bf16_is_nan(std::uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }

float fp16_by_formula(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double mag;
  if (e == 0) mag = std::ldexp(m, -24);
  else if (e == 31) mag = m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  else mag = std::ldexp(1024 + m, e - 15 - 10);
  return static_cast<float>((h & 0x8000u) ? -mag : mag);
}

TEST(Fp16, AllPatternsDecodeAndRoundTrip) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = fp16_to_float(h);
    if (fp16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(fp16_is_nan(float_to_fp16(f))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(float_bits(f), float_bits(fp16_by_formula(h))) << std::hex << i;
    ASSERT_EQ(float_to_fp16(f), h) << std::hex << i;
  }
}

TEST(Fp16, TiesRoundToEvenAndNeighboursRoundToNearest) {
  for (std::uint32_t h = 0; h < 0x7BFFu; ++h) {  // consecutive finite positive pairs
    const float lo = fp16_to_float(static_cast<std::uint16_t>(h));
    const float hi = fp16_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = (lo + hi) * 0.5f;  // 12 significant bits: exact
    const std::uint16_t even = static_cast<std::uint16_t>(h % 2 == 0 ? h : h + 1);
    ASSERT_EQ(float_to_fp16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_fp16(down(mid)), h) << std::hex << h;
    ASSERT_EQ(float_to_fp16(up(mid)), h + 1) << std::hex << h;
    ASSERT_EQ(float_to_fp16(-mid), even | 0x8000u) << std::hex << h;
  }
}

TEST(Fp16, OverflowSubnormalsAndSpecials) {
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(down(65520.0f)), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // tie between 65504 (odd) and 2^16: to Inf
  EXPECT_EQ(float_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(float_to_fp16(kFloatMax), 0x7C00);
  EXPECT_EQ(float_to_fp16(kInf), 0x7C00);
  EXPECT_EQ(float_to_fp16(-kInf), 0xFC00);
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);  // tie -> 0 (even)
  EXPECT_EQ(float_to_fp16(up(0x1p-25f)), 0x0001);
  EXPECT_EQ(float_to_fp16(3.0f * 0x1p-25f), 0x0002);  // tie -> 2
  EXPECT_EQ(float_to_fp16(down(0x1p-14f)), 0x0400);   // rounds up into the normals
  EXPECT_EQ(float_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(float_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_TRUE(fp16_is_nan(float_to_fp16(kNaN)));
  EXPECT_TRUE(fp16_is_nan(float_to_fp16(bits_float(0x7F800001u))));  // payload only in low bits
  EXPECT_TRUE(fp16_is_nan(float_to_fp16(bits_float(0xFF800001u))));
}

TEST(Bf16, AllPatternsDecodeAndRoundTrip) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = bf16_to_float(h);
    ASSERT_EQ(float_bits(f), i << 16) << std::hex << i;
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(bf16_is_nan(float_to_bf16(f))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << i;
  }
}

TEST(Bf16, TiesRoundToEvenAndNeighboursRoundToNearest) {
  for (std::uint32_t h = 0; h < 0x7F7Fu; ++h) {  // consecutive finite positive pairs
    const float lo = bf16_to_float(static_cast<std::uint16_t>(h));
    const float hi = bf16_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = bits_float(((h << 16) + (1u << 15)));  // the bit pattern halfway between
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << std::hex << h;
    const std::uint16_t even = static_cast<std::uint16_t>(h % 2 == 0 ? h : h + 1);
    ASSERT_EQ(float_to_bf16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_bf16(down(mid)), h) << std::hex << h;
    ASSERT_EQ(float_to_bf16(up(mid)), h + 1) << std::hex << h;
    ASSERT_EQ(float_to_bf16(-mid), even | 0x8000u) << std::hex << h;
  }
}

TEST(Bf16, OverflowAndSpecials) {
  const float bf16_max = bf16_to_float(0x7F7F);
  EXPECT_EQ(float_to_bf16(bf16_max), 0x7F7F);
  EXPECT_EQ(float_to_bf16(kFloatMax), 0x7F80);  // above the last tie: RNE gives Inf
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(kNaN)));
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(bits_float(0x7F800001u))));  // payload only in low bits
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(bits_float(0xFF800001u))));
}

}  // namespace
}  // namespace fp4gap
