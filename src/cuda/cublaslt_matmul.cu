#include <sstream>

#include "cuda/cublaslt_matmul.cuh"

namespace fp4gap::cuda {

std::string to_string(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_16F: return "fp16";
    case CUDA_R_32F: return "fp32";
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_4F_E2M1: return "e2m1";
    default: {
      std::ostringstream os;
      os << "cudaDataType " << static_cast<int>(t);
      return os.str();
    }
  }
}

namespace {

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}

std::string algo_config(const cublasLtMatmulHeuristicResult_t& h) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    std::int64_t v = 0;  // the attributes are 32-bit (ID, TILE, STAGES, SPLITK); zero-extended
    std::int32_t v32 = 0;
    std::size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&h.algo, attr, &v32, sizeof v32, &written) == CUBLAS_STATUS_SUCCESS) {
      v = v32;
    }
    return v;
  };
  std::ostringstream os;
  os << "algo " << get(CUBLASLT_ALGO_CONFIG_ID) << " tile " << get(CUBLASLT_ALGO_CONFIG_TILE_ID) << " stages "
     << get(CUBLASLT_ALGO_CONFIG_STAGES_ID) << " splitK " << get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) << " waves "
     << h.wavesCount;
  return os.str();
}

}  // namespace

LtMatmul::LtMatmul(cublasLtHandle_t handle, const LtMatmulShape& shape, const void* a_scale, const void* b_scale)
    : handle_(handle), shape_(shape) {
  const auto m = static_cast<std::uint64_t>(shape.m);
  const auto n = static_cast<std::uint64_t>(shape.n);
  const auto k = static_cast<std::uint64_t>(shape.k);
  try {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_desc(desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    if (shape.scaling == LtScaling::block_vec16) {
      const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
      set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
      set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    }
    if (a_scale != nullptr || b_scale != nullptr) set_scales(a_scale, b_scale);
    // Stored (pre-op) shapes, column-major, leading dimension K for both operands.
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_a_, shape.operand_type, k, n, static_cast<std::int64_t>(k)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_b_, shape.operand_type, k, m, static_cast<std::int64_t>(k)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_d_, shape.out_type, n, m, static_cast<std::int64_t>(n)));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = kWorkspaceBytes;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_a_, layout_b_, layout_d_, layout_d_, pref, 1,
                                          &heuristic_, &found);
    }
    static_cast<void>(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      std::ostringstream os;
      os << "cuBLASLt returned no algorithm for " << to_string(shape.operand_type) << " x "
         << to_string(shape.operand_type) << " -> " << to_string(shape.out_type) << " at m " << shape.m << " n "
         << shape.n << " k " << shape.k << " (TN, fp32 accumulation): cublasLtMatmulAlgoGetHeuristic "
         << cublas_status_name(st) << ", " << found << " result(s)";
      status_ = Status::not_supported(os.str());
    } else {
      config_ = algo_config(heuristic_);
    }
  } catch (...) {
    release();  // a constructor that throws gets no destructor call
    throw;
  }
}

LtMatmul::~LtMatmul() { release(); }

void LtMatmul::release() noexcept {
  if (layout_d_ != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(layout_d_));
  if (layout_b_ != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(layout_b_));
  if (layout_a_ != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(layout_a_));
  if (desc_ != nullptr) static_cast<void>(cublasLtMatmulDescDestroy(desc_));
  layout_d_ = layout_b_ = layout_a_ = nullptr;
  desc_ = nullptr;
}

void LtMatmul::set_scales(const void* a_scale, const void* b_scale) {
  // cuBLASLt's A is our B and vice versa.
  set_desc(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scale);
  set_desc(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale);
}

void LtMatmul::run(const void* a, const void* b, void* d, float alpha, void* workspace, cudaStream_t stream) const {
  if (!status_.is_ok()) throw RuntimeError("LtMatmul::run without an algorithm: " + status_.reason);
  const float beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, b, layout_a_, a, layout_b_, &beta, d, layout_d_, d, layout_d_,
                              &heuristic_.algo, workspace, kWorkspaceBytes, stream));
}

}  // namespace fp4gap::cuda
