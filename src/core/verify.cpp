#include "fp4gap/verify.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace fp4gap {

namespace {

constexpr double kFloatUnitRoundoff = 0x1p-24;

double output_unit_roundoff(OutputType t) {
  switch (t) {
    case OutputType::f32: return 0x1p-24;
    case OutputType::bf16: return 0x1p-8;
    case OutputType::f16: return 0x1p-11;
  }
  return 0x1p-8;
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string position(std::int64_t flat, std::int64_t n) {
  return "(row " + std::to_string(flat / n) + ", col " + std::to_string(flat % n) + ")";
}

}  // namespace

double element_tolerance(double ref, double abs_sum, std::int64_t k, OutputType out, double tensor_core_error) {
  const double ku = static_cast<double>(k) * kFloatUnitRoundoff;
  // gamma(k) is only a bound while k*u < 1; beyond that no float32 accumulation can be trusted.
  const double gamma = ku < 1.0 ? ku / (1.0 - ku) : std::numeric_limits<double>::infinity();
  return std::fabs(ref) * output_unit_roundoff(out) + (gamma + tensor_core_error) * abs_sum;
}

VerifyResult verify_gemm_output(const float* got, const ReferenceResult& ref, std::int64_t k, OutputType out,
                                double tensor_core_error) {
  const std::int64_t count = ref.m * ref.n;
  if (ref.m < 1 || ref.n < 1 || static_cast<std::int64_t>(ref.d.size()) != count ||
      static_cast<std::int64_t>(ref.abs_sum.size()) != count) {
    throw InvalidArgument("reference result is not [m, n]: m = " + std::to_string(ref.m) + ", n = " +
                          std::to_string(ref.n) + ", d has " + std::to_string(ref.d.size()) + " values");
  }
  if (got == nullptr) throw InvalidArgument("verify_gemm_output: no output to check (got is null)");

  VerifyResult r;
  r.checked = count;
  bool output_all_zero = true;
  std::int64_t first_nonzero_ref = -1;
  // mismatches counts every failing element; non_finite is the subset that is NaN or Inf.
  for (std::int64_t i = 0; i < count; ++i) {
    const double g = got[i];
    const double e = ref.d[static_cast<std::size_t>(i)];
    const double s = ref.abs_sum[static_cast<std::size_t>(i)];
    if (e != 0.0 && first_nonzero_ref < 0) first_nonzero_ref = i;
    if (!std::isfinite(g)) {
      ++r.non_finite;
      ++r.mismatches;
      if (r.first_bad < 0) r.first_bad = i;
      output_all_zero = false;
      continue;
    }
    if (g != 0.0) output_all_zero = false;
    const double err = std::fabs(g - e);
    const double scale = std::fmax(std::fabs(e), s * kFloatUnitRoundoff);
    const double rel = scale > 0.0 ? err / scale : (err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (err > r.max_abs_error) r.max_abs_error = err;
    if (rel > r.max_rel_error) r.max_rel_error = rel;
    if (err > element_tolerance(e, s, k, out, tensor_core_error)) {
      ++r.mismatches;
      if (r.first_bad < 0) r.first_bad = i;
    }
  }
  r.all_zero = output_all_zero && first_nonzero_ref >= 0;
  r.passed = r.mismatches == 0 && !r.all_zero;
  if (r.passed) return r;

  if (r.all_zero) {
    const auto j = static_cast<std::size_t>(first_nonzero_ref);
    r.message = "output is all zero while the reference is not: first non-zero reference at " +
                position(first_nonzero_ref, ref.n) + ", expected " + format_number(ref.d[j]);
    if (r.first_bad < 0) r.first_bad = first_nonzero_ref;
    return r;
  }
  const auto j = static_cast<std::size_t>(r.first_bad);
  r.message = std::to_string(r.mismatches) + " of " + std::to_string(count) + " elements wrong (" +
              std::to_string(r.non_finite) + " non-finite); first at " + position(r.first_bad, ref.n) +
              ": got " + format_number(got[r.first_bad]) + ", expected " + format_number(ref.d[j]) +
              ", tolerance " + format_number(element_tolerance(ref.d[j], ref.abs_sum[j], k, out, tensor_core_error)) +
              " (k = " + std::to_string(k) + ", output " + std::string(to_string(out)) + ")";
  return r;
}

}  // namespace fp4gap
