#pragma once
// Bit-level conversions between float32 and the 16-bit float formats (host side).
#include <cstdint>
#include <cstring>

#include "fp4gap/detail/host_device.hpp"

namespace fp4gap {

FP4GAP_HD std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
FP4GAP_HD float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16 <-> float32. float -> bf16 rounds to nearest even; NaN stays a (quiet) NaN.
float bf16_to_float(std::uint16_t h);
std::uint16_t float_to_bf16(float f);

// IEEE binary16 <-> float32. float -> fp16 rounds to nearest even, overflow gives +-Inf.
float fp16_to_float(std::uint16_t h);
std::uint16_t float_to_fp16(float f);

}  // namespace fp4gap
