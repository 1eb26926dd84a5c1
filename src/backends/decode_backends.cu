// The decode GEMM backends (M <= 64), over the kernels of src/cuda/decode:
//   fp4gap-decode-w4a16  bf16 activations x NVFP4 weight, BF16 mma.sync
//   fp4gap-decode-w4a4   NVFP4 activations x NVFP4 weight (cutlass_scaled_fp4_mm contract), FP16 mma.sync
// The weight is pre-shuffled once in prepare(), as a serving stack does at model load; W4A4
// activations are passed with swizzled 128x4 scales, as users pass them.
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/registration.hpp"
#include "backends/runner_support.hpp"
#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap {
namespace {

using cuda::DeviceBuffer;
using decode::Math;

// `sets` copies of `bytes` host bytes, back to back, each starting at a multiple of 256 bytes.
class SetBuffer {
 public:
  SetBuffer() = default;
  SetBuffer(const void* host, std::size_t bytes, int sets)
      : stride_((bytes + 255) / 256 * 256), buffer_(stride_ * static_cast<std::size_t>(sets)) {
    for (int s = 0; s < sets; ++s) {
      CUDA_CHECK(cudaMemcpy(at(s), host, bytes, cudaMemcpyHostToDevice));
    }
  }
  std::uint8_t* at(int set) const { return buffer_.get() + stride_ * static_cast<std::size_t>(set); }

 private:
  std::size_t stride_ = 0;
  DeviceBuffer<std::uint8_t> buffer_;
};

const DeviceContext& current_device() {
  static const DeviceContext d = query_device();
  return d;
}

class DecodeRunner final : public GemmRunner {
 public:
  DecodeRunner(const GemmInputs& in, int sets, Math math)
      : p_(in.problem), math_(math), sets_(sets), alpha_(static_cast<float>(in.alpha)), b_host_(in.b_fp4) {
    if (sets < 1) throw InvalidArgument("input_sets >= 1 required: input_sets = " + std::to_string(sets));
    plan_ = decode::choose_plan(p_.m, p_.n, p_.k, math, decode::WeightLayout::shuffled, current_device());
    decode::prepare_launch(plan_);

    const decode::ShuffledWeight w = decode::shuffle_weight_for_decode(in.b_fp4, math);
    w_codes_ = SetBuffer(w.codes.data(), w.codes.size(), sets);
    w_scales_ = SetBuffer(w.scales.data(), w.scales.size(), sets);
    if (math == Math::w4a16) {
      if (static_cast<std::int64_t>(in.a_bf16.size()) != p_.m * p_.k) {
        throw InvalidArgument("a_bf16 holds " + std::to_string(in.a_bf16.size()) + " values, the problem needs " +
                              std::to_string(p_.m * p_.k));
      }
      a_bf16_host_ = in.a_bf16;
      a_ = SetBuffer(a_bf16_host_.data(), a_bf16_host_.size() * 2, sets);
    } else {
      a_fp4_host_ = in.a_fp4;
      const Nvfp4Matrix swizzled = with_layout(in.a_fp4, ScaleLayout::swizzled_128x4);
      a_ = SetBuffer(swizzled.codes.data(), swizzled.codes.size(), sets);
      a_scales_ = SetBuffer(swizzled.scales.data(), swizzled.scales.size(), sets);
    }
    out_bytes_ = static_cast<std::size_t>(p_.m * p_.n * output_type_bytes(p_.out_type));
    out_stride_ = (out_bytes_ + 255) / 256 * 256;
    outputs_ = DeviceBuffer<std::uint8_t>(out_stride_ * static_cast<std::size_t>(sets));
    if (plan_.workspace_bytes() > 0) {
      workspace_ = DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(plan_.workspace_bytes()));
      workspace_.fill_bytes(0);  // the split-K counters start at zero; every launch leaves them zero
    }
  }

  int input_sets() const override { return sets_; }

  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    decode::GemmArgs args;
    args.a = a_.at(set);
    args.a_scales = math_ == Math::w4a4 ? a_scales_.at(set) : nullptr;
    args.a_scale_layout = ScaleLayout::swizzled_128x4;
    args.w_codes = w_codes_.at(set);
    args.w_scales = w_scales_.at(set);
    args.alpha = alpha_;
    args.d = outputs_.get() + out_stride_ * static_cast<std::size_t>(set);
    args.out_type = p_.out_type;
    args.workspace = workspace_.get();
    args.workspace_bytes = static_cast<std::int64_t>(workspace_.bytes());
    args.programmatic_launch = programmatic_;
    decode::launch_gemm(plan_, args, stream);
  }

  // 0xFF bytes are NaN in every output type.
  void poison_output() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemset(outputs_.get(), 0xFF, outputs_.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::uint16_t* bf16_activations(int set) override {
    check_input_set(set, sets_, "bf16_activations");
    return math_ == Math::w4a16 ? reinterpret_cast<std::uint16_t*>(a_.at(set)) : nullptr;
  }

  std::vector<float> read_output(int set) override {
    check_input_set(set, sets_, "read_output");
    CUDA_CHECK(cudaDeviceSynchronize());  // runs went to non-blocking streams
    std::vector<std::uint8_t> raw(out_bytes_);
    CUDA_CHECK(cudaMemcpy(raw.data(), outputs_.get() + out_stride_ * static_cast<std::size_t>(set), out_bytes_,
                          cudaMemcpyDeviceToHost));
    const std::size_t count = static_cast<std::size_t>(p_.m * p_.n);
    std::vector<float> out(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (p_.out_type == OutputType::f32) {
        std::memcpy(&out[i], raw.data() + 4 * i, 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[i] = p_.out_type == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
    }
    return out;
  }

  OperandView a_operand() const override {
    return math_ == Math::w4a16 ? bf16_operand(a_bf16_host_, p_.m, p_.k) : nvfp4_operand(a_fp4_host_);
  }
  OperandView b_operand() const override { return nvfp4_operand(b_host_); }
  double alpha() const override { return static_cast<double>(alpha_); }
  std::string config() const override { return plan_.describe() + (programmatic_ ? ", programmatic launch" : ""); }
  // Off by default: back to back the programmatic kernels were 0.85-1.15x (runs 9, 90), and behind a
  // kernel that lets no one launch early ~0.2 us slower (run 90); behind one that does, 0.1-0.6
  // us faster (run 90, `fp4gap gemm --after norm-pdl`).
  bool request_programmatic_launch() override {
    programmatic_ = true;
    return true;
  }
  bool on_device() const override { return true; }

 private:
  GemmProblem p_;
  Math math_;
  int sets_;
  float alpha_;
  bool programmatic_ = false;
  decode::Plan plan_;
  Nvfp4Matrix b_host_, a_fp4_host_;
  std::vector<std::uint16_t> a_bf16_host_;
  SetBuffer w_codes_, w_scales_, a_, a_scales_;
  std::size_t out_bytes_ = 0, out_stride_ = 0;
  DeviceBuffer<std::uint8_t> outputs_;
  DeviceBuffer<std::uint8_t> workspace_;
};

class DecodeBackend final : public GemmBackend {
 public:
  explicit DecodeBackend(Math math) : math_(math) {}

  std::string_view name() const override {
    return math_ == Math::w4a16 ? "fp4gap-decode-w4a16" : "fp4gap-decode-w4a4";
  }
  std::string_view description() const override {
    return math_ == Math::w4a16
               ? "fp4gap decode (M <= 64): bf16 activations x NVFP4 weight pre-shuffled at load, exact in-register "
                 "dequantization to BF16, mma.sync m16n8k16, split-K reduced deterministically in-kernel"
               : "fp4gap decode (M <= 64): NVFP4 x NVFP4 (cutlass_scaled_fp4_mm contract, swizzled activation "
                 "scales), exact dequantization to FP16, mma.sync m16n8k16, split-K reduced deterministically in-kernel";
  }

  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    const Status valid = validate_problem(p);
    if (!valid.is_ok()) return valid;
    const OperandFormat want_a = math_ == Math::w4a16 ? OperandFormat::bf16 : OperandFormat::nvfp4;
    if (p.a_format != want_a || p.b_format != OperandFormat::nvfp4) {
      std::ostringstream os;
      os << name() << " multiplies " << to_string(want_a) << " activations by an nvfp4 weight [problem: " << p.label()
         << "]";
      return Status::not_supported(os.str());
    }
    if (p.m > decode::kMaxM) {
      return Status::not_supported("decode kernel serves M <= 64: M = " + std::to_string(p.m) + " [problem: " +
                                   p.label() + "]");
    }
    const Status shape = decode::check_shape(p.m, p.n, p.k, math_);
    if (!shape.is_ok()) return shape;
    if (!device.available) return Status::not_supported(device.unavailable_reason);
    try {
      const decode::Plan plan = decode::choose_plan(p.m, p.n, p.k, math_, decode::WeightLayout::shuffled, device);
      if (plan.row_blocks > 0x7FFFFFFF) return Status::not_supported("N too large for one grid: N = " + std::to_string(p.n));
    } catch (const InvalidArgument& e) {
      return Status::not_supported(e.what());
    }
    return Status::ok();
  }

  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    return std::make_unique<DecodeRunner>(inputs, input_sets, math_);
  }

 private:
  Math math_;
};

}  // namespace

void register_decode_backends() {
  register_gemm_backend(std::make_unique<DecodeBackend>(Math::w4a16));
  register_gemm_backend(std::make_unique<DecodeBackend>(Math::w4a4));
}

}  // namespace fp4gap
