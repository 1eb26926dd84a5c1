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
    // N x K = 384 x 1024: W4A4's prefill plan (m16, 2 K blocks per CTA) dequantizes the
    // activations in the kernel; 6144 x 2048 at M = 12: its plan (16 K blocks per CTA) needs the
    // separate pass, so decode keeps it.
    struct Shape {
      std::int64_t m, n, k;
    };
    for (const Shape s : {Shape{1, 384, 1024}, Shape{8, 384, 1024}, Shape{9, 384, 1024}, Shape{12, 384, 1024},
                          Shape{13, 384, 1024}, Shape{64, 384, 1024}, Shape{200, 384, 1024}, Shape{12, 6144, 2048}}) {
      const std::int64_t m = s.m;
      const GemmProblem p{m, s.n, s.k, w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16, OperandFormat::nvfp4,
                          OutputType::bf16};
      check_backend(name, p, ++seed, InputDistribution::random);
      const GemmInputs inputs = make_gemm_inputs(p, seed, InputDistribution::random);
      const std::string config = registered_backend(name).prepare(inputs, 1)->config();
      const std::string prefill_config =
          registered_backend(w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16").prepare(inputs, 1)->config();
      const bool in_kernel = prefill_config.find("activations dequantized in the kernel") != std::string::npos;
      EXPECT_EQ(in_kernel, w4a4 && s.n == 384) << prefill_config;
      const bool decode = m <= (w4a4 ? w4a4_decode_max_m(in_kernel) : kW4A16DecodeMaxM);
      // Decode kernels name themselves "sm80+ mma.sync ...", prefill kernels "sm90a ...".
      EXPECT_NE(config.find(decode ? "mma.sync" : "sm90a"), std::string::npos)
          << name << " at M = " << m << " ran " << config << ", seed " << seed
          << "; repro: build/gpu/tests/fp4gap_device_tests --gtest_filter='DispatchBackends.*'";
    }
  }
}

}  // namespace
}  // namespace fp4gap
