#pragma once
// One cuBLASLt matmul configured for fp4gap's problem D[M, N] = alpha * A[M, K] * B[N, K]^T with
// row-major operands, shared by the cuBLASLt backends and `fp4gap peak`.
//
// Column-major view (cuBLASLt's): row-major D[M, N] is column-major D^T[N, M] = B * A^T. So
// cuBLASLt's matrix "A" is our weight B (row-major [N, K] = column-major [K, N], op T) and its
// matrix "B" is our activation A (row-major [M, K] = column-major [K, M], op N): the "TN" layout
// that FP8 and block-scaled FP4 require. Scale pointers are named after OUR operands below.
#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "fp4gap/status.hpp"

namespace fp4gap::cuda {

enum class LtScaling {
  none,         // bf16 operands
  per_tensor,   // fp8: one float per operand (device pointer), CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
  block_vec16,  // nvfp4: one UE4M3 per 16 elements along K, swizzled 128x4 (VEC16_UE4M3)
};

struct LtMatmulShape {
  std::int64_t m = 0, n = 0, k = 0;
  cudaDataType_t operand_type = CUDA_R_16BF;  // both operands
  cudaDataType_t out_type = CUDA_R_16BF;      // C and D
  LtScaling scaling = LtScaling::none;
};

// Owning cuBLASLt handle.
class LtHandle {
 public:
  LtHandle() { CUBLAS_CHECK(cublasLtCreate(&handle_)); }
  ~LtHandle() {
    if (handle_ != nullptr) static_cast<void>(cublasLtDestroy(handle_));
  }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

class LtMatmul {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's advice for Hopper/Blackwell

  // Builds the descriptors and asks the heuristic for the best algorithm. Never throws for "no
  // algorithm": status() says why instead. Throws RuntimeError when a descriptor cannot be built.
  // Scaled types (FP8, NVFP4) must pass their first scale pointers: the heuristic only offers
  // algorithms that support scaling when the descriptor already holds scale pointers.
  LtMatmul(cublasLtHandle_t handle, const LtMatmulShape& shape, const void* a_scale = nullptr,
           const void* b_scale = nullptr);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // ok, or not_supported naming the shape, the types and what the heuristic returned.
  const Status& status() const { return status_; }
  // "algo 23 tile 18 stages 9 splitK 1 waves 0.97" (cuBLASLt's enum ids), empty when no algorithm.
  const std::string& config() const { return config_; }

  // Scale pointers (device) of our operands: float for per_tensor, swizzled UE4M3 for
  // block_vec16. Set before every run whose scales live elsewhere (rotated input sets).
  void set_scales(const void* a_scale, const void* b_scale);
  // D = alpha * A * B^T on `stream`; `workspace` holds kWorkspaceBytes. Capturable.
  void run(const void* a, const void* b, void* d, float alpha, void* workspace, cudaStream_t stream) const;

 private:
  void release() noexcept;

  cublasLtHandle_t handle_;
  LtMatmulShape shape_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_a_ = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t layout_b_ = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t layout_d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  Status status_;
  std::string config_;
};

std::string to_string(cudaDataType_t t);

}  // namespace fp4gap::cuda
