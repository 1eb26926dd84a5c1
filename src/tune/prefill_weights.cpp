// Packs an NVFP4 weight into the chunk layout the Hopper prefill kernels read (prefill.hpp):
// a byte shuffle, done once when the weight is prepared, so that every consumer thread loads its
// wgmma A fragment codes with one 16-byte shared-memory load and each chunk is one bulk copy.
#include <cstdint>
#include <sstream>
#include <vector>

#include "fp4gap/prefill.hpp"

namespace fp4gap::prefill {

PackedWeights pack_weights(const Nvfp4Matrix& w) {
  if (w.rows < 1 || w.cols < 1 || w.cols % kBlockSize != 0) {
    std::ostringstream os;
    os << "pack_weights needs rows, cols >= 1 and cols % 16 == 0: rows = " << w.rows << ", cols = " << w.cols;
    throw InvalidArgument(os.str());
  }
  const std::int64_t code_bytes = w.rows * w.cols / 2;
  const std::int64_t scale_bytes = scale_shape(w.layout, w.rows, w.cols).bytes();
  if (static_cast<std::int64_t>(w.codes.size()) < code_bytes ||
      static_cast<std::int64_t>(w.scales.size()) < scale_bytes) {
    std::ostringstream os;
    os << "pack_weights: arrays shorter than the shape [" << w.rows << ", " << w.cols << "] needs: codes "
       << w.codes.size() << " < " << code_bytes << " or scales " << w.scales.size() << " < " << scale_bytes;
    throw InvalidArgument(os.str());
  }

  PackedWeights p;
  p.n = w.rows;
  p.k = w.cols;
  p.n_tiles = ceil_div(w.rows, kBlockN);
  p.k_blocks = ceil_div(w.cols, kBlockK);
  p.bytes.assign(static_cast<std::size_t>(p.n_tiles * p.k_blocks * kChunkBytes), 0);

  const std::int64_t row_bytes = w.cols / 2;
  // Packed byte `kbyte` (two codes) of weight row `row`; zero outside the matrix.
  auto code_byte = [&](std::int64_t row, std::int64_t kbyte) -> std::uint8_t {
    if (row >= w.rows || kbyte >= row_bytes) return 0;
    return w.codes[static_cast<std::size_t>(row * row_bytes + kbyte)];
  };

  for (std::int64_t nt = 0; nt < p.n_tiles; ++nt) {
    for (std::int64_t kb = 0; kb < p.k_blocks; ++kb) {
      std::uint8_t* chunk = p.bytes.data() + chunk_offset(nt, kb, p.k_blocks);
      for (int wg = 0; wg < kConsumerWarpgroups; ++wg) {
        for (int tid = 0; tid < 128; ++tid) {
          const int warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
          const std::int64_t r0 = nt * kBlockN + 64 * wg + 16 * warp + g;
          const std::int64_t r1 = r0 + 8;
          for (int j = 0; j < kBlockK / 16; ++j) {
            const std::int64_t kbyte = (kb * kBlockK + 16 * j) / 2;
            std::uint8_t* word = chunk + chunk_code_word_offset(wg, tid, j);
            word[0] = code_byte(r0, kbyte + t);
            word[1] = code_byte(r1, kbyte + t);
            word[2] = code_byte(r0, kbyte + 4 + t);
            word[3] = code_byte(r1, kbyte + 4 + t);
          }
        }
      }
      for (int row = 0; row < kBlockN; ++row) {
        const std::int64_t grow = nt * kBlockN + row;
        for (int j = 0; j < kBlockK / kBlockSize; ++j) {
          const std::int64_t kblock = kb * (kBlockK / kBlockSize) + j;  // 16-element scale block
          if (grow >= w.rows || kblock * kBlockSize >= w.cols) continue;
          chunk[chunk_scale_offset(row, j)] =
              w.scales[static_cast<std::size_t>(scale_offset(w.layout, grow, kblock, w.cols))];
        }
      }
    }
  }
  return p;
}

}  // namespace fp4gap::prefill
