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

// Decode up to these M where both families serve the shape: measured on the H200 (glm5 shapes,
// graph us) behind another kernel, as a GEMM runs in a serving graph, which never runs a GEMM
// behind itself. W4A16 (PERF-LOG run 91, `fp4gap gemm --after norm|norm-pdl`): the decode kernel
// is faster up to M = 12 on all three shapes (0.4-2.0 us after a norm), at M = 14 on two (W2 even
// / 0.2 us slower), from M = 16 the prefill kernel's m16 tile on two. W4A4 (run 92, `--after
// quantize`, the decode kernel launched programmatically behind the quantizer): decode faster up
// to M = 12 on all three (0.4-1.2 us), at M = 14 on two (W2 0.26 us slower), at M = 16 on one;
// also on the seed shape, where the prefill plan dequantizes the activations in the kernel (before
// run 92 that took the prefill kernel from M = 9). Back to back (runs 53-54, 65-69), where the
// prefill tiles' programmatic launch hides their first loads behind their own previous launch,
// they were faster from M = 9-13.
// Larger weights move the crossing down: the decode kernel's time grows with M x N x K, the
// prefill tile's stays flat to M = 16. At 8192 x 8192 (run 94, behind a kernel) W4A16 decode is
// 1.6 / 0.3 us faster at M = 9 / 12, 1.2 us slower at 14; W4A4 decode 0.5 us faster at M = 9,
// 3.1-3.7 us slower at 12-16 (its policy takes the register-prefetch kernel there).
inline constexpr std::int64_t kW4A16DecodeMaxM = 14;
inline constexpr std::int64_t kW4A4DecodeMaxM = 14;
inline constexpr std::int64_t kDecodeMaxMWeightElements = 4096 * 6144;  // N x K up to which those hold
inline constexpr std::int64_t kW4A16DecodeMaxMLargeWeight = 12;
inline constexpr std::int64_t kW4A4DecodeMaxMLargeWeight = 9;
constexpr std::int64_t decode_max_m(bool w4a4, std::int64_t n, std::int64_t k) {
  if (n * k <= kDecodeMaxMWeightElements) return w4a4 ? kW4A4DecodeMaxM : kW4A16DecodeMaxM;
  return w4a4 ? kW4A4DecodeMaxMLargeWeight : kW4A16DecodeMaxMLargeWeight;
}

struct FamilyChoice {
  Status status;  // ok, or not_supported naming both families' reasons
  KernelFamily family = KernelFamily::decode;
};

// `largest_decode_m`: the largest M decode takes when both serve the shape (decode_max_m above).
// `decode` and `prefill`: what those backends' supports() answered for the problem. An invalid
// problem (e.g. K % 32 != 0) is reported as the decode family says it.
FamilyChoice choose_kernel_family(std::int64_t m, std::int64_t largest_decode_m, const Status& decode,
                                  const Status& prefill);

}  // namespace fp4gap
