#pragma once
// Decode GEMM (M <= 64): the host-side contract of the mma.sync NVFP4-weight kernels in
// src/cuda/decode. Problem shapes and launch-argument rules, the closed list of tile
// configurations, the split-K policy, the pre-shuffled weight layout, and the FP4 -> BF16/FP16
// bit arithmetic the kernels run. The arithmetic is host/device so host tests check it exhaustively.
//
// Operand roles. D[M, N] = alpha * A[M, K] * B[N, K]^T with B the NVFP4 weight. The kernels compute
// D^T = B * A^T with mma.sync m16n8k16: 16 weight rows are the mma's A operand (M-dim 16) and the
// few activation rows its N-dim (8 per tile), so M = 1..64 wastes at most 7 rows per tile.
//
// K mapping. K is cut into windows of 128. In a window, the thread with threadID_in_group t
// (lane % 4) owns k = 32t .. 32t+31 for its two weight rows (groupID and groupID + 8): 16 bytes of
// codes per row, one 16-byte load in the plain layout. mma step s (0..7) of the window gives the
// mma k-slots of thread t {2t, 2t+1, 2t+8, 2t+9} the columns 32t + 4s + {0, 1, 2, 3}. The
// activation fragment uses the same map, so a thread reads 4 consecutive activations per step.
// Each step's 4 columns lie in one 16-column scale block (block 2t for steps 0..3, 2t+1 for 4..7).
//
// Exact arithmetic (docs/KERNELS-decode.md). A code's 3 magnitude bits placed at BF16 bits 8..6
// (FP16 bits 11..9) with its sign at bit 15 read as e2m1 * 2^-126 (FP16: e2m1 * 2^-14), E2M1's
// subnormal 0.5 landing on a BF16 (FP16) subnormal. One multiply by the block scale times 2^119
// (FP16: 2^7), exact in BF16 (FP16), gives e2m1 * scale * 2^-7, exact and normal in BF16 (in FP16
// it may be subnormal, still exact). The 2^7 per dequantized operand goes into alpha.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/detail/byte_perm.hpp"
#include "fp4gap/detail/host_device.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap::decode {

inline constexpr int kMaxM = 64;                 // the decode kernels serve M <= 64
inline constexpr int kStreamingMaxM = 16;        // choose_plan weighs the streaming kernel up to here
inline constexpr int kTileRows = 16;             // weight rows per mma tile
inline constexpr int kWindowK = 128;             // k columns per window (4 threads x 32)
inline constexpr int kWindowCodeBytes = kTileRows * kWindowK / 2;           // 1024
inline constexpr int kWindowScaleBytes = kTileRows * kWindowK / kBlockSize;  // 128
// Each dequantized operand carries this power of two (e2m1 * scale * 2^-7); the epilogue
// multiplies by alpha * 2^(7 * dequantized operands).
inline constexpr int kOperandExponent = -7;

// W4A16: bf16 activations, weights dequantized to BF16. W4A4: NVFP4 activations and weights,
// both dequantized to FP16 (cheaper than BF16 and just as exact for NVFP4 values).
enum class Math { w4a16, w4a4 };
enum class WeightLayout { plain, shuffled };

constexpr std::string_view to_string(Math m) { return m == Math::w4a16 ? "w4a16" : "w4a4"; }
constexpr std::string_view to_string(WeightLayout l) { return l == WeightLayout::plain ? "plain" : "shuffled"; }

// alpha as the kernel applies it: alpha times 2^7 per dequantized-and-scaled operand.
constexpr double kernel_alpha_factor(Math m) { return m == Math::w4a16 ? 128.0 : 16384.0; }

// ---- Bit arithmetic shared verbatim by the kernels and the host tests ----


FP4GAP_HD constexpr std::uint32_t shift_left(std::uint32_t x, int s) { return s >= 0 ? x << s : x >> -s; }

// Where a dequantized value's bits go in a 32-bit mma operand register (value 0 in the low half).
struct OperandBits {
  std::uint32_t magnitude_mask;  // the 3 magnitude bits of both halves
  std::uint32_t sign_mask;       // bits 15 and 31
  int magnitude_lsb;             // lowest magnitude bit of the low half
};
FP4GAP_HD constexpr OperandBits operand_bits(Math m) {
  return m == Math::w4a16 ? OperandBits{0x01C001C0u, 0x80008000u, 6} : OperandBits{0x0E000E00u, 0x80008000u, 9};
}

// Shuffled layout, one 32-bit word per (lane, mma step): it holds the 8 codes of the lane's 4 A
// fragment registers of that step. Register j's magnitudes are stored at their target positions
// shifted right by `magnitude`, its signs shifted right by `sign` (negative: left), chosen so that
// the 4 registers tile the 32 bits and cost 11 integer operations in all (one register needs only
// a mask; the search is in docs/KERNELS-decode.md).
struct FieldShift {
  int magnitude;
  int sign;
};
FP4GAP_HD constexpr FieldShift field_shift(Math m, int reg) {
  constexpr FieldShift bf16[4] = {{-6, 4}, {0, 0}, {3, 5}, {6, 6}};
  constexpr FieldShift f16[4] = {{-3, 7}, {0, 0}, {5, 15}, {8, 8}};
  return m == Math::w4a16 ? bf16[reg] : f16[reg];
}

// The 4 A-fragment registers of one step from a shuffled word, before the scale multiply:
// e2m1 * 2^-126 in BF16 (w4a16) or e2m1 * 2^-14 in FP16 (w4a4). Register j of the mma fragment:
// j = 0: (row g, k0, k0+1), 1: (row g+8, k0, k0+1), 2: (row g, k0+2, k0+3), 3: (row g+8, k0+2, k0+3).
template <Math M>
FP4GAP_HD void unpack_shuffled_word(std::uint32_t w, std::uint32_t out[4]) {
  constexpr OperandBits bits = operand_bits(M);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 4; ++j) {
    const FieldShift f = field_shift(M, j);
    out[j] = (shift_left(w, f.magnitude) & bits.magnitude_mask) | (shift_left(w, f.sign) & bits.sign_mask);
  }
}

// Plain (SPEC) packed byte `p` of `w` (codes of two consecutive columns, even column in the low
// nibble) as one operand register: low nibble in the low half.
template <Math M>
FP4GAP_HD std::uint32_t unpack_plain_byte(std::uint32_t w, int p) {
  const std::uint32_t z = byte_perm(w, 0u, 0x4440u | static_cast<std::uint32_t>(p));
  const std::uint32_t y = (z * 0x1001u) & 0x000F000Fu;  // low nibble at bits 0..3, high at 16..19
  if constexpr (M == Math::w4a16) {
    // y * 0x1040 = (y << 6) + (y << 12), disjoint: magnitudes land on bits 6..8, signs on 15.
    return (y * 0x1040u) & 0x81C081C0u;
  } else {
    return ((y << 9) & 0x0E000E00u) | ((y << 12) & 0x80008000u);
  }
}

// Shuffled scale bytes. Each holds the scale multiplier (scale * 2^119 in BF16, scale * 2^7 in
// FP16) without the bits that are constant: BF16 bits = 0x7000 | byte << 4 (biased exponents
// 224..255 cover 2^-9 * 2^119 .. 448 * 2^119), FP16 bits = byte << 7. Zero scales encode as 0;
// for BF16 that is not zero, so the shuffle writes zero codes for zero-scale blocks.
// scale_pair(word, b): the multiplier of scale byte b of `word` in both halves of a register.
template <Math M>
FP4GAP_HD std::uint32_t scale_pair(std::uint32_t word, int b) {
  const std::uint32_t x = byte_perm(word, 0u, 0x4040u | static_cast<std::uint32_t>(b) | (static_cast<std::uint32_t>(b) << 8));
  if constexpr (M == Math::w4a16) {
    return x * 16u + 0x70007000u;  // no carries: byte << 4 <= 0xFF0 sits below bit 12
  } else {
    return x << 7;
  }
}

// x & mask, computed as written: the compiler otherwise rewrites (x & m) << s + c as
// ((x << s) & (m << s)) | c, three instructions where the AND and one LEA make two.
FP4GAP_HD std::uint32_t and_before_shift(std::uint32_t x, std::uint32_t mask) {
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  asm("and.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(mask));
  return r;
#else
  return x & mask;
#endif
}

// Two multipliers per register, for a multiply that reads one half of its operand in both lanes
// (HMUL2's .H0_H0 / .H1_H1 operand selectors, which ptxas folds from broadcast_half): the
// multipliers of scale bytes 0 and 2 of `word` (low, high half) for odd == 0, of bytes 1 and 3
// for odd == 1. broadcast_half(scale_multipliers(word, b % 2), b / 2) == scale_pair(word, b), at
// two instructions per two scales where scale_pair takes two per scale.
template <Math M>
FP4GAP_HD std::uint32_t scale_multipliers(std::uint32_t word, int odd) {
  if constexpr (M == Math::w4a16) {
    // Byte << 4 in each half (no carries, as in scale_pair), then the constant exponent bits.
    return (odd != 0 ? (word & 0xFF00FF00u) >> 4 : and_before_shift(word, 0x00FF00FFu) * 16u) + 0x70007000u;
  } else {
    return odd != 0 ? (word & 0xFF00FF00u) >> 1 : (word & 0x00FF00FFu) << 7;
  }
}

// Half `high` (0: bits 0..15, 1: bits 16..31) of x in both halves. On the device written as a
// PTX half move, which ptxas folds into the operand selector of the multiply that reads it.
FP4GAP_HD std::uint32_t broadcast_half(std::uint32_t x, int high) {
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  if (high != 0) {
    asm("{.reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {h, h};}" : "=r"(r) : "r"(x));
  } else {
    asm("{.reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {l, l};}" : "=r"(r) : "r"(x));
  }
  return r;
#else
  const std::uint32_t h = high != 0 ? x >> 16 : x & 0xFFFFu;
  return h | (h << 16);
#endif
}

// The same multiplier from an E4M3 byte (plain layout): exact, NaN kept, negative scales kept.
// Needs float subnormals (nvcc's default -ftz=false): e4m3_to_float is exact everywhere.
template <Math M>
FP4GAP_HD std::uint32_t scale_pair_from_e4m3(std::uint32_t byte) {
  const float f = e4m3_to_float(static_cast<std::uint8_t>(byte)) * (M == Math::w4a16 ? 0x1p119f : 0x1p7f);
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  if constexpr (M == Math::w4a16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(f));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(f));
  }
  return r;
#else
  const std::uint32_t h = M == Math::w4a16 ? float_to_bf16(f) : float_to_fp16(f);
  return h | (h << 16);
#endif
}

// Lane-wise product of two registers of the math's 16-bit type, rounded to nearest even. Used
// only on exact products (and it must keep subnormals: no flush to zero).
template <Math M>
FP4GAP_HD std::uint32_t multiply_pair(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  std::uint32_t d;
  if constexpr (M == Math::w4a16) {
#if __CUDA_ARCH__ >= 900
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    // sm_80 has no bf16x2 multiply; -0 as the addend keeps the sign of a zero product.
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
  } else {
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
#else
  auto to_f = [](std::uint32_t h) {
    return M == Math::w4a16 ? bf16_to_float(static_cast<std::uint16_t>(h)) : fp16_to_float(static_cast<std::uint16_t>(h));
  };
  auto from_f = [](float f) -> std::uint32_t { return M == Math::w4a16 ? float_to_bf16(f) : float_to_fp16(f); };
  const std::uint32_t lo = from_f(to_f(a & 0xFFFFu) * to_f(b & 0xFFFFu));
  const std::uint32_t hi = from_f(to_f(a >> 16) * to_f(b >> 16));
  return lo | (hi << 16);
#endif
}

// One K block of a prefill register-A fragment (src/cuda/prefill): step j's 4 registers from the
// shuffled word words[j], each multiplied by its row's scale of block j (row r0's scale bytes in
// scales_lo, row r0 + 8's in scales_hi, as prefill::pack_weights lays them out).
template <Math M>
FP4GAP_HD void dequant_block_fragments(const std::uint32_t (&words)[4], std::uint32_t scales_lo,
                                       std::uint32_t scales_hi, std::uint32_t (&frag)[4][4]) {
  // Step j's multipliers for rows r0 and r0 + 8: half j / 2 of [row][j % 2].
  const std::uint32_t multipliers[2][2] = {{scale_multipliers<M>(scales_lo, 0), scale_multipliers<M>(scales_lo, 1)},
                                           {scale_multipliers<M>(scales_hi, 0), scale_multipliers<M>(scales_hi, 1)}};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 4; ++j) {
    // Step j's codes (e2m1 * 2^-126) times its rows' scale multipliers.
    std::uint32_t v[4];
    unpack_shuffled_word<M>(words[j], v);
    const std::uint32_t scale[2] = {broadcast_half(multipliers[0][j % 2], j / 2),
                                    broadcast_half(multipliers[1][j % 2], j / 2)};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int r = 0; r < 4; ++r) frag[j][r] = multiply_pair<M>(v[r], scale[r & 1]);
  }
}

// ---- Pre-shuffled weight layout ----
//
// Tiles of 16 rows (rows >= N zero), windows of 128 columns (columns >= K zero).
//   codes:  tile nt, window i at byte (nt * k_windows + i) * 1024: two 512-byte halves h = 0, 1;
//           lane L's 16 bytes of half h at h * 512 + L * 16 hold its words for steps 4h .. 4h+3
//           (field_shift layout), so each half is one fully coalesced 16-byte load per lane.
//   scales: tile nt, window i at byte (nt * k_windows + i) * 128; lane L's 4 bytes at L * 4:
//           scales of (row g, block 2t), (row g+8, block 2t), (row g, block 2t+1), (row g+8, 2t+1)
//           of the window, encoded as in scale_pair.
// A zero scale makes its block's codes zero; a negative scale's sign moves into the codes (exact).
struct ShuffledWeight {
  Math math = Math::w4a16;
  std::int64_t n = 0, k = 0;
  std::int64_t n_tiles = 0, k_windows = 0;
  std::vector<std::uint8_t> codes;   // n_tiles * k_windows * 1024
  std::vector<std::uint8_t> scales;  // n_tiles * k_windows * 128
};

// Accepts either scale layout. Throws InvalidArgument when cols % 32 != 0, the arrays are shorter
// than the shape says, or a scale byte is the E4M3 NaN (0x7F / 0xFF), naming its row and block.
ShuffledWeight shuffle_weight_for_decode(const Nvfp4Matrix& w, Math math);

// The two pieces of the shuffled layout, for other packings of the same words (the prefill
// kernels' chunks). encode_scale_multiplier: the byte scale_pair decodes, for the magnitude of
// a non-NaN E4M3 scale (0 for a zero scale; the caller folds a negative scale's sign into the
// codes). pack_shuffled_word: the word of one (lane, step) from its 8 codes, code[reg][half]
// (register reg of the mma A fragment, half 0 the lower column), each a 4-bit E2M1 code.
std::uint8_t encode_scale_multiplier(std::uint8_t e4m3, Math math);
std::uint32_t pack_shuffled_word(Math math, const std::uint8_t (&code)[4][2]);

// What both packings read from an NVFP4 weight, zero outside the matrix. scale(): the E4M3 byte
// of (row, 16-column block), InvalidArgument for the NaN byte ("<who>: ... NaN byte 0x.. at row
// R, block B (columns ..)"), since the multiplier encoding has no NaN. code(): the E2M1 code of
// (row, col) with a negative block scale's sign folded in, 0 in a zero-scale block (the
// multiplier encoding has no sign and no zero).
// The constructor throws InvalidArgument when the code or scale array is shorter than the shape
// needs ("<who>: the weight [R, C] needs N code bytes and S <layout> scale bytes; got ...").
class MultiplierWeightReader {
 public:
  MultiplierWeightReader(const Nvfp4Matrix& w, const char* who);
  std::uint8_t scale(std::int64_t row, std::int64_t kblock) const;
  std::uint8_t code(std::int64_t row, std::int64_t col, std::uint8_t scale) const;

 private:
  const Nvfp4Matrix& w_;
  const char* who_;
};

// Shuffled-layout positions, for the kernels and tests.
FP4GAP_HD constexpr std::int64_t shuffled_window_index(std::int64_t nt, std::int64_t window, std::int64_t k_windows) {
  return nt * k_windows + window;
}
// Bit position, in the lane's word of one step, of a value's magnitude bit `bit` (0..2) or sign
// (bit == 3), for register `reg` (0..3) and half `half` (0: the lower column).
FP4GAP_HD constexpr int shuffled_bit_position(Math m, int reg, int half, int bit) {
  const OperandBits b = operand_bits(m);
  const FieldShift f = field_shift(m, reg);
  return bit == 3 ? 15 + 16 * half - f.sign : b.magnitude_lsb + bit + 16 * half - f.magnitude;
}

// ---- Tile configurations ----

// One compiled kernel instantiation (per Math and WeightLayout): the list is closed
// (tile_configs()), each entry a template instantiation in src/cuda/decode/decode_gemm.cu.
struct TileConfig {
  int mt = 1;                 // 16-row weight tiles per warp
  int nt = 1;                 // 8-row activation tiles per block: serves M <= 8 * nt
  int warps = 4;              // warps per block, sharing the activations
  int k_warps = 1;            // warps splitting K over the same rows, reduced in shared memory
  int windows_per_chunk = 2;  // 128-column windows per warp per pipeline chunk
  int min_blocks_per_sm = 4;  // __launch_bounds__ minimum: caps registers at 64K / (threads * this)
  // 0: the register-prefetch kernel (next chunk's weights in registers, activations shared by the
  // block in two cp.async stages). S >= 2: the streaming kernel, shuffled weight only: each lane
  // cp.asyncs its own weight and 16-bit activation fragments into a ring of S windows private to
  // its warp (windows_per_chunk is 1); W4A4 activations are first dequantized to FP16 by a pass
  // of their own (Plan::dequantizes_activations).
  int stages = 0;
  bool streaming() const { return stages > 0; }
  // Both maths run on every config; the streaming kernel reads only the shuffled layout.
  bool serves(WeightLayout layout) const { return !streaming() || layout == WeightLayout::shuffled; }
  // Streaming: bytes of one ring slot (weights of mt tiles, B fragments of nt activation tiles).
  std::int64_t stream_slot_bytes() const;

  int row_groups() const { return warps / k_warps; }
  int rows_per_block() const { return row_groups() * mt * kTileRows; }
  int max_m() const { return nt * 8; }
  int threads() const { return warps * 32; }
  int windows_per_block_chunk() const { return windows_per_chunk * k_warps; }
  int chunk_k() const { return windows_per_block_chunk() * kWindowK; }  // K of one block chunk
  // Bytes of one activation row in shared memory: 80 bytes per 32 columns (64 + 16 padding) so
  // that the 4 threads of a quad hit different banks, rounded to 64 mod 128 so that consecutive
  // rows do too (docs/KERNELS-decode.md).
  std::int64_t activation_row_bytes() const;
  // Dynamic shared memory: two activation stages (w4a16, cp.async ring) or one FP16 activation
  // buffer (w4a4, filled from registers), or the warps' rings (streaming), reused after the loop
  // for the k_warps reduction, and the split-K flag.
  std::int64_t smem_bytes(Math math) const;
  std::int64_t reduction_scratch_bytes() const;  // accumulators of the warps with k part > 0
  // e.g. "sm80+ mma.sync w4a16 bf16 x nvfp4(shuffled) -> bf16 mma tile n64 m8 k256, 4 warps x 1 m16, 2 stages"
  std::string name(Math math, WeightLayout layout) const;
  // The block tile, "n<rows> m<max M> k<chunk K>" (e.g. "n64 m8 k256"): part of name(), and the
  // tile column of the sweeps' CSVs (docs/data/decode-sweep-*.csv).
  std::string tile() const;
};

const std::vector<TileConfig>& tile_configs();

// ok, or not_supported naming the bytes needed and available (or the compute capability).
Status check_tile_config(const TileConfig& c, Math math, const DeviceContext& device);

// ---- Problem rules, plans and the split-K policy (plain C++, host-tested) ----

// ok, or invalid_problem naming the rule and the shape: M in [1, 64], N >= 1, K >= 32 with
// K % 32 == 0, and for w4a4 N % 32 == 0 (the cutlass_scaled_fp4_mm contract).
Status check_shape(std::int64_t m, std::int64_t n, std::int64_t k, Math math);

struct Plan {
  Math math = Math::w4a16;
  WeightLayout layout = WeightLayout::shuffled;
  std::int64_t m = 0, n = 0, k = 0;
  int config_index = 0;  // into tile_configs()
  TileConfig config;
  int split_k = 1;
  std::int64_t row_blocks = 0;  // ceil(N / rows_per_block)
  std::int64_t k_windows = 0;   // ceil(K / 128)
  std::int64_t k_chunks = 0;    // ceil(k_windows / windows_per_block_chunk)

  std::int64_t blocks() const { return row_blocks * split_k; }
  // W4A4 on the streaming kernel: a first launch writes the activations as FP16 (e2m1 * scale *
  // 2^-7, exact) to the front of the workspace, which the streaming kernel reads like W4A16's bf16.
  bool dequantizes_activations() const { return math == Math::w4a4 && config.streaming(); }
  std::int64_t activation_workspace_bytes() const;  // M * K * 2 rounded up to 256, or 0
  // The FP16 activations, then (split_k > 1) fp32 partials of every split and one arrival counter
  // per row block; 0 when neither is needed.
  std::int64_t workspace_bytes() const;
  std::int64_t workspace_partial_floats() const;
  std::string describe() const;  // config name plus ", split-k S (C chunks of 128*G per split)"
};

// Chunks [begin, end) of split s: every split gets at most one chunk more than another and none
// is empty while k_chunks >= split_k.
using ChunkRange = ItemRange;
FP4GAP_HD constexpr ChunkRange split_chunk_range(std::int64_t k_chunks, int split_k, int s) {
  return even_part(k_chunks, split_k, s);
}

// A plan for an explicit configuration and split; throws InvalidArgument on a bad shape, a
// config_index outside the list, M above the config's max_m, a streaming config with the plain
// layout, or split_k outside [1, k_chunks].
Plan make_plan(std::int64_t m, std::int64_t n, std::int64_t k, Math math, WeightLayout layout, int config_index,
               int split_k);

// The policy: the kernel families (W4A16, shuffled weight, M <= kStreamingMaxM: streaming; W4A4,
// shuffled weight, M <= kStreamingMaxM: streaming after the activation pass, or register-prefetch,
// whose costs are both fitted; register-prefetch otherwise), in each the smallest activation tile
// holding M, then the configuration and split-K factor minimising the cost model
// (register-prefetch: the most loaded SM's weight bytes at the bandwidth its resident warps can
// draw, L2 activation and partial-sum traffic; streaming, and register-prefetch with W4A4 at M <=
// 16: per-configuration constants fitted to an H200 sweep, over the sweep's splits only). Throws
// InvalidArgument on a bad shape or when no configuration fits the device (the message names the
// bytes).
Plan choose_plan(std::int64_t m, std::int64_t n, std::int64_t k, Math math, WeightLayout layout,
                 const DeviceContext& device);
// Whether estimate_plan_us for this config and math comes from constants fitted to an H200 sweep
// (streaming; register-prefetch with W4A4 at M <= 16) rather than the unfitted first-principles
// model, which underestimates the register-prefetch kernel several times over.
bool cost_model_is_fitted(const TileConfig& config, Math math);
// The fitted model is linear: estimate_plan_us is the dot product of a plan's features with its
// config's constants (microseconds per unit of each feature), which is what a refit to a sweep
// solves for (tests/host/decode_cost_fit_test.cpp reproduces the W4A4 constants from their sweep).
// Features: 1, [split > 1], split, then streaming: the busiest SM's chunks, the same x (rows - 1),
// the same x max(0, 8 / resident warps - 1); register-prefetch: waves x a block's chunks, the same
// x (rows - 1), the busiest SM's chunks. Both throw InvalidArgument where the model is not fitted.
using FittedCost = std::array<double, 6>;
FittedCost fitted_cost_features(const Plan& plan, const DeviceContext& device);
FittedCost fitted_cost_constants(const TileConfig& config, Math math);
// The model's estimate for a plan, in microseconds on a device like the H200 (for tests/tuning).
double estimate_plan_us(const Plan& plan, const DeviceContext& device);
// Chunks the busiest SM streams when blocks go, in launch order, to the least loaded SM.
double busiest_sm_chunks(const Plan& plan, int sm_count);
// The split-K ladder the tuning sweep measures: 1, 2, 3, 4, then x1.5 (6, 9, 13, 19, 28, ...).
// The policy weighs only these splits for the plans whose cost model is fitted to that sweep.
constexpr int next_swept_split(int split) { return split < 4 ? split + 1 : split * 3 / 2; }

// ---- Launch ----

// Device pointers of one launch. Row-major throughout; pointers 16-byte aligned (scales: 2).
struct GemmArgs {
  const void* a = nullptr;                  // w4a16: bf16 [M, K]; w4a4: NVFP4 codes [M, K/2]
  const std::uint8_t* a_scales = nullptr;   // w4a4: E4M3 scales of A in a_scale_layout
  ScaleLayout a_scale_layout = ScaleLayout::swizzled_128x4;
  const std::uint8_t* w_codes = nullptr;    // plain: [N, K/2]; shuffled: ShuffledWeight::codes
  const std::uint8_t* w_scales = nullptr;   // plain: E4M3 in w_scale_layout; shuffled: ::scales
  ScaleLayout w_scale_layout = ScaleLayout::swizzled_128x4;  // plain only
  float alpha = 1.0f;                       // 1 / (gs_a * gs_b) as users pass it
  void* d = nullptr;                        // [M, N] of out_type
  OutputType out_type = OutputType::bf16;
  void* workspace = nullptr;                // Plan::workspace_bytes(); counters zero before the
  std::int64_t workspace_bytes = 0;         // first launch, left zero by every launch
  // Programmatic dependent launch (sm_90+): the kernel may start while the previous kernel in the
  // stream is still running, reads only the weight before that kernel has completed (prefetch),
  // and waits for it (griddepcontrol.wait) before reading A or writing D or the workspace. So the
  // previous kernel must not write the weight. It also lets the next kernel start early.
  bool programmatic_launch = false;
};

// Throws InvalidArgument naming what is wrong: null or misaligned pointers, a too small workspace.
void check_gemm_args(const Plan& plan, const GemmArgs& args);

// CUDA library: checks, then enqueues the kernel on `stream` (a cudaStream_t). Graph-capturable.
// Launches sharing a workspace must be stream-ordered (the split-K counters).
void launch_gemm(const Plan& plan, const GemmArgs& args, void* stream);
// CUDA library: raises the kernel's dynamic shared-memory limit where the plan needs it. Call once
// per plan before capturing launch_gemm into a graph (launch_gemm calls it too).
void prepare_launch(const Plan& plan);

}  // namespace fp4gap::decode
