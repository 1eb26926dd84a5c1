#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "fp4gap/format.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/problem.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::make_problem;

std::string parse_format_error(std::string_view s) {
  try {
    parse_operand_format(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no exception";
}

std::string parse_output_error(std::string_view s) {
  try {
    parse_output_type(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(ProblemNames, OperandFormatsRoundTrip) {
  for (OperandFormat f : {OperandFormat::nvfp4, OperandFormat::bf16, OperandFormat::e4m3}) {
    EXPECT_EQ(parse_operand_format(to_string(f)), f) << to_string(f);
  }
  EXPECT_EQ(to_string(OperandFormat::nvfp4), "nvfp4");
  EXPECT_EQ(to_string(OperandFormat::bf16), "bf16");
  EXPECT_EQ(to_string(OperandFormat::e4m3), "e4m3");
}

// The table against the codecs: every finite E4M3 value and every NVFP4 value (E2M1 code times
// E4M3 block scale) survives bf16; an NVFP4 value E4M3 cannot hold, and a bf16 neither can.
TEST(ProblemNames, HoldsExactlyMatchesTheCodecs) {
  const auto survives_bf16 = [](float v) { return bf16_to_float(float_to_bf16(v)) == v; };
  for (int s = 0; s < 256; ++s) {
    const float scale = e4m3_to_float(static_cast<std::uint8_t>(s));
    if (!std::isfinite(scale)) continue;
    EXPECT_TRUE(survives_bf16(scale)) << "e4m3 0x" << std::hex << s;
    for (int c = 0; c < 16; ++c) {
      const float v = e2m1_to_float(static_cast<std::uint8_t>(c)) * scale;
      EXPECT_TRUE(survives_bf16(v)) << "e2m1 " << c << " x e4m3 0x" << std::hex << s;
    }
  }
  const float nvfp4_value = 1.5f * 1.125f;  // e2m1 1.5 times the e4m3 scale 1.125
  EXPECT_NE(e4m3_to_float(float_to_e4m3_sat(nvfp4_value)), nvfp4_value);
  const float bf16_value = bf16_to_float(float_to_bf16(1.0078125f));  // 1 + 2^-7
  EXPECT_NE(e4m3_to_float(float_to_e4m3_sat(bf16_value)), bf16_value);
  for (OperandFormat f : {OperandFormat::nvfp4, OperandFormat::bf16, OperandFormat::e4m3}) {
    EXPECT_TRUE(holds_exactly(f, f));
    EXPECT_TRUE(holds_exactly(f, OperandFormat::bf16));
  }
  EXPECT_FALSE(holds_exactly(OperandFormat::nvfp4, OperandFormat::e4m3));
  EXPECT_FALSE(holds_exactly(OperandFormat::bf16, OperandFormat::e4m3));
  EXPECT_FALSE(holds_exactly(OperandFormat::bf16, OperandFormat::nvfp4));
  EXPECT_FALSE(holds_exactly(OperandFormat::e4m3, OperandFormat::nvfp4));
}

TEST(ProblemNames, OutputTypesRoundTrip) {
  for (OutputType t : {OutputType::f32, OutputType::bf16, OutputType::f16}) {
    EXPECT_EQ(parse_output_type(to_string(t)), t) << to_string(t);
  }
  EXPECT_EQ(to_string(OutputType::f32), "f32");
  EXPECT_EQ(to_string(OutputType::f16), "f16");
}

TEST(ProblemNames, ParseErrorsNameTheChoices) {
  const std::string f = parse_format_error("fp8");
  EXPECT_NE(f.find("'fp8'"), std::string::npos) << f;
  EXPECT_NE(f.find("nvfp4, bf16, e4m3"), std::string::npos) << f;
  const std::string o = parse_output_error("fp32");
  EXPECT_NE(o.find("'fp32'"), std::string::npos) << o;
  EXPECT_NE(o.find("f32, bf16, f16"), std::string::npos) << o;
  EXPECT_NE(parse_format_error(""), "no exception");
  EXPECT_NE(parse_output_error("BF16"), "no exception");  // names are lower case, exactly
}

TEST(ProblemNames, OutputTypeBytes) {
  EXPECT_EQ(output_type_bytes(OutputType::f32), 4);
  EXPECT_EQ(output_type_bytes(OutputType::bf16), 2);
  EXPECT_EQ(output_type_bytes(OutputType::f16), 2);
}

TEST(ProblemLabel, NamesShapeFormatsAndOutput) {
  EXPECT_EQ(make_problem(512, 2048, 6144).label(), "m512 n2048 k6144 nvfp4 x nvfp4 -> bf16");
  EXPECT_EQ(make_problem(1, 32, 64, OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f32).label(),
            "m1 n32 k64 bf16 x nvfp4 -> f32");
}

TEST(ValidateProblem, AcceptsTheServingShapes) {
  EXPECT_TRUE(validate_problem(make_problem(512, 2048, 6144)).is_ok());
  EXPECT_TRUE(validate_problem(make_problem(1, 4096, 6144)).is_ok());  // M is free
  EXPECT_TRUE(validate_problem(make_problem(17, 6144, 2048)).is_ok());
  EXPECT_TRUE(validate_problem(make_problem(3, 33, 100, OperandFormat::bf16, OperandFormat::bf16)).is_ok());
}

TEST(ValidateProblem, DimensionsBelowOneNameTheDimension) {
  struct Case {
    std::int64_t m, n, k;
    const char* rule;
    const char* value;
  } cases[] = {{0, 32, 32, "M < 1", "M = 0"}, {4, -32, 32, "N < 1", "N = -32"}, {4, 32, 0, "K < 1", "K = 0"}};
  for (const Case& c : cases) {
    const Status s = validate_problem(make_problem(c.m, c.n, c.k));
    EXPECT_EQ(s.code, StatusCode::invalid_problem) << c.rule;
    EXPECT_NE(s.reason.find(c.rule), std::string::npos) << s.reason;
    EXPECT_NE(s.reason.find(c.value), std::string::npos) << s.reason;
  }
}

TEST(ValidateProblem, Nvfp4OperandNeedsKMultipleOf32) {
  for (auto [a, b] : {std::pair{OperandFormat::nvfp4, OperandFormat::nvfp4}, std::pair{OperandFormat::bf16, OperandFormat::nvfp4},
                      std::pair{OperandFormat::nvfp4, OperandFormat::bf16}}) {
    const GemmProblem p = make_problem(16, 64, 100, a, b);
    const Status s = validate_problem(p);
    EXPECT_EQ(s.code, StatusCode::invalid_problem) << p.label();
    EXPECT_NE(s.reason.find("K % 32 != 0: K = 100 (an NVFP4 GEMM operand needs K % 32 == 0)"), std::string::npos)
        << s.reason;
    EXPECT_NE(s.reason.find(p.label()), std::string::npos) << s.reason;  // the whole shape is quoted
  }
  // K = 48 is a whole number of 16-element blocks but not of the 32-element pairs the contract needs.
  EXPECT_FALSE(validate_problem(make_problem(16, 64, 48)).is_ok());
}

TEST(ValidateProblem, W4A4NeedsNMultipleOf32) {
  const Status s = validate_problem(make_problem(16, 33, 64));
  EXPECT_EQ(s.code, StatusCode::invalid_problem);
  EXPECT_NE(s.reason.find("N % 32 != 0: N = 33"), std::string::npos) << s.reason;
  // Only W4A4 has the N rule.
  EXPECT_TRUE(validate_problem(make_problem(16, 33, 64, OperandFormat::bf16, OperandFormat::nvfp4)).is_ok());
  EXPECT_TRUE(validate_problem(make_problem(16, 33, 64, OperandFormat::nvfp4, OperandFormat::bf16)).is_ok());
}

TEST(GemmCounts, FlopsAreTwoMNK) {
  EXPECT_DOUBLE_EQ(gemm_flops(make_problem(512, 2048, 6144)), 2.0 * 512 * 2048 * 6144);
  EXPECT_DOUBLE_EQ(gemm_flops(make_problem(1, 32, 32)), 2048.0);
}

TEST(GemmCounts, MinBytesCountPayloadScalesAndOutput) {
  // nvfp4 x nvfp4 -> bf16, m16 n64 k128: a row is 128/2 = 64 code bytes + 128/16 = 8 scale bytes.
  // A 16*72 = 1152, B 64*72 = 4608, D 16*64*2 = 2048: 7808.
  EXPECT_DOUBLE_EQ(gemm_min_bytes(make_problem(16, 64, 128)), 7808.0);
  // bf16 x nvfp4 -> f32: A 16*128*2 = 4096, B 4608, D 16*64*4 = 4096: 12800.
  EXPECT_DOUBLE_EQ(gemm_min_bytes(make_problem(16, 64, 128, OperandFormat::bf16, OperandFormat::nvfp4, OutputType::f32)),
                   12800.0);
  // e4m3 x e4m3 -> f16: A 16*128 = 2048, B 64*128 = 8192, D 16*64*2 = 2048: 12288.
  EXPECT_DOUBLE_EQ(gemm_min_bytes(make_problem(16, 64, 128, OperandFormat::e4m3, OperandFormat::e4m3, OutputType::f16)),
                   12288.0);
  // The GLM-5 W13 decode GEMM: m16 n4096 k6144 -> bf16: A 16*(3072+384), B 4096*(3072+384), D 16*4096*2.
  EXPECT_DOUBLE_EQ(gemm_min_bytes(make_problem(16, 4096, 6144)), 16.0 * 3456 + 4096.0 * 3456 + 16.0 * 4096 * 2);
}

}  // namespace
}  // namespace fp4gap
