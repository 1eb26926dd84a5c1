// The decode kernels' dequantization arithmetic and pre-shuffled weight layout, run on the host
// through the same host/device functions the kernels call (include/fp4gap/decode.hpp): every
// value the kernel would feed the tensor cores must be e2m1 * scale * 2^-7 exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fp4gap/decode.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap::decode {
namespace {

std::string repro(std::uint64_t seed) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return "seed=" + std::to_string(seed) + "; repro: fp4gap_host_tests --gtest_filter=" +
         std::string(info->test_suite_name()) + "." + info->name();
}

float half_value(Math m, std::uint32_t reg, int half) {
  const auto h = static_cast<std::uint16_t>(half == 0 ? reg & 0xFFFFu : reg >> 16);
  return m == Math::w4a16 ? bf16_to_float(h) : fp16_to_float(h);
}

std::uint16_t expected_bits(Math m, float v) { return m == Math::w4a16 ? float_to_bf16(v) : float_to_fp16(v); }

// What the tensor cores see for (row, col) of a shuffled weight, computed the way the kernel does.
float shuffled_operand_value(const ShuffledWeight& s, std::int64_t row, std::int64_t col) {
  const std::int64_t nt = row / kTileRows, win = col / kWindowK;
  const int g = static_cast<int>(row % 8), upper = static_cast<int>((row % kTileRows) / 8);
  const int t = static_cast<int>((col % kWindowK) / 32), step = static_cast<int>((col % 32) / 4);
  const int reg = upper + 2 * static_cast<int>((col % 4) / 2), half = static_cast<int>(col % 2);
  const int lane = g * 4 + t;
  const std::int64_t base = shuffled_window_index(nt, win, s.k_windows);
  const std::uint8_t* c = s.codes.data() + base * kWindowCodeBytes + (step / 4) * 512 + lane * 16 + (step % 4) * 4;
  const std::uint32_t word = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<std::uint32_t>(c[3]) << 24);
  const std::uint8_t* sc = s.scales.data() + base * kWindowScaleBytes + lane * 4;
  const std::uint32_t scale_word = sc[0] | (sc[1] << 8) | (sc[2] << 16) | (static_cast<std::uint32_t>(sc[3]) << 24);
  // Scale byte upper + 2 * (step / 4), as the kernel reads it (decode_gemm.cuh, compute_window).
  std::uint32_t regs[4];
  std::uint32_t product;
  if (s.math == Math::w4a16) {
    unpack_shuffled_word<Math::w4a16>(word, regs);
    product = multiply_pair<Math::w4a16>(regs[reg], broadcast_half(scale_multipliers<Math::w4a16>(scale_word, upper), step / 4));
  } else {
    unpack_shuffled_word<Math::w4a4>(word, regs);
    product = multiply_pair<Math::w4a4>(regs[reg], broadcast_half(scale_multipliers<Math::w4a4>(scale_word, upper), step / 4));
  }
  return half_value(s.math, product, half);
}

// The same for the plain layout: the thread's 16 bytes of the row, byte (col % 32) / 2 of them.
float plain_operand_value(Math m, const Nvfp4Matrix& w, std::int64_t row, std::int64_t col) {
  const std::int64_t seg = (row * w.cols + (col / 32) * 32) / 2;  // the thread's 16 bytes
  const int byte_in_seg = static_cast<int>((col % 32) / 2);
  const std::uint8_t* c = w.codes.data() + seg + (byte_in_seg / 4) * 4;
  const std::uint32_t word = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<std::uint32_t>(c[3]) << 24);
  const std::uint8_t sb = w.scales[static_cast<std::size_t>(scale_offset(w.layout, row, col / kBlockSize, w.cols))];
  std::uint32_t product;
  if (m == Math::w4a16) {
    product = multiply_pair<Math::w4a16>(unpack_plain_byte<Math::w4a16>(word, byte_in_seg % 4),
                                         scale_pair_from_e4m3<Math::w4a16>(sb));
  } else {
    product = multiply_pair<Math::w4a4>(unpack_plain_byte<Math::w4a4>(word, byte_in_seg % 4),
                                        scale_pair_from_e4m3<Math::w4a4>(sb));
  }
  return half_value(m, product, static_cast<int>(col % 2));
}

float exact_value(const Nvfp4Matrix& w, std::int64_t row, std::int64_t col) {
  const std::uint8_t byte = w.codes[static_cast<std::size_t>(row * (w.cols / 2) + col / 2)];
  const std::uint8_t code = (col % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
  const std::uint8_t sb = w.scales[static_cast<std::size_t>(scale_offset(w.layout, row, col / kBlockSize, w.cols))];
  return e2m1_to_float(code) * e4m3_to_float(sb) * 0x1p-7f;  // exact in float
}

// Random codes, and scale bytes drawn from every non-NaN E4M3 byte (subnormal, zero, negative).
Nvfp4Matrix random_matrix(std::int64_t rows, std::int64_t cols, ScaleLayout layout, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Nvfp4Matrix w;
  w.rows = rows;
  w.cols = cols;
  w.layout = ScaleLayout::linear;
  w.codes.resize(static_cast<std::size_t>(rows * cols / 2));
  for (auto& b : w.codes) b = static_cast<std::uint8_t>(rng());
  w.scales.resize(static_cast<std::size_t>(rows * cols / kBlockSize));
  for (auto& b : w.scales) {
    do {
      b = static_cast<std::uint8_t>(rng());
    } while ((b & 0x7Fu) == 0x7Fu);
  }
  return layout == ScaleLayout::linear ? w : with_layout(w, layout);
}

TEST(DecodeBits, ShuffledPositionsTileEachWordExactly) {
  for (Math m : {Math::w4a16, Math::w4a4}) {
    std::set<int> used;
    for (int reg = 0; reg < 4; ++reg) {
      for (int half = 0; half < 2; ++half) {
        for (int bit = 0; bit < 4; ++bit) {
          const int p = shuffled_bit_position(m, reg, half, bit);
          ASSERT_GE(p, 0) << to_string(m) << " reg " << reg << " half " << half << " bit " << bit;
          ASSERT_LT(p, 32) << to_string(m) << " reg " << reg << " half " << half << " bit " << bit;
          EXPECT_TRUE(used.insert(p).second) << to_string(m) << ": bit " << p << " used twice";
        }
      }
    }
    EXPECT_EQ(used.size(), 32u) << to_string(m);
  }
}

// Each of the 16 codes in each register half, alone in a word: the register gets exactly
// e2m1 * 2^-126 (BF16) or e2m1 * 2^-14 (FP16), every other register and half stays zero.
TEST(DecodeBits, ShuffledWordGivesScaledE2m1InEveryPosition) {
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const float unit = m == Math::w4a16 ? 0x1p-126f : 0x1p-14f;
    for (int reg = 0; reg < 4; ++reg) {
      for (int half = 0; half < 2; ++half) {
        for (std::uint32_t code = 0; code < 16; ++code) {
          std::uint32_t word = 0;
          for (int bit = 0; bit < 4; ++bit) {
            if ((code >> bit) & 1u) word |= 1u << shuffled_bit_position(m, reg, half, bit);
          }
          std::uint32_t out[4];
          if (m == Math::w4a16) {
            unpack_shuffled_word<Math::w4a16>(word, out);
          } else {
            unpack_shuffled_word<Math::w4a4>(word, out);
          }
          const std::uint32_t want = expected_bits(m, e2m1_to_float(static_cast<std::uint8_t>(code)) * unit);
          for (int r = 0; r < 4; ++r) {
            const std::uint32_t expect = r == reg ? want << (16 * half) : 0u;
            EXPECT_EQ(out[r], expect) << to_string(m) << " code " << code << " in reg " << reg << " half " << half
                                      << ", register " << r;
          }
        }
      }
    }
  }
}

TEST(DecodeBits, PlainByteGivesScaledE2m1PairForEveryByte) {
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const float unit = m == Math::w4a16 ? 0x1p-126f : 0x1p-14f;
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
      for (int p = 0; p < 4; ++p) {
        // Fill the other bytes with junk: only byte p may matter.
        const std::uint32_t w = (0xA5C3E1F7u & ~(0xFFu << (8 * p))) | (byte << (8 * p));
        const std::uint32_t got = m == Math::w4a16 ? unpack_plain_byte<Math::w4a16>(w, p) : unpack_plain_byte<Math::w4a4>(w, p);
        const std::uint32_t lo = expected_bits(m, e2m1_to_float(static_cast<std::uint8_t>(byte & 0xFu)) * unit);
        const std::uint32_t hi = expected_bits(m, e2m1_to_float(static_cast<std::uint8_t>(byte >> 4)) * unit);
        EXPECT_EQ(got, lo | (hi << 16)) << to_string(m) << " byte 0x" << std::hex << byte << " at position " << p;
      }
    }
  }
}

// Every non-NaN E4M3 scale times every code, through both scale paths, is e2m1 * scale * 2^-7.
TEST(DecodeBits, ScaleMultiplyIsExactForEveryScaleAndCode) {
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const float unit = m == Math::w4a16 ? 0x1p-126f : 0x1p-14f;
    for (std::uint32_t sb = 0; sb < 256; ++sb) {
      if ((sb & 0x7Fu) == 0x7Fu) continue;
      const std::uint32_t from_e4m3 = m == Math::w4a16 ? scale_pair_from_e4m3<Math::w4a16>(sb) : scale_pair_from_e4m3<Math::w4a4>(sb);
      EXPECT_EQ(half_value(m, from_e4m3, 0), e4m3_to_float(static_cast<std::uint8_t>(sb)) * (m == Math::w4a16 ? 0x1p119f : 0x1p7f))
          << to_string(m) << " scale byte 0x" << std::hex << sb;
      EXPECT_EQ(from_e4m3 >> 16, from_e4m3 & 0xFFFFu);
      for (std::uint32_t code = 0; code < 16; ++code) {
        const std::uint32_t v = expected_bits(m, e2m1_to_float(static_cast<std::uint8_t>(code)) * unit);
        const std::uint32_t got = m == Math::w4a16 ? multiply_pair<Math::w4a16>(v | (v << 16), from_e4m3)
                                                   : multiply_pair<Math::w4a4>(v | (v << 16), from_e4m3);
        const float want = e2m1_to_float(static_cast<std::uint8_t>(code)) * e4m3_to_float(static_cast<std::uint8_t>(sb)) * 0x1p-7f;
        EXPECT_EQ(half_value(m, got, 0), want) << to_string(m) << " code " << code << " scale 0x" << std::hex << sb;
        EXPECT_EQ(half_value(m, got, 1), want) << to_string(m) << " code " << code << " scale 0x" << std::hex << sb;
      }
    }
  }
}

// The two-per-register multipliers that the prefill kernel reads through HMUL2's half selectors
// give scale_pair's multiplier for every byte value in every byte position, the other bytes
// arbitrary (a carry between halves or bytes would change a neighbour).
TEST(DecodeBits, TwoScaleMultipliersPerRegisterMatchScalePair) {
  std::uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (std::uint32_t value = 0; value < 256; ++value) {
    for (int b = 0; b < 4; ++b) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::uint32_t word = (next() & ~(0xFFu << (8 * b))) | (value << (8 * b));
        EXPECT_EQ(broadcast_half(scale_multipliers<Math::w4a16>(word, b % 2), b / 2), scale_pair<Math::w4a16>(word, b))
            << "w4a16 word 0x" << std::hex << word << " byte " << b;
        EXPECT_EQ(broadcast_half(scale_multipliers<Math::w4a4>(word, b % 2), b / 2), scale_pair<Math::w4a4>(word, b))
            << "w4a4 word 0x" << std::hex << word << " byte " << b;
      }
    }
  }
  EXPECT_EQ(broadcast_half(0x12345678u, 0), 0x56785678u);
  EXPECT_EQ(broadcast_half(0x12345678u, 1), 0x12341234u);
}

// One 16-row x 4096-column weight whose 4096 scale blocks hold every non-NaN E4M3 byte in turn:
// the shuffled encoding of each, applied to every code, gives e2m1 * scale * 2^-7.
TEST(DecodeLayout, ShuffledScaleEncodingCoversEveryE4m3Byte) {
  std::vector<std::uint8_t> bytes;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) != 0x7F) bytes.push_back(static_cast<std::uint8_t>(b));
  }
  Nvfp4Matrix w;
  w.rows = 16;
  w.cols = 4096;
  w.codes.resize(static_cast<std::size_t>(w.rows * w.cols / 2));
  for (std::size_t i = 0; i < w.codes.size(); ++i) w.codes[i] = static_cast<std::uint8_t>(i * 37 + (i >> 8));
  w.scales.resize(static_cast<std::size_t>(w.rows * w.cols / kBlockSize));
  for (std::size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = bytes[i % bytes.size()];
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const ShuffledWeight s = shuffle_weight_for_decode(w, m);
    for (std::int64_t r = 0; r < w.rows; ++r) {
      for (std::int64_t c = 0; c < w.cols; ++c) {
        ASSERT_EQ(shuffled_operand_value(s, r, c), exact_value(w, r, c))
            << to_string(m) << " row " << r << " col " << c << " scale byte 0x" << std::hex
            << static_cast<int>(w.scales[static_cast<std::size_t>(r * (w.cols / 16) + c / 16)]);
      }
    }
  }
}

// Random matrices of awkward shapes (N not a multiple of 16, K not a multiple of 128), both scale
// layouts: every value through the shuffled and the plain path, and zero padding.
TEST(DecodeLayout, ShuffledAndPlainPathsReproduceEveryValue) {
  struct Shape {
    std::int64_t rows, cols;
  };
  std::uint64_t seed = 1000;
  for (const Shape sh : {Shape{1, 32}, Shape{17, 96}, Shape{33, 160}, Shape{16, 128}, Shape{130, 416}}) {
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
      ++seed;
      const Nvfp4Matrix w = random_matrix(sh.rows, sh.cols, layout, seed);
      for (Math m : {Math::w4a16, Math::w4a4}) {
        const ShuffledWeight s = shuffle_weight_for_decode(w, m);
        ASSERT_EQ(s.n_tiles, ceil_div(sh.rows, 16));
        ASSERT_EQ(s.k_windows, ceil_div(sh.cols, 128));
        ASSERT_EQ(static_cast<std::int64_t>(s.codes.size()), s.n_tiles * s.k_windows * kWindowCodeBytes);
        ASSERT_EQ(static_cast<std::int64_t>(s.scales.size()), s.n_tiles * s.k_windows * kWindowScaleBytes);
        for (std::int64_t r = 0; r < s.n_tiles * kTileRows; ++r) {
          for (std::int64_t c = 0; c < s.k_windows * kWindowK; ++c) {
            const bool inside = r < w.rows && c < w.cols;
            const float want = inside ? exact_value(w, r, c) : 0.0f;
            ASSERT_EQ(shuffled_operand_value(s, r, c), want)
                << to_string(m) << " " << to_string(layout) << " [" << sh.rows << ", " << sh.cols << "] row " << r
                << " col " << c << " " << repro(seed);
            if (inside) {
              ASSERT_EQ(plain_operand_value(m, w, r, c), want)
                  << "plain " << to_string(m) << " " << to_string(layout) << " row " << r << " col " << c << " "
                  << repro(seed);
            }
          }
        }
      }
    }
  }
}

TEST(DecodeLayout, BothScaleLayoutsShuffleToTheSameBytes) {
  const Nvfp4Matrix lin = random_matrix(40, 224, ScaleLayout::linear, 77);
  const Nvfp4Matrix swz = with_layout(lin, ScaleLayout::swizzled_128x4);
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const ShuffledWeight a = shuffle_weight_for_decode(lin, m), b = shuffle_weight_for_decode(swz, m);
    EXPECT_EQ(a.codes, b.codes) << to_string(m);
    EXPECT_EQ(a.scales, b.scales) << to_string(m);
  }
}

TEST(DecodeLayout, ZeroAndNegativeScalesAreFoldedIntoCodes) {
  Nvfp4Matrix w;
  w.rows = 16;
  w.cols = 32;
  w.codes.assign(16 * 16, 0x77);  // every code +6
  w.scales.assign(16 * 2, 0x38);  // 1.0
  w.scales[0] = 0x00;             // row 0, block 0: zero scale, nonzero codes -> zero values
  w.scales[1] = 0xB8;             // row 0, block 1: -1.0 -> -6 * 2^-7
  w.scales[2] = 0x80;             // row 1, block 0: -0
  for (Math m : {Math::w4a16, Math::w4a4}) {
    const ShuffledWeight s = shuffle_weight_for_decode(w, m);
    for (std::int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(shuffled_operand_value(s, 0, c), 0.0f) << to_string(m) << " col " << c;
      EXPECT_EQ(shuffled_operand_value(s, 1, c), 0.0f) << to_string(m) << " col " << c;
    }
    for (std::int64_t c = 16; c < 32; ++c) EXPECT_EQ(shuffled_operand_value(s, 0, c), -6.0f * 0x1p-7f) << to_string(m);
    EXPECT_EQ(shuffled_operand_value(s, 2, 5), 6.0f * 0x1p-7f) << to_string(m);
  }
}

TEST(DecodeLayout, RejectsBadWeightsNamingTheRule) {
  Nvfp4Matrix w;
  w.rows = 4;
  w.cols = 48;
  w.codes.assign(4 * 24, 0);
  w.scales.assign(4 * 3, 0x38);
  try {
    shuffle_weight_for_decode(w, Math::w4a16);
    FAIL() << "K = 48 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("K % 32 == 0: [4, 48]"), std::string::npos) << e.what();
  }
  w.cols = 64;
  w.codes.assign(4 * 32, 0);
  w.scales.assign(4 * 4 - 1, 0x38);
  try {
    shuffle_weight_for_decode(w, Math::w4a4);
    FAIL() << "short scales accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("16 linear scale bytes; got 128 and 15"), std::string::npos) << e.what();
  }
  w.scales.assign(4 * 4, 0x38);
  w.scales[2 * 4 + 3] = 0xFF;
  try {
    shuffle_weight_for_decode(w, Math::w4a4);
    FAIL() << "NaN scale accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("NaN byte 0xff at row 2, block 3 (columns 48..63)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp4gap::decode
