// The dispatching backends fp4gap-w4a16 and fp4gap-w4a4 on the device: verified against the
// reference like every backend, and the kernel they run is the family choose_kernel_family names.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/dispatch.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::check_backend;
using test::registered_backend;

TEST(DispatchBackends, RunTheChosenFamilyCorrectly) {
  REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (const bool w4a4 : {false, true}) {
    const char* name = w4a4 ? "fp4gap-w4a4" : "fp4gap-w4a16";
    for (const std::int64_t m : {1, 8, 9, 12, 13, 64, 200}) {
      const GemmProblem p{m, 384, 1024, w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16, OperandFormat::nvfp4,
                          OutputType::bf16};
      check_backend(name, p, ++seed, InputDistribution::random);
      const GemmInputs inputs = make_gemm_inputs(p, seed, InputDistribution::random);
      const std::string config = registered_backend(name).prepare(inputs, 1)->config();
      const bool decode = m <= (w4a4 ? kW4A4DecodeMaxM : kW4A16DecodeMaxM);
      // Decode kernels name themselves "sm80+ mma.sync ...", prefill kernels "sm90a ...".
      EXPECT_NE(config.find(decode ? "mma.sync" : "sm90a"), std::string::npos)
          << name << " at M = " << m << " ran " << config << ", seed " << seed
          << "; repro: build/gpu/tests/fp4gap_device_tests --gtest_filter='DispatchBackends.*'";
    }
  }
}

}  // namespace
}  // namespace fp4gap
