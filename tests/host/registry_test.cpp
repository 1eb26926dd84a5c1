#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/verify.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::make_problem;

class NamedBackend : public GemmBackend {
 public:
  explicit NamedBackend(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "registry test stand-in"; }
  Status supports(const GemmProblem&, const DeviceContext&) const override { return Status::not_supported("test"); }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs&, int) override { return nullptr; }

 private:
  std::string name_;
};

long count_named(std::string_view name) {
  const auto all = gemm_backends();
  return std::count_if(all.begin(), all.end(), [&](GemmBackend* b) { return b->name() == name; });
}

TEST(BackendRegistry, HostBackendsRegisterOnce) {
  register_host_backends();
  register_host_backends();
  EXPECT_EQ(count_named("cpu-reference"), 1);
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->name(), "cpu-reference");
  EXPECT_FALSE(cpu->description().empty());
  EXPECT_EQ(find_gemm_backend("no-such-backend"), nullptr);
}

TEST(BackendRegistry, DuplicateNamesAreRejected) {
  register_host_backends();
  const std::size_t before = gemm_backends().size();
  try {
    register_gemm_backend(std::make_unique<NamedBackend>("cpu-reference"));
    FAIL() << "a second cpu-reference was accepted";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("duplicate backend name"), std::string::npos) << m;
    EXPECT_NE(m.find("'cpu-reference'"), std::string::npos) << m;
  }
  EXPECT_EQ(gemm_backends().size(), before);
  EXPECT_EQ(count_named("cpu-reference"), 1);
  EXPECT_THROW(register_gemm_backend(nullptr), InvalidArgument);
  EXPECT_THROW(register_gemm_backend(std::make_unique<NamedBackend>("")), InvalidArgument);
  EXPECT_EQ(gemm_backends().size(), before);
}

TEST(BackendRegistry, KeepsRegistrationOrder) {
  // Adds a stand-in that stays registered in this process; its name says where it comes from.
  register_host_backends();
  const std::string name = "registry-test-stand-in";
  if (find_gemm_backend(name) == nullptr) register_gemm_backend(std::make_unique<NamedBackend>(name));
  const auto all = gemm_backends();
  const auto cpu = std::find(all.begin(), all.end(), find_gemm_backend("cpu-reference"));
  const auto added = std::find(all.begin(), all.end(), find_gemm_backend(name));
  ASSERT_NE(cpu, all.end());
  ASSERT_NE(added, all.end());
  EXPECT_LT(cpu - all.begin(), added - all.begin());
}

TEST(CpuReferenceBackend, SupportsValidProblemsUpToASizeLimit) {
  register_host_backends();
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  ASSERT_NE(cpu, nullptr);
  const DeviceContext no_device;  // the CPU reference needs none
  EXPECT_TRUE(cpu->supports(make_problem(512, 2048, 6144), no_device).is_ok());
  EXPECT_TRUE(cpu->supports(make_problem(3, 96, 160, OperandFormat::bf16, OperandFormat::bf16), no_device).is_ok());

  const Status big = cpu->supports(make_problem(8192, 8192, 8192), no_device);  // 2^39 > 2^36
  EXPECT_EQ(big.code, StatusCode::not_supported);
  EXPECT_NE(big.reason.find("too large for the CPU reference (m*n*k = 549755813888"), std::string::npos) << big.reason;

  const Status wide = cpu->supports(make_problem(16384, 8192, 32), no_device);  // 2^32 MACs, 2^27 outputs
  EXPECT_EQ(wide.code, StatusCode::not_supported);
  EXPECT_NE(wide.reason.find("too large for the CPU reference (m*n = 134217728"), std::string::npos) << wide.reason;

  const Status invalid = cpu->supports(make_problem(16, 64, 100), no_device);
  EXPECT_EQ(invalid.code, StatusCode::invalid_problem);
  EXPECT_NE(invalid.reason.find("K % 32 != 0"), std::string::npos) << invalid.reason;

  const Status fp8 = cpu->supports(make_problem(16, 64, 64, OperandFormat::e4m3, OperandFormat::e4m3), no_device);
  EXPECT_EQ(fp8.code, StatusCode::not_supported);
}

TEST(CpuReferenceBackend, RunsPoisonsAndVerifies) {
  register_host_backends();
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  ASSERT_NE(cpu, nullptr);
  GemmProblem p = make_problem(17, 96, 160, OperandFormat::bf16, OperandFormat::nvfp4);
  p.out_type = OutputType::bf16;
  const std::uint64_t seed = 12;
  SCOPED_TRACE("problem " + p.label() + ", seed 12; repro: fp4gap_host_tests --gtest_filter=CpuReferenceBackend.*");
  const GemmInputs inputs = make_gemm_inputs(p, seed);
  auto runner = cpu->prepare(inputs, 2);
  ASSERT_NE(runner, nullptr);
  EXPECT_EQ(runner->input_sets(), 2);
  EXPECT_FALSE(runner->on_device());
  EXPECT_EQ(runner->alpha(), inputs.alpha);

  runner->poison_output();
  for (float v : runner->read_output(1)) ASSERT_TRUE(std::isnan(v));
  runner->run(1, nullptr);

  const ReferenceResult ref = reference_gemm(runner->a_operand(), runner->b_operand(), runner->alpha());
  const std::vector<float> out = runner->read_output(1);
  ASSERT_EQ(out.size(), static_cast<std::size_t>(p.m * p.n));
  const VerifyResult v = verify_gemm_output(out.data(), ref, p.k, p.out_type);
  EXPECT_TRUE(v.passed) << v.message;
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], round_to_output(ref.d[i], p.out_type)) << i;

  // Set 0 was not run: still poisoned, and the verifier says so.
  const std::vector<float> untouched = runner->read_output(0);
  EXPECT_FALSE(verify_gemm_output(untouched.data(), ref, p.k, p.out_type).passed);
  EXPECT_THROW(runner->run(2, nullptr), InvalidArgument);
  EXPECT_THROW(runner->read_output(-1), InvalidArgument);
}

TEST(CpuReferenceBackend, OutlivesTheCallersInputs) {
  register_host_backends();
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  ASSERT_NE(cpu, nullptr);
  const GemmProblem p = make_problem(4, 32, 64);
  std::unique_ptr<GemmRunner> runner;
  ReferenceResult ref;
  {
    const GemmInputs inputs = make_gemm_inputs(p, 3);
    ref = reference_gemm(inputs.a_view(), inputs.b_view(), inputs.alpha);
    runner = cpu->prepare(inputs, 1);
  }
  runner->run(0, nullptr);
  const std::vector<float> out = runner->read_output(0);
  EXPECT_TRUE(verify_gemm_output(out.data(), ref, p.k, p.out_type).passed);
}

}  // namespace
}  // namespace fp4gap
