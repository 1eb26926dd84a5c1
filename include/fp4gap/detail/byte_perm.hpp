#pragma once
// byte_perm(a, b, s): byte i of the result is byte (s >> 4i) & 7 of the 8-byte value b:a (a holds
// bytes 0..3): the PRMT instruction on the device, the same selection on the host, so that the
// dequantization bit tricks of the kernels are testable without a GPU.
#include <cstdint>

#include "fp4gap/detail/host_device.hpp"

namespace fp4gap {

FP4GAP_HD std::uint32_t byte_perm(std::uint32_t a, std::uint32_t b, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const std::uint64_t pool = (static_cast<std::uint64_t>(b) << 32) | a;
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t sel = (s >> (4 * i)) & 7u;
    r |= static_cast<std::uint32_t>((pool >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
#endif
}

}  // namespace fp4gap
