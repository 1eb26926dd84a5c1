// Host NVFP4 quantize / dequantize (SPEC-nvfp4 sections 3 and 6).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/status.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::invalid_argument_message;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint8_t code_at(const Nvfp4Matrix& m, std::int64_t r, std::int64_t c) {
  const std::uint8_t byte = m.codes[static_cast<std::size_t>(r * (m.cols / 2) + c / 2)];
  return static_cast<std::uint8_t>(c % 2 == 0 ? byte & 0xF : byte >> 4);
}

std::uint8_t scale_at(const Nvfp4Matrix& m, std::int64_t r, std::int64_t kb) {
  return m.scales[static_cast<std::size_t>(scale_offset(m.layout, r, kb, m.cols))];
}

// Random data with block magnitudes spread over many binades (so scales cover most of the E4M3
// range, including subnormal and zero scales).
std::vector<float> random_matrix(std::int64_t rows, std::int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-24, 6);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t b = 0; b < x.size(); b += kBlockSize) {
    const float block_scale = std::ldexp(1.0f, binade(rng));
    for (int i = 0; i < kBlockSize; ++i) x[b + i] = normal(rng) * block_scale;
  }
  return x;
}

// ---------------------------------------------------------------- hand-computed vectors

// Two blocks, one row, dynamic gs. amax = 6, so gs = 2688/6 = 448 exactly, inv_gs = fl(1/448).
// r6 = fl(1/6) = 0.16666667163...
//
// Block 0: x = 0, .25, .5, .75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, -6; vmax = 6.
//   sf = 448 * fl(6 * r6) = 448 * fl(1.0000000298) = 448 * 1 = 448 -> byte 0x7E (1.75 * 2^8),
//   not saturated (448 is not > 448).
//   out = 1 / fl(448 * fl(1/448)); fl(1/448) = fl(1/7)/64 and 7 * fl(1/7) = 1.0000000447 rounds
//   to 1, so out = 1 and each x is encoded as itself: every SPEC tie appears once.
//   codes: 0 .25->0 .5->1 .75->2(tie to 1.0) 1->2 1.25->2(tie) 1.5->3 1.75->4(tie to 2)
//          2->4 2.5->4(tie) 3->5 3.5->6(tie to 4) 4->6 5->6(tie) 6->7 -6->0xF
//   packed (element 2j low nibble): 00 21 22 43 44 65 66 F7
//
// Block 1: x = 1.5, -1.5, .1, -.7, .0625, .1875, .3125, .4375, 1, .625, .875, 1.125, 1.25,
//              -1.25, .8, 0; vmax = 1.5.
//   sf = 448 * fl(1.5 * r6) = 448 * fl(0.2500000075) = 448 * 0.25 = 112 = 1.75 * 2^6 -> 0x6E.
//   out = 1 / fl(112 * fl(1/448)) = 1 / fl(1.75 * fl(1/7)) = 1 / fl(0.2500000133) = 1/0.25 = 4.
//   x * out = 6, -6, .4, -2.8, .25, .75, 1.25, 1.75, 4, 2.5, 3.5, 4.5, 5, -5, 3.2, 0
//   codes:    7,  F,  1,   D,   0,   2,    2,    4, 6,   4,   6,   6, 6,  E,   5, 0
//   packed: F7 D1 20 42 46 66 E6 05
//   dequantized: e2m1 * 112 / 448 = e2m1 / 4.
TEST(Quantize, HandComputedTwoBlocks) {
  const std::vector<float> x = {
      0.0f, 0.25f, 0.5f,  0.75f,   1.0f,    1.25f,   1.5f,   1.75f,  2.0f,   2.5f,  3.0f,   3.5f,
      4.0f, 5.0f,  6.0f,  -6.0f,   1.5f,    -1.5f,   0.1f,   -0.7f,  0.0625f, 0.1875f, 0.3125f,
      0.4375f, 1.0f, 0.625f, 0.875f, 1.125f, 1.25f, -1.25f, 0.8f, 0.0f};
  QuantizeReport rep;
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 32, {}, &rep);
  EXPECT_EQ(m.global_scale, 448.0f);
  const std::vector<std::uint8_t> expected_codes = {0x00, 0x21, 0x22, 0x43, 0x44, 0x65, 0x66, 0xF7,
                                                    0xF7, 0xD1, 0x20, 0x42, 0x46, 0x66, 0xE6, 0x05};
  EXPECT_EQ(m.codes, expected_codes);
  EXPECT_EQ(m.scales, (std::vector<std::uint8_t>{0x7E, 0x6E}));
  EXPECT_EQ(rep.saturated_scales, 0);
  EXPECT_EQ(rep.zero_scale_blocks, 0);
  EXPECT_EQ(rep.amax, 6.0f);
  EXPECT_TRUE(rep.clean());

  const std::vector<float> d = dequantize_nvfp4(m);
  const float block1[16] = {6, -6, 0.5f, -3, 0, 1, 1, 2, 4, 2, 4, 4, 4, -4, 3, 0};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(d[static_cast<std::size_t>(i)], e2m1_to_float(code_at(m, 0, i))) << "block 0, " << i;
    EXPECT_EQ(d[static_cast<std::size_t>(16 + i)], block1[i] / 4) << "block 1, " << i;
  }
  const std::vector<float> u = dequantize_nvfp4_unscaled(m);
  EXPECT_EQ(u[0 + 14], 6.0f * 448.0f);
  EXPECT_EQ(u[16 + 0], 6.0f * 112.0f);
}

// The recipe's order of operations is part of the format: CPU and GPU must agree bit for bit,
// so these blocks sit where a different (mathematically equal) order gives another byte.
TEST(Quantize, RecipeOrderOfOperations) {
  // sf = gs * (vmax * r6), not gs * vmax / 6. With gs = 1, r6 = fl(1/6) = (1 + 2^-25) / 6 and
  // vmax = 7.125 - 2^-21 (the float below 6 * 1.1875, 1.1875 being the E4M3 midpoint between
  // 1.125 = 0x39 and 1.25 = 0x3A):
  //   vmax / 6      = 1.1875 - 0.67 ulp(2^-23) -> rounds to 1.1875 - 2^-23 -> E4M3 0x39
  //   vmax * r6     = 1.1875 - 0.67 ulp + 0.30 ulp = 1.1875 - 0.37 ulp -> rounds to 1.1875, the
  //                   midpoint, which E4M3 RNE sends to the even code 1.25 -> 0x3A
  {
    std::vector<float> x(16, 0.0f);
    x[0] = 7.125f - 0x1p-21f;
    QuantizeOptions opt;
    opt.global_scale = 1.0f;
    const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, opt);
    EXPECT_EQ(m.scales[0], 0x3A);
  }
  // out = 1 / (f32(sf8) * fl(1/gs)), not gs / f32(sf8). With gs = 1309 and vmax = 0.003125,
  // sf = 0.682 -> sf8 = 0.6875 (0x33); 1 / fl(0.6875 * fl(1/1309)) = 1903.99988 while
  // 1309 / 0.6875 = 1904. These elements were found by search so that x * 1903.99988 lands one
  // ulp below an E2M1 tie (0.75, 1.75, 3.5) while x * 1904 lands on it (which rounds up).
  {
    std::vector<float> x(16, 0.0f);
    x[0] = 0.003125f;
    x[1] = 0x1.9d0ac2p-12f;  // * out = 0.74999994 -> code 1 (0.5); with 1904: 0.75 -> code 2
    x[2] = 0x1.e1e1e2p-11f;  // * out = 1.74999988 -> code 3 (1.5); with 1904: 1.75 -> code 4
    x[3] = 0x1.e1e1e2p-10f;  // * out = 3.49999976 -> code 5 (3);   with 1904: 3.5  -> code 6
    QuantizeOptions opt;
    opt.global_scale = 1309.0f;
    const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, opt);
    EXPECT_EQ(m.scales[0], 0x33);
    EXPECT_EQ(code_at(m, 0, 1), 1);
    EXPECT_EQ(code_at(m, 0, 2), 3);
    EXPECT_EQ(code_at(m, 0, 3), 5);
  }
}

// ---------------------------------------------------------------- exact round trips

// Data on the NVFP4 grid: each block is e2m1 codes times 2^j with one element forced to +-6, so
// vmax = 6 * 2^j. With gs = 2^g: sf = 2^g * fl(6 * 2^j * r6) = 2^(g+j) (6 * r6 rounds to 1), an
// exact E4M3 byte for g + j in [-9, 8]; out = 1 / (2^(g+j) * 2^-g) = 2^-j exactly, so x * out is
// the grid value itself and dequantization code * 2^(g+j) / 2^g returns x exactly.
std::vector<float> grid_matrix(std::int64_t rows, std::int64_t cols, int jmin, int jmax, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15), j_dist(jmin, jmax), pos(0, kBlockSize - 1);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t b = 0; b < x.size(); b += kBlockSize) {
    const int j = j_dist(rng);
    for (int i = 0; i < kBlockSize; ++i) {
      const auto c = static_cast<std::uint8_t>(code(rng));
      // +0 only: a -0 code would still round-trip, but keep the data free of signed zeros
      x[b + i] = std::ldexp(c == 8 ? 0.0f : e2m1_to_float(c), j);
    }
    x[b + pos(rng)] = std::ldexp(code(rng) < 8 ? 6.0f : -6.0f, j);
  }
  return x;
}

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want,
                          const std::string& repro) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i]))
        << "element " << i << ": got " << got[i] << ", want " << want[i] << "; repro: " << repro;
  }
}

TEST(Quantize, GridDataRoundTripsExactlyWithPowerOfTwoGlobalScale) {
  for (const unsigned seed : {1u, 2u, 3u}) {
    for (const int g : {-3, 0, 5}) {
      // g + j must stay within [-9, 8] (exact E4M3 powers of two)
      const int jmin = -9 - g, jmax = 8 - g;
      const std::vector<float> x = grid_matrix(37, 96, jmin, jmax, seed);
      QuantizeOptions opt;
      opt.global_scale = std::ldexp(1.0f, g);
      for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
        opt.layout = layout;
        QuantizeReport rep;
        const Nvfp4Matrix m = quantize_nvfp4(x, 37, 96, opt, &rep);
        const std::string repro = "grid_matrix(37, 96, " + std::to_string(jmin) + ", " +
                                  std::to_string(jmax) + ", seed " + std::to_string(seed) +
                                  "), gs = 2^" + std::to_string(g) + ", " + std::string(to_string(layout));
        EXPECT_EQ(rep.saturated_scales, 0) << repro;
        EXPECT_EQ(rep.zero_scale_blocks, 0) << repro;
        expect_bitwise_equal(dequantize_nvfp4(m), x, repro);
      }
    }
  }
}

TEST(Quantize, GridDataRoundTripsExactlyWithDynamicGlobalScale) {
  // gs = 2688 / (6 * 2^jmax) = 448 * 2^-jmax; sf = 448 * 2^(j - jmax) is exact in E4M3 for
  // j - jmax >= -15, and out = 1 / fl(2^j * 448 * fl(1/448)) = 2^-j as in the hand-computed test.
  for (const unsigned seed : {4u, 5u}) {
    const std::vector<float> x = grid_matrix(20, 128, -10, 5, seed);
    const Nvfp4Matrix m = quantize_nvfp4(x, 20, 128, {});
    const std::string repro = "grid_matrix(20, 128, -10, 5, seed " + std::to_string(seed) + "), dynamic gs";
    EXPECT_EQ(m.global_scale, 2688.0f / (6.0f * 32.0f)) << repro;
    expect_bitwise_equal(dequantize_nvfp4(m), x, repro);
  }
}

// ---------------------------------------------------------------- input types, determinism

TEST(Quantize, Fp16AndBf16InputsMatchTheirFloatConversions) {
  const unsigned seed = 99;
  const std::int64_t rows = 33, cols = 80;
  const std::vector<float> base = random_matrix(rows, cols, seed);
  std::vector<std::uint16_t> h(base.size()), b(base.size());
  std::vector<float> hf(base.size()), bf(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    h[i] = float_to_fp16(base[i] * 64.0f);  // keep most values inside fp16's normal range
    b[i] = float_to_bf16(base[i]);
    hf[i] = fp16_to_float(h[i]);
    bf[i] = bf16_to_float(b[i]);
  }
  h[5] = 0x7E00;   // NaN
  h[77] = 0xFC00;  // -Inf
  b[9] = 0x7F80;   // Inf
  hf[5] = fp16_to_float(h[5]);
  hf[77] = fp16_to_float(h[77]);
  bf[9] = bf16_to_float(b[9]);
  for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
    QuantizeOptions opt;
    opt.layout = layout;
    for (const auto& [type, raw, as_float] :
         {std::tuple{ElementType::f16, h.data(), &hf}, std::tuple{ElementType::bf16, b.data(), &bf}}) {
      QuantizeReport r1, r2;
      const Nvfp4Matrix m1 = quantize_nvfp4(raw, type, rows, cols, opt, &r1);
      const Nvfp4Matrix m2 = quantize_nvfp4(*as_float, rows, cols, opt, &r2);
      const std::string repro = std::string(to_string(type)) + " random_matrix(33, 80, seed " +
                                std::to_string(seed) + ")";
      EXPECT_EQ(m1.global_scale, m2.global_scale) << repro;
      EXPECT_EQ(m1.codes, m2.codes) << repro;
      EXPECT_EQ(m1.scales, m2.scales) << repro;
      EXPECT_EQ(r1.summary(), r2.summary()) << repro;
      EXPECT_EQ(r1.nan_count + r1.inf_count, type == ElementType::f16 ? 2 : 1) << repro;
    }
  }
}

TEST(Quantize, BitIdenticalAcrossRuns) {
  const unsigned seed = 2024;
  const std::vector<float> x = random_matrix(64, 256, seed);
  const Nvfp4Matrix a = quantize_nvfp4(x, 64, 256, {});
  const Nvfp4Matrix b = quantize_nvfp4(x, 64, 256, {});
  EXPECT_EQ(float_bits(a.global_scale), float_bits(b.global_scale)) << "seed " << seed;
  EXPECT_EQ(a.codes, b.codes) << "seed " << seed;
  EXPECT_EQ(a.scales, b.scales) << "seed " << seed;
}

// ---------------------------------------------------------------- error bound

// Per block, with S = f32(sf8) / gs the dequantization step:
//  * The codes are e2m1(y) with y = x * out, out = 1/(sf8 * inv_gs) ~ 1/S. The E2M1 rounding
//    error of y is at most h(|y|): half the grid spacing, 0.25 below 2, 0.5 in (2, 4], 1 in
//    (4, 6], and |y| - 6 above 6 (saturation). In x units: |x_hat - x| <= S * h(|x| / S).
//    The float32 operations around it (1/gs, sf8 * inv_gs, 1/(..), x * out, the final / gs) each
//    add a relative 2^-24; with |y| <= 9 that is under S * 9 * 8 * 2^-24 < S * 2^-17.
//  * sf8 is E4M3(sf), sf = gs * vmax / 6 (two more roundings): relative error <= 2^-4 in the
//    normal range (3 mantissa bits), absolute <= 2^-10 in the subnormal range; so
//    |S - vmax/6| <= (vmax/6) * (2^-4 + 2^-20) + 2^-10 / gs. This bounds how large S, hence the
//    element error, may get for a block of a given vmax: about 1.07 * vmax / 6 for a full step.
//  * A block whose sf rounds to 0 decodes to 0: |x| <= vmax < 6 * 2^-10 / gs (1 + 2^-20).
double e2m1_half_step(double y) {
  if (y <= 2.0) return 0.25;
  if (y <= 4.0) return 0.5;
  return std::max(1.0, y - 6.0);
}

TEST(Quantize, RandomDataWithinTheNvfp4ErrorBound) {
  for (const unsigned seed : {11u, 12u, 13u}) {
    const std::int64_t rows = 48, cols = 512;
    const std::vector<float> x = random_matrix(rows, cols, seed);
    QuantizeReport rep;
    const Nvfp4Matrix m = quantize_nvfp4(x, rows, cols, {}, &rep);
    const std::vector<float> d = dequantize_nvfp4(m);
    const double gs = m.global_scale;
    const std::string repro = "random_matrix(48, 512, seed " + std::to_string(seed) + ")";
    EXPECT_EQ(rep.saturated_scales, 0) << repro;
    std::int64_t zero_blocks = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t kb = 0; kb < cols / kBlockSize; ++kb) {
        const std::size_t base = static_cast<std::size_t>(r * cols + kb * kBlockSize);
        double vmax = 0;
        for (int i = 0; i < kBlockSize; ++i) vmax = std::max(vmax, std::fabs(static_cast<double>(x[base + i])));
        const std::uint8_t sf8 = scale_at(m, r, kb);
        const double step = e4m3_to_float(sf8) / gs;
        const std::string where = "row " + std::to_string(r) + " block " + std::to_string(kb) + "; " + repro;
        if (sf8 == 0) {
          ++zero_blocks;
          ASSERT_LE(vmax, 6 * 0x1p-10 / gs * (1 + 0x1p-20)) << where;
          for (int i = 0; i < kBlockSize; ++i) ASSERT_EQ(d[base + i], 0.0f) << where;
          continue;
        }
        ASSERT_LE(std::fabs(step - vmax / 6), (vmax / 6) * (0x1p-4 + 0x1p-20) + 0x1p-10 / gs) << where;
        for (int i = 0; i < kBlockSize; ++i) {
          const double xi = x[base + i];
          const double bound = step * (e2m1_half_step(std::fabs(xi) / step) + 0x1p-17);
          ASSERT_LE(std::fabs(d[base + i] - xi), bound) << "element " << i << " of " << where;
        }
      }
    }
    EXPECT_EQ(rep.zero_scale_blocks, zero_blocks) << repro;
    EXPECT_GT(zero_blocks, 0) << "the data should exercise zero-scale blocks; " << repro;
  }
}

// ---------------------------------------------------------------- special inputs

TEST(Quantize, AllZeroTensorUsesGlobalScaleOne) {
  const std::vector<float> x(4 * 64, 0.0f);
  QuantizeReport rep;
  const Nvfp4Matrix m = quantize_nvfp4(x, 4, 64, {}, &rep);
  EXPECT_EQ(m.global_scale, 1.0f);
  EXPECT_TRUE(std::all_of(m.codes.begin(), m.codes.end(), [](std::uint8_t c) { return c == 0; }));
  EXPECT_TRUE(std::all_of(m.scales.begin(), m.scales.end(), [](std::uint8_t s) { return s == 0; }));
  EXPECT_EQ(rep.zero_scale_blocks, 16);
  EXPECT_EQ(rep.amax, 0.0f);
  EXPECT_TRUE(rep.clean());
  for (const float v : dequantize_nvfp4(m)) EXPECT_EQ(v, 0.0f);
}

TEST(Quantize, NaNAndInfAreCountedAndLocated) {
  const std::int64_t rows = 6, cols = 64;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
  auto at = [&](std::int64_t r, std::int64_t c) -> float& { return x[static_cast<std::size_t>(r * cols + c)]; };
  at(2, 5) = kNaN;
  at(3, 1) = -kNaN;
  at(5, 63) = kNaN;
  at(1, 40) = kInf;
  at(4, 0) = -kInf;
  at(0, 17) = 500.0f;  // finite amax, away from the Inf blocks
  for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
    QuantizeOptions opt;
    opt.layout = layout;
    QuantizeReport rep;
    const Nvfp4Matrix m = quantize_nvfp4(x, rows, cols, opt, &rep);
    EXPECT_EQ(rep.nan_count, 3);
    EXPECT_EQ(rep.first_nan_row, 2);
    EXPECT_EQ(rep.first_nan_col, 5);
    EXPECT_EQ(rep.inf_count, 2);
    EXPECT_EQ(rep.first_inf_row, 1);
    EXPECT_EQ(rep.first_inf_col, 40);
    EXPECT_EQ(rep.amax, 500.0f);
    EXPECT_EQ(m.global_scale, 5.376f);
    EXPECT_FALSE(rep.clean());
    for (const std::uint8_t s : m.scales) EXPECT_NE(s & 0x7F, 0x7F) << "NaN scale byte written";
    EXPECT_EQ(scale_at(m, 1, 2), 0x7E);  // block holding +Inf: its scale saturates to 448
    EXPECT_EQ(scale_at(m, 4, 0), 0x7E);
    EXPECT_EQ(code_at(m, 1, 40), 0x7);
    EXPECT_EQ(code_at(m, 4, 0), 0xF);
    EXPECT_EQ(rep.saturated_scales, 2);  // exactly the two Inf blocks
    const std::string s = rep.summary();
    EXPECT_NE(s.find("3 NaN (first at [2, 5])"), std::string::npos) << s;
    EXPECT_NE(s.find("2 Inf (first at [1, 40])"), std::string::npos) << s;
  }
}

TEST(Quantize, StaticGlobalScaleThatOverflowsScalesIsCounted) {
  // gs = 448 static: sf = 448 * vmax / 6. Up to 464 a scale rounds to 448 by plain RNE; above
  // 464 it is clamped, and counted.
  std::vector<float> x(5 * 16, 0.5f);
  x[0] = 6.0f;         // block 0: sf = 448, not saturated
  x[16] = 6.5f;        // block 1: sf = 485.3, saturated
  x[32 + 3] = -12.0f;  // block 2: sf = 896, saturated
  x[48] = 1.0f;        // block 3: not saturated
  x[64] = 6.2f;        // block 4: sf = 462.9, rounds to 448 without clamping
  QuantizeOptions opt;
  opt.global_scale = 448.0f;
  QuantizeReport rep;
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 80, opt, &rep);
  EXPECT_EQ(rep.saturated_scales, 2);
  EXPECT_FALSE(rep.clean());
  EXPECT_EQ(m.global_scale, 448.0f);
  // block 3: sf = 448 * fl(1/6) = 74.67 -> 72 = 1.125 * 2^6 -> byte (13 << 3) | 1 = 0x69
  EXPECT_EQ(m.scales, (std::vector<std::uint8_t>{0x7E, 0x7E, 0x7E, 0x69, 0x7E}));
  EXPECT_EQ(code_at(m, 0, 16), 0x7);   // 6.5 saturates to 6
  EXPECT_EQ(code_at(m, 0, 35), 0xF);   // -12 saturates to -6
  EXPECT_NE(rep.summary().find("2 saturated scales"), std::string::npos) << rep.summary();
}

TEST(Quantize, DynamicGlobalScaleNeverSaturatesTheAmaxBlock) {
  // gs * (amax * r6) can land a few ulps above 448 (r6 > 1/6); that is rounding, not clamping.
  const unsigned seed = 31;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
  for (int i = 0; i < 20000; ++i) {
    std::vector<float> x(16, 0.0f);
    x[static_cast<std::size_t>(i % 16)] = std::exp2(exponent(rng));
    QuantizeReport rep;
    const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, {}, &rep);
    ASSERT_EQ(rep.saturated_scales, 0) << "amax " << x[static_cast<std::size_t>(i % 16)] << " seed " << seed;
    ASSERT_EQ(m.scales[0], 0x7E) << "amax " << x[static_cast<std::size_t>(i % 16)] << " seed " << seed;
    ASSERT_EQ(code_at(m, 0, i % 16), 0x7) << "amax " << x[static_cast<std::size_t>(i % 16)] << " seed " << seed;
  }
}

// ---------------------------------------------------------------- bad input and tiny shapes

TEST(Quantize, RejectsBadShapesAndGlobalScales) {
  const std::vector<float> x(100, 1.0f);
  std::string msg = invalid_argument_message([&] { quantize_nvfp4(x, 1, 100, {}); });
  EXPECT_NE(msg.find("K % 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;
  msg = invalid_argument_message([&] { quantize_nvfp4(x.data(), ElementType::f32, 0, 16, {}); });
  EXPECT_NE(msg.find("rows = 0"), std::string::npos) << msg;
  msg = invalid_argument_message([&] { quantize_nvfp4(x.data(), ElementType::f32, 1, 0, {}); });
  EXPECT_NE(msg.find("K = 0"), std::string::npos) << msg;
  msg = invalid_argument_message([&] { quantize_nvfp4(x, 2, 16, {}); });  // 100 values, not 32
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;
  for (const float gs : {0.0f, -1.0f, kNaN, kInf, 1e36f, 1e-37f}) {
    QuantizeOptions opt;
    opt.global_scale = gs;
    msg = invalid_argument_message([&] { quantize_nvfp4(x.data(), ElementType::f32, 1, 16, opt); });
    EXPECT_NE(msg.find("global scale"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gs = "), std::string::npos) << msg;
  }
}

TEST(Quantize, GlobalScaleBoundsKeepTheRecipeFinite) {
  // At the largest allowed gs a zero next to a value whose scale rounds to the smallest nonzero
  // byte must still encode as 0, not as NaN -> +6.
  std::vector<float> x(16, 0.0f);
  // vmax = 2^-125: sf = 2^118 * 2^-125 / 6 = 2^-7 / 6 ~ 0.67 * 2^-9 -> 2^-9 (byte 0x01), and
  // out = 1 / (2^-9 * 2^-118) = 2^127, still finite (at gs = 2^119 it would be Inf).
  x[3] = 0x1p-128f;  // * 2^127 = 0.5 -> code 1
  x[4] = 0x1p-125f;  // * 2^127 = 4 -> code 6
  QuantizeOptions opt;
  opt.global_scale = kMaxGlobalScale;
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, opt);
  ASSERT_EQ(m.scales[0], 0x01);
  for (int i = 0; i < 16; ++i) {
    const std::uint8_t expected = i == 3 ? 1 : i == 4 ? 6 : 0;
    EXPECT_EQ(code_at(m, 0, i), expected) << "element " << i;
  }
  // amax so small that 2688/amax overflows: gs is capped, not Inf.
  EXPECT_EQ(global_scale_from_amax(1e-40f), kMaxGlobalScale);
  EXPECT_EQ(global_scale_from_amax(0.0f), 1.0f);
  EXPECT_EQ(global_scale_from_amax(6.0f), 448.0f);
  const Nvfp4Matrix tiny = quantize_nvfp4(x, 1, 16, {});
  EXPECT_EQ(tiny.global_scale, kMaxGlobalScale);
}

TEST(Quantize, TinyShapes) {
  const std::vector<float> one_row = grid_matrix(1, 16, 0, 0, 7);
  for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
    QuantizeOptions opt;
    opt.layout = layout;
    opt.global_scale = 1.0f;
    const Nvfp4Matrix m = quantize_nvfp4(one_row, 1, 16, opt);
    EXPECT_EQ(m.codes.size(), 8u);
    EXPECT_EQ(m.scales.size(), layout == ScaleLayout::linear ? 1u : 512u);
    EXPECT_EQ(m.scales[0], 0x38);  // 1.0
    EXPECT_EQ(std::count(m.scales.begin(), m.scales.end(), 0), static_cast<long>(m.scales.size()) - 1);
    expect_bitwise_equal(dequantize_nvfp4(m), one_row, "grid_matrix(1, 16, 0, 0, seed 7)");
  }
  const std::vector<float> three_rows = grid_matrix(3, 16, -2, 2, 8);
  const Nvfp4Matrix m = quantize_nvfp4(three_rows, 3, 16, {});
  expect_bitwise_equal(dequantize_nvfp4(m), three_rows, "grid_matrix(3, 16, -2, 2, seed 8)");
}

TEST(Quantize, DequantizeRejectsInconsistentMatrices) {
  Nvfp4Matrix m = quantize_nvfp4(std::vector<float>(32, 1.0f), 2, 16, {});
  m.scales.pop_back();
  EXPECT_THROW(dequantize_nvfp4(m), InvalidArgument);
  m = quantize_nvfp4(std::vector<float>(32, 1.0f), 2, 16, {});
  m.codes.push_back(0);
  EXPECT_THROW(dequantize_nvfp4_unscaled(m), InvalidArgument);
}

TEST(Quantize, LargeMatrixIsFast) {
  // 4096 x 4096 (a quarter of 8192^2): single-threaded, well under a second when optimized.
  const std::int64_t n = 4096;
  std::vector<float> x(static_cast<std::size_t>(n * n));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (float& v : x) v = dist(rng);
  const auto t0 = std::chrono::steady_clock::now();
  const Nvfp4Matrix m = quantize_nvfp4(x, n, n, {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(m.codes.size(), static_cast<std::size_t>(n * n / 2));
  RecordProperty("quantize_4096x4096_seconds", std::to_string(seconds));
#ifdef NDEBUG
  EXPECT_LT(seconds, 5.0);
#endif
}

}  // namespace
}  // namespace fp4gap
