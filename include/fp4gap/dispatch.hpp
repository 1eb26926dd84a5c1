#pragma once
// Which fp4gap kernel family serves a shape: the decode kernels (mma.sync, any sm_80+ GPU, M <= 64)
// or the Hopper prefill kernels (wgmma, sm_90a, any M). Plain C++, host-tested; the dispatching
// backends fp4gap-w4a16 and fp4gap-w4a4 (src/backends/dispatch_backends.cu) follow it.
#include <cstdint>
#include <string_view>

#include "fp4gap/status.hpp"

namespace fp4gap {

enum class KernelFamily { decode, prefill };
constexpr std::string_view to_string(KernelFamily f) { return f == KernelFamily::decode ? "decode" : "prefill"; }

// Decode up to these M where both families serve the shape, measured on the H200 (glm5 shapes,
// graph us, PERF-LOG runs 53-54). W4A16: the decode kernel is 0.6-1.4 us faster at M = 8; from
// M = 9 the prefill kernel's m16 tile is 0.1-0.9 us faster on the W13 and W2 shapes and 0.1-0.4 us
// slower on the seed shape up to M = 11 (decode grows ~0.2-0.35 us per row, prefill stays flat).
// W4A4: the decode kernel is 0.9-1.4 us faster at M = 8; at M = 12 the two are even (prefill 0.6 and
// 0.1 us faster, 0.4 slower); at M = 16 the prefill kernel is 0.8-1.2 us faster on two of the three shapes.
inline constexpr std::int64_t kW4A16DecodeMaxM = 8;
inline constexpr std::int64_t kW4A4DecodeMaxM = 12;
// W4A4 above M = 8 where the prefill kernel's plan dequantizes the activations in the kernel
// (prefill::prefers_activation_dequant_in_kernel: no separate pass): PERF-LOG runs 65 and 68 timed
// it faster than the decode kernel from M = 10 (seed shape 2048 x 6144: 8.74-8.81 us against
// 9.50-9.63 at M = 10-14, run 68), slower at M = 8 (8.67 against 7.90); through the dispatch (run
// 69) M = 9 / 10 / 12 went 8.95 / 9.45 / 9.55 -> 8.66 / 8.73 / 8.78 us. Behind the separate pass
// the decode kernel keeps M <= kW4A4DecodeMaxM.
inline constexpr std::int64_t kW4A4DecodeMaxMBesideInKernelDequant = 8;
constexpr std::int64_t w4a4_decode_max_m(bool prefill_dequantizes_in_kernel) {
  return prefill_dequantizes_in_kernel ? kW4A4DecodeMaxMBesideInKernelDequant : kW4A4DecodeMaxM;
}

struct FamilyChoice {
  Status status;  // ok, or not_supported naming both families' reasons
  KernelFamily family = KernelFamily::decode;
};

// `decode_max_m`: the largest M decode takes when both serve the shape (kW4A16DecodeMaxM or
// kW4A4DecodeMaxM). `decode` and `prefill`: what those backends' supports() answered for the
// problem. An invalid problem (e.g. K % 32 != 0) is reported as the decode family says it.
FamilyChoice choose_kernel_family(std::int64_t m, std::int64_t decode_max_m, const Status& decode,
                                  const Status& prefill);

}  // namespace fp4gap
