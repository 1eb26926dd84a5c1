// The device tests' own support (device_test_support.hpp): a launch that never finishes is reported
// with the test's trace and ends the process, instead of hanging the suite.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/common.cuh"
#include "device_test_support.hpp"

namespace fp4gap::test {
namespace {

// Spins until *flag is nonzero.
__global__ void wait_for_flag_kernel(const volatile unsigned int* flag) {
  while (*flag == 0u) __nanosleep(1000);
}

__global__ void set_flag_kernel(unsigned int* flag) { *flag = 1u; }

}  // namespace

TEST(DeviceTestSupport, SynchronizeWithinReturnsOnceTheWorkIsDone) {
  REQUIRE_GPU();
  cuda::DeviceBuffer<unsigned int> flag(1);
  flag.fill_bytes(0);
  set_flag_kernel<<<1, 1>>>(flag.get());
  CUDA_CHECK_LAUNCH();
  wait_for_flag_kernel<<<1, 1>>>(flag.get());  // finds the flag up
  CUDA_CHECK_LAUNCH();
  synchronize_within(nullptr, 5.0);
  EXPECT_EQ(flag.download()[0], 1u);
}

TEST(DeviceTestSupport, SynchronizeWithinEndsAProcessWhoseKernelNeverFinishes) {
  REQUIRE_GPU();
  // The child would run under the sanitizer too, which reports a process that exits with a kernel
  // still running in its own way: this checks the helper, not the sanitizer.
  if (under_sanitizer()) GTEST_SKIP() << "not under a sanitizer (FP4GAP_UNDER_SANITIZER=1)";
  // The child process runs the statement in a CUDA context of its own (a forked child could not use
  // the parent's).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto hang = [] {
    cuda::DeviceBuffer<unsigned int> flag(1);
    flag.fill_bytes(0);
    wait_for_flag_kernel<<<1, 1>>>(flag.get());  // nothing ever raises the flag
    synchronize_within(nullptr, 0.5);
  };
  EXPECT_EXIT(hang(), ::testing::ExitedWithCode(EXIT_FAILURE), "did not finish within");
}

}  // namespace fp4gap::test
