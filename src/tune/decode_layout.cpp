// The pre-shuffled weight layout of the decode kernels (include/fp4gap/decode.hpp): the host
// permutation from the SPEC layout, with the scale encoding of scale_pair().
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "fp4gap/decode.hpp"

namespace fp4gap::decode {

std::uint8_t encode_scale_multiplier(std::uint8_t e4m3, Math math) {
  const float magnitude = e4m3_to_float(static_cast<std::uint8_t>(e4m3 & 0x7Fu));
  if (magnitude == 0.0f) return 0;
  if (math == Math::w4a16) {
    const std::uint16_t bits = float_to_bf16(magnitude * 0x1p119f);
    // Every scale in [2^-9, 448] times 2^119 has a biased exponent in 237..254 and 3 mantissa bits.
    if ((bits >> 12) != 0x7u || (bits & 0xFu) != 0) throw std::logic_error("decode: bf16 scale encoding out of range");
    return static_cast<std::uint8_t>(bits >> 4);
  }
  const std::uint16_t bits = float_to_fp16(magnitude * 0x1p7f);
  if ((bits & 0x807Fu) != 0) throw std::logic_error("decode: fp16 scale encoding out of range");
  return static_cast<std::uint8_t>(bits >> 7);
}

std::uint32_t pack_shuffled_word(Math math, const std::uint8_t (&code)[4][2]) {
  std::uint32_t word = 0;
  for (int reg = 0; reg < 4; ++reg) {
    for (int half = 0; half < 2; ++half) {
      for (int bit = 0; bit < 4; ++bit) {
        if ((code[reg][half] >> bit) & 1u) word |= 1u << shuffled_bit_position(math, reg, half, bit);
      }
    }
  }
  return word;
}

MultiplierWeightReader::MultiplierWeightReader(const Nvfp4Matrix& w, const char* who) : w_(w), who_(who) {
  const std::int64_t code_bytes = w.rows * w.cols / 2;
  const std::int64_t scale_bytes = scale_shape(w.layout, w.rows, w.cols).bytes();
  if (static_cast<std::int64_t>(w.codes.size()) < code_bytes ||
      static_cast<std::int64_t>(w.scales.size()) < scale_bytes) {
    std::ostringstream os;
    os << who << ": the weight [" << w.rows << ", " << w.cols << "] needs " << code_bytes << " code bytes and "
       << scale_bytes << " " << to_string(w.layout) << " scale bytes; got " << w.codes.size() << " and "
       << w.scales.size();
    throw InvalidArgument(os.str());
  }
}

std::uint8_t MultiplierWeightReader::scale(std::int64_t row, std::int64_t kblock) const {
  if (row >= w_.rows || kblock >= w_.cols / kBlockSize) return 0;
  const std::uint8_t b = w_.scales[static_cast<std::size_t>(scale_offset(w_.layout, row, kblock, w_.cols))];
  if ((b & 0x7Fu) == 0x7Fu) {
    std::ostringstream os;
    os << who_ << ": the weight scale is the E4M3 NaN byte 0x" << std::hex << static_cast<int>(b) << std::dec
       << " at row " << row << ", block " << kblock << " (columns " << kblock * kBlockSize << ".."
       << kblock * kBlockSize + kBlockSize - 1 << ")";
    throw InvalidArgument(os.str());
  }
  return b;
}

std::uint8_t MultiplierWeightReader::code(std::int64_t row, std::int64_t col, std::uint8_t scale) const {
  if (row >= w_.rows || col >= w_.cols || (scale & 0x7Fu) == 0) return 0;
  const std::uint8_t byte = w_.codes[static_cast<std::size_t>(row * (w_.cols / 2) + col / 2)];
  const std::uint8_t code = (col % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
  return static_cast<std::uint8_t>(code ^ ((scale & 0x80u) >> 4));
}

ShuffledWeight shuffle_weight_for_decode(const Nvfp4Matrix& w, Math math) {
  if (w.rows < 1 || w.cols < 1 || w.cols % 32 != 0) {
    std::ostringstream os;
    os << "decode weight needs rows >= 1 and K % 32 == 0: [" << w.rows << ", " << w.cols
       << "] (the kernels read 32 columns per thread)";
    throw InvalidArgument(os.str());
  }
  const MultiplierWeightReader read(w, "shuffle_weight_for_decode");  // checks the arrays' lengths

  ShuffledWeight s;
  s.math = math;
  s.n = w.rows;
  s.k = w.cols;
  s.n_tiles = ceil_div(w.rows, kTileRows);
  s.k_windows = ceil_div(w.cols, kWindowK);
  const std::int64_t windows = s.n_tiles * s.k_windows;
  s.codes.assign(static_cast<std::size_t>(windows * kWindowCodeBytes), 0);
  s.scales.assign(static_cast<std::size_t>(windows * kWindowScaleBytes), 0);
  for (std::int64_t nt = 0; nt < s.n_tiles; ++nt) {
    for (std::int64_t win = 0; win < s.k_windows; ++win) {
      const std::int64_t base = shuffled_window_index(nt, win, s.k_windows);
      std::uint8_t* codes = s.codes.data() + base * kWindowCodeBytes;
      std::uint8_t* scales = s.scales.data() + base * kWindowScaleBytes;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        // Scale b of the lane: row g + 8 * (b & 1), block 2t + (b >> 1) of the window.
        std::uint8_t scale_bytes_of_lane[4];
        for (int b = 0; b < 4; ++b) {
          const std::int64_t row = nt * kTileRows + g + 8 * (b & 1);
          const std::int64_t kb = win * (kWindowK / kBlockSize) + 2 * t + (b >> 1);
          scale_bytes_of_lane[b] = read.scale(row, kb);
          scales[lane * 4 + b] = encode_scale_multiplier(scale_bytes_of_lane[b], math);
        }
        for (int step = 0; step < 8; ++step) {
          std::uint8_t code[4][2];
          for (int reg = 0; reg < 4; ++reg) {
            const std::int64_t row = nt * kTileRows + g + 8 * (reg & 1);
            const std::uint8_t sb = scale_bytes_of_lane[(reg & 1) + 2 * (step / 4)];
            for (int half = 0; half < 2; ++half) {
              const std::int64_t col = win * kWindowK + 32 * t + 4 * step + 2 * (reg >> 1) + half;
              code[reg][half] = read.code(row, col, sb);
            }
          }
          const std::uint32_t word = pack_shuffled_word(math, code);
          const int at = (step / 4) * 512 + lane * 16 + (step % 4) * 4;
          for (int b = 0; b < 4; ++b) codes[at + b] = static_cast<std::uint8_t>(word >> (8 * b));
        }
      }
    }
  }
  return s;
}

}  // namespace fp4gap::decode
