#pragma once
// Timing GPU work (implemented in the CUDA library). Two modes, both always reported:
//  graph: CUDA-graph replays of back-to-back launches rotating through input sets that together
//         exceed 2x L2, so every launch reads cold weights; time per launch (the primary figure).
//  event: one launch between CUDA events after an L2 flush.
// Each mode's floor (an empty kernel timed the same way) is measured beside the results.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/backend.hpp"

namespace fp4gap {

struct TimingStats {
  double median_us = 0.0;
  double p20_us = 0.0;
  double p80_us = 0.0;
  int samples = 0;
};
TimingStats summarize_samples(std::vector<double> samples_us);  // host; median and p20/p80

struct TimingOptions {
  int warmup_launches = 5;
  int graph_launches = 32;   // launches captured in one graph (rotating input sets)
  int graph_replays = 20;    // samples of the graph mode
  int event_samples = 30;    // samples of the event mode
  // A slow launch (a naive reference at M = 8192 takes ~2 s) is warmed up less and timed with
  // fewer launches per graph, then fewer samples, so that each mode runs about this long; never
  // fewer than min_samples samples (or the counts above, when those are smaller).
  double budget_us_per_mode = 2e5;
  int min_samples = 5;
  // Sustained mode, off at 0 (`fp4gap gemm --sustain MS`): after the graph mode its graph is
  // replayed back to back for this long while a host thread reads the SM clock, the board power
  // and the driver's clock-event reasons through NVML every clock_sample_ms. Only the second half
  // counts: the first lets clocks and power settle under the load. The driver refreshes its
  // readings about every 100 ms, so below ~400 ms there is little to read.
  double sustain_ms = 0.0;
  double clock_sample_ms = 10.0;
};

// `o` with the sustained mode off: for timings that stay a burst whatever the caller asked (the
// read floor; a sequence behind another kernel, which the sustained mode does not time).
inline TimingOptions without_sustain(TimingOptions o) {
  o.sustain_ms = 0.0;
  return o;
}

// One NVML reading during the sustained mode, at t_ms after the replays began. A field the
// driver did not give is 0.
struct DeviceSample {
  double t_ms = 0.0;
  int sm_clock_mhz = 0;
  double power_w = 0.0;
  std::uint64_t clock_event_reasons = 0;  // NVML's nvmlClocksEventReason* bits
};

// The readings of [from_ms, to_ms]: medians of the clock and the power over the samples that have
// them, the lowest clock, and the union of the reasons. samples == 0 when none falls in the window.
struct DeviceSampleSummary {
  int samples = 0;
  int sm_clock_mhz = 0;      // median
  int min_sm_clock_mhz = 0;
  double power_w = 0.0;      // median
  std::uint64_t clock_event_reasons = 0;
};
DeviceSampleSummary summarize_device_samples(const std::vector<DeviceSample>& samples, double from_ms, double to_ms);

// NVML's clock-event reason bits by name ("SW power cap, HW thermal slowdown"), in bit order;
// "none" for 0; a bit NVML has not documented is named by its value ("0x200").
std::string clock_event_reason_names(std::uint64_t bits);

// Throws InvalidArgument naming the rule when sustain_ms is not finite and within [0, 60000] or
// clock_sample_ms is not finite and within [1, 1000].
void validate_sustain_options(const TimingOptions& options);

// The sustained mode's result: the graph's time per launch over the counted half of the window
// (events around it, replays kept at most a few ahead of the host) and what NVML read meanwhile.
struct SustainedTiming {
  double per_launch_us = 0.0;
  double window_ms = 0.0;  // the counted half, as the events measured it
  int replays = 0;         // graph replays in it
  DeviceSampleSummary device;  // device.samples == 0 without NVML
};

// The counts time_launch uses for a launch measured at launch_us after warm-up (host logic).
struct SamplePlan {
  int more_warmup_launches = 0;  // after the first warm-up launch and the sizing launch
  int graph_launches = 0;  // >= input_sets: every set is read once per replay
  int graph_replays = 0;
  int event_samples = 0;
};
SamplePlan plan_samples(const TimingOptions& options, int input_sets, double launch_us);

struct Timing {
  TimingStats graph;
  TimingStats event;
  double graph_floor_us = 0.0;
  double event_floor_us = 0.0;
  int sm_clock_mhz = 0;           // read through NVML after timing, 0 when unavailable
  std::optional<SustainedTiming> sustained;  // TimingOptions::sustain_ms > 0 only
  std::vector<std::string> warnings;  // e.g. clock throttling
};

// How many input sets a runner needs so that the sets together exceed 2x L2.
int input_sets_for_cold_cache(double bytes_per_set, std::int64_t l2_bytes, int max_sets = 64);

// What runs right before each timed launch of a GEMM (`fp4gap gemm --after`, docs/GPU.md):
//  itself:   the same GEMM, back to back (the default): a programmatically launched GEMM overlaps
//            its launch and first loads with its own previous launch.
//  norm:     an elementwise kernel reading and writing the M x K bf16 activations, the shape of an
//            RMSNorm or SiLU-and-mul before a GEMM in a serving graph, launched plainly.
//  norm_pdl: the same kernel allowing the next launch at its start (griddepcontrol), as stacks
//            that use programmatic dependent launches write theirs.
//  quantize: fp4gap's NVFP4 activation quantizer of those activations (given global scale,
//            swizzled scales): the sequence of a W4A4 layer.
enum class Predecessor { itself, norm, norm_pdl, quantize };
std::string_view to_string(Predecessor p);          // "itself", "norm", "norm-pdl", "quantize"
Predecessor parse_predecessor(std::string_view s);  // throws InvalidArgument listing the names
std::vector<std::string_view> predecessor_names();    // in enum order, as parse_predecessor reads them
std::string_view predecessor_description(Predecessor p);  // one phrase, for report headers
// Whether `p` lets the next kernel launch while it runs (norm_pdl, the quantizer): a GEMM timed
// behind it is asked to launch programmatically (GemmRunner::request_programmatic_launch), as a
// stack that writes such predecessors launches its GEMMs.
bool predecessor_allows_early_launch(Predecessor p);

// CUDA library: the elementwise kernel of Predecessor::norm (allow_next_launch false) and norm_pdl
// (true): out = in over `elements` bf16 values, no shared memory, on `stream` (a cudaStream_t).
void launch_norm_stand_in(const std::uint16_t* in, std::uint16_t* out, std::int64_t elements, bool allow_next_launch,
                          const DeviceContext& device, void* stream);

// CUDA library: times any launch in both modes. launch(set, stream) enqueues one launch reading
// input set `set` (0 <= set < input_sets) on `stream` (a cudaStream_t); it must be capturable
// into a CUDA graph (no synchronization, no allocation).
Timing time_launch(const std::function<void(int set, void* stream)>& launch, int input_sets,
                   const DeviceContext& device, const TimingOptions& options);
// Times a prepared GPU runner (time_launch over runner.run).
Timing time_runner(GemmRunner& runner, const DeviceContext& device, const TimingOptions& options);
// Times a prepared GPU runner of `problem` behind `predecessor` (itself: time_runner): both modes
// of [predecessor, run] over the runner's input sets, the predecessor's activations rotated with
// them, minus the predecessor timed alone the same way: what the GEMM adds to that sequence
// (percentiles shifted by the predecessor's median). Throws InvalidArgument for quantize when
// K % 16 != 0 (the quantizer's rule). Behind another kernel the sustained mode is not run.
Timing time_runner_after(GemmRunner& runner, const GemmProblem& problem, Predecessor predecessor,
                         const DeviceContext& device, const TimingOptions& options);

}  // namespace fp4gap
