// Decode and prefill GEMMs launched as programmatic dependents (GemmArgs::programmatic_launch,
// prefill::launch_gemm(.., programmatic)) of a kernel that lets them start at once and only then,
// after a delay, writes their activations and poisons their output. A GEMM that read A or wrote D
// before the previous kernel completed gets zeros or NaN. A probe launched the same way first
// shows that dependents do start early on this device (otherwise the GEMM checks would prove
// nothing).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/prefill/prefill_gemm.cuh"
#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap::decode {
namespace {

using test::repro;
using test::synchronize_within;

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Lets dependents launch, waits `delay_ns`, then copies `bytes` from src to dst, fills `poison`
// with 0xFF and records when it finished.
__global__ void late_producer_kernel(const std::uint8_t* src, std::uint8_t* dst, std::int64_t bytes,
                                     std::uint8_t* poison, std::int64_t poison_bytes, std::uint64_t delay_ns,
                                     std::uint64_t* finished_ns) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const std::uint64_t start = global_ns();
  while (global_ns() - start < delay_ns) {
  }
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) dst[i] = src[i];
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < poison_bytes; i += stride) poison[i] = 0xFF;
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned long long*>(finished_ns), global_ns());
}

// Records when it started, without waiting for the previous grid.
__global__ void start_probe_kernel(std::uint64_t* started_ns) { *started_ns = global_ns(); }

constexpr std::uint64_t kDelayNs = 200'000;

void launch_producer(const std::uint8_t* src, std::uint8_t* dst, std::int64_t bytes, std::uint8_t* poison,
                     std::int64_t poison_bytes, std::uint64_t* finished, cudaStream_t stream) {
  late_producer_kernel<<<8, 256, 0, stream>>>(src, dst, bytes, poison, poison_bytes, kDelayNs, finished);
  CUDA_CHECK_LAUNCH();
}

// The probe: a dependent starts before the producer finished. Each kernel runs once before: a
// kernel's first launch loads its module (lazy loading), which serializes it.
void expect_dependents_start_early(cuda::Stream& stream, cuda::DeviceBuffer<std::uint64_t>& times) {
  cuda::DeviceBuffer<std::uint8_t> scratch(256);
  start_probe_kernel<<<1, 1, 0, stream.get()>>>(times.get() + 1);
  CUDA_CHECK_LAUNCH();
  launch_producer(scratch.get(), scratch.get(), 0, scratch.get(), 0, times.get(), stream.get());
  synchronize_within(stream.get());
  times.fill_bytes(0);
  launch_producer(scratch.get(), scratch.get(), 0, scratch.get(), 0, times.get(), stream.get());
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  cfg.stream = stream.get();
  cudaLaunchAttribute attr = cuda::programmatic_launch_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, start_probe_kernel, times.get() + 1));
  synchronize_within(stream.get());
  const std::vector<std::uint64_t> t = times.download();
  ASSERT_LT(t[1], t[0]) << "the dependent probe started " << (t[1] - t[0]) << " ns after the producer finished: "
                        << "programmatic launches do not overlap here, so this test cannot check the GEMMs";
}

// One shape's inputs, and the race: the GEMM (`launch`, a programmatic launch) behind a producer
// that lets it start at once and only 0.2 ms later writes A (zeros until then) and poisons D.
struct Race {
  std::int64_t m, n, k;
  std::uint64_t seed;
  GemmInputs in;
  ReferenceResult ref;
  cuda::DeviceBuffer<std::uint8_t> a_staged, a;
  cuda::DeviceBuffer<float> d;

  Race(std::int64_t m_, std::int64_t n_, std::int64_t k_, std::uint64_t seed_)
      : m(m_), n(n_), k(k_), seed(seed_),
        in(make_gemm_inputs({m, n, k, OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f32}, seed,
                            InputDistribution::random)),
        ref(reference_gemm(in.a_view(), in.b_view(), in.alpha)),
        a_staged(in.a_bf16.size() * 2),
        a(in.a_bf16.size() * 2),
        d(static_cast<std::size_t>(m * n)) {
    a_staged.upload(reinterpret_cast<const std::uint8_t*>(in.a_bf16.data()), a_staged.size());
  }

  template <class Launch>
  void expect_correct_behind_late_producer(cuda::Stream& stream, cuda::DeviceBuffer<std::uint64_t>& times,
                                           const std::string& plan, Launch&& launch) {
    launch();  // loads the kernel's module (see the probe)
    synchronize_within(stream.get());
    a.fill_bytes(0);
    d.fill_bytes(0);
    launch_producer(a_staged.get(), a.get(), static_cast<std::int64_t>(a.bytes()),
                    reinterpret_cast<std::uint8_t*>(d.get()), static_cast<std::int64_t>(d.bytes()), times.get(),
                    stream.get());
    launch();
    synchronize_within(stream.get());
    const std::vector<float> got = d.download();
    const VerifyResult v = verify_gemm_output(got.data(), ref, k, OutputType::f32);
    std::ostringstream what;
    what << "m" << m << " n" << n << " k" << k << " " << plan;
    EXPECT_TRUE(v.passed) << v.message << " for " << repro(what.str(), seed);
  }
};

struct Shape {
  std::int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 2048, 6144}, {16, 1024, 4096}, {40, 520, 2048}};

TEST(DecodeGemm, ProgrammaticLaunchWaitsForThePreviousKernel) {
  REQUIRE_GPU();
  if (test::gpu().cc_major < 9) GTEST_SKIP() << "programmatic dependent launch needs sm_90+";
  cuda::Stream stream;
  cuda::DeviceBuffer<std::uint64_t> times(2);
  times.fill_bytes(0);
  expect_dependents_start_early(stream, times);
  if (HasFatalFailure()) return;

  for (const Shape s : kShapes) {
    Race race(s.m, s.n, s.k, 4242);
    const ShuffledWeight w = shuffle_weight_for_decode(race.in.b_fp4, Math::w4a16);
    cuda::DeviceBuffer<std::uint8_t> w_codes(w.codes), w_scales(w.scales);
    // The policy's plan (streaming at M <= 16) and a forced split-K plan of the register-prefetch
    // kernel: their waits sit in different places.
    const Plan chosen = choose_plan(s.m, s.n, s.k, Math::w4a16, WeightLayout::shuffled, test::gpu());
    int v1_index = -1;
    for (int i = 0; i < static_cast<int>(tile_configs().size()); ++i) {
      const TileConfig& c = tile_configs()[static_cast<std::size_t>(i)];
      if (!c.streaming() && c.max_m() >= s.m && v1_index < 0) v1_index = i;
    }
    ASSERT_GE(v1_index, 0);
    const Plan split = make_plan(s.m, s.n, s.k, Math::w4a16, WeightLayout::shuffled, v1_index, 2);
    for (const Plan& plan : {chosen, split}) {
      cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(std::max<std::int64_t>(plan.workspace_bytes(), 256)));
      workspace.fill_bytes(0);
      GemmArgs args;
      args.a = race.a.get();
      args.w_codes = w_codes.get();
      args.w_scales = w_scales.get();
      args.alpha = static_cast<float>(race.in.alpha);
      args.d = race.d.get();
      args.out_type = OutputType::f32;
      args.workspace = workspace.get();
      args.workspace_bytes = static_cast<std::int64_t>(workspace.bytes());
      args.programmatic_launch = true;
      race.expect_correct_behind_late_producer(stream, times, plan.describe(),
                                               [&] { launch_gemm(plan, args, stream.as_void()); });
    }
  }
}

// The prefill kernels under a programmatic launch: their producer requests the first weight stages
// before it waits for the previous kernel, then the activations; D is written only after every
// stage has arrived. Every config (the backends launch those up to m128 programmatically, and
// every one behind the W4A4 activation pass), with and without split-K (both reductions).
TEST(PrefillKernel, ProgrammaticLaunchWaitsForThePreviousKernel) {
  REQUIRE_GPU();
  const Status avail = prefill::kernels_available();
  if (!avail.is_ok()) GTEST_SKIP() << avail.reason;
  cuda::Stream stream;
  cuda::DeviceBuffer<std::uint64_t> times(2);
  times.fill_bytes(0);
  expect_dependents_start_early(stream, times);
  if (HasFatalFailure()) return;

  for (const Shape s : kShapes) {
    Race race(s.m, s.n, s.k, 4343);
    cuda::DeviceBuffer<std::uint8_t> packed(prefill::pack_weights(race.in.b_fp4).bytes);
    for (const prefill::TileConfig& c : prefill::tile_configs()) {
      for (int split : {1, 3, -3}) {  // -3: split 3 with a workspace reduction
        if ((!c.splits() && split != 1) || (split < 0 && !c.workspace_split())) continue;
        const prefill::Plan plan = prefill::make_plan(
            s.m, s.n, s.k, c, split < 0 ? -split : split,
            split < 0 ? prefill::SplitReduction::workspace : prefill::SplitReduction::cluster);
        cuda::DeviceBuffer<std::uint8_t> workspace(static_cast<std::size_t>(plan.workspace_bytes()));
        workspace.fill_bytes(0);
        const prefill::ActivationMaps map = prefill::make_activation_maps(race.a.get(), s.m, s.k, c);
        race.expect_correct_behind_late_producer(stream, times, plan.describe() + ", programmatic", [&] {
          prefill::launch_gemm(plan, map, packed.get(), race.d.get(), OutputType::f32, s.m, s.n,
                               static_cast<float>(race.in.alpha), stream.get(), nullptr, true, workspace.get());
        });
      }
    }
  }
}

// The W4A4 prefill path as the backend runs it: the activation pass (programmatic) and the GEMM
// behind it (programmatic), or the GEMM dequantizing the activations itself (unsplit, or split 4
// where a CTA's 32 resident K blocks would not fit), after a producer that writes the NVFP4
// activations (codes, then linear scales) 0.2 ms late and poisons D. A pass or GEMM that read its
// input before the producer completed dequantizes zeros; a GEMM that wrote D too early is poisoned.
TEST(PrefillKernel, ProgrammaticActivationPassWaitsForThePreviousKernel) {
  REQUIRE_GPU();
  const Status avail = prefill::kernels_available();
  if (!avail.is_ok()) GTEST_SKIP() << avail.reason;
  cuda::Stream stream;
  cuda::DeviceBuffer<std::uint64_t> times(2);
  times.fill_bytes(0);
  expect_dependents_start_early(stream, times);
  if (HasFatalFailure()) return;
  const std::int64_t m = 40, n = 544, k = 2048;  // N % 32 == 0 (NVFP4 x NVFP4), a partial weight tile
  const std::uint64_t seed = 4444;
  const GemmInputs in = make_gemm_inputs({m, n, k, OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::f32}, seed,
                                         InputDistribution::random);
  const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
  const Nvfp4Matrix a_linear = with_layout(in.a_fp4, ScaleLayout::linear);
  std::vector<std::uint8_t> staged_host(a_linear.codes);
  staged_host.insert(staged_host.end(), a_linear.scales.begin(), a_linear.scales.end());
  cuda::DeviceBuffer<std::uint8_t> staged(staged_host), a(staged_host.size());
  cuda::DeviceBuffer<std::uint16_t> a_bf16(static_cast<std::size_t>(m * k));
  cuda::DeviceBuffer<float> d(static_cast<std::size_t>(m * n));
  cuda::DeviceBuffer<std::uint8_t> packed(prefill::pack_weights(in.b_fp4).bytes);
  const prefill::Nvfp4Activations act{a.get(), a.get() + a_linear.codes.size(), m, k};
  for (const prefill::TileConfig& c : prefill::tile_configs()) {
    for (const bool in_kernel : {false, true}) {
      if (in_kernel && !c.dequantizes_activations()) continue;
      prefill::Plan plan = prefill::make_plan(m, n, k, c, 1);
      if (in_kernel && !prefill::check_activation_dequant_on_device(plan, k).is_ok()) {
        plan = prefill::make_plan(m, n, k, c, 4);
      }
      const prefill::ActivationMaps map = prefill::make_activation_maps(a_bf16.get(), m, k, c);
      auto launch = [&] {
        if (in_kernel) {
          prefill::launch_gemm(plan, act, packed.get(), d.get(), OutputType::f32, m, n, static_cast<float>(in.alpha),
                               stream.get(), nullptr, true);
          return;
        }
        prefill::launch_dequantize_bf16(a.get(), a.get() + a_linear.codes.size(), a_bf16.get(), m, k, stream.get(), true);
        prefill::launch_gemm(plan, map, packed.get(), d.get(), OutputType::f32, m, n, static_cast<float>(in.alpha),
                             stream.get(), nullptr, true);
      };
      launch();  // loads the modules (see the probe)
      synchronize_within(stream.get());
      a.fill_bytes(0);
      a_bf16.fill_bytes(0);
      d.fill_bytes(0);
      launch_producer(staged.get(), a.get(), static_cast<std::int64_t>(a.bytes()), reinterpret_cast<std::uint8_t*>(d.get()),
                      static_cast<std::int64_t>(d.bytes()), times.get(), stream.get());
      launch();
      synchronize_within(stream.get());
      const std::vector<float> got = d.download();
      const VerifyResult v = verify_gemm_output(got.data(), ref, k, OutputType::f32);
      EXPECT_TRUE(v.passed) << v.message << " for "
                            << repro(std::string("w4a4 m40 n544 k2048 ") + plan.describe() +
                                         (in_kernel ? ", activations dequantized in the kernel" : ", behind the pass"),
                                     seed);
    }
  }
}

}  // namespace
}  // namespace fp4gap::decode
