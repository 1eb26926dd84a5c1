// The GPU quantizer's hot loop replaces two recipe steps by cheaper functions of format.hpp; each
// must equal the recipe's function on every float32 of the domain it claims. These tests walk
// those domains exhaustively (split over threads), so an equivalence that fails anywhere fails
// here with the first input that differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"

namespace fp4gap {
namespace {

// Calls check(bits) for every bits in [first, last] (inclusive) on all hardware threads; returns
// the smallest bits for which check returned false, or nullopt-like ~0 when none did.
std::uint64_t first_failure(std::uint32_t first, std::uint32_t last,
                            const std::function<bool(std::uint32_t)>& check) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::uint64_t count = std::uint64_t{last} - first + 1;
  std::atomic<std::uint64_t> failure{~std::uint64_t{0}};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::uint64_t begin = first + count * t / threads;
      const std::uint64_t end = first + count * (t + 1) / threads;
      for (std::uint64_t b = begin; b < end; ++b) {
        if (!check(static_cast<std::uint32_t>(b))) {
          std::uint64_t seen = failure.load();
          while (b < seen && !failure.compare_exchange_weak(seen, b)) {
          }
          return;
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return failure.load();
}

std::string hex(std::uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

constexpr std::uint64_t kNone = ~std::uint64_t{0};

TEST(QuantizeEquivalents, E4m3OfNonNegativeMatchesTheRecipeOnEveryNonNegativeFloat) {
  // +0 through +Inf: every non-negative float32 that is not NaN.
  const std::uint64_t bad = first_failure(0u, 0x7F800000u, [](std::uint32_t u) {
    const float v = bits_float(u);
    return float_to_e4m3_sat_nonnegative(v) == float_to_e4m3_sat(v);
  });
  EXPECT_EQ(bad, kNone) << "float_to_e4m3_sat_nonnegative differs at float bits " << hex(bad) << " ("
                        << bits_float(static_cast<std::uint32_t>(bad)) << "): "
                        << int{float_to_e4m3_sat_nonnegative(bits_float(static_cast<std::uint32_t>(bad)))}
                        << " vs recipe "
                        << int{float_to_e4m3_sat(bits_float(static_cast<std::uint32_t>(bad)))}
                        << "; repro: fp4gap_host_tests --gtest_filter=QuantizeEquivalents.*";
}

TEST(QuantizeEquivalents, E4m3OfNonNegativeKeepsPositiveNaNInTheScaleRange) {
  for (std::uint32_t u : {0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu}) {
    EXPECT_EQ(float_to_e4m3_sat_nonnegative(bits_float(u)), 0x7Eu) << hex(u);
  }
}

// The result must be exactly the bits of 2^23 + code, code = the recipe's code & 7.
bool magnitude_bits_match(std::uint32_t u) {
  const float a = bits_float(u);
  const std::uint32_t code = float_to_e2m1(a) & 0x7u;
  return e2m1_magnitude_bits_below_seven(a) == float_bits(8388608.0f) + code;
}

TEST(QuantizeEquivalents, E2m1MagnitudeMatchesTheRecipeOnEveryFloatBelowSeven) {
  const std::uint32_t below_seven = float_bits(7.0f) - 1u;  // [+0, 7)
  const std::uint64_t bad = first_failure(0u, below_seven, magnitude_bits_match);
  EXPECT_EQ(bad, kNone) << "e2m1_magnitude_bits_below_seven differs at float bits " << hex(bad) << " ("
                        << bits_float(static_cast<std::uint32_t>(bad))
                        << "); repro: fp4gap_host_tests --gtest_filter=QuantizeEquivalents.*";
}

// The domain ends at 7 for a reason: from 7 on the uncapped third line reaches 7.5, which rounds
// to 8 (a carry out of the 3-bit code). This pins that the kernel's per-block guard is needed.
TEST(QuantizeEquivalents, E2m1MagnitudeNeedsTheCapFromSevenOn) {
  EXPECT_EQ(e2m1_magnitude_bits_below_seven(6.99f), float_bits(8388608.0f) + 7u);
  EXPECT_EQ(e2m1_magnitude_bits_below_seven(7.0f), float_bits(8388608.0f) + 8u);
  EXPECT_EQ(float_to_e2m1(7.0f), 0x7u);
}

// The GPU's block max ignores every NaN, quiet or signaling, so the recipe must too: a signaling
// NaN after the block's largest element must not drop that element (glibc's fmaxf would), and a
// NaN of either kind in the last position must not make the max NaN.
TEST(QuantizeEquivalents, BlockMaxIgnoresQuietAndSignalingNaN) {
  const float gs = 1.0f, inv_gs = 1.0f;
  for (std::uint32_t nan_bits : {0x7F800001u, 0xFF800001u, 0x7FA00000u, 0x7FC00000u, 0xFFC00000u}) {
    for (int pos : {0, 5, 15}) {
      float with_nan[kBlockSize], with_zero[kBlockSize];
      for (int i = 0; i < kBlockSize; ++i) with_nan[i] = with_zero[i] = 0.125f * static_cast<float>(i % 5);
      with_nan[3] = with_zero[3] = -5.0f;  // the block max, before every NaN position but 0
      with_nan[pos] = bits_float(nan_bits);
      with_zero[pos] = 0.0f;
      std::uint8_t packed_nan[kBlockSize / 2], packed_zero[kBlockSize / 2];
      const BlockQuantResult r_nan = quantize_block16(with_nan, gs, inv_gs, packed_nan);
      const BlockQuantResult r_zero = quantize_block16(with_zero, gs, inv_gs, packed_zero);
      EXPECT_EQ(int{r_nan.scale}, int{r_zero.scale})
          << "NaN bits " << hex(nan_bits) << " at element " << pos
          << "; repro: fp4gap_host_tests --gtest_filter=QuantizeEquivalents.BlockMaxIgnoresQuietAndSignalingNaN";
      EXPECT_EQ(int{r_nan.scale}, int{float_to_e4m3_sat(5.0f * kReciprocalSix)}) << hex(nan_bits) << " at " << pos;
    }
  }
}

}  // namespace
}  // namespace fp4gap
