#pragma once
// Checking a kernel's output against the reference, with a tolerance derived from the arithmetic.
#include <cstdint>
#include <string>

#include "fp4gap/problem.hpp"
#include "fp4gap/reference.hpp"

namespace fp4gap {

// Per element: |got - ref| <= |ref| * u_out + gamma(k) * abs_sum, where u_out is the unit
// roundoff of the output type (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) and gamma(k) = k*u/(1-k*u)
// with u = 2^-24 bounds float32 accumulation of k exactly representable products in any order
// (true for every format here: each product of dequantized operands is exact in float32).
//
// tensor_core_error: a further bound, relative to abs_sum, for accumulators less precise than
// float32 (0 for every exact-product float32 path; see GemmRunner::tensor_core_error_bound).
double element_tolerance(double ref, double abs_sum, std::int64_t k, OutputType out, double tensor_core_error = 0.0);

struct VerifyResult {
  bool passed = false;
  std::int64_t checked = 0;
  std::int64_t mismatches = 0;
  std::int64_t non_finite = 0;  // NaN/Inf outputs: an unwritten (poisoned) element shows up here
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;   // relative to max(|ref|, abs_sum * 2^-24)
  std::int64_t first_bad = -1;  // flat index of the first failing element
  bool all_zero = false;        // output is all zero while the reference is not
  std::string message;          // one line, empty when passed
};

// got: m*n outputs converted to float.
VerifyResult verify_gemm_output(const float* got, const ReferenceResult& ref, std::int64_t k, OutputType out,
                                double tensor_core_error = 0.0);

}  // namespace fp4gap
