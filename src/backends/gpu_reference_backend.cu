// The "gpu-reference" backend: the naive GPU GEMM (src/cuda/reference) run as a backend. It is
// the reference for shapes too large for the CPU, never a contender.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/registration.hpp"
#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_reference.hpp"
#include "fp4gap/numeric.hpp"

namespace fp4gap {
namespace {

// One input set on the device: copies of both operands' arrays and an output.
struct DeviceSet {
  cuda::DeviceBuffer<std::uint8_t> a_payload, a_scales, b_payload, b_scales;
  OperandView a, b;  // device views
  cuda::DeviceBuffer<std::uint8_t> out;
};

void upload_operand(const OperandView& host, cuda::DeviceBuffer<std::uint8_t>& payload,
                    cuda::DeviceBuffer<std::uint8_t>& scales, OperandView& device) {
  payload = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(operand_payload_bytes(host)));
  scales = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(operand_scale_bytes(host)));
  device = host;
  device.bf16 = nullptr;
  device.codes = nullptr;
  device.scales = nullptr;
  if (host.format == OperandFormat::bf16) {
    payload.upload(reinterpret_cast<const std::uint8_t*>(host.bf16), payload.size());
    device.bf16 = reinterpret_cast<const std::uint16_t*>(payload.get());
  } else {
    payload.upload(host.codes, payload.size());
    device.codes = payload.get();
  }
  if (host.format == OperandFormat::nvfp4) {
    scales.upload(host.scales, scales.size());
    device.scales = scales.get();
  }
}

class GpuReferenceRunner : public GemmRunner {
 public:
  GpuReferenceRunner(const GemmInputs& inputs, int sets) : inputs_(inputs) {
    const GemmProblem& p = inputs_.problem;
    const auto out_bytes = static_cast<std::size_t>(p.m * p.n * output_type_bytes(p.out_type));
    sets_.resize(static_cast<std::size_t>(sets));
    for (DeviceSet& s : sets_) {
      upload_operand(inputs_.a_view(), s.a_payload, s.a_scales, s.a);
      upload_operand(inputs_.b_view(), s.b_payload, s.b_scales, s.b);
      s.out = cuda::DeviceBuffer<std::uint8_t>(out_bytes);
    }
  }

  int input_sets() const override { return static_cast<int>(sets_.size()); }

  void run(int set, void* stream) override {
    DeviceSet& s = at(set);
    gpu_reference_gemm_device(s.a, s.b, inputs_.alpha, inputs_.problem.out_type, s.out.get(), stream);
  }

  // 0xFF bytes are NaN in every output type (f32 0xFFFFFFFF, bf16 and f16 0xFFFF). The fill runs
  // on the legacy stream, which launches on a non-blocking stream do not wait for: finish it here.
  void poison_output() override {
    for (DeviceSet& s : sets_) s.out.fill_bytes(0xFF);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::vector<float> read_output(int set) override {
    CUDA_CHECK(cudaDeviceSynchronize());  // run() may still be in flight on its own stream
    const std::vector<std::uint8_t> raw = at(set).out.download();
    const GemmProblem& p = inputs_.problem;
    std::vector<float> out(static_cast<std::size_t>(p.m * p.n));
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (p.out_type) {
        case OutputType::f32: {
          float v;
          std::memcpy(&v, raw.data() + 4 * i, 4);
          out[i] = v;
          break;
        }
        case OutputType::bf16:
        case OutputType::f16: {
          std::uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[i] = p.out_type == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
          break;
        }
      }
    }
    return out;
  }

  OperandView a_operand() const override { return inputs_.a_view(); }
  OperandView b_operand() const override { return inputs_.b_view(); }
  double alpha() const override { return inputs_.alpha; }
  std::string config() const override { return "one thread per output, fp32 accumulation"; }
  bool on_device() const override { return true; }

 private:
  DeviceSet& at(int set) {
    if (set < 0 || set >= input_sets()) {
      throw InvalidArgument("input set out of range: set = " + std::to_string(set) + " (the runner has " +
                            std::to_string(input_sets()) + " sets)");
    }
    return sets_[static_cast<std::size_t>(set)];
  }

  GemmInputs inputs_;  // a copy: a_operand()/b_operand() point into it
  std::vector<DeviceSet> sets_;
};

class GpuReferenceBackend : public GemmBackend {
 public:
  std::string_view name() const override { return "gpu-reference"; }
  std::string_view description() const override {
    return "naive GPU GEMM (one thread per output, fp32 accumulation, operands dequantized on the fly): "
           "the reference for large shapes, not a contender";
  }

  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    if (!device.available) return Status::not_supported(device.unavailable_reason);
    Status valid = validate_problem(p);
    if (!valid.is_ok()) return valid;
    if (p.a_format == OperandFormat::e4m3 || p.b_format == OperandFormat::e4m3) {
      return Status::not_supported("e4m3 operands are not an input format (inputs are nvfp4 or bf16)");
    }
    return Status::ok();
  }

  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    if (input_sets < 1) throw InvalidArgument("input_sets < 1: input_sets = " + std::to_string(input_sets));
    return std::make_unique<GpuReferenceRunner>(inputs, input_sets);
  }
};

}  // namespace

void register_gpu_reference_backends() { register_gemm_backend(std::make_unique<GpuReferenceBackend>()); }

}  // namespace fp4gap
