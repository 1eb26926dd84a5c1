#pragma once
// Helpers shared by the host tests. The decoders here are the tests' own, written from the SPEC
// tables, not the library's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/problem.hpp"

namespace fp4gap::test {

// A scratch file `name` in `suite`'s directory under the host tests' FP4GAP_TEST_TMPDIR (created).
inline std::string scratch_file(const std::string& suite, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(FP4GAP_TEST_TMPDIR) / suite;
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline GemmProblem make_problem(std::int64_t m, std::int64_t n, std::int64_t k, OperandFormat a = OperandFormat::nvfp4,
                                OperandFormat b = OperandFormat::nvfp4, OutputType out = OutputType::bf16) {
  return GemmProblem{m, n, k, a, b, out};
}

// "problem <label>, seed <s>; repro: fp4gap_host_tests --gtest_filter=<this test>"
inline std::string repro(const GemmProblem& p, std::uint64_t seed) {
  return "problem " + p.label() + ", seed " + std::to_string(seed) +
         "; repro: fp4gap_host_tests --gtest_filter=" +
         ::testing::UnitTest::GetInstance()->current_test_suite()->name() + "." +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

inline float spec_e2m1(std::uint8_t code) {
  static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8) ? -magnitude[code & 7] : magnitude[code & 7];
}

inline float spec_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The H200 as CUDA reports it, for host tests of device policy (tile feasibility, split-K).
inline DeviceContext h200_context() {
  DeviceContext d;
  d.available = true;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.smem_per_block_optin = 232448;  // 227 KiB
  return d;
}

// The message of the InvalidArgument that f() throws; a test failure (and "") when it throws none.
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument thrown";
  return {};
}

}  // namespace fp4gap::test
