#include "fp4gap/roofline.hpp"

#include <algorithm>
#include <sstream>

#include "fp4gap/report.hpp"

namespace fp4gap {
namespace {

// The tensor-core rate one operand format runs at. NVFP4 on a device without FP4 tensor cores
// is dequantized to BF16 (exact, see KERNEL-NOTES) and runs at the BF16 rate; FP8 without an
// FP8 ceiling falls back the same way.
double format_rate(OperandFormat f, const Ceilings& c) {
  switch (f) {
    case OperandFormat::nvfp4: return c.fp4_flops_per_s > 0 ? c.fp4_flops_per_s : c.bf16_flops_per_s;
    case OperandFormat::e4m3: return c.fp8_flops_per_s > 0 ? c.fp8_flops_per_s : c.bf16_flops_per_s;
    case OperandFormat::bf16: return c.bf16_flops_per_s;
  }
  return 0.0;
}

}  // namespace

std::string_view to_string(Bound b) {
  switch (b) {
    case Bound::memory: return "memory";
    case Bound::compute: return "compute";
    case Bound::launch_latency: return "launch_latency";
    case Bound::unknown: return "unknown";
  }
  return "unknown";
}

// Both operands go through one MMA, so the slower format's rate decides.
double compute_ceiling(OperandFormat a_moved, OperandFormat b_moved, const Ceilings& c) {
  return std::min(format_rate(a_moved, c), format_rate(b_moved, c));
}

std::string_view compute_ceiling_name(OperandFormat a_moved, OperandFormat b_moved, const Ceilings& c) {
  const double rate = compute_ceiling(a_moved, b_moved, c);
  if (rate <= 0) return "none";
  if (rate == c.bf16_flops_per_s) return "BF16";
  if (rate == c.fp8_flops_per_s) return "FP8";
  if (rate == c.fp4_flops_per_s) return "FP4";
  return "?";
}

RooflinePoint roofline(const GemmProblem& p, OperandFormat a_moved, OperandFormat b_moved,
                       const Ceilings& c) {
  GemmProblem moved = p;
  moved.a_format = a_moved;
  moved.b_format = b_moved;
  RooflinePoint r;
  r.flops = gemm_flops(p);
  r.bytes = gemm_min_bytes(moved);
  const double rate = compute_ceiling(a_moved, b_moved, c);
  const std::string rate_name(compute_ceiling_name(a_moved, b_moved, c));
  if (c.memory_bytes_per_s <= 0 || rate <= 0) {
    r.bound = Bound::unknown;
    r.reason = c.memory_bytes_per_s <= 0 ? "no memory ceiling" : "no compute ceiling for these formats";
    return r;
  }
  r.compute_roof_s = r.flops / rate;
  r.memory_roof_s = r.bytes / c.memory_bytes_per_s;
  r.roof_s = std::max(r.compute_roof_s, r.memory_roof_s);

  const std::string memory_text = "moves " + format_bytes(r.bytes) + ": " + format_us(r.memory_roof_s) +
                                  " at " + format_rate(c.memory_bytes_per_s, "B/s");
  const std::string compute_text = format_fixed(r.flops / 1e9, 1) + " GFLOP: " + format_us(r.compute_roof_s) +
                                   " at " + rate_name + " " + format_rate(rate, "FLOP/s");
  if (r.roof_s < kLaunchFloorSeconds) {
    r.bound = Bound::launch_latency;
    r.reason = "roof " + format_us(r.roof_s) + " is under the launch floor";
  } else if (r.memory_roof_s > r.compute_roof_s) {
    r.bound = Bound::memory;
    r.reason = memory_text + " (compute " + format_us(r.compute_roof_s) + ")";
  } else {
    r.bound = Bound::compute;
    r.reason = compute_text + " (memory " + format_us(r.memory_roof_s) + ")";
  }
  return r;
}

TileCoverage tile_coverage(const GemmProblem& p, int sm_count, int tile_m, int tile_n) {
  if (sm_count < 1 || tile_m < 1 || tile_n < 1) {
    throw InvalidArgument("tile_coverage needs sm_count >= 1 and tiles >= 1: sm_count = " +
                          std::to_string(sm_count) + ", tile " + std::to_string(tile_m) + "x" +
                          std::to_string(tile_n));
  }
  TileCoverage t;
  t.tiles = ceil_div(p.m, tile_m) * ceil_div(p.n, tile_n);
  t.sm_count = sm_count;
  t.tile_m = tile_m;
  t.tile_n = tile_n;
  t.waves = static_cast<double>(t.tiles) / sm_count;
  t.starved = t.tiles < sm_count;
  t.text = std::to_string(t.tiles) + " output tiles of " + std::to_string(tile_m) + "x" +
           std::to_string(tile_n) + " for " + std::to_string(sm_count) + " SMs";
  if (!t.starved) t.text += " (" + format_fixed(t.waves, 2) + " waves)";
  return t;
}

LaunchFillSummary summarize_launch_fill(const LaunchFill& f, int sm_count) {
  const bool persistent = f.tiles > f.ctas;
  const std::int64_t resident = std::min(f.ctas, f.ctas_at_once);
  const bool halved = f.halved_wave_cost > 0.0;
  if (sm_count < 1 || f.ctas < 1 || f.ctas_at_once < 1 || f.tiles < f.ctas || !(f.halved_wave_cost >= 0.0) ||
      f.halved_wave_cost > 1.0 || (halved && !(persistent && f.tiles % resident != 0))) {
    std::ostringstream os;
    os << "summarize_launch_fill needs sm_count >= 1, ctas >= 1, ctas_at_once >= 1, tiles >= ctas, and "
          "halved_wave_cost in [0, 1], above 0 only for persistent CTAs whose tiles end in a partial wave: "
       << "sm_count = " << sm_count << ", ctas = " << f.ctas << ", ctas_at_once = " << f.ctas_at_once
       << ", tiles = " << f.tiles << ", halved_wave_cost = " << f.halved_wave_cost;
    throw InvalidArgument(os.str());
  }
  const bool rows_said = f.m != 0;
  if (rows_said && (f.m < 1 || f.tile_rows < 1 || f.row_tiles != ceil_div(f.m, f.tile_rows))) {
    std::ostringstream os;
    os << "summarize_launch_fill needs row_tiles = ceil(m / tile_rows) with m, tile_rows >= 1 where it says how "
          "the tiles cover M: m = "
       << f.m << ", tile_rows = " << f.tile_rows << ", row_tiles = " << f.row_tiles;
    throw InvalidArgument(os.str());
  }
  LaunchFillSummary s;
  s.waves = halved ? static_cast<double>(f.tiles / resident) + f.halved_wave_cost
                   : static_cast<double>(ceil_div(f.tiles, resident));
  const double slots = static_cast<double>(std::max<std::int64_t>(f.ctas_at_once, sm_count));
  s.idle_fraction = std::max(0.0, 1.0 - static_cast<double>(f.tiles) / (s.waves * slots));
  std::ostringstream os;
  os << "launch: " << f.ctas << (persistent ? " persistent CTAs over " + std::to_string(f.tiles) + " tiles" : " CTAs");
  if (f.ctas_at_once < f.ctas) os << ", " << f.ctas_at_once << " at once,";
  os << " for " << sm_count << " SMs, ";
  if (halved) {
    os << format_fixed(s.waves, 2) << " waves (the last of half tiles)";
  } else {
    os << static_cast<std::int64_t>(s.waves) << (s.waves == 1.0 ? " wave" : " waves");
  }
  os << ", " << format_fixed(s.idle_fraction * 100.0, 0) << "% of SM time idle";
  if (rows_said) {
    const std::int64_t covered = f.row_tiles * f.tile_rows;
    s.rows_past_m = 1.0 - static_cast<double>(f.m) / static_cast<double>(covered);
    if (s.rows_past_m >= kRowsPastMShown) {
      os << ", tiles of " << f.tile_rows << " rows cover " << covered << " for M = " << f.m << " ("
         << format_fixed(s.rows_past_m * 100.0, 0) << "% past M)";
    }
  }
  s.text = os.str();
  return s;
}

}  // namespace fp4gap
