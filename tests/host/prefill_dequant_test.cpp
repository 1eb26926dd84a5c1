// The FP4 -> BF16 arithmetic the Hopper prefill kernels run (prefill.hpp), checked bit for bit
// against the format codecs: every scale byte, every code at every position.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/prefill.hpp"

namespace fp4gap::prefill {
namespace {

bool is_e4m3_nan(std::uint32_t byte) { return (byte & 0x7Fu) == 0x7Fu; }

TEST(PrefillDequant, BytePermSelectsBytesOfBothSources) {
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0x7531u), 0x77553311u);
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0x0000u), 0x00000000u);
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0x4444u), 0x44444444u);
  EXPECT_EQ(byte_perm(0xDDCCBBAAu, 0x11223344u, 0x5140u), 0x33BB44AAu);
  // Only the low 3 bits of each selector nibble choose a byte here (bit 3 is never set by the
  // kernels), and only the low 4 nibbles of the selector count.
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0xFFFF3210u), 0x33221100u);
}

TEST(PrefillDequant, ScaleToBf16IsExactForEveryByte) {
  for (std::uint32_t b = 0; b < 256; ++b) {
    if (is_e4m3_nan(b)) continue;
    const std::uint32_t w = e4m3_to_bf16x2(b);
    ASSERT_EQ(w & 0xFFFFu, w >> 16) << "scale byte 0x" << std::hex << b << ": both halves must hold the scale";
    const float want = e4m3_to_float(static_cast<std::uint8_t>(b));
    const float got = bf16_to_float(static_cast<std::uint16_t>(w & 0xFFFFu));
    ASSERT_EQ(float_bits(got), float_bits(want)) << "scale byte 0x" << std::hex << b << ": got " << got
                                                 << ", want " << want;
  }
}

// Expected bf16 bits of element i of a dequantized word: the exact product, which a bf16 holds.
std::uint16_t expected_bits(std::uint32_t q, int i, std::uint32_t scale_byte) {
  const float v = e2m1_to_float(static_cast<std::uint8_t>((q >> (4 * i)) & 0xFu)) *
                  e4m3_to_float(static_cast<std::uint8_t>(scale_byte));
  const std::uint16_t bits = float_to_bf16(v);
  EXPECT_EQ(bf16_to_float(bits), v) << "test premise: E2M1 x E4M3 is exact in bf16";
  return bits;
}

// Checks all 8 elements of dequant_e2m1x8_bf16(q) with different scales for even and odd words.
void check_word(std::uint32_t q, std::uint32_t even_byte, std::uint32_t odd_byte) {
  std::uint32_t out[4];
  dequant_e2m1x8_bf16(q, e4m3_to_bf16x2(even_byte), e4m3_to_bf16x2(odd_byte), out);
  for (int i = 0; i < 8; ++i) {
    const int word = i / 2;
    const std::uint32_t scale = word % 2 == 0 ? even_byte : odd_byte;
    const auto got = static_cast<std::uint16_t>((out[word] >> (16 * (i % 2))) & 0xFFFFu);
    const std::uint16_t want = expected_bits(q, i, scale);
    ASSERT_EQ(got, want) << "q = 0x" << std::hex << q << ", element " << std::dec << i << " (code 0x" << std::hex
                         << ((q >> (4 * i)) & 0xFu) << "), scale byte 0x" << scale << ": got bf16 0x" << got
                         << ", want 0x" << want;
  }
}

TEST(PrefillDequant, EveryCodeAtEveryPositionWithEveryScale) {
  std::mt19937 rng(7);
  for (std::uint32_t scale = 0; scale < 256; ++scale) {
    if (is_e4m3_nan(scale)) continue;
    const std::uint32_t other = (scale * 37u + 11u) & 0xFFu;
    const std::uint32_t odd = is_e4m3_nan(other) ? 0x38u : other;
    for (int pos = 0; pos < 8; ++pos) {
      for (std::uint32_t code = 0; code < 16; ++code) {
        const std::uint32_t background = static_cast<std::uint32_t>(rng());
        const std::uint32_t q = (background & ~(0xFu << (4 * pos))) | (code << (4 * pos));
        check_word(q, scale, odd);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(PrefillDequant, RandomWordsAndScales) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200000; ++trial) {
    const auto q = static_cast<std::uint32_t>(rng());
    std::uint32_t even = rng() & 0xFFu, odd = rng() & 0xFFu;
    if (is_e4m3_nan(even)) even = 0x30u;
    if (is_e4m3_nan(odd)) odd = 0x3Fu;
    check_word(q, even, odd);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace fp4gap::prefill
