#include "fp4gap/numeric.hpp"

#include <cmath>

namespace fp4gap {

float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if (std::isnan(f)) {
    // Keep sign and the top payload bits; setting the quiet bit guarantees a nonzero mantissa
    // (a NaN whose payload sits only in the low 16 bits would otherwise become Inf).
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry out of the mantissa correctly bumps the
  // exponent, and past the largest bf16 it lands on Inf, as RNE must.
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 0x1p-24f;  // subnormal: mant * 2^-24, exact
    return bits_float(float_bits(mag) | sign);
  }
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));  // Inf / NaN kept
  return bits_float(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
}

std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) {  // NaN: keep the top payload bits, force quiet so it stays NaN
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((au >> 13) & 0x3FFu));
  }
  const float a = bits_float(au);
  if (a < 0x1p-14f) {
    // Subnormal range: the result is round(a / 2^-24). The scaling by 2^24 is exact, rint rounds
    // half to even, and 1024 correctly becomes the smallest normal (0x0400).
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::rint(a * 0x1p24f)));
  }
  // Normal (or Inf, or overflow): rebias, then round the 13 dropped bits to nearest even. A carry
  // propagates into the exponent; anything >= 65520 ends at 0x7C00 (Inf).
  if (au >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 2^16: Inf
  const std::uint32_t rebased = au - ((127u - 15u) << 23);
  const std::uint32_t rounding = 0xFFFu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

}  // namespace fp4gap
