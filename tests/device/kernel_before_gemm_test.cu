// Diagnostic (disabled), not a test of speed: what a GEMM costs in a serving graph, where another
// kernel runs right before it (a norm, the activation quantizer), against what `fp4gap gemm`
// times (the same GEMM replayed back to back, where a programmatic launch overlaps the previous
// launch's tail). Graph-timed, cold inputs: the GEMM alone; an elementwise kernel shaped like a
// norm (reads and writes M x K bf16, no shared memory) alone and before the GEMM, once plain and
// once allowing the next kernel to launch at its start (griddepcontrol.launch_dependents, as
// stacks using programmatic launches do); for W4A4 also the activation quantizer (bf16 -> NVFP4,
// given global scale) alone and before the GEMM. The neighbours write their own buffers, not the
// GEMM's inputs: what is timed is the sequence, not a data flow. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='ServingChain.DISABLED_*'
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "device_test_support.hpp"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap::test {
namespace {

// One 16-byte vector per thread and step, grid-stride: out = -in, bf16. `kAllowNext`: the next
// kernel in the stream may launch as soon as this one starts.
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

TEST(ServingChain, DISABLED_KernelBeforeTheGemm) {
  REQUIRE_GPU();
  struct Shape {
    const char* name;
    std::int64_t n, k;
  };
  std::printf("graph us, cold inputs; extra = chain - gemm alone - neighbour alone\n");
  for (const char* backend_name : {"cublas-bf16", "fp4gap-w4a16", "fp4gap-w4a4"}) {
    const bool w4a4 = std::string(backend_name) == "fp4gap-w4a4";
    for (const Shape s : {Shape{"W13", 4096, 6144}, Shape{"seed", 2048, 6144}}) {
      for (const std::int64_t m : {8, 16, 64, 128, 512}) {
        GemmProblem p;
        p.m = m, p.n = s.n, p.k = s.k;
        p.a_format = w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16;
        p.b_format = std::string(backend_name) == "cublas-bf16" ? OperandFormat::bf16 : OperandFormat::nvfp4;
        p.out_type = OutputType::bf16;
        GemmBackend& backend = registered_backend(backend_name);
        ASSERT_TRUE(backend.supports(p, gpu()).is_ok()) << backend_name << " " << p.label();
        const GemmInputs in = make_gemm_inputs(p, 7);
        const int sets = input_sets_for_cold_cache(gemm_min_bytes(p), gpu().l2_bytes);
        std::unique_ptr<GemmRunner> runner = backend.prepare(in, sets);

        // The neighbours' input and output: M x K bf16 per set, cold as the GEMM's.
        const std::int64_t vectors = m * s.k / 8;
        cuda::DeviceBuffer<uint4> act(static_cast<std::size_t>(vectors * sets)), act_out(static_cast<std::size_t>(vectors));
        act.fill_bytes(0);
        const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>((vectors + 255) / 256, 4L * gpu().sm_count));
        auto norm = [&](bool allow_next, int set, void* stream) {
          const uint4* src = act.get() + vectors * set;
          if (allow_next) {
            negate_bf16_kernel<true><<<grid, 256, 0, cuda::as_stream(stream)>>>(src, act_out.get(), vectors);
          } else {
            negate_bf16_kernel<false><<<grid, 256, 0, cuda::as_stream(stream)>>>(src, act_out.get(), vectors);
          }
          CUDA_CHECK_LAUNCH();
        };
        cuda::DeviceBuffer<std::uint8_t> q_codes(static_cast<std::size_t>(m * s.k / 2)),
            q_scales(static_cast<std::size_t>(scale_shape(ScaleLayout::swizzled_128x4, m, s.k).bytes()));
        DeviceQuantizeWorkspace q_workspace;
        auto quantize = [&](int set, void* stream) {
          quantize_nvfp4_device(act.get() + vectors * set, ElementType::bf16, m, s.k, ScaleLayout::swizzled_128x4, 1.0f,
                                q_codes.get(), q_scales.get(), q_workspace, stream);
        };

        const TimingOptions options;
        auto us = [&](const std::function<void(int, void*)>& launch) {
          return time_launch(launch, sets, gpu(), options).graph.median_us;
        };
        const double gemm = us([&](int set, void* st) { runner->run(set, st); });
        std::printf("%-13s %-4s m%-4lld gemm %6.2f", backend_name, s.name, static_cast<long long>(m), gemm);
        for (const bool allow_next : {false, true}) {
          const double alone = us([&](int set, void* st) { norm(allow_next, set, st); });
          const double chained = us([&](int set, void* st) {
            norm(allow_next, set, st);
            runner->run(set, st);
          });
          std::printf(" | norm%s %5.2f + gemm %6.2f (extra %+5.2f)", allow_next ? " allowing" : "", alone, chained,
                      chained - gemm - alone);
        }
        if (w4a4) {
          const double alone = us(quantize);
          const double chained = us([&](int set, void* st) {
            quantize(set, st);
            runner->run(set, st);
          });
          std::printf(" | quantizer %5.2f + gemm %6.2f (extra %+5.2f)", alone, chained, chained - gemm - alone);
        }
        std::printf("\n");
        EXPECT_GT(gemm, 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace fp4gap::test
