// measure_ceilings (cuda_api.hpp): the memory roof and the tensor-core rates of the device at hand.
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>

#include "cuda/common.cuh"
#include "cuda/cublaslt_matmul.cuh"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

using cuda::DeviceBuffer;

// Vectorized grid-stride copy: 16-byte loads and stores, the widest a thread can issue.
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

// Read-dominated: every 16-byte chunk read once, one word written per block. Four independent
// loads in flight per iteration keep enough bytes outstanding to saturate HBM.
__global__ void read_kernel(const int4* __restrict__ src, std::size_t n, unsigned int* __restrict__ out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned int acc = 0;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= static_cast<unsigned int>(a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^
                                     d.y ^ d.z ^ d.w);
  }
  for (; i < n; i += stride) {
    const int4 a = src[i];
    acc ^= static_cast<unsigned int>(a.x ^ a.y ^ a.z ^ a.w);
  }
  // The xor keeps the loads live; a block's result lands in one word so writes stay negligible.
  atomicXor(out + blockIdx.x, acc);
}

__device__ unsigned int hash32(unsigned int x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Uniform in [-1, 1] with |v| >= 1/16: random, never zero (zeros would make the GEMM cheaper
// on some hardware, and a zero result would look like an unwritten output).
__device__ float random_value(std::size_t i, unsigned int seed) {
  const unsigned int h = hash32(static_cast<unsigned int>(i) * 2654435761U ^ seed ^ static_cast<unsigned int>(i >> 32));
  const float mag = 0.0625f + 0.9375f * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  return (h & 1u) ? -mag : mag;
}

__global__ void fill_bf16_kernel(std::uint16_t* p, std::size_t n, unsigned int seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Truncation to bf16 keeps |v| >= 1/16.
    p[i] = static_cast<std::uint16_t>(__float_as_uint(random_value(i, seed)) >> 16);
  }
}

__global__ void fill_e4m3_kernel(std::uint8_t* p, std::size_t n, unsigned int seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = float_to_e4m3_sat(random_value(i, seed) * 448.0f);
  }
}

// Best (shortest) of `reps` timed calls after one warm-up, in seconds.
double best_seconds(const std::function<void(cudaStream_t)>& work, int reps, cuda::Stream& stream) {
  work(stream.get());
  stream.synchronize();
  cuda::Event start, stop;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    start.record(stream.get());
    work(stream.get());
    stop.record(stream.get());
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    best = std::min(best, 1e-3 * static_cast<double>(stop.ms_since(start)));
  }
  return best;
}

unsigned int grid_for(const DeviceContext& device) { return static_cast<unsigned int>(std::max(device.sm_count, 1) * 8); }

double measure_memory(const DeviceContext& device, cuda::Stream& stream) {
  // 1 GiB source + 1 GiB destination: a copy moves 2 GiB; the read kernel reads all 2 GiB.
  // Smaller where the device has less memory (half of it at most).
  std::size_t half = std::size_t{1} << 30;
  while (half > (std::size_t{64} << 20) && 4 * static_cast<std::int64_t>(half) > device.global_mem_bytes) half /= 2;
  DeviceBuffer<int4> buf(2 * half / sizeof(int4));
  DeviceBuffer<unsigned int> sink(grid_for(device));
  CUDA_CHECK(cudaMemsetAsync(buf.get(), 0x5A, buf.bytes(), stream.get()));
  sink.fill_bytes(0);
  const std::size_t n_half = half / sizeof(int4);
  const unsigned int grid = grid_for(device);
  const double copy_s = best_seconds(
      [&](cudaStream_t s) {
        copy_kernel<<<grid, 256, 0, s>>>(buf.get(), buf.get() + n_half, n_half);
        CUDA_CHECK_LAUNCH();
      },
      10, stream);
  const double read_s = best_seconds(
      [&](cudaStream_t s) {
        read_kernel<<<grid, 256, 0, s>>>(buf.get(), 2 * n_half, sink.get());
        CUDA_CHECK_LAUNCH();
      },
      10, stream);
  const double copy_bw = 2.0 * static_cast<double>(half) / copy_s;
  const double read_bw = 2.0 * static_cast<double>(half) / read_s;
  return std::max(copy_bw, read_bw);
}

constexpr int kGemmDim = 8192;
constexpr int kGemmReps = 8;

double gemm_flops_per_s(double seconds) {
  return 2.0 * kGemmDim * static_cast<double>(kGemmDim) * kGemmDim / seconds;
}

double measure_bf16(cuda::Stream& stream) {
  const std::size_t elems = static_cast<std::size_t>(kGemmDim) * kGemmDim;
  DeviceBuffer<std::uint16_t> a(elems), b(elems), d(elems);
  fill_bf16_kernel<<<1024, 256, 0, stream.get()>>>(a.get(), elems, 1u);
  CUDA_CHECK_LAUNCH();
  fill_bf16_kernel<<<1024, 256, 0, stream.get()>>>(b.get(), elems, 2u);
  CUDA_CHECK_LAUNCH();
  DeviceBuffer<std::uint8_t> workspace(cuda::LtMatmul::kWorkspaceBytes);
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  try {
    CUBLAS_CHECK(cublasSetStream(h, stream.get()));
    CUBLAS_CHECK(cublasSetWorkspace(h, workspace.get(), workspace.bytes()));
    const float alpha = 1.0f, beta = 0.0f;
    const double s = best_seconds(
        [&](cudaStream_t) {
          CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, kGemmDim, kGemmDim, kGemmDim, &alpha, b.get(),
                                    CUDA_R_16BF, kGemmDim, a.get(), CUDA_R_16BF, kGemmDim, &beta, d.get(), CUDA_R_16BF,
                                    kGemmDim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        },
        kGemmReps, stream);
    static_cast<void>(cublasDestroy(h));
    return gemm_flops_per_s(s);
  } catch (...) {
    static_cast<void>(cublasDestroy(h));
    throw;
  }
}

// 0 when cuBLASLt has no algorithm for the type on this device.
double measure_lt(cuda::Stream& stream, cudaDataType_t type, cuda::LtScaling scaling) {
  const std::size_t elems = static_cast<std::size_t>(kGemmDim) * kGemmDim;
  // Scales exist before the matmul is built: the heuristic needs the scale pointers set.
  // Each per-tensor scale has its own allocation (cuBLASLt wants aligned scale pointers).
  DeviceBuffer<float> a_unit(std::vector<float>{1.0f}), b_unit(std::vector<float>{1.0f});
  // Block scales: 0x38 is E4M3 1.0 (unsigned UE4M3 reads the same byte), sized for the swizzled layout.
  DeviceBuffer<std::uint8_t> block_scales;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  if (scaling == cuda::LtScaling::block_vec16) {
    block_scales = DeviceBuffer<std::uint8_t>(
        static_cast<std::size_t>(scale_shape(ScaleLayout::swizzled_128x4, kGemmDim, kGemmDim).bytes()));
    block_scales.fill_bytes(0x38);
    a_scale = b_scale = block_scales.get();
  } else if (scaling == cuda::LtScaling::per_tensor) {
    a_scale = a_unit.get();
    b_scale = b_unit.get();
  }
  cuda::LtHandle handle;
  cuda::LtMatmul matmul(handle.get(), {kGemmDim, kGemmDim, kGemmDim, type, CUDA_R_16BF, scaling}, a_scale, b_scale);
  if (!matmul.status().is_ok()) return 0.0;
  const bool fp4 = type == CUDA_R_4F_E2M1;
  const std::size_t operand_bytes = fp4 ? elems / 2 : elems;
  DeviceBuffer<std::uint8_t> a(operand_bytes), b(operand_bytes), workspace(cuda::LtMatmul::kWorkspaceBytes);
  DeviceBuffer<std::uint16_t> d(elems);
  // Random bytes are valid codes for both formats except e4m3's NaN: draw through the e4m3 encoder
  // (for fp4 each byte is two E2M1 codes, none of which is special).
  fill_e4m3_kernel<<<1024, 256, 0, stream.get()>>>(a.get(), operand_bytes, 3u);
  CUDA_CHECK_LAUNCH();
  fill_e4m3_kernel<<<1024, 256, 0, stream.get()>>>(b.get(), operand_bytes, 4u);
  CUDA_CHECK_LAUNCH();
  const double s = best_seconds(
      [&](cudaStream_t st) { matmul.run(a.get(), b.get(), d.get(), 1.0f, workspace.get(), st); }, kGemmReps, stream);
  return gemm_flops_per_s(s);
}

std::string today() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

void launch_copy(const void* src, void* dst, std::size_t bytes, const DeviceContext& device, void* stream) {
  const auto misaligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % sizeof(int4) != 0; };
  if (misaligned(src) || misaligned(dst) || bytes % sizeof(int4) != 0) {
    std::ostringstream os;
    os << "launch_copy: src, dst and bytes must be multiples of 16 (the copy moves 16-byte vectors): src " << src
       << ", dst " << dst << ", bytes " << bytes;
    throw InvalidArgument(os.str());
  }
  copy_kernel<<<grid_for(device), 256, 0, cuda::as_stream(stream)>>>(static_cast<const int4*>(src),
                                                                      static_cast<int4*>(dst), bytes / sizeof(int4));
  CUDA_CHECK_LAUNCH();
}

Timing time_read(double bytes, const DeviceContext& device, const TimingOptions& options) {
  if (!(bytes > 0)) throw InvalidArgument("time_read: bytes must be > 0: " + std::to_string(bytes));
  CUDA_CHECK(cudaSetDevice(device.ordinal));
  const std::size_t n = static_cast<std::size_t>(std::ceil(bytes / sizeof(int4)));
  const int sets = input_sets_for_cold_cache(static_cast<double>(n * sizeof(int4)), device.l2_bytes);
  DeviceBuffer<int4> buf(n * static_cast<std::size_t>(sets));
  buf.fill_bytes(0x5A);
  DeviceBuffer<unsigned int> sink(grid_for(device));
  sink.fill_bytes(0);
  return time_launch(
      [&](int set, void* stream) {
        read_kernel<<<grid_for(device), 256, 0, cuda::as_stream(stream)>>>(buf.get() + n * static_cast<std::size_t>(set),
                                                                         n, sink.get());
        CUDA_CHECK_LAUNCH();
      },
      sets, device, without_sustain(options));  // the read floor is a burst figure, beside the graph mode's
}

Ceilings measure_ceilings(const DeviceContext& device) {
  if (!device.available) throw RuntimeError("measure_ceilings needs a CUDA device: " + device.unavailable_reason);
  CUDA_CHECK(cudaSetDevice(device.ordinal));
  cuda::Stream stream;
  Ceilings c;
  c.memory_bytes_per_s = measure_memory(device, stream);
  c.bf16_flops_per_s = measure_bf16(stream);
  const int cc = device.cc_major * 10 + device.cc_minor;
  c.fp8_flops_per_s = cc >= 89 ? measure_lt(stream, CUDA_R_8F_E4M3, cuda::LtScaling::per_tensor) : 0.0;
  // FP4 tensor cores exist from sm_100 on; below, the rate is 0 by definition, not measured.
  c.fp4_flops_per_s = cc >= 100 ? measure_lt(stream, CUDA_R_4F_E2M1, cuda::LtScaling::block_vec16) : 0.0;
  stream.synchronize();
  c.source = "measured on " + device.name + " " + today();
  return c;
}

}  // namespace fp4gap
