#pragma once
// NVFP4 element and scale codecs and the scale-factor layouts (SPEC-nvfp4 sections 1, 2, 4).
// Everything here is plain arithmetic usable on the host and, unchanged, in CUDA kernels: the CPU
// reference and the GPU quantizer share these functions, which is what makes them bit-identical.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "fp4gap/detail/host_device.hpp"
#include "fp4gap/numeric.hpp"

namespace fp4gap {

inline constexpr int kBlockSize = 16;         // elements per NVFP4 scale block, along K
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kGlobalScaleNumerator = kE2M1Max * kE4M3Max;  // gs = 2688 / amax

// ---- E2M1 (4-bit): bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa ----

FP4GAP_HD float e2m1_to_float(std::uint8_t code) {
  // Magnitudes of codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const std::uint8_t mag = code & 0x7u;
  const float m = mag < 2 ? 0.5f * static_cast<float>(mag)
                          : static_cast<float>((2 | (mag & 1)) << ((mag >> 1) - 1)) * 0.5f;
  return (code & 0x8u) ? -m : m;
}

// Round to nearest, ties to the even code, saturating at +-6 (the rule of
// cvt.rn.satfinite.e2m1x2.f32). +-Inf -> +-6; NaN -> +6 (code 0x7), as CUDA does; callers that
// must not let NaN pass silently count it themselves (see quantize.hpp). The sign is kept, so a
// negative value that rounds to zero gives -0 (code 0x8).
FP4GAP_HD std::uint8_t float_to_e2m1(float v) {
  // Per binade the code is a line in |v|: 2|v| below 2, |v| + 2 from 2 to 4, |v|/2 + 4 above
  // (each product exact). Adding 2^23 rounds a line to the nearest integer, ties to even, which
  // is the even code; the lines meet at 2 and 4 and the right one is the smallest, so the code
  // is their minimum, capped at 7 (6.0). fmin ignores NaN operands, so NaN gives 7 as well.
  const float a = std::fabs(v);
  constexpr float k = 8388608.0f;  // 2^23
  const float c = std::fmin(std::fmin(a * 2.0f + k, a + (k + 2.0f)), std::fmin(a * 0.5f + (k + 4.0f), k + 7.0f));
  const std::uint32_t mag = float_bits(c) & 0x7u;  // c = 2^23 + code
  const std::uint32_t sign = (v != v) ? 0u : (float_bits(v) >> 28) & 0x8u;  // NaN -> +6, as CUDA does
  return static_cast<std::uint8_t>(sign | mag);
}

// ---- E4M3 (8-bit, bias 7, max 448, 0x7F/0xFF NaN, no Inf) ----

FP4GAP_HD float e4m3_to_float(std::uint8_t b) {
  const std::uint32_t e = (b >> 3) & 0xFu;
  const std::uint32_t m = b & 0x7u;
  float v;
  if (e == 0xFu && m == 0x7u) {
    v = bits_float(0x7FC00000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9, exact
  } else {
    v = bits_float(((e - 7u + 127u) << 23) | (m << 20));
  }
  return (b & 0x80u) ? -v : v;
}

// Round to nearest even, saturating at +-448 (CUDA's __NV_SATFINITE rule; +-Inf -> +-448).
// NaN -> 0x7F. Never produces the NaN byte from a number.
FP4GAP_HD std::uint8_t float_to_e4m3_sat(float v) {
  if (v != v) return 0x7Fu;
  const std::uint32_t u = float_bits(v);
  const std::uint8_t sign = (u >> 31) ? 0x80u : 0x00u;
  const float a = std::fabs(v);
  if (a > kE4M3Max) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0.015625f) {  // below 2^-6: subnormal grid m * 2^-9; a * 512 is exact
    const float q = std::rint(a * 512.0f);  // round half to even (default rounding mode)
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(q));  // q == 8 is 2^-6
  }
  const std::uint32_t au = u & 0x7FFFFFFFu;
  std::uint32_t exp = (au >> 23) - 127u + 7u;  // biased E4M3 exponent, 1..15
  std::uint32_t mant = au & 0x7FFFFFu;
  std::uint32_t q = mant >> 20;
  const std::uint32_t rem = mant & 0xFFFFFu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q == 8u) {
    q = 0;
    ++exp;
  }
  return static_cast<std::uint8_t>(sign | (exp << 3) | q);
}

// ---- One NVFP4 block (SPEC section 3), shared verbatim by the CPU and GPU quantizers ----

// 1/6 rounded to float32, as the recipe's r6.
inline constexpr float kReciprocalSix = 1.0f / 6.0f;

// Scales up to 464 round to 448 by plain RNE (464 is the tie between 448 and 480, and 448 is the
// even code); only above it would rounding need 480, which E4M3 lacks, so only there is a scale
// clamped. The dynamic gs alone puts the amax block at 448 * (1 + a few ulps), which must not
// count as saturated.
inline constexpr float kE4M3RoundsBeyondMax = 464.0f;

struct BlockQuantResult {
  std::uint8_t scale;    // E4M3 byte
  bool scale_saturated;  // the unrounded scale exceeded 464 and was clamped to 448
};

// x: 16 float values. gs: global scale; inv_gs: 1/gs computed once by IEEE division.
// Writes 8 packed bytes (element 2j in the low nibble, 2j+1 in the high nibble).
// NaN elements are ignored by the block max and encode as +6 (code 0x7); callers count them.
// Every operation is an IEEE float32 operation in the recipe's order.
FP4GAP_HD BlockQuantResult quantize_block16(const float* x, float gs, float inv_gs,
                                             std::uint8_t* packed) {
  // A comparison, not std::fmax: glibc's fmaxf returns NaN when an operand is a signaling NaN
  // (IEEE 754-2008 maxNum), which then drops every element before it from the running max, while
  // the GPU's max ignores every NaN. `a > vmax` is false for any NaN, on every platform.
  float vmax = 0.0f;
  for (int i = 0; i < kBlockSize; ++i) {
    const float a = std::fabs(x[i]);
    vmax = a > vmax ? a : vmax;
  }
  const float sf = gs * (vmax * kReciprocalSix);
  const std::uint8_t sf8 = float_to_e4m3_sat(sf);
  const float out = (sf8 == 0) ? 0.0f : 1.0f / (e4m3_to_float(sf8) * inv_gs);
  for (int j = 0; j < kBlockSize / 2; ++j) {
    const std::uint8_t lo = float_to_e2m1(x[2 * j] * out);
    const std::uint8_t hi = float_to_e2m1(x[2 * j + 1] * out);
    packed[j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  return {sf8, sf > kE4M3RoundsBeyondMax};
}

// ---- Cheaper equivalents of two recipe steps, for the GPU quantizer's hot loop ----
// Each equals the recipe's function on the inputs it names; tests/host/quantize_equivalents_test.cpp
// compares them on every float32 of those inputs.

// float_to_e4m3_sat(v) for v >= 0 (+Inf included), without branches: block scales are never
// negative. (A NaN with a clear sign bit gives 0x7E; other inputs give meaningless bytes.)
FP4GAP_HD std::uint8_t float_to_e4m3_sat_nonnegative(float v) {
  const std::uint32_t u = float_bits(v);
  // From 2^-6 up: rounding the float32 mantissa to 3 bits is an integer addition of just under
  // half a unit plus the kept lowest bit (ties go to even); a carry moves into the exponent as it
  // must. Rebiasing 127 -> 7 subtracts 120 << 3, and values above 464 (and +Inf) land beyond
  // 0x7E, the cap.
  std::uint32_t normal = (u + 0x7FFFFu + ((u >> 20) & 1u)) >> 20;
  normal = (normal < 0x43Eu ? normal : 0x43Eu) - 0x3C0u;
  // Below 2^-6 the grid is m * 2^-9 (m <= 8): adding 2^14, whose ulp is 2^-9, rounds v onto it,
  // ties to even, and leaves m in the low mantissa bits.
  const std::uint32_t subnormal = float_bits(v + 16384.0f) - float_bits(16384.0f);
  return static_cast<std::uint8_t>(v < 0.015625f ? subnormal : normal);
}

// The magnitude of float_to_e2m1(v) (its code & 7) for a = |v| < 7, not NaN, as the bit pattern
// of the float 2^23 + code: the code in bits 0..2, bits 3..22 zero. These are float_to_e2m1's
// three lines without its cap at 7: below 7 the third line stays under 7.5 and rounds to at
// most 7, so the cap never binds. The lines are non-negative floats, so the smallest is the
// smallest bit pattern: one integer minimum of three (a single instruction on Hopper) instead of
// three float minimums. Fusing the products into FMAs changes nothing: a * 2 is exact, and so is
// a * 0.5 except for subnormal a, where the line rounds to 2^23 + 4 either way.
FP4GAP_HD std::uint32_t e2m1_magnitude_bits_below_seven(float a) {
  constexpr float k = 8388608.0f;  // 2^23
  const std::uint32_t l1 = float_bits(a * 2.0f + k);
  const std::uint32_t l2 = float_bits(a + (k + 2.0f));
  const std::uint32_t l3 = float_bits(a * 0.5f + (k + 4.0f));
  const std::uint32_t m12 = l1 < l2 ? l1 : l2;
  return m12 < l3 ? m12 : l3;
}

// ---- Global scale ----

// The range of global scales for which the recipe stays finite. Above 2^118, 1/gs times the
// smallest nonzero scale byte (2^-9) underflows past 2^-128, its reciprocal `out` becomes +Inf and
// a zero element times Inf is NaN, which encodes as +6: a silent wrong code. Below 2^-119, 1/gs
// times 448 overflows. Both bounds are far outside real data (dynamic gs lies in
// [2688/FLT_MAX, 2^118] ~ [7.9e-36, 3.3e35]).
inline constexpr float kMaxGlobalScale = 0x1p118f;
inline constexpr float kMinGlobalScale = 0x1p-119f;

// gs = 2688 / amax as a float32 division; 1 when amax == 0 (all-zero tensor; TransformerEngine's
// rule); capped at kMaxGlobalScale when amax is so small (< ~8e-33) that 2688/amax exceeds it.
// amax must be finite and >= 0. Host/device so the GPU quantizer derives the identical gs.
FP4GAP_HD float global_scale_from_amax(float amax) {
  if (amax == 0.0f) return 1.0f;
  const float gs = kGlobalScaleNumerator / amax;
  return gs > kMaxGlobalScale ? kMaxGlobalScale : gs;
}

// ---- Scale-factor layouts (SPEC section 4) ----

enum class ScaleLayout { linear, swizzled_128x4 };

constexpr std::string_view to_string(ScaleLayout l) {
  return l == ScaleLayout::linear ? "linear" : "swizzled";
}

FP4GAP_HD constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
FP4GAP_HD constexpr std::int64_t ceil_div(std::int64_t x, std::int64_t m) { return (x + m - 1) / m; }

// Items [begin, end) of part `part` of `count` items cut into `parts` contiguous parts: each part
// at most one item larger than another, none empty while count >= parts (split-K ranges).
struct ItemRange {
  std::int64_t begin, end;
};
FP4GAP_HD constexpr ItemRange even_part(std::int64_t count, int parts, int part) {
  const std::int64_t base = count / parts, extra = count % parts;
  const std::int64_t begin = part * base + (part < extra ? part : extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

// Shape of the scale array, in bytes, for a [rows, k] NVFP4 matrix (k % 16 == 0).
struct ScaleShape {
  std::int64_t rows;
  std::int64_t cols;
  constexpr std::int64_t bytes() const { return rows * cols; }
};
FP4GAP_HD constexpr ScaleShape scale_shape(ScaleLayout layout, std::int64_t rows, std::int64_t k) {
  const std::int64_t kb = k / kBlockSize;
  return layout == ScaleLayout::linear ? ScaleShape{rows, kb}
                                       : ScaleShape{round_up(rows, 128), round_up(kb, 4)};
}

// Byte offset of the scale of (row, k-block kb) in the SWIZZLED_128x4 layout.
FP4GAP_HD constexpr std::int64_t swizzled_scale_offset(std::int64_t row, std::int64_t kb, std::int64_t k) {
  const std::int64_t kt = ceil_div(k, 64);  // 4-block groups along K, padded
  return ((row / 128) * kt + kb / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + (kb % 4);
}

FP4GAP_HD constexpr std::int64_t scale_offset(ScaleLayout layout, std::int64_t row, std::int64_t kb,
                                              std::int64_t k) {
  return layout == ScaleLayout::linear ? row * (k / kBlockSize) + kb : swizzled_scale_offset(row, kb, k);
}

}  // namespace fp4gap
