// DivideByConstant must give floor(n / d) for every n < 2^31 and every divisor the quantizer can
// meet (blocks per row, 1 .. 2^27). Checked on all divisors up to 2^12 against every n near a
// multiple of d and near 2^31, and on every power of two and its neighbours up to 2^31.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "fp4gap/detail/divide_by_constant.hpp"

namespace fp4gap {
namespace {

constexpr std::uint32_t kLimit = 0x7FFFFFFFu;  // largest n

::testing::AssertionResult divides(std::uint32_t d, std::uint32_t n) {
  const DivideByConstant div = DivideByConstant::make(d);
  if (div.divide(n) == n / d) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n << " / " << d << " gave " << div.divide(n) << ", want " << n / d
                                       << " (magic " << div.magic << ", post shift " << div.post_shift
                                       << "); repro: fp4gap_host_tests --gtest_filter=DivideByConstant.*";
}

// n around multiples of d (where a floor changes), the largest n, and random n.
void check_divisor(std::uint32_t d, std::mt19937& rng) {
  std::vector<std::uint32_t> ns = {0, 1, d - 1, d, d + 1, kLimit, kLimit - 1, kLimit - d};
  const std::uint32_t top_multiple = kLimit / d * d;
  for (std::uint32_t q : {top_multiple, top_multiple - d}) {
    ns.push_back(q);
    ns.push_back(q - 1);
  }
  std::uniform_int_distribution<std::uint32_t> any(0, kLimit);
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t n = any(rng);
    ns.push_back(n);
    ns.push_back(n / d * d);
    if (n / d * d > 0) ns.push_back(n / d * d - 1);
  }
  for (std::uint32_t n : ns) {
    if (n > kLimit) continue;
    ASSERT_TRUE(divides(d, n)) << "seed 7";
  }
}

TEST(DivideByConstant, EveryDivisorUpTo4096) {
  std::mt19937 rng(7);
  for (std::uint32_t d = 1; d <= 4096; ++d) {
    check_divisor(d, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(DivideByConstant, PowersOfTwoAndNeighboursUpTo2To31) {
  std::mt19937 rng(7);
  for (int e = 1; e <= 31; ++e) {
    const std::uint32_t p = std::uint32_t{1} << e;
    for (std::uint32_t d : {p - 1, p, p + 1}) {
      if (d == 0 || d > kLimit) continue;
      check_divisor(d, rng);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(DivideByConstant, EveryNumeratorForAFewDivisors) {
  for (std::uint32_t d : {3u, 385u, 511u}) {
    const DivideByConstant div = DivideByConstant::make(d);
    for (std::uint32_t n = 0; n < (1u << 24); ++n) {
      if (div.divide(n) != n / d) {
        ASSERT_TRUE(divides(d, n));
      }
    }
  }
}

}  // namespace
}  // namespace fp4gap
