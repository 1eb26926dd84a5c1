#include "fp4gap/problem.hpp"

#include <string>

namespace fp4gap {

std::string_view to_string(OperandFormat f) {
  switch (f) {
    case OperandFormat::nvfp4: return "nvfp4";
    case OperandFormat::bf16: return "bf16";
    case OperandFormat::e4m3: return "e4m3";
  }
  return "?";
}

std::string_view to_string(OutputType t) {
  switch (t) {
    case OutputType::f32: return "f32";
    case OutputType::bf16: return "bf16";
    case OutputType::f16: return "f16";
  }
  return "?";
}

OperandFormat parse_operand_format(std::string_view s) {
  for (OperandFormat f : {OperandFormat::nvfp4, OperandFormat::bf16, OperandFormat::e4m3}) {
    if (s == to_string(f)) return f;
  }
  throw InvalidArgument("unknown operand format '" + std::string(s) + "' (choices: nvfp4, bf16, e4m3)");
}

OutputType parse_output_type(std::string_view s) {
  for (OutputType t : {OutputType::f32, OutputType::bf16, OutputType::f16}) {
    if (s == to_string(t)) return t;
  }
  throw InvalidArgument("unknown output type '" + std::string(s) + "' (choices: f32, bf16, f16)");
}

bool holds_exactly(OperandFormat from, OperandFormat to) {
  return from == to || to == OperandFormat::bf16;
}

std::int64_t output_type_bytes(OutputType t) { return t == OutputType::f32 ? 4 : 2; }

std::string GemmProblem::label() const {
  return "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k) + " " +
         std::string(to_string(a_format)) + " x " + std::string(to_string(b_format)) + " -> " +
         std::string(to_string(out_type));
}

Status validate_problem(const GemmProblem& p) {
  const std::string shape = " [problem: " + p.label() + "]";
  const struct {
    const char* name;
    std::int64_t value;
  } dims[] = {{"M", p.m}, {"N", p.n}, {"K", p.k}};
  for (const auto& d : dims) {
    if (d.value < 1) {
      return Status::invalid_problem(std::string(d.name) + " < 1: " + d.name + " = " + std::to_string(d.value) +
                                     " (every GEMM dimension must be >= 1)" + shape);
    }
  }
  const bool a_fp4 = p.a_format == OperandFormat::nvfp4;
  const bool b_fp4 = p.b_format == OperandFormat::nvfp4;
  if ((a_fp4 || b_fp4) && p.k % 32 != 0) {
    return Status::invalid_problem("K % 32 != 0: K = " + std::to_string(p.k) +
                                   " (an NVFP4 GEMM operand needs K % 32 == 0)" + shape);
  }
  if (a_fp4 && b_fp4 && p.n % 32 != 0) {
    return Status::invalid_problem("N % 32 != 0: N = " + std::to_string(p.n) +
                                   " (an NVFP4 x NVFP4 GEMM needs N % 32 == 0)" + shape);
  }
  return Status::ok();
}

double gemm_flops(const GemmProblem& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

namespace {

// Bytes of one row of K elements as stored: NVFP4 moves its packed codes and one E4M3 scale per
// 16-element block (the LINEAR count; swizzle padding is not data a kernel must read).
double operand_row_bytes(OperandFormat f, std::int64_t k) {
  switch (f) {
    case OperandFormat::nvfp4: return static_cast<double>(k / 2 + k / 16);
    case OperandFormat::bf16: return 2.0 * static_cast<double>(k);
    case OperandFormat::e4m3: return static_cast<double>(k);
  }
  return 0.0;
}

}  // namespace

double gemm_min_bytes(const GemmProblem& p) {
  return static_cast<double>(p.m) * operand_row_bytes(p.a_format, p.k) +
         static_cast<double>(p.n) * operand_row_bytes(p.b_format, p.k) +
         static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(output_type_bytes(p.out_type));
}

}  // namespace fp4gap
