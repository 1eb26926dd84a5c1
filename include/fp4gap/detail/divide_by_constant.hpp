#pragma once
// Division of 31-bit unsigned numbers by a divisor fixed at launch time, as one 32x32->64-bit
// multiply and a shift: the GPU quantizer turns a flat block index into (row, k-block) for every
// block, and a hardware-less integer division would cost it more than the rest of its index math.
#include <cstdint>

#include "fp4gap/detail/host_device.hpp"

namespace fp4gap {

// With c = ceil(log2 d) and p = 31 + c, magic = ceil(2^p / d) = (2^p + e) / d for some 0 <= e < d,
// and n * magic / 2^p = n/d + n*e / (d * 2^p). For n < 2^31 the second term is below
// 2^31 / 2^p = 2^-c <= 1/d, and the fractional part of n/d is at most (d-1)/d, so the floor of the
// sum is floor(n/d). magic < 2^32 because d > 2^(c-1) (for d = 1, magic = 2^31).
// The shift by p is taken as the high word of (2n) * magic (a shift by 32, since 2n < 2^32)
// followed by a shift by c: floors of divisions by powers of two compose.
struct DivideByConstant {
  std::uint32_t magic = 0;
  std::uint32_t post_shift = 0;  // c

  static DivideByConstant make(std::uint32_t d) {  // d >= 1
    std::uint32_t c = 0;
    while ((std::uint64_t{1} << c) < d) ++c;
    const std::uint64_t pow = std::uint64_t{1} << (31 + c);
    return {static_cast<std::uint32_t>((pow + d - 1) / d), c};
  }
  // floor(n / d) for n < 2^31.
  FP4GAP_HD std::uint32_t divide(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t high = __umulhi(n << 1, magic);  // the same high word, in one instruction
#else
    const auto high = static_cast<std::uint32_t>((static_cast<std::uint64_t>(n << 1) * magic) >> 32);
#endif
    return high >> post_shift;
  }
};

}  // namespace fp4gap
