// The vendor baselines every table is measured against:
//   cublas-bf16     cublasGemmEx, BF16 x BF16 (the exact dequantized NVFP4 values), FP32 accumulation
//   dequant-cublas-bf16  the same GEMM on NVFP4 operands kept as NVFP4, dequantized to bf16 scratch
//                   by fp4gap's exact pass on every run (the fallback without an NVFP4 GEMM kernel)
//   cublaslt-fp8    cuBLASLt E4M3 x E4M3 with per-tensor scales (re-quantized operands)
//   cublaslt-nvfp4  cuBLASLt block-scaled NVFP4 (Blackwell only)
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "backends/registration.hpp"
#include "backends/runner_support.hpp"
#include "cuda/common.cuh"
#include "cuda/cublaslt_matmul.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/reference.hpp"

namespace fp4gap {
namespace {

using cuda::DeviceBuffer;
using cuda::upload_sets;

cudaDataType_t cuda_type(OutputType t) {
  switch (t) {
    case OutputType::f32: return CUDA_R_32F;
    case OutputType::bf16: return CUDA_R_16BF;
    case OutputType::f16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Checks every cuBLAS baseline shares: a valid problem, a device, dimensions cuBLAS's 32-bit API
// can take.
Status common_support(const GemmProblem& p, const DeviceContext& device) {
  Status valid = validate_problem(p);
  if (!valid.is_ok()) return valid;
  if (!device.available) return Status::not_supported(device.unavailable_reason);
  for (const auto& [name, v] : {std::pair{"M", p.m}, std::pair{"N", p.n}, std::pair{"K", p.k}}) {
    if (v > INT_MAX) {
      std::ostringstream os;
      os << name << " > 2^31-1: " << name << " = " << v << " (cuBLAS takes 32-bit dimensions)";
      return Status::not_supported(os.str());
    }
  }
  return Status::ok();
}

void require_size(const char* what, std::size_t got, std::int64_t want) {
  if (got != static_cast<std::size_t>(want)) {
    std::ostringstream os;
    os << what << " holds " << got << " elements, the problem needs " << want;
    throw InvalidArgument(os.str());
  }
}

void require_sets(int input_sets) {
  if (input_sets < 1) throw InvalidArgument("input_sets >= 1 required: input_sets = " + std::to_string(input_sets));
}

// One output per input set, so read_output(set) shows what the launch on that set wrote.
class DeviceOutputs {
 public:
  DeviceOutputs(std::int64_t m, std::int64_t n, OutputType type, int sets)
      : elements_(static_cast<std::size_t>(m * n)),
        bytes_(elements_ * static_cast<std::size_t>(output_type_bytes(type))),
        type_(type),
        sets_(sets),
        buffer_(bytes_ * static_cast<std::size_t>(sets)) {}

  void* at(int set) const { return buffer_.get() + bytes_ * static_cast<std::size_t>(set); }

  // 0xFF bytes are NaN in f32, bf16 and fp16. Device-synchronous: launches on any stream finish
  // before, and later launches on any stream see the poison.
  void poison() {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemset(buffer_.get(), 0xFF, buffer_.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::vector<float> read(int set) const {
    check_input_set(set, sets_, "read_output");
    // Runs went to non-blocking streams, which a plain cudaMemcpy does not wait for.
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint8_t> raw(bytes_);
    CUDA_CHECK(cudaMemcpy(raw.data(), at(set), bytes_, cudaMemcpyDeviceToHost));
    std::vector<float> out(elements_);
    if (type_ == OutputType::f32) {
      std::memcpy(out.data(), raw.data(), bytes_);
    } else {
      for (std::size_t i = 0; i < elements_; ++i) {
        std::uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[i] = type_ == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
    }
    return out;
  }

 private:
  std::size_t elements_;
  std::size_t bytes_;
  OutputType type_;
  int sets_;
  DeviceBuffer<std::uint8_t> buffer_;
};

// ================================ cublas-bf16 ================================

class CublasHandle {
 public:
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&h_)); }
  ~CublasHandle() {
    if (h_ != nullptr) static_cast<void>(cublasDestroy(h_));
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// cuBLAS has no BF16 x BF16 -> FP16 GEMM. NVFP4 values (E2M1 x E4M3) are exact in FP16 as well
// (KERNEL-NOTES), so an all-NVFP4 problem with FP16 output runs on FP16 copies of the very same
// values; other problems with FP16 output are not supported.
bool uses_fp16_operands(const GemmProblem& p) { return p.out_type == OutputType::f16; }

std::vector<std::uint16_t> bf16_to_fp16_exact(const std::vector<std::uint16_t>& bf16, const char* which) {
  std::vector<std::uint16_t> out(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) {
    const float v = bf16_to_float(bf16[i]);
    out[i] = float_to_fp16(v);
    if (fp16_to_float(out[i]) != v) {
      std::ostringstream os;
      os << "cublas-bf16: operand " << which << " element " << i << " = " << v
         << " is not exact in fp16 (fp16 output needs NVFP4 operands)";
      throw InvalidArgument(os.str());
    }
  }
  return out;
}

// D[m, n] = alpha * A[m, k] * B[n, k]^T on row-major 16-bit operands of `operand_type`, FP32
// accumulation, on `stream` with `workspace` as cuBLAS's (so that capture into a CUDA graph never
// allocates).
void gemm_16bit(cublasHandle_t handle, const DeviceBuffer<std::uint8_t>& workspace, cudaStream_t stream,
                const GemmProblem& p, const void* a, const void* b, cudaDataType_t operand_type, float alpha,
                void* out) {
  // cublasSetStream resets the workspace to cuBLAS's pool: set ours again after it.
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.get(), workspace.bytes()));
  const float beta = 0.0f;
  const auto m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  // Column-major D^T[n, m] = B * A^T: B row-major [n, k] is column-major [k, n] -> op T;
  // A row-major [m, k] is column-major [k, m] = A^T already -> op N.
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, operand_type, k, a, operand_type, k,
                            &beta, out, cuda_type(p.out_type), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

class CublasBf16Runner final : public GemmRunner {
 public:
  CublasBf16Runner(const GemmInputs& in, int sets)
      : p_(in.problem), sets_(sets), a_host_(in.a_bf16), b_host_(in.b_bf16),
        alpha_(static_cast<float>(in.alpha)), outputs_(p_.m, p_.n, p_.out_type, sets) {
    require_size("a_bf16", a_host_.size(), p_.m * p_.k);
    require_size("b_bf16", b_host_.size(), p_.n * p_.k);
    const bool fp16 = uses_fp16_operands(p_);
    operand_type_ = fp16 ? CUDA_R_16F : CUDA_R_16BF;
    const std::vector<std::uint16_t> a_dev = fp16 ? bf16_to_fp16_exact(a_host_, "A") : a_host_;
    const std::vector<std::uint16_t> b_dev = fp16 ? bf16_to_fp16_exact(b_host_, "B") : b_host_;
    a_bytes_ = a_dev.size() * 2;
    b_bytes_ = b_dev.size() * 2;
    a_ = upload_sets(a_dev.data(), a_bytes_, sets);
    b_ = upload_sets(b_dev.data(), b_bytes_, sets);
  }

  int input_sets() const override { return sets_; }

  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    gemm_16bit(handle_.get(), workspace_, cuda::as_stream(stream), p_, a_.get() + a_bytes_ * static_cast<std::size_t>(set),
               b_.get() + b_bytes_ * static_cast<std::size_t>(set), operand_type_, alpha_, outputs_.at(set));
  }

  void poison_output() override { outputs_.poison(); }
  std::vector<float> read_output(int set) override { return outputs_.read(set); }
  std::uint16_t* bf16_activations(int set) override {
    check_input_set(set, sets_, "bf16_activations");
    if (operand_type_ != CUDA_R_16BF) return nullptr;
    return reinterpret_cast<std::uint16_t*>(a_.get() + a_bytes_ * static_cast<std::size_t>(set));
  }
  OperandView a_operand() const override { return bf16_operand(a_host_, p_.m, p_.k); }
  OperandView b_operand() const override { return bf16_operand(b_host_, p_.n, p_.k); }
  double alpha() const override { return static_cast<double>(alpha_); }
  std::string config() const override {
    return std::string("cublasGemmEx CUBLAS_GEMM_DEFAULT, ") +
           (operand_type_ == CUDA_R_16F ? "fp16 operands (the same NVFP4 values, exact in fp16)" : "bf16 operands") +
           ", fp32 accumulation (the algorithm is chosen inside cuBLAS)";
  }
  bool on_device() const override { return true; }

 private:
  GemmProblem p_;
  int sets_;
  std::vector<std::uint16_t> a_host_, b_host_;
  float alpha_;
  cudaDataType_t operand_type_ = CUDA_R_16BF;
  std::size_t a_bytes_ = 0, b_bytes_ = 0;
  DeviceBuffer<std::uint8_t> a_, b_;
  DeviceOutputs outputs_;
  CublasHandle handle_;
  DeviceBuffer<std::uint8_t> workspace_{cuda::LtMatmul::kWorkspaceBytes};
};

class CublasBf16Backend final : public GemmBackend {
 public:
  std::string_view name() const override { return "cublas-bf16"; }
  std::string_view description() const override {
    return "cuBLAS cublasGemmEx BF16 x BF16, FP32 accumulation, on the exact dequantized operands (NVFP4 "
           "values without global scales; alpha carries them): the baseline of every table";
  }
  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    Status s = common_support(p, device);
    if (!s.is_ok()) return s;
    if (uses_fp16_operands(p) &&
        (p.a_format != OperandFormat::nvfp4 || p.b_format != OperandFormat::nvfp4)) {
      return Status::not_supported(
          "cuBLAS has no BF16 x BF16 -> FP16 GEMM, and bf16 operand values are not exact in fp16: fp16 output "
          "needs both operands nvfp4 [problem: " + p.label() + "]");
    }
    return Status::ok();
  }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    require_sets(input_sets);
    return std::make_unique<CublasBf16Runner>(inputs, input_sets);
  }
};

// ============================ dequant-cublas-bf16 ============================

// NVFP4 operands stay NVFP4 on the device (codes, linear scales); every run dequantizes them with
// fp4gap's exact pass (e2m1 * e4m3, no global scale: alpha carries those, as for cublas-bf16) into
// bf16 scratch that the next run overwrites, then multiplies the scratch with cublasGemmEx. Its
// time is the passes' plus cuBLAS BF16's on the very same values.
class DequantCublasBf16Runner final : public GemmRunner {
 public:
  DequantCublasBf16Runner(const GemmInputs& in, int sets)
      : p_(in.problem), sets_(sets), w4a4_(in.problem.a_format == OperandFormat::nvfp4),
        // The pass reads linear scales. W4A4 keeps only the NVFP4 activations, W4A16 only the bf16.
        b_fp4_(with_layout(in.b_fp4, ScaleLayout::linear)),
        a_fp4_(w4a4_ ? with_layout(in.a_fp4, ScaleLayout::linear) : Nvfp4Matrix{}),
        a_bf16_(w4a4_ ? std::vector<std::uint16_t>{} : in.a_bf16), alpha_(static_cast<float>(in.alpha)),
        outputs_(p_.m, p_.n, p_.out_type, sets) {
    const auto upload = [&](const Nvfp4Matrix& x, std::int64_t rows, const char* which, Nvfp4Sets& dev) {
      require_size(which, x.codes.size(), rows * p_.k / 2);
      dev.code_bytes = x.codes.size();
      dev.scale_bytes = x.scales.size();
      dev.codes = upload_sets(x.codes.data(), dev.code_bytes, sets);
      dev.scales = upload_sets(x.scales.data(), dev.scale_bytes, sets);
    };
    upload(b_fp4_, p_.n, "b_fp4 codes", b_);
    b_scratch_ = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(p_.n * p_.k));
    if (w4a4_) {
      upload(a_fp4_, p_.m, "a_fp4 codes", a_);
      a_scratch_ = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(p_.m * p_.k));
    } else {
      require_size("a_bf16", a_bf16_.size(), p_.m * p_.k);
      a_bytes_ = a_bf16_.size() * 2;
      a_bf16_dev_ = upload_sets(a_bf16_.data(), a_bytes_, sets);
    }
  }

  int input_sets() const override { return sets_; }

  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    const cudaStream_t s = cuda::as_stream(stream);
    const auto dequantize = [&](const Nvfp4Sets& x, std::int64_t rows, std::uint16_t* out) {
      prefill::launch_dequantize_bf16(x.codes.get() + x.code_bytes * static_cast<std::size_t>(set),
                                      x.scales.get() + x.scale_bytes * static_cast<std::size_t>(set), out, rows, p_.k, s);
    };
    dequantize(b_, p_.n, b_scratch_.get());
    const void* a = a_bf16_dev_.get() + a_bytes_ * static_cast<std::size_t>(set);
    if (w4a4_) {
      dequantize(a_, p_.m, a_scratch_.get());
      a = a_scratch_.get();
    }
    gemm_16bit(handle_.get(), workspace_, s, p_, a, b_scratch_.get(), CUDA_R_16BF, alpha_, outputs_.at(set));
  }

  void poison_output() override { outputs_.poison(); }
  std::vector<float> read_output(int set) override { return outputs_.read(set); }
  std::uint16_t* bf16_activations(int set) override {
    check_input_set(set, sets_, "bf16_activations");
    if (w4a4_) return nullptr;
    return reinterpret_cast<std::uint16_t*>(a_bf16_dev_.get() + a_bytes_ * static_cast<std::size_t>(set));
  }
  OperandView a_operand() const override { return w4a4_ ? nvfp4_operand(a_fp4_) : bf16_operand(a_bf16_, p_.m, p_.k); }
  OperandView b_operand() const override { return nvfp4_operand(b_fp4_); }
  double alpha() const override { return static_cast<double>(alpha_); }
  std::string config() const override {
    return std::string("each run: fp4gap's exact NVFP4 -> bf16 pass over the weight") +
           (w4a4_ ? " and the activations" : "") +
           " into scratch, then cublasGemmEx CUBLAS_GEMM_DEFAULT on bf16, fp32 accumulation";
  }
  bool on_device() const override { return true; }

 private:
  struct Nvfp4Sets {
    DeviceBuffer<std::uint8_t> codes, scales;
    std::size_t code_bytes = 0, scale_bytes = 0;
  };
  GemmProblem p_;
  int sets_;
  bool w4a4_;
  Nvfp4Matrix b_fp4_, a_fp4_;
  std::vector<std::uint16_t> a_bf16_;
  float alpha_;
  Nvfp4Sets b_, a_;
  std::size_t a_bytes_ = 0;
  DeviceBuffer<std::uint8_t> a_bf16_dev_;
  DeviceBuffer<std::uint16_t> b_scratch_, a_scratch_;
  DeviceOutputs outputs_;
  CublasHandle handle_;
  DeviceBuffer<std::uint8_t> workspace_{cuda::LtMatmul::kWorkspaceBytes};
};

class DequantCublasBf16Backend final : public GemmBackend {
 public:
  std::string_view name() const override { return "dequant-cublas-bf16"; }
  std::string_view description() const override {
    return "NVFP4 operands dequantized to bf16 scratch on every run (fp4gap's exact pass), then cublasGemmEx BF16 x "
           "BF16, FP32 accumulation: what a GPU without an NVFP4 GEMM kernel can run, timed with its passes (added "
           "when no GPU was lent: its device tests have not run yet)";
  }
  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    Status s = common_support(p, device);
    if (!s.is_ok()) return s;
    if (p.b_format != OperandFormat::nvfp4 || (p.a_format != OperandFormat::nvfp4 && p.a_format != OperandFormat::bf16)) {
      return Status::not_supported("dequant-cublas-bf16 dequantizes an nvfp4 weight and takes nvfp4 or bf16 "
                                   "activations [problem: " + p.label() + "]");
    }
    if (p.out_type == OutputType::f16) {
      return Status::not_supported("cuBLAS has no BF16 x BF16 -> FP16 GEMM, and the pass writes bf16 [problem: " +
                                   p.label() + "]");
    }
    return Status::ok();
  }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    require_sets(input_sets);
    return std::make_unique<DequantCublasBf16Runner>(inputs, input_sets);
  }
};

// ============================ cuBLASLt backends ==============================

// The cuBLASLt handle a backend's supports() asks the heuristic with, made on first use.
class LazyLtHandle {
 public:
  cublasLtHandle_t get(int ordinal) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!handle_) {
      CUDA_CHECK(cudaSetDevice(ordinal));
      handle_ = std::make_unique<cuda::LtHandle>();
    }
    return handle_->get();
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<cuda::LtHandle> handle_;
};

// Per-tensor E4M3 quantization with scale s = 448 / amax: codes = e4m3_satfinite(x * s), so
// x ~= code / s. s = 1 for an all-zero tensor.
struct E4m3Tensor {
  std::vector<std::uint8_t> codes;
  float scale = 1.0f;
};
E4m3Tensor quantize_e4m3_per_tensor(const std::vector<std::uint16_t>& bf16) {
  float amax = 0.0f;
  for (std::uint16_t h : bf16) {
    const float v = std::fabs(bf16_to_float(h));
    if (std::isfinite(v)) amax = std::max(amax, v);
  }
  E4m3Tensor t;
  t.scale = amax > 0.0f ? kE4M3Max / amax : 1.0f;
  t.codes.resize(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) t.codes[i] = float_to_e4m3_sat(bf16_to_float(bf16[i]) * t.scale);
  return t;
}

// What the cuBLASLt heuristic answers for `shape`; a failure to even ask becomes not_supported
// too (supports() reports, never throws).
struct Probe {
  Status status;
  std::string config;
};
Probe probe_heuristic(LazyLtHandle& handle, int ordinal, const cuda::LtMatmulShape& shape) {
  try {
    // Scaled types are asked with scale pointers set, as they will run (see LtMatmul).
    DeviceBuffer<std::uint8_t> a_scale, b_scale;
    if (shape.scaling != cuda::LtScaling::none) {
      a_scale = DeviceBuffer<std::uint8_t>(256);
      b_scale = DeviceBuffer<std::uint8_t>(256);
    }
    const cuda::LtMatmul matmul(handle.get(ordinal), shape, a_scale.get(), b_scale.get());
    return {matmul.status(), matmul.config()};
  } catch (const RuntimeError& e) {
    return {Status::not_supported(std::string("cuBLASLt setup failed: ") + e.what()), {}};
  }
}

cuda::LtMatmulShape fp8_shape(const GemmProblem& p) {
  return {p.m, p.n, p.k, CUDA_R_8F_E4M3, cuda_type(p.out_type), cuda::LtScaling::per_tensor};
}

class CublasLtFp8Runner final : public GemmRunner {
 public:
  CublasLtFp8Runner(const GemmInputs& in, int sets)
      : p_(in.problem), sets_(sets), outputs_(p_.m, p_.n, p_.out_type, sets) {
    require_size("a_bf16", in.a_bf16.size(), p_.m * p_.k);
    require_size("b_bf16", in.b_bf16.size(), p_.n * p_.k);
    a_ = quantize_e4m3_per_tensor(in.a_bf16);
    b_ = quantize_e4m3_per_tensor(in.b_bf16);
    a_dev_ = upload_sets(a_.codes.data(), a_.codes.size(), sets);
    b_dev_ = upload_sets(b_.codes.data(), b_.codes.size(), sets);
    // cuBLASLt multiplies the codes by these dequantization scales and alpha.
    // Each scale in its own allocation: cuBLASLt wants aligned scale pointers.
    dequant_scales_host_ = {1.0f / a_.scale, 1.0f / b_.scale};
    a_dequant_scale_ = DeviceBuffer<float>(std::vector<float>{dequant_scales_host_[0]});
    b_dequant_scale_ = DeviceBuffer<float>(std::vector<float>{dequant_scales_host_[1]});
    alpha_ = static_cast<float>(in.alpha);
    matmul_ = std::make_unique<cuda::LtMatmul>(handle_.get(), fp8_shape(p_), a_dequant_scale_.get(),
                                               b_dequant_scale_.get());
    if (!matmul_->status().is_ok()) throw RuntimeError("cublaslt-fp8: " + matmul_->status().reason);
  }

  int input_sets() const override { return sets_; }
  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    const auto s = static_cast<std::size_t>(set);
    matmul_->run(a_dev_.get() + a_.codes.size() * s, b_dev_.get() + b_.codes.size() * s, outputs_.at(set), alpha_,
                 workspace_.get(), cuda::as_stream(stream));
  }
  void poison_output() override { outputs_.poison(); }
  std::vector<float> read_output(int set) override { return outputs_.read(set); }
  OperandView a_operand() const override { return view(a_, p_.m); }
  OperandView b_operand() const override { return view(b_, p_.n); }
  // What cuBLASLt applies to the sum of code products: alpha * (1/sa) * (1/sb), each a float.
  double alpha() const override {
    return static_cast<double>(alpha_) * static_cast<double>(dequant_scales_host_[0]) *
           static_cast<double>(dequant_scales_host_[1]);
  }
  std::string config() const override {
    std::ostringstream os;
    os << "cuBLASLt " << matmul_->config() << "; per-tensor scales sa " << a_.scale << " sb " << b_.scale;
    return os.str();
  }
  // FP8 tensor cores sum each group of 32 products at ~14 bits (backend.hpp).
  double tensor_core_error_bound() const override { return 0x1p-9; }
  bool on_device() const override { return true; }

 private:
  OperandView view(const E4m3Tensor& t, std::int64_t rows) const {
    OperandView o;
    o.format = OperandFormat::e4m3;
    o.rows = rows;
    o.k = p_.k;
    o.codes = t.codes.data();
    return o;
  }

  GemmProblem p_;
  int sets_;
  E4m3Tensor a_, b_;
  DeviceBuffer<std::uint8_t> a_dev_, b_dev_;
  std::vector<float> dequant_scales_host_;
  DeviceBuffer<float> a_dequant_scale_, b_dequant_scale_;
  float alpha_ = 1.0f;
  DeviceOutputs outputs_;
  cuda::LtHandle handle_;
  std::unique_ptr<cuda::LtMatmul> matmul_;
  DeviceBuffer<std::uint8_t> workspace_{cuda::LtMatmul::kWorkspaceBytes};
};

class CublasLtFp8Backend final : public GemmBackend {
 public:
  std::string_view name() const override { return "cublaslt-fp8"; }
  std::string_view description() const override {
    return "cuBLASLt E4M3 x E4M3 (TN) with per-tensor scales 448/amax, FP32 accumulation: re-quantizes both "
           "operands to FP8, so it multiplies different values than the NVFP4 kernels (checked against its own "
           "operands)";
  }
  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    Status s = common_support(p, device);
    if (!s.is_ok()) return s;
    if (device.cc_major * 10 + device.cc_minor < 89) {
      return Status::not_supported("FP8 tensor cores need sm_89 or newer: " + device.name + " is sm_" +
                                   std::to_string(device.cc_major) + std::to_string(device.cc_minor));
    }
    if (p.k % 16 != 0) {
      return Status::not_supported("K % 16 != 0: K = " + std::to_string(p.k) +
                                   " (cuBLASLt FP8 needs 16-byte aligned operand rows)");
    }
    return probe_heuristic(handle_, device.ordinal, fp8_shape(p)).status;
  }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    require_sets(input_sets);
    return std::make_unique<CublasLtFp8Runner>(inputs, input_sets);
  }

 private:
  mutable LazyLtHandle handle_;
};

// ------------------------------ cublaslt-nvfp4 ------------------------------
// Written against the CUDA 12.8+ cuBLASLt block-scaled API; it has never run: the development GPU
// (H200, sm_90) has no FP4 tensor cores, and there this backend answers not_supported.

cuda::LtMatmulShape nvfp4_shape(const GemmProblem& p) {
  return {p.m, p.n, p.k, CUDA_R_4F_E2M1, cuda_type(p.out_type), cuda::LtScaling::block_vec16};
}

class CublasLtNvfp4Runner final : public GemmRunner {
 public:
  CublasLtNvfp4Runner(const GemmInputs& in, int sets)
      : p_(in.problem), sets_(sets), outputs_(p_.m, p_.n, p_.out_type, sets) {
    require_size("a_fp4.codes", in.a_fp4.codes.size(), p_.m * p_.k / 2);
    require_size("b_fp4.codes", in.b_fp4.codes.size(), p_.n * p_.k / 2);
    // Codes are row-major [rows, K/2] with element 2j in the low nibble: cuBLASLt's packing of
    // CUDA_R_4F_E2M1 along the leading (K) dimension. Scales go into the 128x4 swizzle.
    a_ = with_layout(in.a_fp4, ScaleLayout::swizzled_128x4);
    b_ = with_layout(in.b_fp4, ScaleLayout::swizzled_128x4);
    a_codes_ = upload_sets(a_.codes.data(), a_.codes.size(), sets);
    b_codes_ = upload_sets(b_.codes.data(), b_.codes.size(), sets);
    a_scales_ = upload_sets(a_.scales.data(), a_.scales.size(), sets);
    b_scales_ = upload_sets(b_.scales.data(), b_.scales.size(), sets);
    alpha_ = static_cast<float>(in.alpha);
    matmul_ = std::make_unique<cuda::LtMatmul>(handle_.get(), nvfp4_shape(p_), a_scales_.get(), b_scales_.get());
    if (!matmul_->status().is_ok()) throw RuntimeError("cublaslt-nvfp4: " + matmul_->status().reason);
  }

  int input_sets() const override { return sets_; }
  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    const auto s = static_cast<std::size_t>(set);
    // The descriptor holds the scale pointers; it is read when the call is made (also in capture).
    matmul_->set_scales(a_scales_.get() + a_.scales.size() * s, b_scales_.get() + b_.scales.size() * s);
    matmul_->run(a_codes_.get() + a_.codes.size() * s, b_codes_.get() + b_.codes.size() * s, outputs_.at(set),
                 alpha_, workspace_.get(), cuda::as_stream(stream));
  }
  void poison_output() override { outputs_.poison(); }
  std::vector<float> read_output(int set) override { return outputs_.read(set); }
  OperandView a_operand() const override { return nvfp4_operand(a_); }
  OperandView b_operand() const override { return nvfp4_operand(b_); }
  double alpha() const override { return static_cast<double>(alpha_); }
  std::string config() const override { return "cuBLASLt " + matmul_->config(); }
  bool on_device() const override { return true; }

 private:
  GemmProblem p_;
  int sets_;
  Nvfp4Matrix a_, b_;
  DeviceBuffer<std::uint8_t> a_codes_, b_codes_, a_scales_, b_scales_;
  float alpha_ = 1.0f;
  DeviceOutputs outputs_;
  cuda::LtHandle handle_;
  std::unique_ptr<cuda::LtMatmul> matmul_;
  DeviceBuffer<std::uint8_t> workspace_{cuda::LtMatmul::kWorkspaceBytes};
};

class CublasLtNvfp4Backend final : public GemmBackend {
 public:
  std::string_view name() const override { return "cublaslt-nvfp4"; }
  std::string_view description() const override {
    return "cuBLASLt block-scaled NVFP4 (CUDA_R_4F_E2M1, VEC16_UE4M3 scales swizzled 128x4), FP32 accumulation; "
           "needs sm_100 or newer. Written against the CUDA 12.8+ API and never run on the development H200";
  }
  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    Status s = common_support(p, device);
    if (!s.is_ok()) return s;
    if (p.a_format != OperandFormat::nvfp4 || p.b_format != OperandFormat::nvfp4) {
      return Status::not_supported("cuBLASLt's NVFP4 GEMM needs both operands nvfp4 [problem: " + p.label() + "]");
    }
    const Probe probe = probe_heuristic(handle_, device.ordinal, nvfp4_shape(p));
    if (device.cc_major < 10) {
      std::string why = "FP4 tensor cores need sm_100 or newer: " + device.name + " is sm_" +
                        std::to_string(device.cc_major) + std::to_string(device.cc_minor);
      why += probe.status.is_ok() ? "; cuBLASLt offered an algorithm (" + probe.config + ") that is not used"
                                  : "; " + probe.status.reason;
      return Status::not_supported(why);
    }
    return probe.status;
  }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    require_sets(input_sets);
    return std::make_unique<CublasLtNvfp4Runner>(inputs, input_sets);
  }

 private:
  mutable LazyLtHandle handle_;
};

}  // namespace

void register_cublas_backends() {
  register_gemm_backend(std::make_unique<CublasBf16Backend>());
  register_gemm_backend(std::make_unique<DequantCublasBf16Backend>());
  register_gemm_backend(std::make_unique<CublasLtFp8Backend>());
  register_gemm_backend(std::make_unique<CublasLtNvfp4Backend>());
}

}  // namespace fp4gap
