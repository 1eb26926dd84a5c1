// The kernel-family dispatch of include/fp4gap/dispatch.hpp.
#include "fp4gap/dispatch.hpp"

namespace fp4gap {

FamilyChoice choose_kernel_family(std::int64_t m, std::int64_t largest_decode_m, const Status& decode,
                                  const Status& prefill, std::optional<KernelFamily> measured) {
  if (decode.code == StatusCode::invalid_problem) return {decode, KernelFamily::decode};
  if (prefill.code == StatusCode::invalid_problem) return {prefill, KernelFamily::prefill};
  if (measured && decode.is_ok() && prefill.is_ok()) return {Status::ok(), *measured};
  if (decode.is_ok() && (m <= largest_decode_m || !prefill.is_ok())) return {Status::ok(), KernelFamily::decode};
  if (prefill.is_ok()) return {Status::ok(), KernelFamily::prefill};
  return {Status::not_supported("decode: " + decode.reason + "; prefill: " + prefill.reason), KernelFamily::decode};
}

}  // namespace fp4gap
