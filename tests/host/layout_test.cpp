// Scale-factor layouts (SPEC-nvfp4 section 4): the SWIZZLED_128x4 offset formula against the
// tensor definition, padding, and conversions.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp4gap/format.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap {
namespace {

// The tensor definition, executed literally: pad to [Mp, Kp], view as (Mp/128, 4, 32, Kp/4, 4),
// permute to (0, 3, 2, 1, 4), make contiguous. Walking the permuted tensor in its memory order
// (loops nested as the permuted dimensions) and numbering the elements gives, for every source
// position [row, kb], its destination index.
std::vector<std::int64_t> swizzle_by_definition(std::int64_t rows, std::int64_t k) {
  const std::int64_t mp = round_up(rows, 128);
  const std::int64_t kp = round_up(k / 16, 4);
  std::vector<std::int64_t> dest(static_cast<std::size_t>(mp * kp), -1);
  std::int64_t next = 0;
  for (std::int64_t d0 = 0; d0 < mp / 128; ++d0)        // permuted dim 0 = source dim 0
    for (std::int64_t d3 = 0; d3 < kp / 4; ++d3)        // permuted dim 1 = source dim 3
      for (std::int64_t d2 = 0; d2 < 32; ++d2)          // permuted dim 2 = source dim 2
        for (std::int64_t d1 = 0; d1 < 4; ++d1)         // permuted dim 3 = source dim 1
          for (std::int64_t d4 = 0; d4 < 4; ++d4) {     // permuted dim 4 = source dim 4
            const std::int64_t row = d0 * 128 + d1 * 32 + d2;  // source view (Mp/128, 4, 32, ...)
            const std::int64_t col = d3 * 4 + d4;              // source view (..., Kp/4, 4)
            dest[static_cast<std::size_t>(row * kp + col)] = next++;
          }
  return dest;
}

struct Shape {
  std::int64_t rows, k;
};
const std::vector<Shape> kShapes = [] {
  std::vector<Shape> s;
  for (const std::int64_t m : {1, 31, 32, 127, 128, 129, 300})
    for (const std::int64_t k : {16, 32, 48, 64, 80, 2048 + 16}) s.push_back({m, k});
  return s;
}();

std::string describe(const Shape& s) {
  return "M = " + std::to_string(s.rows) + ", K = " + std::to_string(s.k);
}

TEST(Layout, SwizzledOffsetMatchesTheTensorDefinition) {
  for (const Shape& s : kShapes) {
    const std::vector<std::int64_t> dest = swizzle_by_definition(s.rows, s.k);
    const std::int64_t kp = round_up(s.k / 16, 4);
    const ScaleShape shape = scale_shape(ScaleLayout::swizzled_128x4, s.rows, s.k);
    ASSERT_EQ(shape.rows, round_up(s.rows, 128)) << describe(s);
    ASSERT_EQ(shape.cols, kp) << describe(s);
    // Every padded position too: the formula must agree with the definition on the whole array.
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      for (std::int64_t kb = 0; kb < kp; ++kb) {
        ASSERT_EQ(swizzled_scale_offset(r, kb, s.k), dest[static_cast<std::size_t>(r * kp + kb)])
            << "row " << r << ", kb " << kb << "; " << describe(s);
        if (r < s.rows && kb < s.k / 16) {
          ASSERT_EQ(scale_offset(ScaleLayout::swizzled_128x4, r, kb, s.k), swizzled_scale_offset(r, kb, s.k));
        }
      }
    }
  }
}

TEST(Layout, SwizzledOffsetsAreABijectionOntoThePaddedArray) {
  for (const Shape& s : kShapes) {
    const ScaleShape shape = scale_shape(ScaleLayout::swizzled_128x4, s.rows, s.k);
    std::vector<int> hits(static_cast<std::size_t>(shape.bytes()), 0);
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      for (std::int64_t kb = 0; kb < shape.cols; ++kb) {
        const std::int64_t off = swizzled_scale_offset(r, kb, s.k);
        ASSERT_GE(off, 0) << describe(s);
        ASSERT_LT(off, shape.bytes()) << describe(s);
        ++hits[static_cast<std::size_t>(off)];
      }
    }
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "offset " << i << "; " << describe(s);
  }
}

TEST(Layout, LinearOffsetIsRowMajor) {
  EXPECT_EQ(scale_shape(ScaleLayout::linear, 3, 48).rows, 3);
  EXPECT_EQ(scale_shape(ScaleLayout::linear, 3, 48).cols, 3);
  EXPECT_EQ(scale_offset(ScaleLayout::linear, 2, 1, 48), 7);
  EXPECT_EQ(scale_offset(ScaleLayout::linear, 0, 0, 48), 0);
}

TEST(Layout, QuantizedPaddingBytesAreZero) {
  const unsigned seed = 17;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.5f, 4.0f);  // every block gets a nonzero scale
  for (const Shape& s : kShapes) {
    std::vector<float> x(static_cast<std::size_t>(s.rows * s.k));
    for (float& v : x) v = dist(rng);
    QuantizeOptions opt;
    opt.layout = ScaleLayout::swizzled_128x4;
    const Nvfp4Matrix m = quantize_nvfp4(x, s.rows, s.k, opt);
    const ScaleShape shape = scale_shape(ScaleLayout::swizzled_128x4, s.rows, s.k);
    ASSERT_EQ(static_cast<std::int64_t>(m.scales.size()), shape.bytes()) << describe(s);
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      for (std::int64_t kb = 0; kb < shape.cols; ++kb) {
        const std::uint8_t b = m.scales[static_cast<std::size_t>(swizzled_scale_offset(r, kb, s.k))];
        if (r < s.rows && kb < s.k / 16) {
          ASSERT_NE(b, 0) << "row " << r << ", kb " << kb << "; " << describe(s) << ", seed " << seed;
        } else {
          ASSERT_EQ(b, 0) << "padding at row " << r << ", kb " << kb << "; " << describe(s);
        }
      }
    }
  }
}

TEST(Layout, ConvertScalesRoundTripsAndMatchesQuantizingInEachLayout) {
  const unsigned seed = 23;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(1, 0x7E);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const Shape& s : kShapes) {
    std::vector<std::uint8_t> linear(static_cast<std::size_t>(s.rows * (s.k / 16)));
    for (auto& b : linear) b = static_cast<std::uint8_t>(byte(rng));
    const std::vector<std::uint8_t> swizzled =
        convert_scales(linear.data(), ScaleLayout::linear, ScaleLayout::swizzled_128x4, s.rows, s.k);
    ASSERT_EQ(static_cast<std::int64_t>(swizzled.size()),
              scale_shape(ScaleLayout::swizzled_128x4, s.rows, s.k).bytes());
    const std::vector<std::uint8_t> back =
        convert_scales(swizzled.data(), ScaleLayout::swizzled_128x4, ScaleLayout::linear, s.rows, s.k);
    ASSERT_EQ(back, linear) << describe(s) << ", seed " << seed;
    const std::vector<std::uint8_t> again =
        convert_scales(back.data(), ScaleLayout::linear, ScaleLayout::swizzled_128x4, s.rows, s.k);
    ASSERT_EQ(again, swizzled) << describe(s);

    std::vector<float> x(static_cast<std::size_t>(s.rows * s.k));
    for (float& v : x) v = normal(rng);
    QuantizeOptions opt;
    const Nvfp4Matrix lin = quantize_nvfp4(x, s.rows, s.k, opt);
    opt.layout = ScaleLayout::swizzled_128x4;
    const Nvfp4Matrix swz = quantize_nvfp4(x, s.rows, s.k, opt);
    EXPECT_EQ(swz.codes, lin.codes) << describe(s);
    const Nvfp4Matrix converted = with_layout(lin, ScaleLayout::swizzled_128x4);
    EXPECT_EQ(converted.layout, ScaleLayout::swizzled_128x4);
    EXPECT_EQ(converted.scales, swz.scales) << describe(s) << ", seed " << seed;
    EXPECT_EQ(with_layout(swz, ScaleLayout::linear).scales, lin.scales) << describe(s);
    EXPECT_EQ(dequantize_nvfp4(swz), dequantize_nvfp4(lin)) << describe(s);
  }
}

}  // namespace
}  // namespace fp4gap
