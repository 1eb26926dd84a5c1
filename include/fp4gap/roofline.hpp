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

// A roof below this is dominated by launch overhead, not by the GPU's rates: the H200's floors
// are ~1 us per launch in a CUDA graph and ~4.8 us event-timed (KERNEL-NOTES).
inline constexpr double kLaunchFloorSeconds = 2e-6;

// The compute rate the roofline uses for these operands (flop/s; 0 when the ceiling is missing),
// and its name ("BF16", "FP8", "FP4").
double compute_ceiling(OperandFormat a_moved, OperandFormat b_moved, const Ceilings& c);
std::string_view compute_ceiling_name(OperandFormat a_moved, OperandFormat b_moved, const Ceilings& c);

// How well M x N output tiles cover the SMs: a GEMM that gives each SM at most one tile and
// leaves SMs idle (tiles < SMs) cannot reach the compute roof without splitting K.
struct TileCoverage {
  std::int64_t tiles = 0;
  int sm_count = 0;
  int tile_m = 0, tile_n = 0;
  double waves = 0.0;    // tiles / SMs
  bool starved = false;  // fewer tiles than SMs
  std::string text;      // "64 output tiles of 128x128 for 132 SMs"
};
TileCoverage tile_coverage(const GemmProblem& p, int sm_count, int tile_m = 128, int tile_n = 128);

// A launch's fill in waves and the share of SM time it leaves idle, every tile counted as the same
// work and each wave as long as one tile (a halved last wave as `halved_wave_cost`). An SM holds
// max(ctas_at_once, sm_count) / sm_count CTAs, so clusters that leave SMs empty count as idle.
// E.g. 96 CTAs on 132 SMs: "launch: 96 CTAs for 132 SMs, 1 wave, 27% of SM time idle". Where the
// fill says how the tiles cover M and they reach past it by at least kRowsPastMShown of the rows:
// "..., tiles of 128 rows cover 640 for M = 520 (19% past M)".
inline constexpr double kRowsPastMShown = 0.05;
struct LaunchFillSummary {
  double waves = 0.0;
  double idle_fraction = 0.0;
  double rows_past_m = 0.0;  // share of the tiles' rows past M (0: none, or not said)
  std::string text;
};
LaunchFillSummary summarize_launch_fill(const LaunchFill& f, int sm_count);

}  // namespace fp4gap
