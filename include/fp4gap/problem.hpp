#pragma once
// A GEMM problem: D[M, N] = alpha * A[M, K] * B[N, K]^T  (B is the weight, stored N x K: "TN").
#include <cstdint>
#include <string>
#include <string_view>

#include "fp4gap/status.hpp"

namespace fp4gap {

// e4m3 (per-tensor scale in alpha) exists for the cuBLASLt FP8 baseline.
enum class OperandFormat { nvfp4, bf16, e4m3 };
enum class OutputType { f32, bf16, f16 };

std::string_view to_string(OperandFormat f);
std::string_view to_string(OutputType t);
OperandFormat parse_operand_format(std::string_view s);  // throws InvalidArgument naming the choices
OutputType parse_output_type(std::string_view s);
std::int64_t output_type_bytes(OutputType t);
// Whether every value of `from` is a value of `to` (a per-tensor scale aside): a runner that
// multiplies `to` operands made from `from` inputs computes the problem's own product. NVFP4 ->
// bf16 and E4M3 -> bf16 are exact (SPEC-nvfp4.md); bf16 -> E4M3 / NVFP4 and NVFP4 -> E4M3 round.
bool holds_exactly(OperandFormat from, OperandFormat to);

struct GemmProblem {
  std::int64_t m = 0, n = 0, k = 0;
  OperandFormat a_format = OperandFormat::nvfp4;
  OperandFormat b_format = OperandFormat::nvfp4;
  OutputType out_type = OutputType::bf16;

  std::string label() const;  // e.g. "m512 n2048 k6144 nvfp4 x nvfp4 -> bf16"
};

// Rules every backend shares: M, N, K >= 1; an NVFP4 operand needs K % 32 == 0 (the
// cutlass_scaled_fp4_mm contract: two 16-element blocks per 16-byte row segment);
// W4A4 also needs N % 32 == 0. Returns invalid_problem naming the rule and the shape.
Status validate_problem(const GemmProblem& p);

// Bytes a GEMM must move at least: each input read once (FP4 payload + scale bytes), output
// written once. FLOPs = 2*M*N*K.
double gemm_flops(const GemmProblem& p);
double gemm_min_bytes(const GemmProblem& p);

}  // namespace fp4gap
