#pragma once
// The decode GEMM kernel (M <= 64): D^T = W * A^T with mma.sync m16n8k16, the NVFP4 weight W
// streamed from global memory straight into registers (16-byte loads, one chunk ahead),
// dequantized there exactly (include/fp4gap/decode.hpp), activations staged in shared memory,
// warps of a block optionally splitting K (reduced in shared memory), split-K partials across
// blocks reduced deterministically by the last block of each row block.
// docs/KERNELS-decode.md explains the design; this file is included by decode_gemm.cu only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/grid_dependency.cuh"
#include "fp4gap/decode.hpp"

namespace fp4gap::decode::device {

struct Params {
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;               // w4a16: bf16 [m, k]; w4a4: codes [m, k/2]
  const std::uint8_t* a_scales = nullptr;
  int a_swizzled = 0;
  const std::uint8_t* w_codes = nullptr;
  const std::uint8_t* w_scales = nullptr;
  int w_swizzled = 0;                    // plain layout only
  float alpha = 1.0f;                    // alpha * 2^(7 per dequantized operand)
  void* d = nullptr;
  int out_type = 0;                      // OutputType
  float* partials = nullptr;             // split_k > 1
  unsigned int* counters = nullptr;      // one per row block, zero between launches
  int split_k = 1;
  std::int64_t k_chunks = 0, k_windows = 0, n_tiles = 0;
};

// Bytes of one activation row in shared memory (TileConfig::activation_row_bytes).
constexpr int activation_row_bytes(int windows_per_chunk) {
  int bytes = windows_per_chunk * 4 * 80;
  while (bytes % 128 != 64) bytes += 16;
  return bytes;
}

__device__ __forceinline__ uint4 load_stream_16(const void* p) {
  uint4 r;
  // Read once: keep it out of L1, fetch whole 256-byte L2 lines.
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ std::uint32_t load_stream_4(const void* p) {
  std::uint32_t r;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ std::uint32_t load_u16(const void* p) {
  return __ldg(static_cast<const unsigned short*>(p));
}

// cp.async to a shared-memory address (converted once, outside loops); src-size 0 (valid false)
// writes 16 zero bytes without reading. The .ca (L1-allocating) ones serve the activation window
// a warp copies, which the warps of the other row groups of the block (same k part) read shortly
// after.
__device__ __forceinline__ void cp_async_shared_16(std::uint32_t s, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(global), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  cp_async_shared_16(static_cast<std::uint32_t>(__cvta_generic_to_shared(smem)), global, valid);
}
__device__ __forceinline__ void cp_async_shared_ca_16(std::uint32_t s, const void* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(global), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_shared_ca_4(std::uint32_t s, const void* global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

template <Math M>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (M == Math::w4a16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ std::uint32_t component(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One 16-element NVFP4 activation block (plain codes: `lo` holds columns 0-7, `hi` 8-15, even
// column in the low nibble) as FP16 pairs e2m1 * scale * 2^-7, exact: v[i] holds columns 2i, 2i+1.
// `scale` is the block's E4M3 byte.
__device__ __forceinline__ void dequantize_activation_block(std::uint32_t lo, std::uint32_t hi, std::uint32_t scale,
                                                            std::uint32_t (&v)[8]) {
  const std::uint32_t s = scale_pair_from_e4m3<Math::w4a4>(scale);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = multiply_pair<Math::w4a4>(unpack_plain_byte<Math::w4a4>(i < 4 ? lo : hi, i % 4), s);
}

// One chunk of a warp's weight in registers: per window and m16 tile, 32 bytes of codes and the
// scale word (shuffled: 4 encoded bytes; plain: E4M3 bytes (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)).
template <int MT, int G>
struct WeightRegs {
  uint4 codes[G][MT][2];
  std::uint32_t scales[G][MT];
};

template <Math M, WeightLayout L, int MT, int NT, int WARPS, int WK, int G>
struct Tile {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRowGroups = WARPS / WK;
  static constexpr int kRows = kRowGroups * MT * kTileRows;
  static constexpr int kMPad = NT * 8;
  static constexpr int kChunkWindows = G * WK;  // windows of one block chunk; warp part kp owns G
  static constexpr int kRowBytes = activation_row_bytes(kChunkWindows);
  static constexpr int kActBytes = kMPad * kRowBytes;
  static constexpr int kActBuffers = M == Math::w4a16 ? 2 : 1;
  static constexpr int kScratchBytes = (WARPS - kRowGroups) * MT * NT * 4 * 32 * 4;
  static constexpr int kFlagOffset = kActBuffers * kActBytes > kScratchBytes ? kActBuffers * kActBytes : kScratchBytes;
  // W4A4 activations: 32-column segments per chunk, converted from registers.
  static constexpr int kActSegments = kMPad * kChunkWindows * 4;
  static constexpr int kActSegmentsPerThread = (kActSegments + kThreads - 1) / kThreads;
  static_assert(WARPS % WK == 0, "warps split into row groups x k parts");

  const Params& p;
  unsigned char* smem;
  int warp, lane, g, t;
  int row_group, k_part;   // warp = row_group * WK + k_part
  std::int64_t warp_row0;  // first weight row of this warp

  __device__ Tile(const Params& params, unsigned char* shared)
      : p(params), smem(shared), warp(static_cast<int>(threadIdx.x) / 32), lane(static_cast<int>(threadIdx.x) % 32),
        g(lane >> 2), t(lane & 3), row_group(warp / WK), k_part(warp % WK),
        warp_row0(static_cast<std::int64_t>(blockIdx.x) * kRows + static_cast<std::int64_t>(row_group) * MT * kTileRows) {}

  // The window of K that window wi of this warp's part of chunk `chunk` is.
  __device__ std::int64_t window_of(std::int64_t chunk, int wi) const {
    return chunk * kChunkWindows + k_part * G + wi;
  }

  __device__ void load_weights(WeightRegs<MT, G>& r, std::int64_t chunk) const {
#pragma unroll
    for (int wi = 0; wi < G; ++wi) {
      const std::int64_t window = window_of(chunk, wi);
      const std::int64_t col0 = window * kWindowK + 32 * t;
      const bool valid_k = window < p.k_windows && col0 < p.k;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const std::int64_t row0 = warp_row0 + mt * kTileRows;
        r.codes[wi][mt][0] = r.codes[wi][mt][1] = make_uint4(0, 0, 0, 0);
        r.scales[wi][mt] = 0;
        if constexpr (L == WeightLayout::shuffled) {
          const std::int64_t tile = row0 / kTileRows;
          if (valid_k && tile < p.n_tiles) {
            const std::int64_t w = shuffled_window_index(tile, window, p.k_windows);
            const std::uint8_t* c = p.w_codes + w * kWindowCodeBytes + lane * 16;
            r.codes[wi][mt][0] = load_stream_16(c);
            r.codes[wi][mt][1] = load_stream_16(c + 512);
            r.scales[wi][mt] = load_stream_4(p.w_scales + w * kWindowScaleBytes + lane * 4);
          }
        } else {
          const std::int64_t kb = col0 / kBlockSize;
          const ScaleLayout layout = p.w_swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::linear;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const std::int64_t row = row0 + g + 8 * half;
            if (valid_k && row < p.n) {
              r.codes[wi][mt][half] = load_stream_16(p.w_codes + row * (p.k / 2) + col0 / 2);
              // Blocks kb, kb + 1 are adjacent in both layouts (kb is even).
              r.scales[wi][mt] |= load_u16(p.w_scales + scale_offset(layout, row, kb, p.k)) << (16 * half);
            }
          }
        }
      }
    }
  }

  // W4A16: cp.async the bf16 activations of a chunk into buffer `stage`, zero past K.
  __device__ void copy_activations(std::int64_t chunk, int stage) const {
    const auto* a = static_cast<const std::uint16_t*>(p.a);
    const std::int64_t col_base = chunk * kChunkWindows * kWindowK;
    const int rows = p.m < kMPad ? static_cast<int>(p.m) : kMPad;  // rows >= M feed only unused columns
    unsigned char* buffer = smem + stage * kActBytes;
    for (int i = static_cast<int>(threadIdx.x); i < rows * kChunkWindows * 16; i += kThreads) {
      const int r = i / (kChunkWindows * 16), e = i % (kChunkWindows * 16);
      const std::int64_t col = col_base + 8 * e;
      const bool valid = col < p.k;
      cp_async_16(buffer + r * kRowBytes + (e / 4) * 80 + (e % 4) * 16, valid ? a + r * p.k + col : a, valid);
    }
  }

  // W4A4: a chunk's activation codes and scales into registers ...
  struct ActRegs {
    uint4 codes[kActSegmentsPerThread];
    std::uint32_t scales[kActSegmentsPerThread];
  };
  __device__ void load_activations(ActRegs& r, std::int64_t chunk) const {
    const auto* a = static_cast<const std::uint8_t*>(p.a);
    const ScaleLayout layout = p.a_swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::linear;
#pragma unroll
    for (int j = 0; j < kActSegmentsPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      const int row = i / (kChunkWindows * 4), seg = i % (kChunkWindows * 4);
      const std::int64_t col = chunk * kChunkWindows * kWindowK + 32 * seg;
      r.codes[j] = make_uint4(0, 0, 0, 0);
      r.scales[j] = 0;
      if (i < kActSegments && row < p.m && col < p.k) {
        r.codes[j] = __ldg(reinterpret_cast<const uint4*>(a + row * (p.k / 2) + col / 2));
        r.scales[j] = load_u16(p.a_scales + scale_offset(layout, row, col / kBlockSize, p.k));
      }
    }
  }
  // ... and dequantized (x scale x 2^-7, exact in FP16) into the activation buffer.
  __device__ void store_activations(const ActRegs& r) const {
#pragma unroll
    for (int j = 0; j < kActSegmentsPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      const int row = i / (kChunkWindows * 4), seg = i % (kChunkWindows * 4);
      if (i >= kActSegments || row >= p.m) continue;
      unsigned char* dst = smem + row * kRowBytes + seg * 80;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // columns 16 * half .. +15 share scale byte `half`
        std::uint32_t v[8];
        dequantize_activation_block(component(r.codes[j], 2 * half), component(r.codes[j], 2 * half + 1),
                                    (r.scales[j] >> (8 * half)) & 0xFFu, v);
        *reinterpret_cast<uint4*>(dst + 32 * half) = make_uint4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<uint4*>(dst + 32 * half + 16) = make_uint4(v[4], v[5], v[6], v[7]);
      }
    }
  }

  // Dequantize and multiply one chunk: for each window, 8 mma steps of k16 per m16 x n8 tile.
  __device__ void compute(const WeightRegs<MT, G>& r, const unsigned char* act, std::int64_t chunk,
                          float (&acc)[MT][NT][4]) const {
#pragma unroll
    for (int wi = 0; wi < G; ++wi) {
      if (window_of(chunk, wi) >= p.k_windows) break;  // uniform per warp: the last chunk may be short
      // Activation row 8j + g, columns 32t + 8 * pair .. +7 of the window: both steps' B
      // fragments in one 16-byte shared load.
      compute_window(r, wi, [&](int j, int pair) {
        return *reinterpret_cast<const uint4*>(act + (j * 8 + g) * kRowBytes + ((k_part * G + wi) * 4 + t) * 80 + pair * 16);
      }, acc, acc);
    }
  }

  // Window wi of the registers: 8 mma steps of k16 per m16 x n8 tile. b_of(j, pair) returns the
  // B fragments of steps 2 * pair and 2 * pair + 1 for activation tile j (x, y: the first step).
  // The even steps accumulate into acc, the odd ones into acc_odd: two independent mma chains
  // where the caller passes two arrays (it may pass the same one twice: one chain).
  template <class BFragments>
  __device__ void compute_window(const WeightRegs<MT, G>& r, int wi, const BFragments& b_of, float (&acc)[MT][NT][4],
                                 float (&acc_odd)[MT][NT][4]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // steps 4h .. 4h+3 use scale block 2t + h
      std::uint32_t scale[MT][2];  // rows g, g + 8
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (L == WeightLayout::shuffled) {
          // Bytes 2h and 2h + 1: half h of the even and the odd bytes' multipliers.
          scale[mt][0] = broadcast_half(scale_multipliers<M>(r.scales[wi][mt], 0), h);
          scale[mt][1] = broadcast_half(scale_multipliers<M>(r.scales[wi][mt], 1), h);
        } else {
          scale[mt][0] = scale_pair_from_e4m3<M>((r.scales[wi][mt] >> (8 * h)) & 0xFFu);
          scale[mt][1] = scale_pair_from_e4m3<M>((r.scales[wi][mt] >> (16 + 8 * h)) & 0xFFu);
        }
      }
#pragma unroll
      for (int sp = 0; sp < 2; ++sp) {
        const int pair = 2 * h + sp;  // steps 2 * pair and 2 * pair + 1
        std::uint32_t frag[MT][2][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (L == WeightLayout::shuffled) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const int step = 2 * pair + q;
              std::uint32_t v[4];
              unpack_shuffled_word<M>(component(r.codes[wi][mt][step / 4], step % 4), v);
#pragma unroll
              for (int j = 0; j < 4; ++j) frag[mt][q][j] = multiply_pair<M>(v[j], scale[mt][j & 1]);
            }
          } else {
            // Word `pair` of each row's 16 bytes: bytes 0, 1 are step 2*pair's column pairs
            // (k0, k0+1), (k0+2, k0+3); bytes 2, 3 the next step's.
            const std::uint32_t lo = component(r.codes[wi][mt][0], pair), hi = component(r.codes[wi][mt][1], pair);
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              frag[mt][q][0] = multiply_pair<M>(unpack_plain_byte<M>(lo, 2 * q), scale[mt][0]);
              frag[mt][q][1] = multiply_pair<M>(unpack_plain_byte<M>(hi, 2 * q), scale[mt][1]);
              frag[mt][q][2] = multiply_pair<M>(unpack_plain_byte<M>(lo, 2 * q + 1), scale[mt][0]);
              frag[mt][q][3] = multiply_pair<M>(unpack_plain_byte<M>(hi, 2 * q + 1), scale[mt][1]);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint4 b = b_of(j, pair);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<M>(acc[mt][j], frag[mt][0], b.x, b.y);
            mma_16816<M>(acc_odd[mt][j], frag[mt][1], b.z, b.w);
          }
        }
      }
    }
  }

  // After the main loop (shared memory free): k-part reduction, split-K reduction, output. Every
  // thread of the block calls it; `last_flag` is a free int of shared memory.
  __device__ void finish(float (&acc)[MT][NT][4], int* last_flag) const {
    if constexpr (WK > 1) reduce_k_parts(acc);
    if (p.split_k > 1) {
      if (!reduce_partials(acc, last_flag)) return;
    } else if (k_part != 0) {
      return;
    }
    store_output(acc);
  }

  __device__ void store_output(const float (&acc)[MT][NT][4]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const std::int64_t n = warp_row0 + mt * kTileRows + g + 8 * (e >> 1);
          const std::int64_t m = j * 8 + 2 * t + (e & 1);
          if (n >= p.n || m >= p.m) continue;
          const float v = p.alpha * acc[mt][j][e];
          const std::int64_t at = m * p.n + n;
          if (p.out_type == static_cast<int>(OutputType::f32)) {
            static_cast<float*>(p.d)[at] = v;
          } else if (p.out_type == static_cast<int>(OutputType::bf16)) {
            static_cast<__nv_bfloat16*>(p.d)[at] = __float2bfloat16_rn(v);
          } else {
            static_cast<__half*>(p.d)[at] = __float2half_rn(v);
          }
        }
      }
    }
  }

  // k parts: the warps of a row group with k_part > 0 leave their accumulators in shared memory
  // (the activation buffers are free after the loop); k part 0 adds them in k-part order.
  __device__ void reduce_k_parts(float (&acc)[MT][NT][4]) const {
    auto* scratch = reinterpret_cast<float4*>(smem);
    auto slot = [&](int part, int mt, int j) { return ((row_group * (WK - 1) + part - 1) * MT * NT + mt * NT + j) * 32 + lane; };
    if (k_part > 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < NT; ++j) scratch[slot(k_part, mt, j)] = make_float4(acc[mt][j][0], acc[mt][j][1], acc[mt][j][2], acc[mt][j][3]);
      }
    }
    __syncthreads();
    if (k_part == 0) {
      for (int part = 1; part < WK; ++part) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const float4 v = scratch[slot(part, mt, j)];
            acc[mt][j][0] += v.x;
            acc[mt][j][1] += v.y;
            acc[mt][j][2] += v.z;
            acc[mt][j][3] += v.w;
          }
        }
      }
    }
  }

  // Split-K: every block stores its partial tile (k part 0 warps); the last block to arrive at the
  // row block's counter adds all splits in split order (bitwise repeatable). Every thread of the
  // block calls it (barriers); returns whether this thread's warp writes the output.
  __device__ bool reduce_partials(float (&acc)[MT][NT][4], int* last_flag) const {
    auto* ws = reinterpret_cast<float4*>(p.partials);
    const std::int64_t slots_per_split = static_cast<std::int64_t>(gridDim.x) * kRowGroups;
    const std::int64_t base_slot = static_cast<std::int64_t>(blockIdx.x) * kRowGroups + row_group;
    if (k_part == 0) {
      const std::int64_t my_slot = blockIdx.y * slots_per_split + base_slot;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          __stcg(&ws[(my_slot * MT * NT + mt * NT + j) * 32 + lane],
                 make_float4(acc[mt][j][0], acc[mt][j][1], acc[mt][j][2], acc[mt][j][3]));
        }
      }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned int arrived = atomicAdd(&p.counters[blockIdx.x], 1u);
      const bool last = arrived == static_cast<unsigned int>(p.split_k - 1);
      if (last) atomicExch(&p.counters[blockIdx.x], 0u);  // every split has arrived: ready for the next launch
      *last_flag = last ? 1 : 0;
    }
    __syncthreads();
    if (*last_flag == 0 || k_part != 0) return false;
    __threadfence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float4 sum = __ldcg(&ws[(base_slot * MT * NT + mt * NT + j) * 32 + lane]);
        for (int s = 1; s < p.split_k; ++s) {
          const float4 v = __ldcg(&ws[((s * slots_per_split + base_slot) * MT * NT + mt * NT + j) * 32 + lane]);
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        acc[mt][j][0] = sum.x;
        acc[mt][j][1] = sum.y;
        acc[mt][j][2] = sum.z;
        acc[mt][j][3] = sum.w;
      }
    }
    return true;
  }
};

template <Math M, WeightLayout L, int MT, int NT, int WARPS, int WK, int G, int MIN_BLOCKS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS) decode_gemm_kernel(const Params p) {
  using T = Tile<M, L, MT, NT, WARPS, WK, G>;
  extern __shared__ __align__(16) unsigned char smem[];
  const T tile(p, smem);
  const ChunkRange range = split_chunk_range(p.k_chunks, p.split_k, static_cast<int>(blockIdx.y));

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;
    }
  }

  WeightRegs<MT, G> regs[2];
  typename T::ActRegs act_regs;
  tile.load_weights(regs[0], range.begin);  // the weight is not written by the previous kernel
  cuda::wait_for_previous_grid();
  if constexpr (M == Math::w4a16) {
    tile.copy_activations(range.begin, 0);
    cp_async_commit();
  } else {
    tile.load_activations(act_regs, range.begin);
    tile.store_activations(act_regs);
  }

  // One chunk: prefetch the next chunk's weights (registers) and activations, then compute. The
  // register sets alternate, so the loop body handles two chunks with constant indices.
  auto step = [&](std::int64_t c, WeightRegs<MT, G>& current, WeightRegs<MT, G>& next, int stage) {
    const bool has_next = c + 1 < range.end;
    if (has_next) tile.load_weights(next, c + 1);
    if constexpr (M == Math::w4a16) {
      if (has_next) tile.copy_activations(c + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      if (has_next) tile.load_activations(act_regs, c + 1);
    }
    __syncthreads();
    tile.compute(current, smem + (M == Math::w4a16 ? stage * T::kActBytes : 0), c, acc);
    __syncthreads();
    if constexpr (M == Math::w4a4) {
      if (has_next) tile.store_activations(act_regs);
    }
  };
  for (std::int64_t c = range.begin; c < range.end; c += 2) {
    step(c, regs[0], regs[1], 0);
    if (c + 1 < range.end) step(c + 1, regs[1], regs[0], 1);
  }
  cuda::allow_dependent_launch();

  tile.finish(acc, reinterpret_cast<int*>(smem + T::kFlagOffset));
}

// ---- The streaming kernel (TileConfig::stages > 0, shuffled weight) ----
//
// v1 above holds the next chunk's weights in registers: about one chunk in flight per warp, and
// with the registers that takes, 8-16 warps per SM. Nsight Compute on the H200 (PERF-LOG run 5)
// showed it latency-bound: 0.9 TB/s, 2 warps per scheduler, 0.4 eligible. Here every lane copies
// with cp.async exactly the bytes it will read itself (its 2 x 16 code bytes and scale word per
// m16 tile, and the B fragments of its activation row per n8 tile) into a ring of S window slots
// private to its warp, S - 1 windows ahead. A lane waits only for its own copies, so the main
// loop has no barrier, and the bytes in flight are set by the ring, not by the register file.
// Warp (row group, k part) takes window c * WK + k part for every chunk c of its split.
template <int MT, int NT>
struct StreamSlot {
  static constexpr int kWeightBytes = MT * (kWindowCodeBytes + kWindowScaleBytes);
  // Per n8 tile, 4 pieces (steps 2q, 2q + 1) x 32 lanes x 16 bytes: each LDS.128 is contiguous.
  static constexpr int kBytes = kWeightBytes + NT * 4 * 32 * 16;
};

// M: the mma type and the weight's shuffled encoding. The activations are 16-bit either way: bf16
// (W4A16), or FP16 times 2^-7 written by dequantize_activations_kernel (W4A4).
template <Math M, int MT, int NT, int WARPS, int WK, int S, int MIN_BLOCKS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS) decode_stream_kernel(const Params p) {
  using T = Tile<M, WeightLayout::shuffled, MT, NT, WARPS, WK, 1>;
  using Slot = StreamSlot<MT, NT>;
  constexpr int kRingBytes = WARPS * S * Slot::kBytes;
  constexpr int kFlagOffset = kRingBytes > T::kScratchBytes ? kRingBytes : T::kScratchBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  const T tile(p, smem);
  const ChunkRange range = split_chunk_range(p.k_chunks, p.split_k, static_cast<int>(blockIdx.y));
  unsigned char* const ring = smem + tile.warp * S * Slot::kBytes;
  const auto* a = static_cast<const std::uint16_t*>(p.a);
  const int lane = tile.lane;

  // Slots of tiles past N and activation rows >= M are not written: what they hold reaches only
  // output rows >= N and columns >= M, which are never stored. Columns past K are zero-filled
  // (their weight codes are zero, and 0 * Inf would be NaN).
  // Iteration i (i = 0 .. live - 1) is this warp's window window0 + i * k_warps. Chunks of the
  // split whose window for this k part lies past K are skipped altogether.
  const std::int64_t window0 = tile.window_of(range.begin, 0);
  const std::int64_t in_k = window0 >= p.k_windows ? 0 : (p.k_windows - window0 + WK - 1) / WK;
  const int live = static_cast<int>(range.end - range.begin < in_k ? range.end - range.begin : in_k);
  // Only the last window can reach past K (its zero-filled columns).
  const bool last_valid = live > 0 && (window0 + static_cast<std::int64_t>(live - 1) * WK) * kWindowK + 32 * tile.t < p.k;
  const std::uint32_t ring_lane = static_cast<std::uint32_t>(__cvta_generic_to_shared(ring)) + lane * 16;
  const std::uint32_t ring_scale = static_cast<std::uint32_t>(__cvta_generic_to_shared(ring)) + kWindowCodeBytes + lane * 4;
  // The copy sources advance by k_warps windows per issue: running pointers, so that an issue is
  // its cp.asyncs and one add per source (recomputing 64-bit addresses per window cost ~50 of the
  // ~215 instructions of a window at M <= 8).
  const unsigned char* code_src[MT];
  const unsigned char* scale_src[MT];
  bool tile_live[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const std::int64_t tile_index = tile.warp_row0 / kTileRows + mt;
    tile_live[mt] = tile_index < p.n_tiles;
    const std::int64_t w = shuffled_window_index(tile_live[mt] ? tile_index : 0, window0, p.k_windows);
    code_src[mt] = p.w_codes + w * kWindowCodeBytes + lane * 16;
    scale_src[mt] = p.w_scales + w * kWindowScaleBytes + lane * 4;
  }
  const std::uint16_t* act_src[NT];
  bool row_live[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const std::int64_t row = 8 * j + tile.g;
    row_live[j] = row < p.m;
    act_src[j] = a + (row_live[j] ? row : 0) * p.k + window0 * kWindowK + 32 * tile.t;
  }

  // Iteration i into ring slot `slot` (the sources are at iteration i: issues come in order).
  auto issue = [&](int i, int slot) {
    if (i < live) {
      const std::uint32_t s = ring_lane + slot * Slot::kBytes;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (tile_live[mt]) {
          const std::uint32_t d = s + mt * (kWindowCodeBytes + kWindowScaleBytes);
          cp_async_shared_16(d, code_src[mt], true);
          cp_async_shared_16(d + 512, code_src[mt] + 512, true);
          cp_async_shared_ca_4(ring_scale + slot * Slot::kBytes + mt * (kWindowCodeBytes + kWindowScaleBytes), scale_src[mt]);
        }
        code_src[mt] += WK * kWindowCodeBytes;
        scale_src[mt] += WK * kWindowScaleBytes;
      }
      const bool valid = i + 1 < live || last_valid;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (row_live[j]) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            // Past K the source is not read (src-size 0), so it need not be a valid address.
            cp_async_shared_ca_16(s + Slot::kWeightBytes + (j * 4 + q) * 512, act_src[j] + 8 * q, valid);
          }
        }
        act_src[j] += WK * kWindowK;
      }
    }
    cp_async_commit();  // also when empty: the group count stays uniform for cp_async_wait
  };

  float acc[MT][NT][4], acc_odd[MT][NT][4];  // even and odd mma steps: two dependency chains
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = acc_odd[mt][j][e] = 0.0f;
    }
  }

  // Under a programmatic launch the previous kernel may still run: the first S - 1 windows of
  // the weight go to L2 meanwhile (lanes 0..7 one 128-byte line of codes each, lane 8 the scales).
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < live && lane < 9) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (!tile_live[mt]) continue;
        const unsigned char* codes = code_src[mt] - lane * 16 + s * (WK * kWindowCodeBytes);
        prefetch_l2(lane < 8 ? codes + lane * 128 : scale_src[mt] - lane * 4 + s * (WK * kWindowScaleBytes));
      }
    }
  }
  cuda::wait_for_previous_grid();
#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(s, s);
  // Unrolled by S, so that every ring slot is a constant offset.
  for (int i0 = 0; i0 < live; i0 += S) {
#pragma unroll
    for (int u = 0; u < S; ++u) {
      const int i = i0 + u;
      if (i >= live) break;  // uniform per warp
      // The slot refilled here was read in the previous iteration, whose mma consumed those loads.
      issue(i + S - 1, (u + S - 1) % S);
      cp_async_wait<S - 1>();
      const unsigned char* s = ring + u * Slot::kBytes;
      WeightRegs<MT, 1> r;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const unsigned char* w = s + mt * (kWindowCodeBytes + kWindowScaleBytes);
        r.codes[0][mt][0] = *reinterpret_cast<const uint4*>(w + lane * 16);
        r.codes[0][mt][1] = *reinterpret_cast<const uint4*>(w + 512 + lane * 16);
        r.scales[0][mt] = *reinterpret_cast<const std::uint32_t*>(w + kWindowCodeBytes + lane * 4);
      }
      tile.compute_window(r, 0, [&](int j, int pair) {
        return *reinterpret_cast<const uint4*>(s + Slot::kWeightBytes + (j * 4 + pair) * 512 + lane * 16);
      }, acc, acc_odd);
    }
  }
  cuda::allow_dependent_launch();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] += acc_odd[mt][j][e];
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the reductions reuse the rings

  tile.finish(acc, reinterpret_cast<int*>(smem + kFlagOffset));
}

// W4A4 on the streaming kernel: the NVFP4 activations [m, k] (scales linear or swizzled) to FP16
// [m, k] once, e2m1 * scale * 2^-7 exactly (the register-prefetch kernel's conversion into shared
// memory), one 16-element block per thread. It lets the streaming kernel, launched
// programmatically behind it, start at once: that kernel reads the activations only after its
// griddepcontrol.wait, i.e. after this grid has completed.
__global__ void dequantize_activations_kernel(const Params p, std::uint16_t* out) {
  cuda::wait_for_previous_grid();
  cuda::allow_dependent_launch();
  const std::int64_t blocks_per_row = p.k / kBlockSize;
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= p.m * blocks_per_row) return;
  const ScaleLayout layout = p.a_swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::linear;
  const uint2 codes = *reinterpret_cast<const uint2*>(static_cast<const std::uint8_t*>(p.a) + b * 8);
  std::uint32_t v[8];
  dequantize_activation_block(codes.x, codes.y,
                              p.a_scales[scale_offset(layout, b / blocks_per_row, b % blocks_per_row, p.k)], v);
  uint4* dst = reinterpret_cast<uint4*>(out + b * 16);
  dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
  dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

}  // namespace fp4gap::decode::device
