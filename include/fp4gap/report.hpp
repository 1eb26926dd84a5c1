#pragma once
// One row per (problem, backend) of a GEMM run, and its writers: an aligned text table (short,
// stable columns), CSV (stable header, documented in docs/CLI.md) and JSON.
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/roofline.hpp"

namespace fp4gap {

enum class RowStatus {
  passed,           // verified against the reference (then timed where it runs on the device)
  incorrect,        // BROKEN: failed verification, never timed
  not_supported,    // the backend declined the problem on this device, with a reason
  invalid_problem,  // the problem breaks a rule every backend shares
  error,            // the backend threw (CUDA error, out of memory, ...)
};
std::string_view to_string(RowStatus s);

struct GemmRow {
  std::string backend;
  std::string shape_name;  // preset name, e.g. "glm5.W13"; empty for plain shapes
  std::string problem;     // GemmProblem::label()
  std::int64_t m = 0, n = 0, k = 0;
  std::string a_format, b_format, out_type;
  RowStatus status = RowStatus::passed;
  std::string reason;      // why not supported / invalid / incorrect / error
  std::string config;      // the runner's chosen tactic or tile
  std::string reference;   // "cpu" or "gpu-reference": what the output was checked against
  // What the runner multiplies, e.g. "e4m3 x e4m3" (empty when it was not prepared), and whether
  // those operands round the problem's (holds_exactly): such a row is verified against the product
  // of its own operands, a different product from the problem's.
  std::string operands;
  bool rounds_operands = false;

  // Primary timing. mode "graph": CUDA-graph replays, per launch, cold weights (GPU backends);
  // "host": std::chrono around run() (CPU backends); empty when not timed.
  std::string mode;
  std::optional<double> median_us, p20_us, p80_us;
  int samples = 0;
  std::optional<double> event_median_us, event_p20_us, event_p80_us;  // GPU only
  std::optional<double> floor_us;        // empty kernel timed like the primary figure
  std::optional<double> event_floor_us;
  std::optional<int> sm_clock_mhz;
  // The sustained mode (`fp4gap gemm --sustain MS`, timing.hpp): time per launch over the last
  // half of MS of back-to-back replays, that half's length, and NVML's median SM clock and board
  // power and the clock-event reasons in it ("none", or e.g. "SW power cap"; empty without NVML).
  std::optional<double> sustained_us, sustained_ms;
  std::optional<int> sustained_sm_clock_mhz;
  std::optional<double> sustained_power_w;
  std::string sustained_clock_reasons;
  std::optional<double> sustained_vs_cublas_bf16;  // cublas-bf16's sustained_us / this one, same run

  // From the median and the bytes/FLOPs of what the runner really multiplies.
  std::optional<double> tflops, gbps;
  std::optional<double> roof_us;             // roofline time of the runner's own operands
  std::optional<double> pct_of_roof;         // roof_us / median_us * 100
  std::optional<double> pct_compute_roof;    // compute roof / median * 100
  std::optional<double> pct_memory_roof;     // memory roof / median * 100
  std::optional<double> pct_of_problem_roof; // roof of the problem's own formats / median * 100
  // The read floor: `fp4gap peak`'s read kernel streaming the same bytes as roof_us counts, timed
  // like the row (graph, cold copies), and read_us / median_us * 100. GPU rows only.
  std::optional<double> read_us;
  std::optional<double> pct_of_read;
  std::string bound;                         // memory / compute / launch_latency
  std::string bound_reason;
  std::optional<double> speedup_vs_cublas_bf16;  // cublas-bf16 median / this median, same run
  std::optional<double> max_abs_error, max_rel_error;
  std::string warnings;  // "; "-separated
  std::string repro;     // command line that reruns this row alone
};

// Text formatting shared by the reports (no locale, no fmt).
std::string format_fixed(double v, int decimals);
std::string format_bytes(double bytes);   // "7.1 MB", "60.0 MiB" style: decimal units, 1 decimal
std::string format_us(double seconds);    // "1.7 us"
std::string format_rate(double per_s, std::string_view unit);  // "4.27 TB/s", "745 TFLOP/s"

// What the run measured on: written above the table, embedded in the JSON.
struct RunContext {
  DeviceContext device;
  std::optional<Ceilings> ceilings;
  std::vector<std::string> notes;  // e.g. "ceilings: datasheet (measurement failed: ...)"
};
std::vector<std::string> describe_device(const DeviceContext& device);
// "no CUDA device: <reason>" (the reason's own "no CUDA device: " prefix is not repeated).
std::string describe_unavailable(const DeviceContext& device);
std::string describe_ceilings(const Ceilings& c);

// Writers. The table lists short columns, then per-row notes (reasons, bounds, warnings) and one
// repro line per row, numbered like the table's "#" column.
void write_table(std::ostream& out, const std::vector<GemmRow>& rows);
// The verdict of `fp4gap diagnose`, one line per shape (rows grouped by shape name and problem).
std::vector<std::string> shape_verdicts(const std::vector<GemmRow>& rows);

std::string csv_header();
void write_csv(std::ostream& out, const std::vector<GemmRow>& rows);  // header + one line a row
std::string to_json(const RunContext& context, const std::vector<GemmRow>& rows);  // indented

// Ceilings as a JSON document (fp4gap peak --output) and back (fp4gap gemm --ceilings FILE).
std::string ceilings_to_json(const Ceilings& c, const std::string& device_name);
// Throws InvalidArgument naming the field when a rate is missing, not a number, or negative,
// or when memory_bytes_per_s or bf16_flops_per_s is not > 0.
Ceilings ceilings_from_json(std::string_view text);

}  // namespace fp4gap
