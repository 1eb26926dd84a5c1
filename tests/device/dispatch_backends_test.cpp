// The dispatching backends fp4gap-w4a16 and fp4gap-w4a4 on the device: verified against the
// reference like every backend, and the kernel they run is the family choose_kernel_family names.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/dispatch.hpp"
#include "fp4gap/tune_cache.hpp"
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
    // Both sides of the boundary, on a shape whose W4A4 prefill plan dequantizes the activations
    // in the kernel (384 x 1024) and on one whose plan needs the separate pass (6144 x 2048); and
    // a weight just over kDecodeMaxMWeightElements (6144 x 7232: W4A16 decode to 12, W4A4 to 10).
    struct Shape {
      std::int64_t m, n, k;
    };
    for (const Shape s : {Shape{1, 384, 1024}, Shape{8, 384, 1024}, Shape{9, 384, 1024}, Shape{14, 384, 1024},
                          Shape{15, 384, 1024}, Shape{64, 384, 1024}, Shape{200, 384, 1024}, Shape{14, 6144, 2048},
                          Shape{15, 6144, 2048}, Shape{11, 6144, 7232}, Shape{13, 6144, 7232}}) {
      const std::int64_t m = s.m;
      const GemmProblem p{m, s.n, s.k, w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16, OperandFormat::nvfp4,
                          OutputType::bf16};
      check_backend(name, p, ++seed, InputDistribution::random);
      const GemmInputs inputs = make_gemm_inputs(p, seed, InputDistribution::random);
      const std::string config = registered_backend(name).prepare(inputs, 1)->config();
      const bool decode = m <= decode_max_m(w4a4, s.n, s.k);
      // Decode kernels name themselves "sm80+ mma.sync ...", prefill kernels "sm90a ...".
      EXPECT_NE(config.find(decode ? "mma.sync" : "sm90a"), std::string::npos)
          << name << " at M = " << m << " ran " << config << ", seed " << seed
          << "; repro: build/gpu/tests/fp4gap_device_tests --gtest_filter='DispatchBackends.*'";
    }
  }
}

// A tune cache that timed both families for a problem decides there, on either side of the
// boundary, and the row says so; without it the boundary decides again.
TEST(DispatchBackends, FollowTheFamilyATuneCacheMeasuredFaster) {
  REQUIRE_GPU();
  const std::string path = (std::filesystem::temp_directory_path() / "fp4gap-tuned-family-test.json").string();
  std::uint64_t seed = 950;
  for (const bool w4a4 : {false, true}) {
    const char* name = w4a4 ? "fp4gap-w4a4" : "fp4gap-w4a16";
    // M = 32 takes the prefill kernel by the boundary, M = 8 the decode kernel: the cache says
    // the opposite at each.
    for (const std::int64_t m : {std::int64_t{32}, std::int64_t{8}}) {
      const bool decode_by_cache = m > decode_max_m(w4a4, 384, 1024);
      tune::Entry e;
      e.device = tune::device_key(test::gpu());
      e.problem = tune::ProblemKey{w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16", m, 384, 1024,
                                   OutputType::bf16};
      e.families = tune::FamilyTiming{"norm", "decode", "prefill", decode_by_cache ? 1.0 : 2.0,
                                      decode_by_cache ? 2.0 : 1.0};
      tune::Cache cache;
      cache.put(e);
      cache.save(path);
      tune::use_cache_file(path);
      const GemmProblem p{m, 384, 1024, w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16, OperandFormat::nvfp4,
                          OutputType::bf16};
      const Status prefill =
          registered_backend(w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16").supports(p, test::gpu());
      ASSERT_TRUE(prefill.is_ok()) << "both families must serve the problem: " << prefill.reason;
      check_backend(name, p, ++seed, InputDistribution::random);
      const std::string config =
          registered_backend(name).prepare(make_gemm_inputs(p, seed, InputDistribution::random), 1)->config();
      EXPECT_NE(config.find(decode_by_cache ? "mma.sync" : "sm90a"), std::string::npos) << name << " M = " << m << ": "
                                                                                         << config;
      EXPECT_NE(config.find(std::string(decode_by_cache ? "decode" : "prefill") +
                            " kernel by the tune cache (measured after norm: decode "),
                std::string::npos)
          << config;
      tune::clear_active_cache();
      const std::string untuned =
          registered_backend(name).prepare(make_gemm_inputs(p, seed, InputDistribution::random), 1)->config();
      EXPECT_NE(untuned.find(decode_by_cache ? "sm90a" : "mma.sync"), std::string::npos) << untuned;
      EXPECT_EQ(untuned.find("tune cache"), std::string::npos) << untuned;
    }
  }
}

}  // namespace
}  // namespace fp4gap
