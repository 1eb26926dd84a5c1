#pragma once
// The CPU reference GEMM: the oracle every kernel is checked against. Accumulates in double.
#include <cstdint>
#include <vector>

#include "fp4gap/format.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap {

// A row-major [rows, k] operand as one backend multiplies it; global/per-tensor scales are NOT
// applied here (they are folded into alpha).
struct OperandView {
  OperandFormat format = OperandFormat::bf16;
  std::int64_t rows = 0;
  std::int64_t k = 0;
  const std::uint16_t* bf16 = nullptr;  // bf16: rows*k raw bf16 bits
  const std::uint8_t* codes = nullptr;  // nvfp4: rows*k/2 packed E2M1; e4m3: rows*k bytes
  const std::uint8_t* scales = nullptr; // nvfp4: E4M3 block scales in `layout`
  ScaleLayout layout = ScaleLayout::linear;
};

// Views of host matrices as operands (the data stays owned by the argument).
OperandView nvfp4_operand(const Nvfp4Matrix& m);
OperandView bf16_operand(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t k);

// Dequantized values of an operand, float32 (exact for every format here).
std::vector<float> operand_values(const OperandView& v);

struct ReferenceResult {
  std::int64_t m = 0, n = 0;
  std::vector<double> d;        // alpha * sum_k a*b, row-major [m, n]
  std::vector<double> abs_sum;  // |alpha| * sum_k |a*b|: the scale of the accumulation error
};

// D = alpha * A * B^T. A: [m, k], B: [n, k]. threads == 0 uses std::thread::hardware_concurrency.
// Cache-blocked and multi-threaded: m=512, n=2048, k=6144 takes seconds on 2 cores.
ReferenceResult reference_gemm(const OperandView& a, const OperandView& b, double alpha, int threads = 0);

// Output rounding of a reference value to the output type, returned as float.
float round_to_output(double v, OutputType t);

}  // namespace fp4gap
