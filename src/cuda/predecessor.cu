// What `fp4gap gemm --after` runs right before each timed GEMM launch (timing.hpp, Predecessor),
// and time_runner_after. Why (PERF-LOG runs 85-86): the default timing replays one GEMM back to
// back, and a programmatically launched GEMM then hides its launch and first loads behind its own
// previous launch, which no serving graph offers it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

// out = -in over `vectors` 16-byte vectors of bf16, grid-stride: the memory traffic of an
// elementwise kernel over the activations (an RMSNorm, a SiLU-and-mul), no shared memory.
// kAllowNext: the next kernel may launch at once (it must wait for this grid before it reads).
template <bool kAllowNext>
__global__ void __launch_bounds__(256) negate_bf16_kernel(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                         std::int64_t vectors) {
  if constexpr (kAllowNext) cuda::allow_dependent_launch();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    const uint4 x = in[v];
    out[v] = make_uint4(x.x ^ 0x80008000u, x.y ^ 0x80008000u, x.z ^ 0x80008000u, x.w ^ 0x80008000u);
  }
}

// The sequence's cost of the GEMM: the chain's samples less the predecessor's median.
void subtract(TimingStats& chain, double predecessor_us) {
  chain.median_us -= predecessor_us;
  chain.p20_us -= predecessor_us;
  chain.p80_us -= predecessor_us;
}

}  // namespace

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
  // The activations, M x K bf16 per set rounded up to 16 bytes, as many sets as the GEMM's so
  // that the predecessor reads them cold too; every value 0x3F3F (0.746), an ordinary block for
  // the quantizer.
  const std::int64_t vectors = (problem.m * problem.k + 7) / 8;
  cuda::DeviceBuffer<uint4> act(static_cast<std::size_t>(vectors * sets)), out(static_cast<std::size_t>(vectors));
  act.fill_bytes(0x3F);
  const std::int64_t sm_count = std::max(1, device.sm_count);
  const auto grid = static_cast<unsigned>(std::clamp<std::int64_t>((vectors + 255) / 256, 1, 4 * sm_count));

  cuda::DeviceBuffer<std::uint8_t> codes, scales;
  DeviceQuantizeWorkspace quantize_workspace;
  if (predecessor == Predecessor::quantize) {
    codes = cuda::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(problem.m * problem.k / 2));
    scales = cuda::DeviceBuffer<std::uint8_t>(
        static_cast<std::size_t>(scale_shape(ScaleLayout::swizzled_128x4, problem.m, problem.k).bytes()));
  }
  const auto run_predecessor = [&](int set, void* stream) {
    const uint4* in = act.get() + vectors * set;
    const cudaStream_t s = cuda::as_stream(stream);
    switch (predecessor) {
      case Predecessor::norm:
        negate_bf16_kernel<false><<<grid, 256, 0, s>>>(in, out.get(), vectors);
        CUDA_CHECK_LAUNCH();
        break;
      case Predecessor::norm_pdl:
        negate_bf16_kernel<true><<<grid, 256, 0, s>>>(in, out.get(), vectors);
        CUDA_CHECK_LAUNCH();
        break;
      case Predecessor::quantize:
        quantize_nvfp4_device(in, ElementType::bf16, problem.m, problem.k, ScaleLayout::swizzled_128x4, 1.0f,
                              codes.get(), scales.get(), quantize_workspace, stream);
        break;
      case Predecessor::itself:
        break;
    }
  };
  const Timing alone = time_launch(run_predecessor, sets, device, options);
  Timing t = time_launch(
      [&](int set, void* stream) {
        run_predecessor(set, stream);
        runner.run(set, stream);
      },
      sets, device, options);
  subtract(t.graph, alone.graph.median_us);
  subtract(t.event, alone.event.median_us);
  for (const std::string& w : alone.warnings) {
    if (std::find(t.warnings.begin(), t.warnings.end(), w) == t.warnings.end()) t.warnings.push_back(w);
  }
  return t;
}

}  // namespace fp4gap
