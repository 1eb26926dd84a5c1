#pragma once
// Which fp4gap kernel family serves a shape: the decode kernels (mma.sync, any sm_80+ GPU, M <= 64)
// or the Hopper prefill kernels (wgmma, sm_90a, any M). Plain C++, host-tested; the dispatching
// backends fp4gap-w4a16 and fp4gap-w4a4 (src/backends/dispatch_backends.cu) follow it, or, where a
// tune cache timed both families for the very problem on this device, the measurement
// (tune::tuned_family).
#include <cstdint>
#include <optional>
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
// prefill tile's stays flat to M = 16. At 8192 x 8192 (runs 94 and 97, behind a kernel) W4A16
// decode is 1.6 / 0.3 us faster at M = 9 / 12, 1.2 us slower at 14; W4A4 decode (since run 96's
// refit of its policy) 0.55 / 0.14 us faster at M = 9 / 10, 0.3-2.0 us slower at 11-13. The
// DeepSeek-V3-sized experts (run 97: W13 4096 x 7168, W2 7168 x 2048) behave like the glm5 shapes:
// W4A16 decode faster to M = 13 on both (0.2-1.0 us at 13), even at 14 on W13; W4A4 decode faster
// to M = 12 on both (0.3-0.5 us), 0.2-0.4 us slower at 13-14 (as glm5 W2; glm5 W13 and seed are
// 0.2 us faster there). So the large-weight boundaries start between 4096 x 7168 (29.4 M, like
// glm5) and 8192 x 8192 (67 M), at their geometric middle, 6144 x 7168 (44 M): no shape between
// was measured. (Before run 97 they started above 4096 x 6144, and 4096 x 7168 lost 1.0 us at
// W4A16 M = 13 and 0.5-0.8 us at W4A4 M = 10-12.)
inline constexpr std::int64_t kW4A16DecodeMaxM = 14;
inline constexpr std::int64_t kW4A4DecodeMaxM = 14;
inline constexpr std::int64_t kDecodeMaxMWeightElements = 6144 * 7168;  // N x K up to which those hold
inline constexpr std::int64_t kW4A16DecodeMaxMLargeWeight = 12;
inline constexpr std::int64_t kW4A4DecodeMaxMLargeWeight = 10;
constexpr std::int64_t decode_max_m(bool w4a4, std::int64_t n, std::int64_t k) {
  if (n * k <= kDecodeMaxMWeightElements) return w4a4 ? kW4A4DecodeMaxM : kW4A16DecodeMaxM;
  return w4a4 ? kW4A4DecodeMaxMLargeWeight : kW4A16DecodeMaxMLargeWeight;
}

struct FamilyChoice {
  Status status;  // ok, or not_supported naming both families' reasons
  KernelFamily family = KernelFamily::decode;
};

// `largest_decode_m`: the largest M decode takes when both serve the shape (decode_max_m above).
// `decode` and `prefill`: what those backends' supports() answered for the problem. `measured`:
// the family `fp4gap tune` measured faster for this problem on this device (tune::tuned_family),
// which decides instead of `largest_decode_m` where both serve it. An invalid problem (e.g.
// K % 32 != 0) is reported as the decode family says it.
FamilyChoice choose_kernel_family(std::int64_t m, std::int64_t largest_decode_m, const Status& decode,
                                  const Status& prefill, std::optional<KernelFamily> measured = std::nullopt);

}  // namespace fp4gap
