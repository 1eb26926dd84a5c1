#pragma once
// Helpers shared by the device tests.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/status.hpp"
#include "fp4gap/verify.hpp"

namespace fp4gap::test {

// Set to 1 by scripts/device-run.sh --sanitize: under an instrumenting tool every launch is slow,
// so the tests skip bounds on measured time (and nothing else).
inline bool under_sanitizer() {
  const char* v = std::getenv("FP4GAP_UNDER_SANITIZER");
  return v != nullptr && std::string(v) == "1";
}

// Waits for the work queued on `stream` (nullptr: the legacy default stream, which also waits for
// the blocking streams' earlier work), at most `seconds` (ten times that under a sanitizer). A
// kernel that never finishes (a barrier, cluster or flag protocol that waits forever) fails the
// current test there, printing its SCOPED_TRACE (plan, seed, repro), and ends the process: a hung
// context cannot be reset, and the outer `timeout` of a GPU call would end the suite without
// saying which launch hung.
inline void synchronize_within(cudaStream_t stream, double seconds = 30.0) {
  if (under_sanitizer()) seconds *= 10.0;
  cudaEvent_t done = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(done, stream));
  const auto start = std::chrono::steady_clock::now();
  cudaError_t status = cudaSuccess;
  while ((status = cudaEventQuery(done)) == cudaErrorNotReady) {
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > seconds) {
      ADD_FAILURE() << "the GPU work did not finish within " << seconds
                    << " s: a kernel waits forever (the trace below names the launch); ending the process, "
                    << "whose CUDA context cannot be reset";
      std::fprintf(stderr, "the GPU work did not finish within %g s\n", seconds);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
    // Most launches here take microseconds: poll without sleeping for the first 10 ms.
    if (waited.count() > 0.01) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  static_cast<void>(cudaEventDestroy(done));
  CUDA_CHECK(status);
  CUDA_CHECK(stream == nullptr ? cudaDeviceSynchronize() : cudaStreamSynchronize(stream));
}

inline const DeviceContext& gpu() {
  static const DeviceContext d = query_device(0);
  return d;
}

// A registered backend by name; throws when it is not registered.
inline GemmBackend& registered_backend(const char* name) {
  register_cuda_backends();
  GemmBackend* b = find_gemm_backend(name);
  if (b == nullptr) throw RuntimeError(std::string("backend not registered: ") + name);
  return *b;
}

// Raw output bytes of type t (f32, bf16 or f16) as floats.
inline std::vector<float> output_as_float(const std::vector<std::uint8_t>& raw, OutputType t) {
  const std::size_t size = static_cast<std::size_t>(output_type_bytes(t));
  std::vector<float> out(raw.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t == OutputType::f32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = t == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return out;
}

// The sweeps' FP4GAP_SWEEP_M (or another diagnostic's `variable`): a comma-separated list of M
// that replaces the diagnostic's own list. Throws on anything else, so that a typo does not
// silently run the default list.
inline std::vector<std::int64_t> sweep_ms_from_env(std::vector<std::int64_t> defaults,
                                                   const char* variable = "FP4GAP_SWEEP_M") {
  const char* list = std::getenv(variable);
  if (list == nullptr) return defaults;
  std::vector<std::int64_t> ms;
  for (const char* p = list; *p != '\0';) {
    char* end = nullptr;
    const long long m = std::strtoll(p, &end, 10);
    if (end == p || m < 1 || (*end != ',' && *end != '\0')) {
      throw std::invalid_argument(std::string(variable) + " is a comma-separated list of M >= 1: " + list);
    }
    ms.push_back(m);
    p = *end == ',' ? end + 1 : end;
  }
  return ms;
}

// "<what>, seed S; repro: <command running the current test>", for failure messages.
// Every output equals the reference rounded once to the output type. Holds for exact-grid inputs:
// every partial sum is exact in fp32 whatever the accumulation order.
inline void expect_exact(const std::vector<float>& got, const ReferenceResult& ref, OutputType out) {
  std::int64_t bad = 0, first = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float want = round_to_output(ref.d[i], out);
    if (float_bits(got[i]) != float_bits(want) && !(got[i] == 0.0f && want == 0.0f)) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << bad << " outputs differ from the exactly rounded reference; first at row " << first / ref.n
                    << ", col " << first % ref.n << ": got " << (first >= 0 ? got[static_cast<std::size_t>(first)] : 0.0f)
                    << ", want " << (first >= 0 ? round_to_output(ref.d[static_cast<std::size_t>(first)], out) : 0.0f);
}

inline std::string repro(const std::string& what, std::uint64_t seed) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::ostringstream os;
  os << what << ", seed " << seed << "; repro: build/gpu/tests/fp4gap_device_tests --gtest_filter='"
     << info->test_suite_name() << "." << info->name() << "'";
  return os.str();
}

// Runs a registered backend on input set 1 of 2 (outputs poisoned first) and checks its output
// against the reference of exactly what the runner multiplied, within its tensor-core bound; set 0
// was never run and must keep its NaN poison. `also` gets the output and the reference for a
// caller's further checks (e.g. exact equality on exact-grid inputs).
inline void check_backend(
    const char* name, const GemmProblem& p, std::uint64_t seed, InputDistribution dist,
    const std::function<void(const std::vector<float>& got, const ReferenceResult& ref)>& also = {}) {
  SCOPED_TRACE(repro(std::string(name) + ", " + p.label(), seed));
  GemmBackend& b = registered_backend(name);
  const Status s = b.supports(p, gpu());
  ASSERT_TRUE(s.is_ok()) << to_string(s.code) << ": " << s.reason;
  const GemmInputs inputs = make_gemm_inputs(p, seed, dist);
  auto runner = b.prepare(inputs, 2);
  ASSERT_TRUE(runner->on_device());
  ASSERT_EQ(runner->input_sets(), 2);
  runner->poison_output();
  cuda::Stream stream;
  runner->run(1, stream.as_void());
  synchronize_within(stream.get());
  const std::vector<float> got = runner->read_output(1);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(p.m * p.n));
  const ReferenceResult ref = reference_gemm(runner->a_operand(), runner->b_operand(), runner->alpha());
  const VerifyResult v = verify_gemm_output(got.data(), ref, p.k, p.out_type, runner->tensor_core_error_bound());
  EXPECT_TRUE(v.passed) << v.message << " (config: " << runner->config() << ")";
  EXPECT_EQ(v.non_finite, 0) << "unwritten (poisoned) outputs; config: " << runner->config();
  EXPECT_FALSE(v.all_zero);
  if (also) also(got, ref);

  const std::vector<float> untouched = runner->read_output(0);
  std::int64_t nan_count = 0;
  for (float x : untouched) nan_count += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(nan_count, p.m * p.n) << "set 0 was never run: its output must still be the NaN poison";
}

}  // namespace fp4gap::test

// Device tests run where a GPU exists: without one they fail with the reason, never skip.
#define REQUIRE_GPU()                                  \
  ASSERT_TRUE(::fp4gap::test::gpu().available)         \
      << "device tests need a CUDA device: " << ::fp4gap::test::gpu().unavailable_reason
