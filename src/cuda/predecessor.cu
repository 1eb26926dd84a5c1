// What `fp4gap gemm --after` runs right before each timed GEMM launch (timing.hpp, Predecessor),
// and time_runner_after. Why (PERF-LOG runs 85-86): the default timing replays one GEMM back to
// back, and a programmatically launched GEMM then hides its launch and first loads behind its own
// previous launch, which no serving graph offers it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

// out = in over `count` units (16-byte vectors of bf16, or single bf16 values where the buffers
// do not allow vectors), grid-stride: the memory traffic of an elementwise kernel over the
// activations (an RMSNorm, a SiLU-and-mul), no shared memory. kAllowNext: the next kernel may
// launch at once (it must wait for this grid before it reads).
template <bool kAllowNext, typename Unit>
__global__ void __launch_bounds__(256) copy_activations_kernel(const Unit* __restrict__ in, Unit* __restrict__ out,
                                                              std::int64_t count) {
  if constexpr (kAllowNext) cuda::allow_dependent_launch();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    out[i] = in[i];
  }
}

template <typename Unit>
void launch_copy_activations(bool allow_next, const void* in, void* out, std::int64_t count, unsigned grid,
                             cudaStream_t stream) {
  const auto* src = static_cast<const Unit*>(in);
  auto* dst = static_cast<Unit*>(out);
  if (allow_next) {
    copy_activations_kernel<true, Unit><<<grid, 256, 0, stream>>>(src, dst, count);
  } else {
    copy_activations_kernel<false, Unit><<<grid, 256, 0, stream>>>(src, dst, count);
  }
  CUDA_CHECK_LAUNCH();
}

// The sequence's cost of the GEMM: the chain's samples less the predecessor's median.
void subtract(TimingStats& chain, double predecessor_us) {
  chain.median_us -= predecessor_us;
  chain.p20_us -= predecessor_us;
  chain.p80_us -= predecessor_us;
}

}  // namespace

void launch_norm_stand_in(const std::uint16_t* in, std::uint16_t* out, std::int64_t elements, bool allow_next_launch,
                          const DeviceContext& device, void* stream) {
  const bool vectors = elements % 8 == 0 && reinterpret_cast<std::uintptr_t>(in) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const std::int64_t units = vectors ? elements / 8 : elements;
  const std::int64_t sm_count = std::max(1, device.sm_count);
  const auto grid = static_cast<unsigned>(std::clamp<std::int64_t>((units + 255) / 256, 1, 4 * sm_count));
  const cudaStream_t s = cuda::as_stream(stream);
  if (vectors) {
    launch_copy_activations<uint4>(allow_next_launch, in, out, units, grid, s);
  } else {
    launch_copy_activations<std::uint16_t>(allow_next_launch, in, out, units, grid, s);
  }
}

Timing time_runner_after(GemmRunner& runner, const GemmProblem& problem, Predecessor predecessor,
                         const DeviceContext& device, const TimingOptions& options) {
  if (predecessor == Predecessor::itself) return time_runner(runner, device, options);
  if (!runner.on_device()) {
    throw InvalidArgument("time_runner_after: the runner is not on the device; GPU timing needs a GPU runner");
  }
  if (predecessor == Predecessor::quantize && problem.k % 16 != 0) {
    throw InvalidArgument("--after quantize: the NVFP4 activation quantizer needs K % 16 == 0 [problem: " +
                          problem.label() + "]");
  }
  CUDA_CHECK(cudaSetDevice(device.ordinal));
  const int sets = runner.input_sets();
  const std::int64_t elements = problem.m * problem.k;
  // Where the runner reads bf16 activations of its own, the norm rewrites them with their own
  // values (copied from as many cold sets as the GEMM's), so the GEMM finds them in L2 as behind
  // the kernel that wrote them; otherwise the predecessor writes a buffer of its own, from
  // activations 0x3F3F (0.746: an ordinary block for the quantizer).
  const OperandView a = runner.a_operand();
  const bool rewrites_input = predecessor != Predecessor::quantize && runner.bf16_activations(0) != nullptr &&
                              a.format == OperandFormat::bf16 && a.bf16 != nullptr && a.rows * a.k == elements;
  const std::int64_t set_elements = (elements + 7) / 8 * 8;  // each set 16-byte aligned
  cuda::DeviceBuffer<std::uint16_t> act(static_cast<std::size_t>(set_elements * sets));
  cuda::DeviceBuffer<std::uint16_t> own_out;
  if (rewrites_input) {
    for (int set = 0; set < sets; ++set) {
      CUDA_CHECK(cudaMemcpy(act.get() + set_elements * set, a.bf16, static_cast<std::size_t>(elements) * 2,
                            cudaMemcpyHostToDevice));
    }
  } else {
    act.fill_bytes(0x3F);
    own_out = cuda::DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(set_elements));
  }
  const auto destination = [&](int set) { return rewrites_input ? runner.bf16_activations(set) : own_out.get(); };

  cuda::DeviceBuffer<std::uint8_t> codes, scales;
  std::optional<DeviceQuantizeWorkspace> quantize_workspace;  // only the quantizer's device state
  if (predecessor == Predecessor::quantize) {
    quantize_workspace.emplace();
    codes = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(elements / 2));
    scales = cuda::DeviceBuffer<std::uint8_t>(
        static_cast<std::size_t>(scale_shape(ScaleLayout::swizzled_128x4, problem.m, problem.k).bytes()));
  }
  const auto run_predecessor = [&](int set, void* stream) {
    const std::uint16_t* in = act.get() + set_elements * set;
    if (predecessor == Predecessor::quantize) {
      quantize_nvfp4_device(in, ElementType::bf16, problem.m, problem.k, ScaleLayout::swizzled_128x4, 1.0f,
                            codes.get(), scales.get(), *quantize_workspace, stream);
    } else {
      launch_norm_stand_in(in, destination(set), elements, predecessor == Predecessor::norm_pdl, device, stream);
    }
  };
  // The sustained mode times back-to-back launches only (timing.hpp).
  const TimingOptions sequence_options = without_sustain(options);
  const Timing alone = time_launch(run_predecessor, sets, device, sequence_options);
  Timing t = time_launch(
      [&](int set, void* stream) {
        run_predecessor(set, stream);
        runner.run(set, stream);
      },
      sets, device, sequence_options);
  subtract(t.graph, alone.graph.median_us);
  subtract(t.event, alone.event.median_us);
  for (const std::string& w : alone.warnings) {
    if (std::find(t.warnings.begin(), t.warnings.end(), w) == t.warnings.end()) t.warnings.push_back(w);
  }
  if (!rewrites_input) {
    t.warnings.push_back(std::string(predecessor == Predecessor::quantize
                                         ? "the quantizer before it writes NVFP4 buffers of its own, not this runner's input"
                                         : "the norm before it writes a buffer of its own, not this runner's input (it "
                                           "exposes no bf16 activations)") +
                         ": the GEMM read its activations from HBM, not from L2 as behind the kernel that wrote them");
  }
  return t;
}

}  // namespace fp4gap
