#include "cpu_reference_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

namespace fp4gap {

namespace {

// Beyond this the reference takes minutes on a few cores.
constexpr double kMaxMacs = 68719476736.0;  // 2^36
// The reference keeps two doubles per output: 2^26 outputs are 1 GiB.
constexpr double kMaxOutputs = 67108864.0;  // 2^26

class CpuReferenceRunner : public GemmRunner {
 public:
  CpuReferenceRunner(const GemmInputs& inputs, int sets)
      : inputs_(inputs),
        outputs_(static_cast<std::size_t>(sets),
                 std::vector<float>(static_cast<std::size_t>(inputs.problem.m * inputs.problem.n),
                                    std::numeric_limits<float>::quiet_NaN())) {}

  // Every set multiplies the same operands: there is no cache to keep cold on the CPU.
  int input_sets() const override { return static_cast<int>(outputs_.size()); }

  void run(int set, void* /*stream*/) override {
    std::vector<float>& out = output(set);
    const ReferenceResult r = reference_gemm(inputs_.a_view(), inputs_.b_view(), inputs_.alpha);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = round_to_output(r.d[i], inputs_.problem.out_type);
  }

  void poison_output() override {
    for (std::vector<float>& out : outputs_) std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
  }

  std::vector<float> read_output(int set) override { return output(set); }
  OperandView a_operand() const override { return inputs_.a_view(); }
  OperandView b_operand() const override { return inputs_.b_view(); }
  double alpha() const override { return inputs_.alpha; }
  std::string config() const override { return "double accumulation, all host threads"; }
  bool on_device() const override { return false; }

 private:
  std::vector<float>& output(int set) {
    if (set < 0 || set >= input_sets()) {
      throw InvalidArgument("input set out of range: set = " + std::to_string(set) + " (the runner has " +
                            std::to_string(input_sets()) + " sets)");
    }
    return outputs_[static_cast<std::size_t>(set)];
  }

  GemmInputs inputs_;  // a copy: the runner must not depend on the caller's inputs staying alive
  std::vector<std::vector<float>> outputs_;
};

class CpuReferenceBackend : public GemmBackend {
 public:
  std::string_view name() const override { return "cpu-reference"; }
  std::string_view description() const override {
    return "CPU reference GEMM (double accumulation, multi-threaded): the oracle, not a contender";
  }

  Status supports(const GemmProblem& p, const DeviceContext& /*device*/) const override {
    Status valid = validate_problem(p);
    if (!valid.is_ok()) return valid;
    if (p.a_format == OperandFormat::e4m3 || p.b_format == OperandFormat::e4m3) {
      return Status::not_supported("e4m3 operands are not an input format (inputs are nvfp4 or bf16)");
    }
    const double macs = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
    if (macs > kMaxMacs) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", macs);  // m*n*k may not fit int64
      return Status::not_supported(std::string("too large for the CPU reference (m*n*k = ") + buf + " > 2^36)");
    }
    const double outputs = static_cast<double>(p.m) * static_cast<double>(p.n);
    if (outputs > kMaxOutputs) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", outputs);
      return Status::not_supported(std::string("too large for the CPU reference (m*n = ") + buf +
                                   " outputs > 2^26; it keeps two doubles per output)");
    }
    return Status::ok();
  }

  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    if (input_sets < 1) throw InvalidArgument("input_sets < 1: input_sets = " + std::to_string(input_sets));
    return std::make_unique<CpuReferenceRunner>(inputs, input_sets);
  }
};

}  // namespace

std::unique_ptr<GemmBackend> make_cpu_reference_backend() { return std::make_unique<CpuReferenceBackend>(); }

}  // namespace fp4gap
