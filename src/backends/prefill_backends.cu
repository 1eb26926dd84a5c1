// The Hopper prefill backends (src/cuda/prefill):
//   fp4gap-prefill-w4a16  bf16 activations x NVFP4 weight, wgmma with the weight dequantized in registers
//   fp4gap-prefill-w4a4   NVFP4 activations x NVFP4 weight: the narrow tiles dequantize the activations
//                         in the kernel where a CTA has few of them (prefers_activation_dequant_in_kernel),
//                         the others read a bf16 workspace that a separate pass fills each run
// Both are exact: every NVFP4 value is a bf16, so only the fp32 accumulation order differs from
// the reference.
#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/registration.hpp"
#include "backends/runner_support.hpp"
#include "cuda/common.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap {
namespace {

using cuda::DeviceBuffer;
using cuda::upload_sets;

constexpr std::string_view backend_name(bool w4a4) { return w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16"; }

class PrefillRunner final : public GemmRunner {
 public:
  // `forced`: run this plan whatever the tune cache or the policy says (fp4gap tune measures each).
  PrefillRunner(const GemmInputs& in, int sets, bool w4a4, const DeviceContext& device,
                const std::optional<prefill::Plan>& forced)
      : p_(in.problem), sets_(sets), w4a4_(w4a4), alpha_(static_cast<float>(in.alpha)) {
    if (sets < 1) throw InvalidArgument("input_sets >= 1 required: input_sets = " + std::to_string(sets));
    const Status available = prefill::kernels_available();
    if (!available.is_ok()) throw RuntimeError("fp4gap-prefill: " + available.reason);
    weight_ = in.b_fp4;
    const std::vector<prefill::PlanCandidate> candidates =
        prefill::plan_candidates(p_.m, p_.n, p_.k, device, prefill::concurrent_ctas);
    // A measured plan (forced or from the tune cache) is run as it was measured, W4A4's too: the
    // policy's W4A4 adjustment (w4a4_plan) applies to the policy's pick only.
    if (forced) {
      const prefill::Plan fitting = prefill::make_plan(p_.m, p_.n, p_.k, forced->config, forced->split_k, forced->reduction);
      if (fitting.m_tiles != forced->m_tiles || fitting.n_tiles != forced->n_tiles ||
          fitting.k_blocks != forced->k_blocks) {
        std::ostringstream os;
        os << "forced plan " << forced->describe() << " has " << forced->m_tiles << " x " << forced->n_tiles
           << " tiles of " << forced->k_blocks << " K blocks; " << p_.label() << " needs " << fitting.m_tiles << " x "
           << fitting.n_tiles << " of " << fitting.k_blocks;
        throw InvalidArgument(os.str());
      }
      plan_ = *forced;
      plan_source_ = "plan forced by fp4gap tune";
    } else {
      const prefill::Plan policy =
          prefill::policy_plan(candidates, w4a4_, p_.k, prefill::activation_dequant_smem_limit(), device).plan;
      prefill::TunedChoice tuned = prefill::tuned_plan(std::string(backend_name(w4a4_)), p_.m, p_.n, p_.k,
                                                       p_.out_type, device, candidates, policy);
      plan_source_ = std::move(tuned.note);
      plan_ = tuned.plan ? *tuned.plan : policy;
    }

    const prefill::PackedWeights packed = prefill::pack_weights(weight_);
    packed_bytes_ = packed.bytes.size();
    packed_ = upload_sets(packed.bytes.data(), packed_bytes_, sets);

    if (w4a4_) {
      act_fp4_ = with_layout(in.a_fp4, ScaleLayout::linear);  // both dequantizations read linear scales
      // Each set's codes start 16-byte aligned (the kernel's code loads), its scales 2-byte aligned:
      // both padded to 16-byte multiples.
      auto padded = [](std::vector<std::uint8_t> bytes) {
        bytes.resize((bytes.size() + 15) / 16 * 16);
        return bytes;
      };
      const std::vector<std::uint8_t> codes = padded(act_fp4_.codes), scales = padded(act_fp4_.scales);
      a_code_bytes_ = codes.size();
      a_scale_bytes_ = scales.size();
      a_codes_ = upload_sets(codes.data(), a_code_bytes_, sets);
      a_scales_ = upload_sets(scales.data(), a_scale_bytes_, sets);
      dequant_in_kernel_ = prefill::w4a4_dequantizes_in_kernel(plan_, p_.k);
      if (!dequant_in_kernel_) {
        workspace_ = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(p_.m * p_.k));
        maps_.push_back(prefill::make_activation_maps(workspace_.get(), p_.m, p_.k, plan_.config));
      }
    } else {
      act_bf16_ = in.a_bf16;
      if (act_bf16_.size() != static_cast<std::size_t>(p_.m * p_.k)) {
        std::ostringstream os;
        os << "a_bf16 holds " << act_bf16_.size() << " elements, the problem needs " << p_.m * p_.k;
        throw InvalidArgument(os.str());
      }
      a_bytes_ = act_bf16_.size() * 2;
      a_bf16_dev_ = upload_sets(act_bf16_.data(), a_bytes_, sets);
      for (int s = 0; s < sets; ++s) {
        maps_.push_back(prefill::make_activation_maps(a_bf16_dev_.get() + a_bytes_ * static_cast<std::size_t>(s),
                                                     p_.m, p_.k, plan_.config));
      }
    }
    // A split plan's partial tiles and counters (zeroed once; every launch leaves them zero).
    split_workspace_ = DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(plan_.workspace_bytes()));
    split_workspace_.fill_bytes(0);
    out_bytes_ = static_cast<std::size_t>(p_.m * p_.n * output_type_bytes(p_.out_type));
    outputs_ = DeviceBuffer<std::uint8_t>(out_bytes_ * static_cast<std::size_t>(sets));
    // A first launch here loads the kernels and sets their shared-memory limit outside any graph
    // capture (run() is captured by the timing code).
    prefill::prepare_launch(plan_);
    run(0, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  int input_sets() const override { return sets_; }

  void run(int set, void* stream) override {
    check_input_set(set, sets_, "run");
    const cudaStream_t s = cuda::as_stream(stream);
    const auto at = [&](const DeviceBuffer<std::uint8_t>& sets, std::size_t stride) {
      return sets.get() + stride * static_cast<std::size_t>(set);
    };
    const std::uint8_t* packed = at(packed_, packed_bytes_);
    std::uint8_t* out = at(outputs_, out_bytes_);
    if (dequant_in_kernel_) {
      const prefill::Nvfp4Activations act{at(a_codes_, a_code_bytes_), at(a_scales_, a_scale_bytes_), p_.m, p_.k};
      prefill::launch_gemm(plan_, act, packed, out, p_.out_type, p_.m, p_.n, alpha_, s, nullptr, programmatic(),
                           split_workspace_.get());
      return;
    }
    if (w4a4_) {
      prefill::launch_dequantize_bf16(at(a_codes_, a_code_bytes_), at(a_scales_, a_scale_bytes_), workspace_.get(),
                                      p_.m, p_.k, s, /*programmatic=*/true);
    }
    const prefill::ActivationMaps& map = maps_[w4a4_ ? 0 : static_cast<std::size_t>(set)];
    prefill::launch_gemm(plan_, map, packed, out, p_.out_type, p_.m, p_.n, alpha_, s, nullptr, programmatic(),
                         split_workspace_.get());
  }

  std::uint16_t* bf16_activations(int set) override {
    check_input_set(set, sets_, "bf16_activations");
    if (w4a4_) return nullptr;
    return reinterpret_cast<std::uint16_t*>(a_bf16_dev_.get() + a_bytes_ * static_cast<std::size_t>(set));
  }

  // 0xFF bytes are NaN in f32, bf16 and fp16.
  void poison_output() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemset(outputs_.get(), 0xFF, outputs_.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::vector<float> read_output(int set) override {
    check_input_set(set, sets_, "read_output");
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint8_t> raw(out_bytes_);
    CUDA_CHECK(cudaMemcpy(raw.data(), outputs_.get() + out_bytes_ * static_cast<std::size_t>(set), out_bytes_,
                          cudaMemcpyDeviceToHost));
    const std::size_t count = static_cast<std::size_t>(p_.m * p_.n);
    std::vector<float> out(count);
    if (p_.out_type == OutputType::f32) {
      std::memcpy(out.data(), raw.data(), out_bytes_);
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[i] = p_.out_type == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
    }
    return out;
  }

  OperandView a_operand() const override {
    return w4a4_ ? nvfp4_operand(act_fp4_) : bf16_operand(act_bf16_, p_.m, p_.k);
  }
  OperandView b_operand() const override { return nvfp4_operand(weight_); }
  double alpha() const override { return static_cast<double>(alpha_); }
  std::string config() const override {
    std::string c = plan_.describe();
    if (programmatic()) c += ", programmatic launch";
    if (dequant_in_kernel_) {
      c += "; activations dequantized in the kernel";
    } else if (w4a4_) {
      c += "; activations dequantized to a bf16 workspace by a separate kernel each run";
    }
    if (!plan_source_.empty()) c += "; " + plan_source_;
    return c;
  }
  bool on_device() const override { return true; }
  // The GEMM's launch (W4A4's activation pass before it is not counted).
  std::optional<LaunchFill> launch_fill() const override {
    LaunchFill fill = prefill::launch_fill(plan_, prefill::concurrent_ctas(plan_.config, plan_.cluster_size()));
    fill.m = p_.m;
    return fill;
  }

 private:
  // Behind the W4A4 activation pass every config launches programmatically: that pass lets the
  // GEMM start once its last CTA has started, so the GEMM's launch and first weight stages
  // overlap the pass's tail (the GEMM reads the activations only after the pass completes). The
  // pass itself launches programmatically too (it waits for the previous kernel before it reads
  // or writes).
  bool programmatic() const {
    return (w4a4_ && !dequant_in_kernel_) || plan_.programmatic;
  }

  GemmProblem p_;
  int sets_;
  bool w4a4_;
  bool dequant_in_kernel_ = false;  // W4A4 on a plan whose kernel dequantizes the activations
  float alpha_;
  prefill::Plan plan_;
  std::string plan_source_;  // a tuned or forced plan's note; empty for the policy's pick
  Nvfp4Matrix weight_;
  Nvfp4Matrix act_fp4_;
  std::vector<std::uint16_t> act_bf16_;
  // Bytes between input sets (W4A4: the codes and scales rounded up to 16-byte multiples).
  std::size_t packed_bytes_ = 0, a_bytes_ = 0, a_code_bytes_ = 0, a_scale_bytes_ = 0, out_bytes_ = 0;
  DeviceBuffer<std::uint8_t> packed_, a_bf16_dev_, a_codes_, a_scales_, outputs_, split_workspace_;
  DeviceBuffer<std::uint16_t> workspace_;
  std::vector<prefill::ActivationMaps> maps_;
};

class PrefillBackend final : public GemmBackend {
 public:
  explicit PrefillBackend(bool w4a4, std::optional<prefill::Plan> forced = std::nullopt)
      : w4a4_(w4a4), forced_(std::move(forced)) {}

  std::string_view name() const override { return backend_name(w4a4_); }
  std::string_view description() const override {
    return w4a4_ ? "Hopper wgmma NVFP4 x NVFP4 (exact): the W4A16 kernel, its narrow tiles dequantizing few "
                   "activations per CTA themselves, the others behind a separate bf16 pass"
                 : "Hopper wgmma bf16 x NVFP4 (exact): TMA stage ring, weight dequantized into wgmma register "
                   "fragments, producer/consumer warpgroups, split-K in a cluster or a workspace";
  }

  Status supports(const GemmProblem& p, const DeviceContext& device) const override {
    const Status valid = validate_problem(p);
    if (!valid.is_ok()) return valid;
    const OperandFormat want_a = w4a4_ ? OperandFormat::nvfp4 : OperandFormat::bf16;
    if (p.a_format != want_a || p.b_format != OperandFormat::nvfp4) {
      std::ostringstream os;
      os << name() << " multiplies " << to_string(want_a) << " activations by an nvfp4 weight, not "
         << to_string(p.a_format) << " x " << to_string(p.b_format);
      return Status::not_supported(os.str());
    }
    if (!device.available) return Status::not_supported(device.unavailable_reason);
    if (device.cc_major != 9 || device.cc_minor != 0) {
      std::ostringstream os;
      os << "needs wgmma (sm_90a): " << device.name << " is compute capability " << device.cc_major << "."
         << device.cc_minor;
      return Status::not_supported(os.str());
    }
    for (const auto& [dim, v] : {std::pair{"M", p.m}, std::pair{"N", p.n}, std::pair{"K", p.k}}) {
      if (v > INT_MAX) {
        std::ostringstream os;
        os << dim << " > 2^31-1: " << dim << " = " << v << " (the kernel takes 32-bit dimensions)";
        return Status::not_supported(os.str());
      }
    }
    bool fits = false;
    std::string why;
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      const Status s = prefill::check_tile_config(c, device);
      if (s.is_ok()) fits = true;
      else why = s.reason;
    }
    if (!fits) return Status::not_supported(why);
    return prefill::kernels_available();
  }

  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) override {
    int ordinal = 0;
    CUDA_CHECK(cudaGetDevice(&ordinal));
    return std::make_unique<PrefillRunner>(inputs, input_sets, w4a4_, query_device(ordinal), forced_);
  }

 private:
  bool w4a4_;
  std::optional<prefill::Plan> forced_;
};

}  // namespace

std::unique_ptr<GemmBackend> make_prefill_plan_backend(bool w4a4, const prefill::Plan& plan) {
  return std::make_unique<PrefillBackend>(w4a4, plan);
}

void register_prefill_backends() {
  register_gemm_backend(std::make_unique<PrefillBackend>(false));
  register_gemm_backend(std::make_unique<PrefillBackend>(true));
}

}  // namespace fp4gap
