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

// Decode up to this M where both families serve the shape. Measured on the H200 (PERF-LOG run 8,
// the glm5 shapes): the decode kernel wins at M = 1 (1.8-1.9x) and mostly at M = 16; from M = 32
// the prefill kernel's m64 tile wins on every shape (1.2-2.2x).
inline constexpr std::int64_t kDecodeDispatchMaxM = 16;

struct FamilyChoice {
  Status status;  // ok, or not_supported naming both families' reasons
  KernelFamily family = KernelFamily::decode;
};

// `decode` and `prefill`: what those backends' supports() answered for the problem. An invalid
// problem (e.g. K % 32 != 0) is reported as the decode family says it.
FamilyChoice choose_kernel_family(std::int64_t m, const Status& decode, const Status& prefill);

}  // namespace fp4gap
