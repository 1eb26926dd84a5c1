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
