// The packed weight layout of the Hopper prefill kernels: a host simulation of what each consumer
// thread loads and dequantizes, mapped through the wgmma A-fragment definition of the PTX ISA
// (m16n8k16 layout per warp), must reproduce the weight exactly and cover it once.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "fp4gap/decode.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap::prefill {
namespace {

Nvfp4Matrix random_weight(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (float& v : x) v = normal(rng) * 3.0f;
  return quantize_nvfp4(x, rows, cols, QuantizeOptions{});
}

// Row and column, inside a warp's 16 x 16 A tile, of element i (0..7) of a thread's fragment
// (PTX ISA, "Matrix Fragments for mma.m16n8k16", multiplicand A, .bf16; wgmma m64nNk16 gives each
// warp of the warpgroup 16 rows in this layout).
int fragment_row(int lane, int i) { return lane / 4 + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8); }
int fragment_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }

std::string shape(std::int64_t n, std::int64_t k) {
  std::ostringstream os;
  os << "weight [" << n << ", " << k << "]";
  return os.str();
}

void check_packing(std::int64_t n, std::int64_t k, std::uint32_t seed) {
  SCOPED_TRACE(shape(n, k) + ", seed " + std::to_string(seed) +
               "; repro: fp4gap_host_tests --gtest_filter='PrefillWeights.*'");
  const Nvfp4Matrix w = random_weight(n, k, seed);
  const std::vector<float> values = dequantize_nvfp4_unscaled(w);
  const PackedWeights p = pack_weights(w);
  ASSERT_EQ(p.n_tiles, (n + kBlockN - 1) / kBlockN);
  ASSERT_EQ(p.k_blocks, (k + kBlockK - 1) / kBlockK);
  ASSERT_EQ(static_cast<std::int64_t>(p.bytes.size()), p.n_tiles * p.k_blocks * kChunkBytes);

  std::vector<int> visits(static_cast<std::size_t>(n * k), 0);
  for (std::int64_t nt = 0; nt < p.n_tiles; ++nt) {
    for (std::int64_t kb = 0; kb < p.k_blocks; ++kb) {
      const std::uint8_t* chunk = p.bytes.data() + chunk_offset(nt, kb, p.k_blocks);
      for (int wg = 0; wg < kConsumerWarpgroups; ++wg) {
        for (int tid = 0; tid < 128; ++tid) {
          const int warp = tid / 32, lane = tid % 32;
          const int frag_row = 64 * wg + 16 * warp + lane / 4;  // as the kernel computes it
          std::uint32_t scales_lo, scales_hi;
          std::memcpy(&scales_lo, chunk + chunk_scale_offset(frag_row, 0), 4);
          std::memcpy(&scales_hi, chunk + chunk_scale_offset(frag_row + 8, 0), 4);
          for (int j = 0; j < kBlockK / 16; ++j) {
            std::uint32_t q;
            std::memcpy(&q, chunk + chunk_code_word_offset(wg, tid, j), 4);
            // The kernel's arithmetic, verbatim (prefill_gemm.cu, consume()).
            std::uint32_t v[4], regs[4];
            decode::unpack_shuffled_word<decode::Math::w4a16>(q, v);
            const std::uint32_t scale[2] = {
                decode::broadcast_half(decode::scale_multipliers<decode::Math::w4a16>(scales_lo, j % 2), j / 2),
                decode::broadcast_half(decode::scale_multipliers<decode::Math::w4a16>(scales_hi, j % 2), j / 2)};
            for (int r = 0; r < 4; ++r) regs[r] = decode::multiply_pair<decode::Math::w4a16>(v[r], scale[r & 1]);
            for (int i = 0; i < 8; ++i) {
              // The registers hold e2m1 * scale * 2^-7 (the epilogue multiplies alpha by 2^7).
              const float got =
                  bf16_to_float(static_cast<std::uint16_t>((regs[i / 2] >> (16 * (i % 2))) & 0xFFFFu)) * 128.0f;
              const std::int64_t row = nt * kBlockN + 64 * wg + 16 * warp + fragment_row(lane, i);
              const std::int64_t col = kb * kBlockK + 16 * j + fragment_col(lane, i);
              if (row >= n || col >= k) {
                ASSERT_EQ(got, 0.0f) << "padding at row " << row << ", col " << col << " must be zero";
                continue;
              }
              const float want = values[static_cast<std::size_t>(row * k + col)];
              ASSERT_EQ(float_bits(got), float_bits(want))
                  << "row " << row << ", col " << col << " (chunk " << nt << "," << kb << ", warpgroup " << wg
                  << ", thread " << tid << ", step " << j << ", element " << i << "): got " << got << ", want " << want;
              ++visits[static_cast<std::size_t>(row * k + col)];
            }
          }
        }
      }
    }
  }
  for (std::int64_t e = 0; e < n * k; ++e) {
    ASSERT_EQ(visits[static_cast<std::size_t>(e)], 1) << "element (" << e / k << ", " << e % k << ") visited "
                                                      << visits[static_cast<std::size_t>(e)] << " times";
  }
}

TEST(PrefillWeights, FragmentsReproduceTheWeightExactly) {
  check_packing(128, 64, 1);
  check_packing(256, 192, 2);
}

TEST(PrefillWeights, PartialTilesArePaddedWithZeros) {
  check_packing(1, 32, 3);     // one row, half a K block
  check_packing(200, 96, 4);   // N % 128 != 0, K % 64 == 32
  check_packing(130, 160, 5);
}

// Scale bytes quantize never writes but the format allows: zero (its block must read as zeros)
// and negative (its sign goes into the codes); and the NaN byte, refused with its position.
TEST(PrefillWeights, ZeroNegativeAndNanScales) {
  Nvfp4Matrix w = random_weight(130, 64, 8);
  w.scales[static_cast<std::size_t>(3 * 4 + 1)] = 0x00;                      // row 3, block 1: zero
  w.scales[static_cast<std::size_t>(129 * 4 + 2)] |= 0x80;                   // row 129, block 2: negative
  const std::vector<float> values = dequantize_nvfp4_unscaled(w);
  const PackedWeights p = pack_weights(w);
  // Element (row, col) through the kernel's arithmetic: chunk, warpgroup, thread, step, register.
  auto kernel_value = [&](std::int64_t row, std::int64_t col) {
    const std::int64_t nt = row / kBlockN, kb = col / kBlockK;
    const int r = static_cast<int>(row % kBlockN), c = static_cast<int>(col % kBlockK);
    const int wg = r / 64, warp = (r % 64) / 16, g = r % 8, upper = (r % 16) / 8;
    const int j = c / 16, t = (c % 8) / 2, reg = upper + 2 * ((c % 16) / 8), half = c % 2;
    const std::uint8_t* chunk = p.bytes.data() + chunk_offset(nt, kb, p.k_blocks);
    std::uint32_t q, s;
    std::memcpy(&q, chunk + chunk_code_word_offset(wg, warp * 32 + g * 4 + t, j), 4);
    std::memcpy(&s, chunk + chunk_scale_offset(r, 0), 4);
    std::uint32_t v[4];
    decode::unpack_shuffled_word<decode::Math::w4a16>(q, v);
    const std::uint32_t x = decode::multiply_pair<decode::Math::w4a16>(
        v[reg], decode::broadcast_half(decode::scale_multipliers<decode::Math::w4a16>(s, j % 2), j / 2));
    return bf16_to_float(static_cast<std::uint16_t>(x >> (16 * half))) * 128.0f;
  };
  for (std::int64_t col = 16; col < 32; ++col) {
    EXPECT_EQ(kernel_value(3, col), 0.0f) << "zero-scale block, col " << col;
    EXPECT_EQ(values[static_cast<std::size_t>(3 * 64 + col)], 0.0f);
  }
  int nonzero = 0;
  for (std::int64_t col = 32; col < 48; ++col) {
    const float want = values[static_cast<std::size_t>(129 * 64 + col)];
    EXPECT_EQ(float_bits(kernel_value(129, col)), float_bits(want)) << "negative-scale block, col " << col;
    nonzero += want != 0.0f;
  }
  EXPECT_GT(nonzero, 0) << "the negative-scale block must hold nonzero values for the check to mean anything";

  w.scales[static_cast<std::size_t>(5 * 4 + 3)] = 0x7F;
  try {
    pack_weights(w);
    FAIL() << "a NaN scale byte was packed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("row 5, block 3"), std::string::npos) << e.what();
  }
}

TEST(PrefillWeights, SwizzledScalesPackTheSameBytes) {
  const Nvfp4Matrix w = random_weight(160, 128, 6);
  const PackedWeights linear = pack_weights(w);
  const PackedWeights swizzled = pack_weights(with_layout(w, ScaleLayout::swizzled_128x4));
  EXPECT_EQ(linear.bytes, swizzled.bytes);
}

TEST(PrefillWeights, RejectsBadShapes) {
  Nvfp4Matrix w = random_weight(4, 32, 7);
  Nvfp4Matrix bad_cols = w;
  bad_cols.cols = 40;
  EXPECT_THROW(pack_weights(bad_cols), InvalidArgument);
  Nvfp4Matrix short_codes = w;
  short_codes.codes.resize(10);
  try {
    pack_weights(short_codes);
    FAIL() << "short code array accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pack_weights: the weight ["), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("code bytes and"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4gap::prefill
