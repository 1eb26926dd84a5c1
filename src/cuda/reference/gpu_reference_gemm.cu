// The naive GPU reference GEMM: one thread per output element. Nothing is tiled or staged, so
// the only thing to get right is the dequantization, which is format.hpp's codecs applied
// exactly as operand_values() applies them on the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <sstream>

#include "cuda/common.cuh"
#include "fp4gap/cuda_reference.hpp"

namespace fp4gap {
namespace {

// Value of element (row, k) of an operand, float32 (exact for every format: an E2M1 value times
// an E4M3 scale has at most 6 significant bits).
__device__ __forceinline__ float operand_value(const OperandView& v, std::int64_t row, std::int64_t k) {
  switch (v.format) {
    case OperandFormat::bf16:
      return bits_float(static_cast<std::uint32_t>(v.bf16[row * v.k + k]) << 16);
    case OperandFormat::e4m3:
      return e4m3_to_float(v.codes[row * v.k + k]);
    case OperandFormat::nvfp4: {
      const std::uint8_t byte = v.codes[row * (v.k / 2) + k / 2];
      const std::uint8_t code = (k % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
      const std::uint8_t scale = v.scales[scale_offset(v.layout, row, k / kBlockSize, v.k)];
      return e2m1_to_float(code) * e4m3_to_float(scale);
    }
  }
  return 0.0f;
}

// One rounding from the double alpha * acc to the output type.
template <typename Out>
__device__ __forceinline__ Out to_output(double v);
template <>
__device__ __forceinline__ float to_output<float>(double v) { return __double2float_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_output<__nv_bfloat16>(double v) { return __double2bfloat16(v); }
template <>
__device__ __forceinline__ __half to_output<__half>(double v) { return __double2half(v); }

// threadIdx.x runs along n so that a warp shares one row of A.
template <typename Out>
__global__ void reference_gemm_f32_kernel(OperandView a, OperandView b, double alpha, Out* d) {
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t m = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (m >= a.rows || n >= b.rows) return;
  float acc = 0.0f;
  for (std::int64_t k = 0; k < a.k; ++k) acc += operand_value(a, m, k) * operand_value(b, n, k);
  d[m * b.rows + n] = to_output<Out>(static_cast<double>(acc) * alpha);
}

// The ReferenceResult form: the products are exact in float32 and summed in double.
__global__ void reference_gemm_f64_kernel(OperandView a, OperandView b, double alpha, double* d, double* abs_sum) {
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t m = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (m >= a.rows || n >= b.rows) return;
  double acc = 0.0, abs_acc = 0.0;
  for (std::int64_t k = 0; k < a.k; ++k) {
    const double p = operand_value(a, m, k) * operand_value(b, n, k);
    acc += p;
    abs_acc += fabs(p);
  }
  d[m * b.rows + n] = alpha * acc;
  abs_sum[m * b.rows + n] = fabs(alpha) * abs_acc;
}

void check_operand(const OperandView& v, const char* which) {
  std::ostringstream os;
  if (v.rows < 1 || v.k < 1) {
    os << "gpu reference GEMM: operand " << which << " must have rows, k >= 1: rows = " << v.rows
       << ", k = " << v.k;
  } else if (v.format == OperandFormat::nvfp4 && v.k % kBlockSize != 0) {
    os << "gpu reference GEMM: operand " << which << " is nvfp4 and k % 16 != 0: k = " << v.k
       << " (NVFP4 blocks are 16 elements)";
  } else if (v.format == OperandFormat::bf16 && v.bf16 == nullptr) {
    os << "gpu reference GEMM: operand " << which << " is bf16 but its bf16 pointer is null";
  } else if (v.format != OperandFormat::bf16 && v.codes == nullptr) {
    os << "gpu reference GEMM: operand " << which << " is " << to_string(v.format) << " but its codes pointer is null";
  } else if (v.format == OperandFormat::nvfp4 && v.scales == nullptr) {
    os << "gpu reference GEMM: operand " << which << " is nvfp4 but its scales pointer is null";
  } else {
    return;
  }
  throw InvalidArgument(os.str());
}

void check_operands(const OperandView& a, const OperandView& b) {
  check_operand(a, "A");
  check_operand(b, "B");
  if (a.k != b.k) {
    std::ostringstream os;
    os << "gpu reference GEMM: A and B must share k: A is [" << a.rows << ", " << a.k << "], B is [" << b.rows
       << ", " << b.k << "]";
    throw InvalidArgument(os.str());
  }
}

constexpr dim3 kBlock{32, 8, 1};

dim3 grid_for(const OperandView& a, const OperandView& b) {
  return dim3(cuda::grid_size_1d(b.rows, kBlock.x), cuda::grid_size_1d(a.rows, kBlock.y), 1);
}

// A copy of an operand's arrays on the device, and the view of them.
struct DeviceOperand {
  cuda::DeviceBuffer<std::uint8_t> payload;
  cuda::DeviceBuffer<std::uint8_t> scales;
  OperandView view;

  explicit DeviceOperand(const OperandView& host)
      : payload(static_cast<std::size_t>(operand_payload_bytes(host))),
        scales(static_cast<std::size_t>(operand_scale_bytes(host))),
        view(host) {
    const void* src = host.format == OperandFormat::bf16 ? static_cast<const void*>(host.bf16)
                                                          : static_cast<const void*>(host.codes);
    payload.upload(static_cast<const std::uint8_t*>(src), payload.size());
    view.bf16 = nullptr;
    view.codes = nullptr;
    view.scales = nullptr;
    if (host.format == OperandFormat::bf16) {
      view.bf16 = reinterpret_cast<const std::uint16_t*>(payload.get());
    } else {
      view.codes = payload.get();
    }
    if (host.format == OperandFormat::nvfp4) {
      scales.upload(host.scales, scales.size());
      view.scales = scales.get();
    }
  }
};

}  // namespace

std::int64_t operand_payload_bytes(const OperandView& v) {
  switch (v.format) {
    case OperandFormat::bf16: return v.rows * v.k * 2;
    case OperandFormat::e4m3: return v.rows * v.k;
    case OperandFormat::nvfp4: return v.rows * v.k / 2;
  }
  return 0;
}

std::int64_t operand_scale_bytes(const OperandView& v) {
  return v.format == OperandFormat::nvfp4 ? scale_shape(v.layout, v.rows, v.k).bytes() : 0;
}

void gpu_reference_gemm_device(const OperandView& a, const OperandView& b, double alpha, OutputType out,
                               void* d_out, void* stream) {
  check_operands(a, b);
  if (d_out == nullptr) throw InvalidArgument("gpu_reference_gemm_device: the output pointer is null");
  const cudaStream_t s = cuda::as_stream(stream);
  switch (out) {
    case OutputType::f32:
      reference_gemm_f32_kernel<<<grid_for(a, b), kBlock, 0, s>>>(a, b, alpha, static_cast<float*>(d_out));
      break;
    case OutputType::bf16:
      reference_gemm_f32_kernel<<<grid_for(a, b), kBlock, 0, s>>>(a, b, alpha, static_cast<__nv_bfloat16*>(d_out));
      break;
    case OutputType::f16:
      reference_gemm_f32_kernel<<<grid_for(a, b), kBlock, 0, s>>>(a, b, alpha, static_cast<__half*>(d_out));
      break;
  }
  CUDA_CHECK_LAUNCH();
}

ReferenceResult gpu_reference_gemm(const OperandView& a, const OperandView& b, double alpha) {
  check_operands(a, b);
  const DeviceOperand da(a);
  const DeviceOperand db(b);
  const auto count = static_cast<std::size_t>(a.rows * b.rows);
  cuda::DeviceBuffer<double> d(count);
  cuda::DeviceBuffer<double> abs_sum(count);
  reference_gemm_f64_kernel<<<grid_for(a, b), kBlock>>>(da.view, db.view, alpha, d.get(), abs_sum.get());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  ReferenceResult r;
  r.m = a.rows;
  r.n = b.rows;
  r.d = d.download();
  r.abs_sum = abs_sum.download();
  return r;
}

}  // namespace fp4gap
