#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "fp4gap/presets.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

GemmProblem w4a4() {
  GemmProblem p;
  p.a_format = OperandFormat::nvfp4;
  p.b_format = OperandFormat::nvfp4;
  p.out_type = OutputType::bf16;
  return p;
}

struct Nk {
  std::int64_t n, k;
};

std::map<std::string, Nk> shapes_by_name(const std::vector<PresetShape>& v) {
  std::map<std::string, Nk> out;
  for (const PresetShape& s : v) out[s.name] = {s.problem.n, s.problem.k};
  return out;
}

TEST(Presets, Glm5ShapesAtEveryM) {
  const std::vector<PresetShape> v = preset_shapes("glm5", 1, w4a4());
  const std::vector<std::int64_t> ms = {1, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192};
  EXPECT_EQ(preset_m_values("glm5"), ms);
  ASSERT_EQ(v.size(), 3 * ms.size());
  const auto by_name = shapes_by_name(v);
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name.at("glm5.W13").n, 4096);
  EXPECT_EQ(by_name.at("glm5.W13").k, 6144);
  EXPECT_EQ(by_name.at("glm5.W2").n, 6144);
  EXPECT_EQ(by_name.at("glm5.W2").k, 2048);
  EXPECT_EQ(by_name.at("glm5.seed").n, 2048);
  EXPECT_EQ(by_name.at("glm5.seed").k, 6144);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_TRUE(v[i].status.is_ok()) << v[i].name << ": " << v[i].status.reason;
    EXPECT_EQ(v[i].problem.m, ms[i % ms.size()]);
    EXPECT_EQ(v[i].problem.a_format, OperandFormat::nvfp4);
    EXPECT_EQ(v[i].problem.out_type, OutputType::bf16);
  }
}

TEST(Presets, DeepSeekV3ExpertShapesWithoutTheSeed) {
  const std::vector<std::int64_t> ms = {1, 16};
  const std::vector<PresetShape> v = preset_shapes("deepseek-v3", 1, w4a4(), ms);
  ASSERT_EQ(v.size(), 2 * ms.size());
  const auto by_name = shapes_by_name(v);
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_EQ(by_name.at("deepseek-v3.W13").n, 4096);
  EXPECT_EQ(by_name.at("deepseek-v3.W13").k, 7168);
  EXPECT_EQ(by_name.at("deepseek-v3.W2").n, 7168);
  EXPECT_EQ(by_name.at("deepseek-v3.W2").k, 2048);
  for (const PresetShape& s : v) EXPECT_TRUE(s.status.is_ok()) << s.name << ": " << s.status.reason;
  const auto tp8 = shapes_by_name(preset_shapes("deepseek-v3", 8, w4a4(), ms));
  EXPECT_EQ(tp8.at("deepseek-v3.W13/tp8").n, 512);
  EXPECT_EQ(tp8.at("deepseek-v3.W2/tp8").k, 256);
  EXPECT_EQ(preset_m_values("deepseek-v3"), preset_m_values("glm5"));
}

TEST(Presets, FormatsAndMValuesComeFromTheCaller) {
  GemmProblem f;
  f.a_format = OperandFormat::bf16;
  f.b_format = OperandFormat::nvfp4;
  f.out_type = OutputType::f32;
  const std::vector<std::int64_t> ms = {16, 512};
  const std::vector<PresetShape> v = preset_shapes("glm5", 1, f, ms);
  ASSERT_EQ(v.size(), 6u);
  for (const PresetShape& s : v) {
    EXPECT_EQ(s.problem.a_format, OperandFormat::bf16);
    EXPECT_EQ(s.problem.out_type, OutputType::f32);
    EXPECT_TRUE(s.problem.m == 16 || s.problem.m == 512);
  }
}

TEST(Presets, TensorParallelSplitsTheIntermediateDimension) {
  const std::vector<std::int64_t> ms = {16};
  const auto by_name = shapes_by_name(preset_shapes("glm5", 8, w4a4(), ms));
  EXPECT_EQ(by_name.at("glm5.W13/tp8").n, 4096 / 8);
  EXPECT_EQ(by_name.at("glm5.W13/tp8").k, 6144);
  EXPECT_EQ(by_name.at("glm5.W2/tp8").n, 6144);
  EXPECT_EQ(by_name.at("glm5.W2/tp8").k, 2048 / 8);
  EXPECT_EQ(by_name.at("glm5.seed").n, 2048);  // the seed shape stays fixed
  EXPECT_EQ(by_name.at("glm5.seed").k, 6144);
  for (const PresetShape& s : preset_shapes("glm5", 8, w4a4(), ms)) EXPECT_TRUE(s.status.is_ok()) << s.name;
}

TEST(Presets, ShapesThatTpBreaksAreReportedNotDropped) {
  const std::vector<std::int64_t> ms = {16};
  const std::vector<PresetShape> v = preset_shapes("glm5", 3, w4a4(), ms);
  ASSERT_EQ(v.size(), 3u);
  for (const PresetShape& s : v) {
    if (s.name == "glm5.seed") {
      EXPECT_TRUE(s.status.is_ok());
      continue;
    }
    EXPECT_EQ(s.status.code, StatusCode::invalid_problem) << s.name;
    EXPECT_NE(s.status.reason.find("not divisible by tp = 3"), std::string::npos) << s.status.reason;
  }
  // tp = 128 divides, but W2's K = 16 breaks the NVFP4 GEMM rule K % 32 == 0.
  const std::vector<PresetShape> t128 = preset_shapes("glm5", 128, w4a4(), ms);
  const auto w2 = std::find_if(t128.begin(), t128.end(), [](const PresetShape& s) { return s.name == "glm5.W2/tp128"; });
  ASSERT_NE(w2, t128.end());
  EXPECT_EQ(w2->problem.k, 16);
  EXPECT_EQ(w2->status.code, StatusCode::invalid_problem);
  EXPECT_NE(w2->status.reason.find("K % 32"), std::string::npos) << w2->status.reason;
  EXPECT_NE(w2->status.reason.find("tp = 128"), std::string::npos) << w2->status.reason;
}

TEST(Presets, BadArguments) {
  EXPECT_THROW(preset_shapes("glm6", 1, w4a4()), InvalidArgument);
  EXPECT_THROW(preset_shapes("glm5", 0, w4a4()), InvalidArgument);
  EXPECT_THROW(preset_m_values("nope"), InvalidArgument);
  EXPECT_EQ(preset_names(), (std::vector<std::string_view>{"glm5", "deepseek-v3"}));
  const std::string message = test::invalid_argument_message([] { preset_shapes("glm6", 1, w4a4()); });
  EXPECT_NE(message.find("unknown preset \"glm6\" (known: glm5, deepseek-v3)"), std::string::npos) << message;
}

}  // namespace
}  // namespace fp4gap
