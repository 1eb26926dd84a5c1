// NVFP4 quantization kernels: an amax reduction (when the global scale is not given) and the
// quantizer proper. Every number the CPU quantizer computes is computed here by format.hpp's
// functions with the same IEEE float32 operations, so codes, scales and report are
// bit-identical to quantize_nvfp4() on the host. That needs IEEE division and no flushing of
// denormals: nvcc's defaults (-prec-div=true, -ftz=false), which fast-math would replace.
#include <cuda_fp16.h>

#if defined(__USE_FAST_MATH__)
#error "quantize_nvfp4.cu must not be compiled with --use_fast_math: CPU and GPU codes would differ"
#endif

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "cuda/common.cuh"
#include "fp4gap/cuda_quantize.hpp"

namespace fp4gap {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Lives in the workspace. Zero-filled means "nothing seen": first positions are stored as the
// bitwise complement of the flat index so that atomicMax of a zero fill finds the smallest index.
struct QuantizeState {
  unsigned long long nan_count;
  unsigned long long inf_count;
  unsigned long long saturated_scales;
  unsigned long long zero_scale_blocks;
  unsigned long long first_nan_complement;
  unsigned long long first_inf_complement;
  unsigned int amax_bits;  // float bits of max |x| over finite x (non-negative: bits order = value order)
  float global_scale;      // the gs the latest quantization used
};

// ---- element types: loading one 16-element block and classifying its values from the raw bits ----

template <ElementType kType>
struct Element;

// 16-bit types: two elements per 32-bit word, element 2j in the low half (little endian), which
// matches the packing of the codes. Finite magnitudes are compared as integers: for a
// non-negative IEEE-style number the bit pattern orders like the value.
template <std::uint32_t kExponentMask2>
struct SixteenBitElement {
  static constexpr int kWords = 8;
  // Magnitude bits of the finite halves of w (non-finite halves -> 0), and whether any half is
  // NaN or Inf (exponent all ones).
  __device__ static std::uint32_t finite_magnitudes(std::uint32_t w, std::uint32_t& nonfinite) {
    const std::uint32_t mag = w & 0x7FFF7FFFu;
    const std::uint32_t nf = __vcmpgeu2(mag, kExponentMask2);
    nonfinite |= nf;
    return mag & ~nf;
  }
  __device__ static std::uint32_t max_magnitudes(std::uint32_t a, std::uint32_t b) { return __vmaxu2(a, b); }
};

template <>
struct Element<ElementType::bf16> : SixteenBitElement<0x7F807F80u> {
  __device__ static void to_float(const std::uint32_t* w, float* x) {
    for (int j = 0; j < kWords; ++j) {
      x[2 * j] = bits_float(w[j] << 16);
      x[2 * j + 1] = bits_float(w[j] & 0xFFFF0000u);
    }
  }
  __device__ static float magnitude_to_float(std::uint32_t m2) {
    const std::uint32_t m = max(m2 & 0xFFFFu, m2 >> 16);
    return bits_float(m << 16);
  }
};

template <>
struct Element<ElementType::f16> : SixteenBitElement<0x7C007C00u> {
  __device__ static void to_float(const std::uint32_t* w, float* x) {
    for (int j = 0; j < kWords; ++j) {
      x[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] & 0xFFFFu)));
      x[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] >> 16)));
    }
  }
  __device__ static float magnitude_to_float(std::uint32_t m2) {
    const std::uint32_t m = max(m2 & 0xFFFFu, m2 >> 16);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(m)));
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
  __device__ static void to_float(const std::uint32_t* w, float* x) {
    for (int j = 0; j < kWords; ++j) x[j] = bits_float(w[j]);
  }
  __device__ static float magnitude_to_float(std::uint32_t m) { return bits_float(m); }
};

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

// ---- reductions of per-thread values into the workspace (one atomic per thread block) ----

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
  // Swizzled padding: rows [rows, padded_rows) for every k-block, then k-blocks
  // [blocks_per_row, padded_blocks_per_row) of the real rows.
  std::uint32_t rows;
  std::uint32_t padded_blocks_per_row;
  std::uint32_t padding_rows_entries;  // (padded_rows - rows) * padded_blocks_per_row
  std::uint32_t padding_entries;       // all padding entries
  bool gs_from_amax;
  float given_gs;
  QuantizeState* state;
};

template <ElementType kType>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* input, std::uint32_t total_blocks,
                                                       QuantizeState* state) {
  using E = Element<kType>;
  std::uint32_t m = 0;
  std::uint32_t nonfinite = 0;
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < total_blocks; b += stride) {
    std::uint32_t w[E::kWords];
    load_block<kType>(input, b, w);
    for (int j = 0; j < E::kWords; ++j) m = E::max_magnitudes(m, E::finite_magnitudes(w[j], nonfinite));
  }
  publish_amax(state, E::magnitude_to_float(m));
}

template <ElementType kType, bool kReport>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantizeParams p) {
  using E = Element<kType>;
  // format.hpp's rule, on the device: no host round trip between the amax pass and this kernel.
  const float gs = p.gs_from_amax ? global_scale_from_amax(bits_float(p.state->amax_bits)) : p.given_gs;
  const float inv_gs = __fdiv_rn(1.0f, gs);
  if (blockIdx.x == 0 && threadIdx.x == 0) p.state->global_scale = gs;

  // Report counters, per thread; combined once per thread block at the end.
  unsigned long long nan_count = 0, inf_count = 0, saturated = 0, zero_blocks = 0;
  unsigned long long first_nan_complement = 0, first_inf_complement = 0;
  std::uint32_t finite_max = 0;

  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < p.total_blocks; b += stride) {
    std::uint32_t w[E::kWords];
    load_block<kType>(p.input, b, w);
    float x[kBlockSize];
    E::to_float(w, x);

    if constexpr (kReport) {
      std::uint32_t nonfinite = 0;
      for (int j = 0; j < E::kWords; ++j)
        finite_max = E::max_magnitudes(finite_max, E::finite_magnitudes(w[j], nonfinite));
      if (nonfinite != 0) {  // rare: classify each element
        for (int i = 0; i < kBlockSize; ++i) {
          const unsigned long long flat = static_cast<unsigned long long>(b) * kBlockSize + i;
          if (x[i] != x[i]) {
            ++nan_count;
            first_nan_complement = max(first_nan_complement, ~flat);
          } else if (fabsf(x[i]) == INFINITY) {
            ++inf_count;
            first_inf_complement = max(first_inf_complement, ~flat);
          }
        }
      }
    }

    std::uint8_t packed[kBlockSize / 2];
    const BlockQuantResult r = quantize_block16(x, gs, inv_gs, packed);
    uint2 codes;
    codes.x = static_cast<std::uint32_t>(packed[0]) | (static_cast<std::uint32_t>(packed[1]) << 8) |
              (static_cast<std::uint32_t>(packed[2]) << 16) | (static_cast<std::uint32_t>(packed[3]) << 24);
    codes.y = static_cast<std::uint32_t>(packed[4]) | (static_cast<std::uint32_t>(packed[5]) << 8) |
              (static_cast<std::uint32_t>(packed[6]) << 16) | (static_cast<std::uint32_t>(packed[7]) << 24);
    reinterpret_cast<uint2*>(p.codes)[b] = codes;

    std::int64_t offset = b;  // linear: row * blocks_per_row + kb is the flat block index
    if (p.layout == ScaleLayout::swizzled_128x4) {
      const std::uint32_t row = b / p.blocks_per_row;
      const std::uint32_t kb = b - row * p.blocks_per_row;
      offset = swizzled_scale_offset(row, kb, p.cols);
    }
    p.scales[offset] = r.scale;

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
    for (int i = 0; i < 4; ++i) {
      const unsigned long long total = block_reduce<false>(counts[i]);
      if (threadIdx.x == 0 && total != 0) atomicAdd(targets[i], total);
    }
    const unsigned long long nan_pos = block_reduce<true>(first_nan_complement);
    if (threadIdx.x == 0 && nan_pos != 0) atomicMax(&s->first_nan_complement, nan_pos);
    const unsigned long long inf_pos = block_reduce<true>(first_inf_complement);
    if (threadIdx.x == 0 && inf_pos != 0) atomicMax(&s->first_inf_complement, inf_pos);
    // With a computed gs the amax pass has already stored the same maximum.
    if (!p.gs_from_amax) publish_amax(s, E::magnitude_to_float(finite_max));
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
void launch_quantize(const QuantizeParams& params, bool report, int sm_count, cudaStream_t stream) {
  const int t = static_cast<int>(kType);
  const Occupancy& occ = occupancy();
  const std::int64_t work = std::max<std::int64_t>(params.total_blocks, params.padding_entries);
  if (params.gs_from_amax) {
    amax_kernel<kType><<<grid_for(params.total_blocks, occ.amax[t], sm_count), kThreads, 0, stream>>>(
        params.input, params.total_blocks, params.state);
    CUDA_CHECK_LAUNCH();
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
  CUDA_CHECK(cudaMalloc(&state_, sizeof(QuantizeState)));
  CUDA_CHECK(cudaMemset(state_, 0, sizeof(QuantizeState)));
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
  p.gs_from_amax = !global_scale.has_value();
  p.given_gs = global_scale.value_or(0.0f);
  p.state = state;

  // The counters start from zero for every quantization that reads them (the amax pass, the
  // report); a memset node is capturable like a kernel.
  if (report || p.gs_from_amax) CUDA_CHECK(cudaMemsetAsync(state, 0, sizeof(QuantizeState), s));

  switch (type) {
    case ElementType::bf16: launch_quantize<ElementType::bf16>(p, report, workspace.sm_count(), s); break;
    case ElementType::f16: launch_quantize<ElementType::f16>(p, report, workspace.sm_count(), s); break;
    case ElementType::f32: launch_quantize<ElementType::f32>(p, report, workspace.sm_count(), s); break;
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
