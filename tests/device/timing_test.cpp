// time_launch / time_runner / measure_ceilings on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::gpu;

void expect_ordered(const TimingStats& t, int samples, const char* mode) {
  EXPECT_EQ(t.samples, samples) << mode;
  EXPECT_GT(t.median_us, 0.0) << mode;
  EXPECT_LE(t.p20_us, t.median_us) << mode;
  EXPECT_LE(t.median_us, t.p80_us) << mode;
}

// Timing ran every set (graph rotation): each output is a correct GEMM, not the poison.
void expect_every_set_correct(GemmRunner& runner, const GemmProblem& p) {
  const ReferenceResult ref = reference_gemm(runner.a_operand(), runner.b_operand(), runner.alpha());
  for (int s = 0; s < runner.input_sets(); ++s) {
    const std::vector<float> got = runner.read_output(s);
    const VerifyResult v = verify_gemm_output(got.data(), ref, p.k, p.out_type, runner.tensor_core_error_bound());
    EXPECT_TRUE(v.passed) << "set " << s << ": " << v.message;
  }
}

TEST(Timing, LaunchesRotateOverEverySetInBothModes) {
  REQUIRE_GPU();
  cuda::DeviceBuffer<std::uint8_t> scratch(5 * 4096);
  std::map<int, int> calls;
  int total = 0;
  // A memset node is capturable, so the same callable serves warm-up, capture and event mode.
  auto launch = [&](int set, void* stream) {
    ++calls[set];
    ++total;
    CUDA_CHECK(cudaMemsetAsync(scratch.get() + 4096 * set, set, 4096, cuda::as_stream(stream)));
  };
  TimingOptions o;
  o.warmup_launches = 3;
  o.graph_launches = 8;
  o.graph_replays = 4;
  o.event_samples = 6;
  const Timing t = time_launch(launch, 5, gpu(), o);
  // Warm-up set 0, one sizing launch of set 0, the rest of the warm-up i % 5 (0 < i < 3), capture
  // i % 5 (i < 8), event mode s % 5 (s < 6): enqueued once each.
  EXPECT_EQ(total, 3 + 1 + 8 + 6);
  EXPECT_EQ(calls[0], 1 + 1 + 2 + 2);
  EXPECT_EQ(calls[1], 1 + 2 + 1);
  EXPECT_EQ(calls[2], 1 + 2 + 1);
  EXPECT_EQ(calls[3], 0 + 1 + 1);
  EXPECT_EQ(calls[4], 0 + 1 + 1);
  expect_ordered(t.graph, 4, "graph");
  expect_ordered(t.event, 6, "event");
}

TEST(Timing, ASlowLaunchGetsShortGraphsAndTheMinimumOfSamples) {
  REQUIRE_GPU();
  cuda::DeviceBuffer<std::uint8_t> scratch(3 * 4096);
  int total = 0;
  auto launch = [&](int set, void* stream) {
    ++total;
    CUDA_CHECK(cudaMemsetAsync(scratch.get() + 4096 * set, set, 4096, cuda::as_stream(stream)));
  };
  TimingOptions o;
  o.warmup_launches = 2;
  o.budget_us_per_mode = 1e-3;  // every launch is over budget
  const Timing t = time_launch(launch, 3, gpu(), o);
  // One warm-up (the second does not fit the budget), sizing 1, one graph of the 3 sets (captured
  // once, replayed), min_samples events.
  EXPECT_EQ(total, 1 + 1 + 3 + o.min_samples);
  expect_ordered(t.graph, o.min_samples, "graph");
  expect_ordered(t.event, o.min_samples, "event");
}

TEST(Timing, GraphCoversEverySetWhenSetsOutnumberLaunches) {
  REQUIRE_GPU();
  cuda::DeviceBuffer<std::uint8_t> scratch(40);
  std::map<int, int> calls;
  auto launch = [&](int set, void* stream) {
    ++calls[set];
    CUDA_CHECK(cudaMemsetAsync(scratch.get() + set, 1, 1, cuda::as_stream(stream)));
  };
  TimingOptions o;
  o.warmup_launches = 0;
  o.graph_launches = 8;
  o.graph_replays = 2;
  o.event_samples = 1;
  time_launch(launch, 40, gpu(), o);
  for (int s = 0; s < 40; ++s) EXPECT_GE(calls[s], 1) << "set " << s << " never captured";
}

TEST(Timing, RunnerTimingHasPlausibleFloorsAndKeepsOutputsCorrect) {
  REQUIRE_GPU();
  register_cuda_backends();
  GemmProblem p;
  p.m = 64;
  p.n = 2048;
  p.k = 1024;
  const std::uint64_t seed = 11;
  SCOPED_TRACE("cublas-bf16 " + p.label() + " seed 11; repro: fp4gap_device_tests --gtest_filter='Timing.*'");
  GemmBackend* b = find_gemm_backend("cublas-bf16");
  ASSERT_NE(b, nullptr);
  const GemmInputs inputs = make_gemm_inputs(p, seed);
  auto runner = b->prepare(inputs, 3);
  runner->poison_output();
  TimingOptions o;
  o.budget_us_per_mode = 1e12;  // the full counts, however slow a launch is (under a sanitizer)
  const Timing t = time_runner(*runner, gpu(), o);
  expect_ordered(t.graph, o.graph_replays, "graph");
  expect_ordered(t.event, o.event_samples, "event");
  EXPECT_GT(t.graph_floor_us, 0.0);
  if (!test::under_sanitizer()) {
    // An empty kernel: about 1 us per launch inside a graph, several us between events (H200:
    // 0.97 and 4.8). The graph floor must be the lower one, and a real GEMM above its floor.
    EXPECT_LT(t.graph_floor_us, 5.0);
    EXPECT_LT(t.graph_floor_us, t.event_floor_us);
    EXPECT_LT(t.event_floor_us, 50.0);
    EXPECT_GT(t.graph.median_us, t.graph_floor_us);
    EXPECT_GT(t.event.median_us, t.event_floor_us);
    if (t.sm_clock_mhz > 0 && t.sm_clock_mhz >= 0.9 * gpu().sm_clock_mhz) {
      EXPECT_TRUE(t.warnings.empty()) << t.warnings.front();
    }
  }
  expect_every_set_correct(*runner, p);
}

// fp4gap gemm --after: the GEMM behind each predecessor adds a positive time; a norm rewrites
// the runner's own activations (with their values: every set's output stays correct), the
// quantizer writes its own buffers and the row is warned; the quantizer's K rule is named.
TEST(Timing, RunnerBehindEachPredecessor) {
  REQUIRE_GPU();
  register_cuda_backends();
  GemmProblem p;
  p.m = 16;
  p.n = 2048;
  p.k = 1024;
  p.a_format = OperandFormat::bf16;
  SCOPED_TRACE("fp4gap-w4a16 " + p.label() + " seed 12; repro: fp4gap_device_tests --gtest_filter='Timing.*'");
  GemmBackend* b = find_gemm_backend("fp4gap-w4a16");
  ASSERT_NE(b, nullptr);
  auto runner = b->prepare(make_gemm_inputs(p, 12), 3);
  TimingOptions o;
  o.budget_us_per_mode = 1e12;
  for (const Predecessor before : {Predecessor::norm, Predecessor::norm_pdl, Predecessor::quantize}) {
    SCOPED_TRACE(std::string(to_string(before)));
    runner->poison_output();
    const Timing t = time_runner_after(*runner, p, before, gpu(), o);
    EXPECT_EQ(t.graph.samples, o.graph_replays);
    EXPECT_GT(t.graph.median_us, 0.0);
    EXPECT_GT(t.event.median_us, 0.0);
    EXPECT_LE(t.graph.p20_us, t.graph.median_us);
    EXPECT_LE(t.graph.median_us, t.graph.p80_us);
    const bool warned = std::any_of(t.warnings.begin(), t.warnings.end(), [](const std::string& w) {
      return w.find("of its own, not this runner's input") != std::string::npos;
    });
    EXPECT_EQ(warned, before == Predecessor::quantize);
    expect_every_set_correct(*runner, p);
  }
  GemmProblem odd;
  odd.m = 4;
  odd.n = 64;
  odd.k = 40;
  odd.a_format = odd.b_format = OperandFormat::bf16;
  auto cublas = find_gemm_backend("cublas-bf16")->prepare(make_gemm_inputs(odd, 13), 1);
  try {
    time_runner_after(*cublas, odd, Predecessor::quantize, gpu(), o);
    FAIL() << "the quantizer ran with K % 16 != 0";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--after quantize: the NVFP4 activation quantizer needs K % 16 == 0"),
              std::string::npos)
        << e.what();
  }
}

// The stand-in norm of `--after norm|norm-pdl` copies every element, on its vector path (16-byte
// aligned, a multiple of 8) and its scalar one (an odd count from an odd offset), and writes
// nothing past them (the GEMM sweeps also run it on their activations).
TEST(Timing, NormStandInCopiesEveryElementAndNothingElse) {
  REQUIRE_GPU();
  const std::int64_t total = 4099;
  std::vector<std::uint16_t> in(total);
  for (std::int64_t i = 0; i < total; ++i) in[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i * 2654435761u >> 16);
  struct Case {
    std::int64_t offset, elements;
    bool allow_next;
  };
  for (const Case c : {Case{0, 4096, false}, Case{0, 4096, true}, Case{1, 4097, false}, Case{3, 7, true}}) {
    SCOPED_TRACE("offset " + std::to_string(c.offset) + ", " + std::to_string(c.elements) + " elements");
    cuda::DeviceBuffer<std::uint16_t> src(in), dst(static_cast<std::size_t>(total));
    dst.fill_bytes(0xFF);
    cuda::Stream stream;
    launch_norm_stand_in(src.get() + c.offset, dst.get() + c.offset, c.elements, c.allow_next, gpu(), stream.as_void());
    stream.synchronize();
    const std::vector<std::uint16_t> out = dst.download();
    for (std::int64_t i = 0; i < total; ++i) {
      const bool copied = i >= c.offset && i < c.offset + c.elements;
      ASSERT_EQ(out[static_cast<std::size_t>(i)], copied ? in[static_cast<std::size_t>(i)] : 0xFFFF) << "element " << i;
    }
  }
}

// The decode runner launched programmatically behind a norm that lets it start early (as `fp4gap
// gemm --after norm-pdl` asks it to): every set's output is still the GEMM, the config says so.
// (That the kernel waits for the previous kernel's writes: DecodeGemm.ProgrammaticLaunch*.)
TEST(Timing, DecodeRunnerLaunchedProgrammaticallyBehindAnEarlyLaunchingNorm) {
  REQUIRE_GPU();
  register_cuda_backends();
  for (const char* name : {"fp4gap-decode-w4a16", "fp4gap-decode-w4a4"}) {
    GemmProblem p;
    p.m = 3;
    p.n = 2048;
    p.k = 1024;
    p.a_format = std::string(name) == "fp4gap-decode-w4a16" ? OperandFormat::bf16 : OperandFormat::nvfp4;
    SCOPED_TRACE(std::string(name) + " " + p.label() + " seed 14; repro: fp4gap_device_tests --gtest_filter='Timing.*'");
    auto runner = find_gemm_backend(name)->prepare(make_gemm_inputs(p, 14), 3);
    EXPECT_TRUE(runner->request_programmatic_launch());
    EXPECT_NE(runner->config().find(", programmatic launch"), std::string::npos) << runner->config();
    runner->poison_output();
    TimingOptions o;
    o.budget_us_per_mode = 1e12;
    const Timing t = time_runner_after(*runner, p, p.a_format == OperandFormat::bf16 ? Predecessor::norm_pdl
                                                                                     : Predecessor::quantize,
                                       gpu(), o);
    EXPECT_GT(t.graph.median_us, 0.0);
    expect_every_set_correct(*runner, p);
  }
  GemmProblem bf16;
  bf16.m = 3;
  bf16.n = 64;
  bf16.k = 64;
  bf16.a_format = bf16.b_format = OperandFormat::bf16;
  EXPECT_FALSE(find_gemm_backend("cublas-bf16")->prepare(make_gemm_inputs(bf16, 15), 1)->request_programmatic_launch());
}

TEST(Timing, RejectsBadOptionsAndMissingDevice) {
  auto noop = [](int, void*) {};
  DeviceContext none;
  none.unavailable_reason = "no CUDA device: test";
  EXPECT_THROW(time_launch(noop, 1, none, TimingOptions{}), RuntimeError);
  REQUIRE_GPU();
  TimingOptions o;
  o.graph_launches = 0;
  EXPECT_THROW(time_launch(noop, 1, gpu(), o), InvalidArgument);
  o = TimingOptions{};
  o.graph_replays = 0;
  EXPECT_THROW(time_launch(noop, 1, gpu(), o), InvalidArgument);
  o = TimingOptions{};
  o.event_samples = 0;
  EXPECT_THROW(time_launch(noop, 1, gpu(), o), InvalidArgument);
  EXPECT_THROW(time_launch(noop, 0, gpu(), TimingOptions{}), InvalidArgument);
  o = TimingOptions{};
  o.sustain_ms = -1.0;
  EXPECT_THROW(time_launch(noop, 1, gpu(), o), InvalidArgument);
}

TEST(Timing, SustainedModeReplaysForItsWindowAndReadsTheClock) {
  REQUIRE_GPU();
  // A 64 MiB memset per launch (~15-20 us on an H200): long enough that the host's loop and the
  // graph launches cannot be what is timed.
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  cuda::DeviceBuffer<std::uint8_t> scratch(2 * kBytes);
  auto launch = [&](int set, void* stream) {
    CUDA_CHECK(cudaMemsetAsync(scratch.get() + kBytes * set, set + 1, kBytes, cuda::as_stream(stream)));
  };
  TimingOptions o;
  const Timing burst = time_launch(launch, 2, gpu(), o);
  EXPECT_FALSE(burst.sustained.has_value()) << "the sustained mode is off by default";
  o.sustain_ms = 400.0;
  const Timing t = time_launch(launch, 2, gpu(), o);
  ASSERT_TRUE(t.sustained.has_value());
  const SustainedTiming& s = *t.sustained;
  std::printf("sustained: %.2f us per launch over %.1f ms (%d replays), graph %.2f us; NVML: %d samples, %d MHz "
              "(min %d), %.0f W, clock events: %s\n",
              s.per_launch_us, s.window_ms, s.replays, t.graph.median_us, s.device.samples, s.device.sm_clock_mhz,
              s.device.min_sm_clock_mhz, s.device.power_w, clock_event_reason_names(s.device.clock_event_reasons).c_str());
  // The counted half is ~200 ms of device time: the host keeps at most a few replays ahead.
  EXPECT_GT(s.window_ms, 150.0);
  EXPECT_LT(s.window_ms, 300.0);
  EXPECT_GE(s.replays, 1);
  // Back to back, a memset runs at the rate the graph mode measured, give or take clocks.
  EXPECT_GT(s.per_launch_us, 0.5 * t.graph.median_us);
  EXPECT_LT(s.per_launch_us, 2.0 * t.graph.median_us);
  if (s.device.samples > 0) {
    // ~20 readings at 10 ms over 200 ms; the clock is read on every machine NVML knows.
    EXPECT_GE(s.device.samples, 10);
    EXPECT_GT(s.device.sm_clock_mhz, 0);
    EXPECT_LE(s.device.min_sm_clock_mhz, s.device.sm_clock_mhz);
  }
  std::vector<std::uint8_t> host(16);
  CUDA_CHECK(cudaMemcpy(host.data(), scratch.get() + kBytes, host.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[0], 2) << "the replays ran set 1";
}

TEST(Timing, CpuRunnerIsRejected) {
  REQUIRE_GPU();
  register_host_backends();
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  ASSERT_NE(cpu, nullptr);
  GemmProblem p;
  p.m = 1;
  p.n = 32;
  p.k = 32;
  auto runner = cpu->prepare(make_gemm_inputs(p, 1), 1);
  EXPECT_THROW(time_runner(*runner, gpu(), TimingOptions{}), InvalidArgument);
}

TEST(Timing, ErrorInsideCaptureLeavesTheStreamUsable) {
  REQUIRE_GPU();
  int calls = 0;
  auto failing = [&](int, void*) {
    if (++calls > 1) throw RuntimeError("launch failed on purpose");
  };
  TimingOptions o;
  o.warmup_launches = 1;  // the warm-up succeeds; the first captured launch throws
  EXPECT_THROW(time_launch(failing, 1, gpu(), o), RuntimeError);
  // The device still works afterwards.
  cuda::DeviceBuffer<int> x(1);
  x.fill_bytes(0);
  EXPECT_EQ(x.download()[0], 0);
}

TEST(Peak, CeilingsAreMeasuredAndFp4IsZeroBelowSm100) {
  REQUIRE_GPU();
  // Seconds of copies and 8192^3 GEMMs, checked only for their rates; its copy kernel is checked
  // for correctness by LaunchCopyMovesEveryByte... under the sanitizer too.
  if (test::under_sanitizer()) GTEST_SKIP() << "a rate measurement, meaningless under FP4GAP_UNDER_SANITIZER=1";
  const Ceilings c = measure_ceilings(gpu());
  EXPECT_GT(c.memory_bytes_per_s, 1e11);
  EXPECT_GT(c.bf16_flops_per_s, 1e12);
  if (gpu().cc_major * 10 + gpu().cc_minor >= 89) {
    EXPECT_GT(c.fp8_flops_per_s, c.bf16_flops_per_s) << "FP8 tensor cores run at twice the BF16 rate";
  }
  if (gpu().cc_major < 10) {
    EXPECT_EQ(c.fp4_flops_per_s, 0.0);
  }
  EXPECT_NE(c.source.find(gpu().name), std::string::npos) << c.source;
  EXPECT_EQ(c.source.rfind("measured on ", 0), 0u) << c.source;
  std::printf("ceilings on %s: memory %.3f TB/s, bf16 %.1f TFLOP/s, fp8 %.1f TFLOP/s, fp4 %.1f TFLOP/s\n",
              gpu().name.c_str(), c.memory_bytes_per_s * 1e-12, c.bf16_flops_per_s * 1e-12, c.fp8_flops_per_s * 1e-12,
              c.fp4_flops_per_s * 1e-12);
}

TEST(Peak, LaunchCopyMovesEveryByteAndRefusesMisalignment) {
  REQUIRE_GPU();
  // An odd number of 16-byte vectors, not a multiple of the grid: the grid-stride tail is exercised.
  constexpr std::size_t kBytes = 16 * 100003;
  std::vector<std::uint8_t> host(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<std::uint8_t>(i * 131 + (i >> 11));
  cuda::DeviceBuffer<std::uint8_t> src(kBytes), dst(kBytes + 16);
  src.upload(host);
  dst.fill_bytes(0xAB);
  launch_copy(src.get(), dst.get(), kBytes, gpu(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint8_t> got = dst.download();
  EXPECT_TRUE(std::equal(host.begin(), host.end(), got.begin())) << "the copy differs from its source";
  for (std::size_t i = kBytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xAB) << "byte " << i << " past the end written";
  try {
    launch_copy(src.get() + 8, dst.get(), 64, gpu(), nullptr);
    FAIL() << "a source address % 16 != 0 must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(launch_copy(src.get(), dst.get(), 24, gpu(), nullptr), InvalidArgument);
}

// The read floor reads cold copies: it never beats the datasheet bandwidth (an L2-resident copy
// would), and it is no faster than the empty-kernel floor it includes.
TEST(Peak, ReadFloorStreamsColdBytes) {
  REQUIRE_GPU();
  constexpr double kDatasheetH200BytesPerS = 4.8e12;
  for (const double bytes : {7.08e6, 14.2e6, 37.7e6}) {  // the NVFP4 weights of glm5 seed / W13, 8192^2
    const Timing t = time_read(bytes, gpu(), TimingOptions{});
    EXPECT_GE(t.graph.median_us, bytes / kDatasheetH200BytesPerS * 1e6) << bytes << " bytes";
    EXPECT_GE(t.graph.median_us, t.graph_floor_us) << bytes << " bytes";
    std::printf("read floor of %.2f MB: graph %.2f us (%.2f TB/s), event %.2f us, empty kernel %.2f us\n", bytes / 1e6,
                t.graph.median_us, bytes / t.graph.median_us / 1e6, t.event.median_us, t.graph_floor_us);
  }
  EXPECT_THROW(time_read(0.0, gpu(), TimingOptions{}), InvalidArgument);
}

TEST(Peak, NoDeviceThrowsWithTheReason) {
  DeviceContext none;
  none.unavailable_reason = "no CUDA device: test";
  try {
    measure_ceilings(none);
    FAIL() << "measure_ceilings without a device must throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device: test"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4gap
