// Packs an NVFP4 weight into the chunk layout the Hopper prefill kernels read (prefill.hpp):
// a bit shuffle, done once when the weight is prepared, so that every consumer thread loads its
// wgmma A fragment codes with one 16-byte shared-memory load, each chunk is one bulk copy, and
// each word is the decode kernels' shuffled word (11 integer operations per 8 values to unpack).
#include <cstdint>
#include <cstring>
#include <sstream>
#include <vector>

#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"

namespace fp4gap::prefill {

PackedWeights pack_weights(const Nvfp4Matrix& w) {
  if (w.rows < 1 || w.cols < 1 || w.cols % kBlockSize != 0) {
    std::ostringstream os;
    os << "pack_weights needs rows, cols >= 1 and cols % 16 == 0: rows = " << w.rows << ", cols = " << w.cols;
    throw InvalidArgument(os.str());
  }
  const decode::MultiplierWeightReader read(w, "pack_weights");  // checks the arrays' lengths

  PackedWeights p;
  p.n = w.rows;
  p.k = w.cols;
  p.n_tiles = ceil_div(w.rows, kBlockN);
  p.k_blocks = ceil_div(w.cols, kBlockK);
  p.bytes.assign(static_cast<std::size_t>(p.n_tiles * p.k_blocks * kChunkBytes), 0);

  for (std::int64_t nt = 0; nt < p.n_tiles; ++nt) {
    for (std::int64_t kb = 0; kb < p.k_blocks; ++kb) {
      std::uint8_t* chunk = p.bytes.data() + chunk_offset(nt, kb, p.k_blocks);
      for (int wg = 0; wg < kConsumerWarpgroups; ++wg) {
        for (int tid = 0; tid < 128; ++tid) {
          const int warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
          const std::int64_t r0 = nt * kBlockN + 64 * wg + 16 * warp + g;
          for (int j = 0; j < kBlockK / 16; ++j) {
            // Step j is 16-column block kb * 4 + j; fragment register reg holds row r0 + 8 (reg & 1),
            // columns c0 + 8 (reg >> 1) + half (PTX wgmma A fragment, m16n8k16 layout per warp).
            const std::int64_t kblock = kb * (kBlockK / kBlockSize) + j;
            const std::int64_t c0 = kblock * kBlockSize + 2 * t;
            const std::uint8_t scale[2] = {read.scale(r0, kblock), read.scale(r0 + 8, kblock)};
            std::uint8_t code[4][2];
            for (int reg = 0; reg < 4; ++reg) {
              for (int half = 0; half < 2; ++half) {
                code[reg][half] = read.code(r0 + 8 * (reg & 1), c0 + 8 * (reg >> 1) + half, scale[reg & 1]);
              }
            }
            const std::uint32_t word = decode::pack_shuffled_word(decode::Math::w4a16, code);
            std::memcpy(chunk + chunk_code_word_offset(wg, tid, j), &word, 4);
          }
        }
      }
      for (int row = 0; row < kBlockN; ++row) {
        for (int j = 0; j < kBlockK / kBlockSize; ++j) {
          chunk[chunk_scale_offset(row, j)] = decode::encode_scale_multiplier(
              read.scale(nt * kBlockN + row, kb * (kBlockK / kBlockSize) + j), decode::Math::w4a16);
        }
      }
    }
  }
  return p;
}

}  // namespace fp4gap::prefill
