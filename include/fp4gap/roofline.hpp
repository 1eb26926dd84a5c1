#pragma once
// Ceilings and the roofline model (host only).
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/problem.hpp"

namespace fp4gap {

// Rates of the device at hand: measured where possible (fp4gap peak), else datasheet.
struct Ceilings {
  double memory_bytes_per_s = 0.0;
  double bf16_flops_per_s = 0.0;   // dense BF16 tensor-core rate
  double fp8_flops_per_s = 0.0;
  double fp4_flops_per_s = 0.0;    // 0 where the device has no FP4 tensor cores
  std::string source;              // "measured on <gpu> <date>" or "datasheet <gpu>"
};

enum class Bound { memory, compute, launch_latency, unknown };
std::string_view to_string(Bound b);

struct RooflinePoint {
  double flops = 0.0;
  double bytes = 0.0;
  double compute_roof_s = 0.0;  // flops / compute ceiling of the tensor-core type used
  double memory_roof_s = 0.0;   // bytes / memory ceiling
  double roof_s = 0.0;          // max of the two
  Bound bound = Bound::unknown;
  std::string reason;           // e.g. "64 output tiles for 132 SMs", "weight read: 7.1 MB"
};

// Operand formats decide the bytes and the compute ceiling (NVFP4 dequantized to BF16 on Hopper
// runs at the BF16 rate; FP8 at the FP8 rate; native FP4 where fp4_flops_per_s > 0).
RooflinePoint roofline(const GemmProblem& p, OperandFormat a_moved, OperandFormat b_moved,
                       const Ceilings& c);

}  // namespace fp4gap
