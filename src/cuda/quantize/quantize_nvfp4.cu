// NVFP4 quantization kernels: an amax reduction (when the global scale is not given) and the
// quantizer proper. Every number the CPU quantizer computes is computed here with the same IEEE
// float32 operations, so codes, scales and report are bit-identical to quantize_nvfp4() on the
// host. That needs IEEE division and no flushing of denormals: nvcc's defaults (-prec-div=true,
// -ftz=false), which fast-math would replace.
//
// The quantizer streams 16-element blocks and is meant to run at memory speed, so its per-block
// work is cut to what the recipe needs, without changing a result:
//  - `out` = 1 / (scale * (1/gs)) takes one of 127 values per gs: each thread block tabulates them
//    once with the recipe's own expression (IEEE division), and a block looks its value up;
//  - the block maximum is an integer maximum of the magnitude bits (bit order is value order for
//    non-negative numbers), and the E4M3 rounding of the scale is format.hpp's branch-free
//    float_to_e4m3_sat_nonnegative (block scales are never negative);
//  - an element's code is the sign bit of its input plus format.hpp's
//    e2m1_magnitude_bits_below_seven(|x * out|), and the packing into nibbles is byte permutes;
//    that function needs |x * out| < 7, which a block guarantees exactly when max|x| * out < 7
//    (rounding is monotonic); blocks that fail the test (NaN, Inf, a clamped or subnormal
//    scale) run format.hpp's quantize_block16 itself.
// Loads run ahead of the arithmetic: each thread copies the blocks of its next grid-stride steps
// into shared memory with cp.async (bytes in flight without holding registers) while it computes
// the current one, so the memory system sees enough requests to stay busy.
#include <cuda_fp16.h>

#if defined(__USE_FAST_MATH__)
#error "quantize_nvfp4.cu must not be compiled with --use_fast_math: CPU and GPU codes would differ"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/detail/divide_by_constant.hpp"

namespace fp4gap {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// The table of `out` values is indexed by the scale byte; one entry per thread fills it.
static_assert(kThreads == 256, "one thread per scale byte fills the table of out values");
// Thread blocks of the amax pass: at most this many per SM, so the workspace can hold one partial
// maximum per thread block (2048 threads per SM is the most any CUDA GPU has).
constexpr int kMaxAmaxBlocksPerSm = 2048 / kThreads;
// 16-byte vectors each thread of the amax pass loads before it reduces them (bytes in flight).
constexpr int kAmaxVectorsPerIteration = 8;

// Lives in the workspace, followed by the amax pass's partial maxima (one uint32 per thread
// block). Zero-filled means "nothing seen": first positions are stored as the bitwise complement
// of the flat index so that atomicMax of a zero fill finds the smallest index. Only the report
// path needs the counters zeroed; the plain path never reads them.
struct QuantizeState {
  unsigned long long nan_count;
  unsigned long long inf_count;
  unsigned long long saturated_scales;
  unsigned long long zero_scale_blocks;
  unsigned long long first_nan_complement;
  unsigned long long first_inf_complement;
  unsigned int amax_bits;  // report: float bits of max |x| over finite x (bits order = value order)
  float global_scale;      // the gs the latest quantization used
};

std::uint32_t* amax_partials(void* state) {
  return reinterpret_cast<std::uint32_t*>(static_cast<char*>(state) + sizeof(QuantizeState));
}

// ---- byte permutes ----

// prmt.b32: byte i of the result is byte (selector nibble i & 7) of the pair (b:a); a nibble with
// bit 3 set replicates that byte's top bit instead (0x00 or 0xFF), which turns a sign bit into a
// byte mask. (__byte_perm does not promise the replicate mode.)
__device__ __forceinline__ std::uint32_t permute_bytes(std::uint32_t a, std::uint32_t b, std::uint32_t selector) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// ---- element types: loading a block, its magnitudes and signs from the raw bits ----

template <ElementType kType>
struct Element;

// 16-bit types: two elements per 32-bit word, element 2j in the low half (little endian), which
// matches the packing of the codes. Magnitudes are compared as integers: for a non-negative
// IEEE-style number the bit pattern orders like the value, NaN patterns above Inf.
template <std::uint32_t kExponentMask2, std::uint32_t kKeyOffset2>
struct SixteenBitElement {
  static constexpr int kWords = 8;
  // Report: magnitude bits of the finite halves of w (non-finite halves -> 0), and whether any
  // half is NaN or Inf (exponent all ones).
  __device__ static std::uint32_t finite_magnitudes(std::uint32_t w, std::uint32_t& nonfinite) {
    const std::uint32_t mag = w & 0x7FFF7FFFu;
    const std::uint32_t nf = __vcmpgeu2(mag, kExponentMask2);
    nonfinite |= nf;
    return mag & ~nf;
  }
  __device__ static std::uint32_t max_magnitudes(std::uint32_t a, std::uint32_t b) { return __vmaxu2(a, b); }
  // Both halves' maximum, in the low half.
  __device__ static std::uint32_t fold_halves(std::uint32_t m2) { return max(m2 & 0xFFFFu, m2 >> 16); }

  // Amax pass: per half, magnitude + offset, where the offset carries every NaN/Inf magnitude
  // (exponent all ones) past 0x7FFF, i.e. below zero as a signed 16-bit number, while finite
  // magnitudes keep their order. A signed maximum then ignores NaN and Inf.
  static constexpr std::uint32_t kZeroKeys = kKeyOffset2;
  __device__ static std::uint32_t max_keys(std::uint32_t keys, std::uint32_t w) {
    return __vmaxs2(keys, (w & 0x7FFF7FFFu) + kKeyOffset2);
  }
  __device__ static std::uint32_t magnitude_of_keys(std::uint32_t keys) {
    const std::uint32_t k = __vmaxs2(keys, permute_bytes(keys, keys, 0x1032u)) & 0xFFFFu;
    return k - (kKeyOffset2 & 0xFFFFu);
  }

  // Hot loop: the magnitude bits of the block's largest element in each half (either is NaN's
  // when the block holds a NaN).
  __device__ static std::uint32_t block_magnitudes(const std::uint32_t* w) {
    std::uint32_t m = w[0] & 0x7FFF7FFFu;
    for (int j = 1; j < kWords; ++j) m = __vmaxu2(m, w[j] & 0x7FFF7FFFu);
    return m;
  }
  // Sign bytes of the elements 4q..4q+3: byte i holds element 4q+i's sign in its top bit.
  __device__ static std::uint32_t sign_bytes(const std::uint32_t* w, int q) {
    return permute_bytes(w[2 * q], w[2 * q + 1], 0x7531u);
  }
};

template <>
struct Element<ElementType::bf16> : SixteenBitElement<0x7F807F80u, 0x00800080u> {
  __device__ static float low(std::uint32_t w) { return bits_float(w << 16); }
  __device__ static float high(std::uint32_t w) { return bits_float(w & 0xFFFF0000u); }
  __device__ static float magnitude_to_float(std::uint32_t m) { return bits_float(m << 16); }
  __device__ static float value(const std::uint32_t* w, int i) { return i % 2 == 0 ? low(w[i / 2]) : high(w[i / 2]); }
  // max |x| over the block (NaN when it holds a NaN).
  __device__ static float block_max_abs(const std::uint32_t* w) {
    const std::uint32_t m = block_magnitudes(w);
    return bits_float(max(m & 0xFFFF0000u, m << 16));
  }
};

template <>
struct Element<ElementType::f16> : SixteenBitElement<0x7C007C00u, 0x04000400u> {
  __device__ static float low(std::uint32_t w) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xFFFFu)));
  }
  __device__ static float high(std::uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))); }
  __device__ static float magnitude_to_float(std::uint32_t m) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(m)));
  }
  __device__ static float value(const std::uint32_t* w, int i) { return i % 2 == 0 ? low(w[i / 2]) : high(w[i / 2]); }
  __device__ static float block_max_abs(const std::uint32_t* w) {
    return magnitude_to_float(fold_halves(block_magnitudes(w)));
  }
};

template <>
struct Element<ElementType::f32> {
  static constexpr int kWords = 16;
  __device__ static std::uint32_t finite_magnitudes(std::uint32_t w, std::uint32_t& nonfinite) {
    const std::uint32_t mag = w & 0x7FFFFFFFu;
    const bool nf = mag >= 0x7F800000u;
    nonfinite |= nf ? 1u : 0u;
    return nf ? 0u : mag;
  }
  __device__ static std::uint32_t max_magnitudes(std::uint32_t a, std::uint32_t b) { return max(a, b); }
  __device__ static std::uint32_t fold_halves(std::uint32_t m) { return m; }

  // Amax pass: as for 16-bit types, with one 32-bit key per word.
  static constexpr std::uint32_t kZeroKeys = 0x00800000u;
  __device__ static std::uint32_t max_keys(std::uint32_t keys, std::uint32_t w) {
    return static_cast<std::uint32_t>(
        max(static_cast<std::int32_t>(keys), static_cast<std::int32_t>((w & 0x7FFFFFFFu) + kZeroKeys)));
  }
  __device__ static std::uint32_t magnitude_of_keys(std::uint32_t keys) { return keys - kZeroKeys; }

  __device__ static float block_max_abs(const std::uint32_t* w) {
    std::uint32_t m = w[0] & 0x7FFFFFFFu;
    for (int j = 1; j < kWords; ++j) m = max(m, w[j] & 0x7FFFFFFFu);
    return bits_float(m);
  }
  __device__ static std::uint32_t sign_bytes(const std::uint32_t* w, int q) {
    const std::uint32_t lo = permute_bytes(w[4 * q], w[4 * q + 1], 0x0073u);
    const std::uint32_t hi = permute_bytes(w[4 * q + 2], w[4 * q + 3], 0x0073u);
    return permute_bytes(lo, hi, 0x5410u);
  }
  __device__ static float magnitude_to_float(std::uint32_t m) { return bits_float(m); }
  __device__ static float value(const std::uint32_t* w, int i) { return bits_float(w[i]); }
};

// ---- loads ----

// One 16-element block = kWords/4 aligned 16-byte loads.
template <ElementType kType>
__device__ __forceinline__ void load_block(const void* input, std::uint32_t block, std::uint32_t* w) {
  constexpr int kVectors = Element<kType>::kWords / 4;
  const uint4* src = static_cast<const uint4*>(input) + static_cast<std::uint64_t>(block) * kVectors;
  for (int v = 0; v < kVectors; ++v) {
    const uint4 q = __ldg(src + v);
    w[4 * v] = q.x;
    w[4 * v + 1] = q.y;
    w[4 * v + 2] = q.z;
    w[4 * v + 3] = q.w;
  }
}

// The quantizer's load ring. Each warp walks 32 consecutive blocks per grid-stride step (its
// "span") and copies them with cp.async into its own part of shared memory: lane l copies the
// 16-byte chunks l, l+32, ... of the span, so every copy instruction reads 512 contiguous bytes (a
// lane copying its own block would read every 32-byte sector in two halves, and L2 would serve it
// twice). A lane then reads its own block's chunks, which other lanes copied: cp.async.wait_group
// plus __syncwarp orders that. Chunk c sits at c ^ ((c / 8) % pieces), so that the 8 lanes of a
// quarter-warp touch 8 distinct 16-byte bank groups both when they copy and when they read. In a
// reverse walk lane l handles the span's block 31 - l.
// A lane finds its block's chunk v by XOR-ing 16 * v into the shared address of chunk 0, which
// lands on the right slot only if the ring starts on a multiple of 16 * kPieces bytes (64 for
// f32). A uint4 array is only 16-byte aligned, and the compiler places the ring after the other
// shared variables (at 32 mod 64 in practice), hence the explicit alignment.
template <ElementType kType>
struct alignas(128) WarpLoadRing {
  static constexpr int kPieces = Element<kType>::kWords / 4;  // 16-byte chunks per block
  static constexpr int kChunks = 32 * kPieces;               // per warp and stage
  // Steps in flight per warp = kStages - 1; 32 KiB of shared memory per thread block either way.
  static constexpr int kStages = kPieces == 2 ? 4 : 2;
  static constexpr std::uint32_t kStageBytes = kWarps * kChunks * 16;
  static constexpr std::uint32_t kRingBytes = kStages * kStageBytes;  // a power of two: offsets wrap by masking
  static_assert((kRingBytes & (kRingBytes - 1)) == 0, "stage offsets wrap with a mask");
  static_assert(16 * kPieces <= 128 && kStageBytes % 128 == 0, "every stage starts where XOR-ing 16 * v is exact");
  uint4 chunk[kStages][kWarps][kChunks];
};

template <ElementType kType>
class WarpStream {
 public:
  using Ring = WarpLoadRing<kType>;
  static constexpr int kPieces = Ring::kPieces;

  // first: the warp's first position; stride: positions per grid-stride step.
  __device__ WarpStream(Ring& ring, const void* input, std::uint32_t total_blocks, bool reverse, std::uint32_t first,
                        std::uint32_t stride)
      : total_(total_blocks), reverse_(reverse), lane_(static_cast<int>(threadIdx.x) % 32) {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const auto base = static_cast<std::uint32_t>(__cvta_generic_to_shared(&ring.chunk[0][warp][0]));
    // Chunk lane + 32v sits at slot(lane) + 32v; chunk kPieces * mine + v at slot(kPieces * mine) ^ v
    // (the swizzle term depends only on the bits above the ones v and 32v touch).
    copy_base_ = base + 16u * static_cast<std::uint32_t>(lane_ ^ ((lane_ >> 3) & (kPieces - 1)));
    const int mine = reverse ? 31 - lane_ : lane_;
    const int c = kPieces * mine;
    read_base_ = base + 16u * static_cast<std::uint32_t>(c ^ ((c >> 3) & (kPieces - 1)));
    source_ = static_cast<const uint4*>(input) + lane_ + static_cast<std::int64_t>(span_low(first)) * kPieces;
    const std::int64_t chunks_per_step = static_cast<std::int64_t>(stride) * kPieces;
    source_step_ = reverse ? -chunks_per_step : chunks_per_step;
  }

  // Copies the next span in line (steps are copied in order, one call per step, empty or not) into
  // the stage at stage_offset; step_first is the span's first position.
  __device__ void copy(std::uint32_t stage_offset, std::uint32_t step_first) {
    if (step_first + 31 < total_) {  // the whole span exists
      for (int v = 0; v < kPieces; ++v) copy_chunk(copy_base_ + stage_offset + 512u * v, source_ + 32 * v);
    } else if (step_first < total_) {  // the last, partial span
      const std::int32_t low = span_low(step_first);
      for (int v = 0; v < kPieces; ++v) {
        // A negative block (reverse walk) wraps above total_ - 1.
        const auto block = static_cast<std::uint32_t>(low + (lane_ + 32 * v) / kPieces);
        if (block < total_) copy_chunk(copy_base_ + stage_offset + 512u * v, source_ + 32 * v);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");  // empty or not: group counts match in all lanes
    source_ += source_step_;
  }
  // Waits until the step copied kStages - 1 calls ago has landed, for every lane of the warp.
  __device__ static void wait_oldest() {
    asm volatile("cp.async.wait_group %0;" ::"n"(Ring::kStages - 1) : "memory");
    __syncwarp();
  }
  // This lane's block in the stage at stage_offset.
  __device__ void read(std::uint32_t stage_offset, std::uint32_t* w) const {
    for (int v = 0; v < kPieces; ++v) {
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[4 * v]), "=r"(w[4 * v + 1]), "=r"(w[4 * v + 2]), "=r"(w[4 * v + 3])
                   : "r"((read_base_ + stage_offset) ^ (16u * v))
                   : "memory");
    }
  }
  // The block at a position: reverse walks go from the last block down.
  __device__ std::uint32_t block_at(std::uint32_t position) const { return reverse_ ? total_ - 1 - position : position; }

 private:
  // The lowest block of the span starting at step_first (negative for a reverse walk's last span).
  __device__ std::int32_t span_low(std::uint32_t step_first) const {
    return reverse_ ? static_cast<std::int32_t>(total_ - 1 - step_first) - 31 : static_cast<std::int32_t>(step_first);
  }
  __device__ static void copy_chunk(std::uint32_t dst, const uint4* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
  }

  std::uint32_t total_;
  bool reverse_;
  int lane_;
  std::uint32_t copy_base_ = 0;  // shared address of this lane's copy slot in stage 0
  std::uint32_t read_base_ = 0;  // shared address of this lane's block's first chunk in stage 0
  const uint4* source_ = nullptr;  // this lane's first chunk of the next span to copy
  std::int64_t source_step_ = 0;
};

// ---- one block ----

// Codes of the elements 8h..8h+7 of a block (one 32-bit word of nibbles), given |x * out| < 7 for
// all of them. A magnitude comes back as the bits of 2^23 + code, so even + odd * 16 has both
// codes in its low byte (the exponent bits stay above it); the sign of x * out is the sign of x
// (out >= 0), taken from the input bits.
template <ElementType kType>
__device__ __forceinline__ std::uint32_t encode_eight(const std::uint32_t* w, int h, float out) {
  using E = Element<kType>;
  std::uint32_t pairs[4];
  for (int j = 0; j < 4; ++j) {
    const float even = E::value(w, 8 * h + 2 * j) * out;
    const float odd = E::value(w, 8 * h + 2 * j + 1) * out;
    pairs[j] = e2m1_magnitude_bits_below_seven(fabsf(even)) + e2m1_magnitude_bits_below_seven(fabsf(odd)) * 16u;
  }
  const std::uint32_t magnitudes = permute_bytes(pairs[0] + pairs[1] * 256u, pairs[2] + pairs[3] * 256u, 0x5410u);
  const std::uint32_t signs_lo = E::sign_bytes(w, 2 * h);      // elements 8h..8h+3
  const std::uint32_t signs_hi = E::sign_bytes(w, 2 * h + 1);  // elements 8h+4..8h+7
  const std::uint32_t even_signs = permute_bytes(signs_lo, signs_hi, 0xECA8u);  // 0xFF where negative
  const std::uint32_t odd_signs = permute_bytes(signs_lo, signs_hi, 0x7531u);   // sign in bit 7
  const std::uint32_t signs = (even_signs & 0x0F0F0F0Fu) | (odd_signs & 0xF0F0F0F0u);
  return magnitudes | (signs & 0x88888888u);
}

// Quantizes the block in w: its 8 code bytes into `codes`, its scale byte (and whether it was
// clamped) returned, exactly as quantize_block16 on the block's float values.
template <ElementType kType>
__device__ __forceinline__ BlockQuantResult quantize_block(const std::uint32_t* w, float gs, float inv_gs,
                                                           const float* out_table, uint2& codes) {
  using E = Element<kType>;
  // The recipe's max over fabs, as integers; NaN when the block holds a NaN (the recipe would
  // skip it: such a block takes the recipe's path below).
  const float vmax = E::block_max_abs(w);
  const float sf = gs * (vmax * kReciprocalSix);
  const std::uint8_t sf8 = float_to_e4m3_sat_nonnegative(sf);
  const float out = out_table[sf8];
  if (vmax * out < 7.0f) {  // false for NaN and Inf too
    codes.x = encode_eight<kType>(w, 0, out);
    codes.y = encode_eight<kType>(w, 1, out);
    return {sf8, sf > kE4M3RoundsBeyondMax};
  }
  float x[kBlockSize];
  for (int i = 0; i < kBlockSize; ++i) x[i] = E::value(w, i);
  std::uint8_t packed[kBlockSize / 2];
  const BlockQuantResult r = quantize_block16(x, gs, inv_gs, packed);
  codes.x = static_cast<std::uint32_t>(packed[0]) | (static_cast<std::uint32_t>(packed[1]) << 8) |
            (static_cast<std::uint32_t>(packed[2]) << 16) | (static_cast<std::uint32_t>(packed[3]) << 24);
  codes.y = static_cast<std::uint32_t>(packed[4]) | (static_cast<std::uint32_t>(packed[5]) << 8) |
            (static_cast<std::uint32_t>(packed[6]) << 16) | (static_cast<std::uint32_t>(packed[7]) << 24);
  return r;
}

// ---- reductions of per-thread values (one atomic or store per thread block) ----

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, d);
  return v;
}
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, d));
  return v;
}

// Sums (kMax false) or maxes (kMax true) v over the thread block; the result is valid in thread 0.
// Every thread of the block must call it.
template <bool kMax>
__device__ unsigned long long block_reduce(unsigned long long v) {
  __shared__ unsigned long long partial[kWarps];
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (threadIdx.x % 32 == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < kWarps; ++i) v = kMax ? max(v, partial[i]) : v + partial[i];
  }
  return v;
}

// The maximum of v over the thread block, in every thread. Every thread must call it, once.
__device__ std::uint32_t block_max_everywhere(std::uint32_t v) {
  __shared__ std::uint32_t partial[kWarps];
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, d));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int i = 1; i < kWarps; ++i) v = max(v, partial[i]);
  return v;
}

__device__ void publish_amax(QuantizeState* state, float amax) {
  const unsigned long long bits = block_reduce<true>(float_bits(amax));
  // Skip the atomic when it cannot raise the value: most blocks see a smaller max than the first.
  if (threadIdx.x == 0 && bits > state->amax_bits) atomicMax(&state->amax_bits, static_cast<unsigned int>(bits));
}

// ---- the kernels ----

struct QuantizeParams {
  const void* input;
  std::uint8_t* codes;
  std::uint8_t* scales;
  std::int64_t cols;
  std::uint32_t blocks_per_row;  // cols / 16
  std::uint32_t total_blocks;    // rows * cols / 16
  ScaleLayout layout;
  DivideByConstant row_of_block;       // b / blocks_per_row
  std::uint64_t swizzle_tile_row_bytes;  // 512 * ceil(cols / 64): one 128-row band of the swizzled layout
  // Swizzled padding: rows [rows, padded_rows) for every k-block, then k-blocks
  // [blocks_per_row, padded_blocks_per_row) of the real rows.
  std::uint32_t rows;
  std::uint32_t padded_blocks_per_row;
  std::uint32_t padding_rows_entries;  // (padded_rows - rows) * padded_blocks_per_row
  std::uint32_t padding_entries;       // all padding entries
  bool gs_from_amax;
  float given_gs;
  const std::uint32_t* amax_partials;  // gs_from_amax: the amax pass's per-thread-block maxima
  std::uint32_t amax_partial_count;
  // Walk the blocks from the last to the first: right after the amax pass, whose last reads may
  // still sit in L2, the quantizer then starts on them.
  bool reverse;
  QuantizeState* state;
};

// Scale byte offset of block b (row-major block index).
__device__ __forceinline__ std::uint64_t scale_offset_of_block(const QuantizeParams& p, std::uint32_t b) {
  if (p.layout == ScaleLayout::linear) return b;  // row * blocks_per_row + kb
  const std::uint32_t row = p.row_of_block.divide(b);
  const std::uint32_t kb = b - row * p.blocks_per_row;
  // swizzled_scale_offset of format.hpp, with the division by 128 rows and 4 k-blocks as shifts.
  return static_cast<std::uint64_t>(row >> 7) * p.swizzle_tile_row_bytes +
         ((kb >> 2) * 512u + (row & 31u) * 16u + ((row >> 5) & 3u) * 4u + (kb & 3u));
}

// The amax pass reads the input as consecutive 16-byte vectors (lane-consecutive, so every load
// instruction covers 512 contiguous bytes), several per thread in flight before any is reduced.
template <ElementType kType>
__global__ void __launch_bounds__(kThreads) amax_kernel(const uint4* input, std::uint64_t vectors,
                                                       std::uint32_t* partials) {
  using E = Element<kType>;
  std::uint32_t keys = E::kZeroKeys;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  std::uint64_t v = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; v + (kAmaxVectorsPerIteration - 1) * stride < vectors; v += kAmaxVectorsPerIteration * stride) {
    uint4 q[kAmaxVectorsPerIteration];
    for (int u = 0; u < kAmaxVectorsPerIteration; ++u) q[u] = __ldg(input + v + u * stride);
    for (int u = 0; u < kAmaxVectorsPerIteration; ++u) {
      keys = E::max_keys(keys, q[u].x);
      keys = E::max_keys(keys, q[u].y);
      keys = E::max_keys(keys, q[u].z);
      keys = E::max_keys(keys, q[u].w);
    }
  }
  for (; v < vectors; v += stride) {
    const uint4 q = __ldg(input + v);
    keys = E::max_keys(E::max_keys(keys, q.x), q.y);
    keys = E::max_keys(E::max_keys(keys, q.z), q.w);
  }
  const float amax = E::magnitude_to_float(E::magnitude_of_keys(keys));
  const unsigned long long bits = block_reduce<true>(float_bits(amax));
  if (threadIdx.x == 0) partials[blockIdx.x] = static_cast<std::uint32_t>(bits);
}

template <ElementType kType, bool kReport>
__global__ void __launch_bounds__(kThreads, kReport ? 1 : 6) quantize_kernel(QuantizeParams p) {
  using E = Element<kType>;
  constexpr int kWords = E::kWords;
  // A GEMM launched programmatically behind the quantizer (the serving sequence) may start now:
  // it waits for this grid to complete before it reads the activations (griddepcontrol.wait),
  // and meanwhile loads its first weight stages (PERF-LOG run 86).
  cuda::allow_dependent_launch();
  const std::uint32_t stride = gridDim.x * blockDim.x;
  // Step k covers the positions [first + k * stride, first + k * stride + 32) of this warp; lane l
  // handles position first + k * stride + l.
  __shared__ WarpLoadRing<kType> ring;
  constexpr int kStages = WarpLoadRing<kType>::kStages;
  constexpr std::uint32_t kStageBytes = WarpLoadRing<kType>::kStageBytes;
  const std::uint32_t lane = threadIdx.x % 32;
  std::uint32_t first = blockIdx.x * blockDim.x + (threadIdx.x - lane);
  WarpStream<kType> stream(ring, p.input, p.total_blocks, p.reverse, first, stride);
  // The first steps' loads do not depend on gs: issue them before the table is built.
  for (int k = 0; k < kStages - 1; ++k) stream.copy(k * kStageBytes, first + k * stride);

  // format.hpp's rule, on the device: no host round trip between the amax pass and this kernel.
  float gs = p.given_gs;
  if (p.gs_from_amax) {
    std::uint32_t m = 0;
    for (std::uint32_t k = threadIdx.x; k < p.amax_partial_count; k += blockDim.x) m = max(m, p.amax_partials[k]);
    gs = global_scale_from_amax(bits_float(block_max_everywhere(m)));
  }
  const float inv_gs = __fdiv_rn(1.0f, gs);
  __shared__ float out_table[256];
  {
    // quantize_block16's out for scale byte threadIdx.x, by the same expression (IEEE division).
    const auto sf8 = static_cast<std::uint8_t>(threadIdx.x);
    out_table[threadIdx.x] = sf8 == 0 ? 0.0f : __fdiv_rn(1.0f, e4m3_to_float(sf8) * inv_gs);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) p.state->global_scale = gs;
  __syncthreads();

  // Report counters, per thread; combined once per thread block at the end.
  unsigned long long nan_count = 0, inf_count = 0, saturated = 0, zero_blocks = 0;
  unsigned long long first_nan_complement = 0, first_inf_complement = 0;
  std::uint32_t finite_max = 0;

  // Whole warps walk the steps (copies and __syncwarp need every lane); a lane past the end only
  // helps with the copies.
  for (std::uint32_t stage_offset = 0; first < p.total_blocks; first += stride) {
    __syncwarp();  // every lane is done reading the stage that the copy below refills
    // The stage read in the previous step takes the step kStages - 1 ahead.
    stream.copy((stage_offset + (kStages - 1) * kStageBytes) % WarpLoadRing<kType>::kRingBytes,
                first + (kStages - 1) * stride);
    WarpStream<kType>::wait_oldest();
    std::uint32_t w[kWords];
    stream.read(stage_offset, w);
    stage_offset = (stage_offset + kStageBytes) % WarpLoadRing<kType>::kRingBytes;
    const std::uint32_t position = first + lane;
    if (position >= p.total_blocks) continue;
    const std::uint32_t b = stream.block_at(position);

    if constexpr (kReport) {
      std::uint32_t nonfinite = 0;
      for (int j = 0; j < kWords; ++j)
        finite_max = E::max_magnitudes(finite_max, E::finite_magnitudes(w[j], nonfinite));
      if (nonfinite != 0) {  // rare: classify each element
        for (int e = 0; e < kBlockSize; ++e) {
          const float x = E::value(w, e);
          const unsigned long long flat = static_cast<unsigned long long>(b) * kBlockSize + e;
          if (x != x) {
            ++nan_count;
            first_nan_complement = max(first_nan_complement, ~flat);
          } else if (fabsf(x) == INFINITY) {
            ++inf_count;
            first_inf_complement = max(first_inf_complement, ~flat);
          }
        }
      }
    }

    uint2 codes;
    const BlockQuantResult r = quantize_block<kType>(w, gs, inv_gs, out_table, codes);
    // Streaming store: the codes are not read again, so they should not push the input out of L2.
    __stcs(reinterpret_cast<uint2*>(p.codes) + b, codes);
    // Scale bytes fill their sectors over many warps: a plain store keeps the sector in L2 meanwhile.
    p.scales[scale_offset_of_block(p, b)] = r.scale;

    if constexpr (kReport) {
      saturated += r.scale_saturated ? 1 : 0;
      zero_blocks += r.scale == 0 ? 1 : 0;
    }
  }

  // Swizzled padding is written here (as 0) so that no separate fill is needed.
  for (std::uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < p.padding_entries; e += stride) {
    std::uint32_t row, kb;
    if (e < p.padding_rows_entries) {
      row = p.rows + e / p.padded_blocks_per_row;
      kb = e % p.padded_blocks_per_row;
    } else {
      const std::uint32_t q = e - p.padding_rows_entries;
      const std::uint32_t pad = p.padded_blocks_per_row - p.blocks_per_row;
      row = q / pad;
      kb = p.blocks_per_row + q % pad;
    }
    p.scales[swizzled_scale_offset(row, kb, p.cols)] = 0;
  }

  if constexpr (kReport) {
    QuantizeState* s = p.state;
    const unsigned long long counts[4] = {nan_count, inf_count, saturated, zero_blocks};
    unsigned long long* targets[4] = {&s->nan_count, &s->inf_count, &s->saturated_scales, &s->zero_scale_blocks};
    for (int k = 0; k < 4; ++k) {
      const unsigned long long total = block_reduce<false>(counts[k]);
      if (threadIdx.x == 0 && total != 0) atomicAdd(targets[k], total);
    }
    const unsigned long long nan_pos = block_reduce<true>(first_nan_complement);
    if (threadIdx.x == 0 && nan_pos != 0) atomicMax(&s->first_nan_complement, nan_pos);
    const unsigned long long inf_pos = block_reduce<true>(first_inf_complement);
    if (threadIdx.x == 0 && inf_pos != 0) atomicMax(&s->first_inf_complement, inf_pos);
    publish_amax(s, E::magnitude_to_float(E::fold_halves(finite_max)));
  }
}

// Resident thread blocks per SM of each kernel, found once. The workspace constructor fills the
// table, so no launch (which may be under graph capture) is the first to query the runtime.
struct Occupancy {
  int amax[3];
  int quantize[3];
  int quantize_report[3];
};

int resident_blocks(const void* kernel) {
  int resident = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, 0));
  return resident > 0 ? resident : 1;
}

template <ElementType kType>
void fill_occupancy(Occupancy& o) {
  const int t = static_cast<int>(kType);
  o.amax[t] = resident_blocks(reinterpret_cast<const void*>(amax_kernel<kType>));
  o.quantize[t] = resident_blocks(reinterpret_cast<const void*>(quantize_kernel<kType, false>));
  o.quantize_report[t] = resident_blocks(reinterpret_cast<const void*>(quantize_kernel<kType, true>));
}

const Occupancy& occupancy() {
  static const Occupancy table = [] {
    Occupancy o{};
    fill_occupancy<ElementType::f32>(o);
    fill_occupancy<ElementType::f16>(o);
    fill_occupancy<ElementType::bf16>(o);
    return o;
  }();
  return table;
}

// Thread blocks for a grid-stride kernel: enough to fill every SM once, fewer for small work.
unsigned int grid_for(std::int64_t work, int resident_per_sm, int sm_count) {
  const std::int64_t full = static_cast<std::int64_t>(sm_count) * resident_per_sm;
  const std::int64_t needed = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(needed < 1 ? 1 : (needed < full ? needed : full));
}

template <ElementType kType>
void launch_quantize(QuantizeParams& params, std::uint32_t* partials, bool report, int sm_count, cudaStream_t stream) {
  const int t = static_cast<int>(kType);
  const Occupancy& occ = occupancy();
  const std::int64_t work = std::max<std::int64_t>(params.total_blocks, params.padding_entries);
  if (params.gs_from_amax) {
    const std::uint64_t vectors = static_cast<std::uint64_t>(params.total_blocks) * (Element<kType>::kWords / 4);
    const std::int64_t amax_work = static_cast<std::int64_t>(vectors / kAmaxVectorsPerIteration);
    const unsigned int grid = grid_for(amax_work, std::min(occ.amax[t], kMaxAmaxBlocksPerSm), sm_count);
    amax_kernel<kType><<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(params.input), vectors, partials);
    CUDA_CHECK_LAUNCH();
    params.amax_partials = partials;
    params.amax_partial_count = grid;
  }
  if (report) {
    quantize_kernel<kType, true><<<grid_for(work, occ.quantize_report[t], sm_count), kThreads, 0, stream>>>(params);
  } else {
    quantize_kernel<kType, false><<<grid_for(work, occ.quantize[t], sm_count), kThreads, 0, stream>>>(params);
  }
  CUDA_CHECK_LAUNCH();
}

void check_arguments(const void* d_input, ElementType type, std::int64_t rows, std::int64_t cols,
                     std::optional<float> global_scale, const std::uint8_t* d_codes,
                     const std::uint8_t* d_scales) {
  std::ostringstream os;
  if (rows < 1 || cols < 1) {
    os << "quantize_nvfp4_device: rows and cols must be >= 1: rows = " << rows << ", cols = " << cols;
  } else if (cols % kBlockSize != 0) {
    os << "quantize_nvfp4_device: cols % 16 != 0: cols = " << cols << " (NVFP4 blocks are 16 elements)";
  } else if (rows > std::numeric_limits<std::int64_t>::max() / cols ||
             rows * cols / kBlockSize >= (std::int64_t{1} << 31)) {
    os << "quantize_nvfp4_device: rows * cols / 16 >= 2^31 blocks: rows = " << rows << ", cols = " << cols
       << " (the kernel indexes blocks with 32 bits)";
  } else if (type != ElementType::bf16 && type != ElementType::f16 && type != ElementType::f32) {
    os << "quantize_nvfp4_device: unsupported element type " << static_cast<int>(type);
  } else if (d_input == nullptr || d_codes == nullptr || d_scales == nullptr) {
    os << "quantize_nvfp4_device: null device pointer (input " << d_input << ", codes "
       << static_cast<const void*>(d_codes) << ", scales " << static_cast<const void*>(d_scales) << ")";
  } else if (reinterpret_cast<std::uintptr_t>(d_input) % 16 != 0) {
    os << "quantize_nvfp4_device: input address % 16 != 0: " << d_input
       << " (blocks are read with 16-byte loads)";
  } else if (reinterpret_cast<std::uintptr_t>(d_codes) % 8 != 0) {
    os << "quantize_nvfp4_device: codes address % 8 != 0: " << static_cast<const void*>(d_codes)
       << " (a block's 8 code bytes are written with one 8-byte store)";
  } else if (global_scale && !(std::isfinite(*global_scale) && *global_scale > 0.0f)) {
    os << "quantize_nvfp4_device: the global scale must be finite and > 0: gs = " << *global_scale;
  } else if (global_scale && (*global_scale < kMinGlobalScale || *global_scale > kMaxGlobalScale)) {
    os.precision(9);
    os << "quantize_nvfp4_device: global scale outside [2^-119, 2^118] (the quantization recipe would "
          "overflow float32): gs = "
       << *global_scale;
  } else {
    return;
  }
  throw InvalidArgument(os.str());
}

}  // namespace

DeviceQuantizeWorkspace::DeviceQuantizeWorkspace() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  static_cast<void>(occupancy());
  // The state, then one partial maximum per thread block of the amax pass.
  const std::size_t bytes = sizeof(QuantizeState) + sizeof(std::uint32_t) * static_cast<std::size_t>(sm_count_) *
                                                        kMaxAmaxBlocksPerSm;
  CUDA_CHECK(cudaMalloc(&state_, bytes));
  CUDA_CHECK(cudaMemset(state_, 0, bytes));
}

DeviceQuantizeWorkspace::~DeviceQuantizeWorkspace() {
  if (state_ != nullptr) static_cast<void>(cudaFree(state_));
}

DeviceQuantizeWorkspace::DeviceQuantizeWorkspace(DeviceQuantizeWorkspace&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)), sm_count_(other.sm_count_) {}

DeviceQuantizeWorkspace& DeviceQuantizeWorkspace::operator=(DeviceQuantizeWorkspace&& other) noexcept {
  if (this != &other) {
    if (state_ != nullptr) static_cast<void>(cudaFree(state_));
    state_ = std::exchange(other.state_, nullptr);
    sm_count_ = other.sm_count_;
  }
  return *this;
}

const float* DeviceQuantizeWorkspace::device_global_scale() const {
  return &static_cast<const QuantizeState*>(state_)->global_scale;
}

float DeviceQuantizeWorkspace::read_global_scale(void* stream) const {
  float gs = 0.0f;
  const cudaStream_t s = cuda::as_stream(stream);
  CUDA_CHECK(cudaMemcpyAsync(&gs, device_global_scale(), sizeof gs, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return gs;
}

void quantize_nvfp4_device(const void* d_input, ElementType type, std::int64_t rows, std::int64_t cols,
                           ScaleLayout layout, std::optional<float> global_scale, std::uint8_t* d_codes,
                           std::uint8_t* d_scales, DeviceQuantizeWorkspace& workspace, void* stream,
                           QuantizeReport* report_or_null) {
  check_arguments(d_input, type, rows, cols, global_scale, d_codes, d_scales);
  if (workspace.device_state() == nullptr)
    throw InvalidArgument("quantize_nvfp4_device: the workspace was moved from (no device state)");

  auto* state = static_cast<QuantizeState*>(workspace.device_state());
  const cudaStream_t s = cuda::as_stream(stream);
  const bool report = report_or_null != nullptr;

  QuantizeParams p{};
  p.input = d_input;
  p.codes = d_codes;
  p.scales = d_scales;
  p.cols = cols;
  p.blocks_per_row = static_cast<std::uint32_t>(cols / kBlockSize);
  p.total_blocks = static_cast<std::uint32_t>(rows * p.blocks_per_row);
  p.layout = layout;
  p.rows = static_cast<std::uint32_t>(rows);
  if (layout == ScaleLayout::swizzled_128x4) {
    const ScaleShape shape = scale_shape(layout, rows, cols);
    p.padded_blocks_per_row = static_cast<std::uint32_t>(shape.cols);
    p.padding_rows_entries = static_cast<std::uint32_t>((shape.rows - rows) * shape.cols);
    p.padding_entries = static_cast<std::uint32_t>(shape.bytes() - rows * p.blocks_per_row);
  }
  if (layout == ScaleLayout::swizzled_128x4) {
    p.row_of_block = DivideByConstant::make(p.blocks_per_row);
    p.swizzle_tile_row_bytes = static_cast<std::uint64_t>(512 * ceil_div(cols, 64));
  }
  p.gs_from_amax = !global_scale.has_value();
  p.reverse = p.gs_from_amax;
  p.given_gs = global_scale.value_or(0.0f);
  p.state = state;

  // The report's counters start from zero (a memset node is capturable like a kernel). The plain
  // path needs no fill: the amax pass writes every partial the quantizer reads.
  if (report) CUDA_CHECK(cudaMemsetAsync(state, 0, sizeof(QuantizeState), s));
  std::uint32_t* partials = amax_partials(state);

  switch (type) {
    case ElementType::bf16: launch_quantize<ElementType::bf16>(p, partials, report, workspace.sm_count(), s); break;
    case ElementType::f16: launch_quantize<ElementType::f16>(p, partials, report, workspace.sm_count(), s); break;
    case ElementType::f32: launch_quantize<ElementType::f32>(p, partials, report, workspace.sm_count(), s); break;
  }

  if (report) {
    QuantizeState h{};
    CUDA_CHECK(cudaMemcpyAsync(&h, state, sizeof h, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    QuantizeReport& r = *report_or_null;
    r = QuantizeReport{};
    r.nan_count = static_cast<std::int64_t>(h.nan_count);
    r.inf_count = static_cast<std::int64_t>(h.inf_count);
    if (h.first_nan_complement != 0) {
      const auto flat = static_cast<std::int64_t>(~h.first_nan_complement);
      r.first_nan_row = flat / cols;
      r.first_nan_col = flat % cols;
    }
    if (h.first_inf_complement != 0) {
      const auto flat = static_cast<std::int64_t>(~h.first_inf_complement);
      r.first_inf_row = flat / cols;
      r.first_inf_col = flat % cols;
    }
    r.saturated_scales = static_cast<std::int64_t>(h.saturated_scales);
    r.zero_scale_blocks = static_cast<std::int64_t>(h.zero_scale_blocks);
    r.amax = bits_float(h.amax_bits);
  }
}

}  // namespace fp4gap
