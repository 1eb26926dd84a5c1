// The closed list of decode kernel instantiations and their launcher (include/fp4gap/decode.hpp).
#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cuda/common.cuh"
#include "cuda/decode/decode_gemm.cuh"
#include "fp4gap/decode.hpp"

namespace fp4gap::decode {

namespace {

using Kernel = void (*)(device::Params);

struct Instantiation {
  TileConfig config;
  Kernel kernels[2][2];  // [math][layout]
};

// MIN_BLOCKS_W4A4_PLAIN: the W4A4 plain-layout variant converts both operands' scales through
// float and needs more registers; where 64K / (threads * MIN_BLOCKS) would make it spill, it gets
// a lower occupancy of its own (docs/KERNELS-decode.md, register table).
template <int MT, int NT, int WARPS, int WK, int G, int MIN_BLOCKS, int MIN_BLOCKS_W4A4_PLAIN = MIN_BLOCKS>
constexpr Instantiation instantiate() {
  using device::decode_gemm_kernel;
  return {TileConfig{MT, NT, WARPS, WK, G, MIN_BLOCKS},
          {{&decode_gemm_kernel<Math::w4a16, WeightLayout::plain, MT, NT, WARPS, WK, G, MIN_BLOCKS>,
            &decode_gemm_kernel<Math::w4a16, WeightLayout::shuffled, MT, NT, WARPS, WK, G, MIN_BLOCKS>},
           {&decode_gemm_kernel<Math::w4a4, WeightLayout::plain, MT, NT, WARPS, WK, G, MIN_BLOCKS_W4A4_PLAIN>,
            &decode_gemm_kernel<Math::w4a4, WeightLayout::shuffled, MT, NT, WARPS, WK, G, MIN_BLOCKS>}}};
}

// The streaming kernel exists for the shuffled weight only (TileConfig::serves).
template <int MT, int NT, int WARPS, int WK, int MIN_BLOCKS, int S>
constexpr Instantiation instantiate_streaming() {
  using device::decode_stream_kernel;
  return {TileConfig{MT, NT, WARPS, WK, 1, MIN_BLOCKS, S},
          {{nullptr, &decode_stream_kernel<Math::w4a16, MT, NT, WARPS, WK, S, MIN_BLOCKS>},
           {nullptr, &decode_stream_kernel<Math::w4a4, MT, NT, WARPS, WK, S, MIN_BLOCKS>}}};
}

// Same order as tile_configs() (src/tune/decode_plan.cpp); checked at first use.
const std::array<Instantiation, 17>& instantiations() {
  static const std::array<Instantiation, 17> list = {
      instantiate<1, 1, 8, 8, 2, 2>(), instantiate<1, 1, 8, 4, 2, 2>(), instantiate<1, 1, 4, 1, 2, 4>(),
      instantiate<1, 2, 8, 8, 1, 2>(), instantiate<1, 2, 8, 4, 2, 2, 1>(), instantiate<1, 2, 4, 1, 2, 4>(),
      instantiate<1, 4, 8, 2, 2, 2, 1>(),
      instantiate<1, 4, 4, 1, 2, 3>(), instantiate<2, 4, 4, 1, 1, 2>(), instantiate<2, 8, 4, 1, 1, 2>(),
      instantiate<2, 8, 8, 1, 1, 1>(),
      instantiate_streaming<1, 1, 8, 8, 2, 4>(), instantiate_streaming<2, 1, 8, 8, 2, 3>(),
      instantiate_streaming<1, 1, 4, 4, 4, 4>(), instantiate_streaming<1, 1, 16, 16, 1, 3>(),
      instantiate_streaming<1, 2, 4, 4, 3, 3>(),
      instantiate_streaming<2, 2, 4, 4, 2, 3>(),
  };
  static const bool checked = [] {
    const auto& configs = tile_configs();
    bool same = configs.size() == list.size();
    for (std::size_t i = 0; same && i < list.size(); ++i) {
      const TileConfig& a = configs[i];
      const TileConfig& b = list[i].config;
      same = a.mt == b.mt && a.nt == b.nt && a.warps == b.warps && a.k_warps == b.k_warps &&
             a.windows_per_chunk == b.windows_per_chunk && a.min_blocks_per_sm == b.min_blocks_per_sm &&
             a.stages == b.stages &&
             a.activation_row_bytes() == device::activation_row_bytes(b.windows_per_block_chunk());
    }
    if (!same) throw std::logic_error("decode: tile_configs() and the kernel instantiations differ");
    return true;
  }();
  static_cast<void>(checked);
  return list;
}

Kernel kernel_of(const Plan& plan) {
  const auto& list = instantiations();
  if (plan.config_index < 0 || plan.config_index >= static_cast<int>(list.size())) {
    throw InvalidArgument("decode: config_index outside the instantiations: " + std::to_string(plan.config_index));
  }
  const Kernel kernel = list[static_cast<std::size_t>(plan.config_index)]
                            .kernels[plan.math == Math::w4a16 ? 0 : 1][plan.layout == WeightLayout::plain ? 0 : 1];
  if (kernel == nullptr) {
    throw InvalidArgument("decode: " + plan.config.name(plan.math, plan.layout) + " has no kernel for this math and layout");
  }
  return kernel;
}

}  // namespace

void prepare_launch(const Plan& plan) {
  const std::int64_t smem = plan.config.smem_bytes(plan.math);
  // Once per kernel: later launches (possibly inside a graph capture) make no attribute calls.
  static std::mutex mutex;
  static std::set<Kernel> raised;
  static bool pass_raised = false;
  const Kernel kernel = kernel_of(plan);
  const std::lock_guard<std::mutex> lock(mutex);
  if (!pass_raised) {
    cuda::set_shared_memory_attributes(device::dequantize_activations_kernel, 0);
    pass_raised = true;
  }
  if (raised.count(kernel) != 0) return;
  cuda::set_shared_memory_attributes(kernel, smem);
  raised.insert(kernel);
}

void launch_gemm(const Plan& plan, const GemmArgs& args, void* stream) {
  check_gemm_args(plan, args);
  const Kernel kernel = kernel_of(plan);
  prepare_launch(plan);

  device::Params p;
  p.m = plan.m;
  p.n = plan.n;
  p.k = plan.k;
  p.a = args.a;
  p.a_scales = args.a_scales;
  p.a_swizzled = args.a_scale_layout == ScaleLayout::swizzled_128x4 ? 1 : 0;
  p.w_codes = args.w_codes;
  p.w_scales = args.w_scales;
  p.w_swizzled = args.w_scale_layout == ScaleLayout::swizzled_128x4 ? 1 : 0;
  p.alpha = static_cast<float>(static_cast<double>(args.alpha) * kernel_alpha_factor(plan.math));
  p.d = args.d;
  p.out_type = static_cast<int>(args.out_type);
  p.split_k = plan.split_k;
  p.k_chunks = plan.k_chunks;
  p.k_windows = plan.k_windows;
  p.n_tiles = ceil_div(plan.n, kTileRows);
  unsigned char* const workspace = static_cast<unsigned char*>(args.workspace);
  if (plan.split_k > 1) {
    p.partials = reinterpret_cast<float*>(workspace + plan.activation_workspace_bytes());
    p.counters = reinterpret_cast<unsigned int*>(workspace + plan.activation_workspace_bytes() +
                                                 plan.workspace_partial_floats() * 4);
  }
  cudaLaunchAttribute attr = cuda::programmatic_launch_attribute();
  bool programmatic = args.programmatic_launch;
  if (plan.dequantizes_activations()) {
    auto* fp16 = reinterpret_cast<std::uint16_t*>(workspace);
    constexpr unsigned int kThreads = 256;
    cudaLaunchConfig_t pass{};
    pass.gridDim = dim3(static_cast<unsigned int>(ceil_div(plan.m * (plan.k / kBlockSize), kThreads)));
    pass.blockDim = dim3(kThreads);
    pass.stream = cuda::as_stream(stream);
    pass.attrs = &attr;
    pass.numAttrs = args.programmatic_launch ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&pass, device::dequantize_activations_kernel, p, fp16));
    p.a = fp16;
    programmatic = true;  // behind our own pass, which writes neither the weight nor D
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned int>(plan.row_blocks), static_cast<unsigned int>(plan.split_k));
  cfg.blockDim = dim3(static_cast<unsigned int>(plan.config.threads()));
  cfg.dynamicSmemBytes = static_cast<std::size_t>(plan.config.smem_bytes(plan.math));
  cfg.stream = cuda::as_stream(stream);
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

}  // namespace fp4gap::decode
