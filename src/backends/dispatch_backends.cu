// The dispatching backends a user calls without knowing the kernels:
//   fp4gap-w4a16  bf16 activations x NVFP4 weight
//   fp4gap-w4a4   NVFP4 activations x NVFP4 weight (cutlass_scaled_fp4_mm contract)
// Each asks the decode and prefill backends of its math whether they serve the problem and runs
// the one choose_kernel_family picks (include/fp4gap/dispatch.hpp); the runner's config names the
// kernel that ran.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backends/registration.hpp"
#include "cuda/common.cuh"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/backend.hpp"
#include "fp4gap/dispatch.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap {
namespace {

// The runner of the family a tune cache chose: the family's own runner, its config line saying why.
class TunedFamilyRunner final : public GemmRunner {
 public:
  TunedFamilyRunner(std::unique_ptr<GemmRunner> runner, std::string why)
      : runner_(std::move(runner)), why_(std::move(why)) {}
  int input_sets() const override { return runner_->input_sets(); }
  void run(int set, void* stream) override { runner_->run(set, stream); }
  void poison_output() override { runner_->poison_output(); }
  std::vector<float> read_output(int set) override { return runner_->read_output(set); }
  OperandView a_operand() const override { return runner_->a_operand(); }
  OperandView b_operand() const override { return runner_->b_operand(); }
  double alpha() const override { return runner_->alpha(); }
  std::string config() const override { return runner_->config() + "; " + why_; }
  double tensor_core_error_bound() const override { return runner_->tensor_core_error_bound(); }
  bool on_device() const override { return runner_->on_device(); }
  std::uint16_t* bf16_activations(int set) override { return runner_->bf16_activations(set); }
  bool request_programmatic_launch() override { return runner_->request_programmatic_launch(); }
  std::optional<LaunchFill> launch_fill() const override { return runner_->launch_fill(); }

 private:
  std::unique_ptr<GemmRunner> runner_;
  std::string why_;
};

class DispatchBackend final : public GemmBackend {
 public:
  DispatchBackend(std::string_view name, std::string_view decode, std::string_view prefill, bool w4a4)
      : name_(name), decode_(decode), prefill_(prefill), w4a4_(w4a4),
        description_("fp4gap's pick for " + std::string(w4a4 ? "NVFP4" : "bf16") +
                     " x NVFP4: the decode kernel up to M = " + std::to_string(decode_max_m(w4a4, 1, 1)) + " (" +
                     std::to_string(decode_max_m(w4a4, 1, kDecodeMaxMWeightElements + 1)) + " for weights over " +
                     std::to_string(kDecodeMaxMWeightElements) + " elements)" +
                     ", the Hopper prefill kernel above (where only one of them serves the shape, that one); the "
                     "boundary is fit behind another kernel (fp4gap gemm --after norm|quantize), back to back the "
                     "prefill kernel wins from M = 9-13; a tune cache that timed both for the problem on this device "
                     "decides instead (fp4gap tune)") {}

  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }

  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    return choose(p, device, tuned_family(p, device)).status;
  }

  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    int ordinal = 0;
    CUDA_CHECK(cudaGetDevice(&ordinal));
    const DeviceContext device = query_device(ordinal);
    const std::optional<tune::TunedFamily> tuned = tuned_family(inputs.problem, device);
    const FamilyChoice c = choose(inputs.problem, device, tuned);
    if (!c.status.is_ok()) throw InvalidArgument(std::string(name_) + ": " + c.status.reason);
    std::unique_ptr<GemmRunner> runner = backend(c.family).prepare(inputs, input_sets);
    if (tuned && tuned->family == c.family) {
      return std::make_unique<TunedFamilyRunner>(
          std::move(runner), std::string(to_string(c.family)) + " kernel by the tune cache (" + tuned->note + ")");
    }
    return runner;
  }

 private:
  GemmBackend& backend(KernelFamily f) const {
    GemmBackend* b = find_gemm_backend(f == KernelFamily::decode ? decode_ : prefill_);
    if (b == nullptr) throw RuntimeError(std::string(name_) + ": backend not registered: " + std::string(to_string(f)));
    return *b;
  }
  // The family a tune cache timed faster for this very problem on this device, if any.
  std::optional<tune::TunedFamily> tuned_family(const GemmProblem& p, const DeviceContext& device) const {
    return tune::tuned_family(w4a4_, p.m, p.n, p.k, p.out_type, device);
  }
  // `tuned` (tuned_family) decides where both families serve the problem.
  FamilyChoice choose(const GemmProblem& p, const DeviceContext& device,
                      const std::optional<tune::TunedFamily>& tuned) const {
    const Status decode = backend(KernelFamily::decode).supports(p, device);
    const Status prefill = backend(KernelFamily::prefill).supports(p, device);
    return choose_kernel_family(p.m, decode_max_m(w4a4_, p.n, p.k), decode, prefill,
                                tuned ? std::optional<KernelFamily>(tuned->family) : std::nullopt);
  }

  std::string_view name_, decode_, prefill_;
  bool w4a4_;
  std::string description_;
};

}  // namespace

void register_dispatch_backends() {
  register_gemm_backend(
      std::make_unique<DispatchBackend>("fp4gap-w4a16", "fp4gap-decode-w4a16", "fp4gap-prefill-w4a16", false));
  register_gemm_backend(
      std::make_unique<DispatchBackend>("fp4gap-w4a4", "fp4gap-decode-w4a4", "fp4gap-prefill-w4a4", true));
}

}  // namespace fp4gap
