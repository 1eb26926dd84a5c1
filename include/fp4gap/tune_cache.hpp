#pragma once
// Measured plans (`fp4gap tune`) and their on-disk cache. The prefill kernels' policy ranks plans
// with a cost model fitted on one card (the H200); on another card, or at a shape the model reads
// wrongly, a plan it ranks lower can be faster (PERF-LOG run 120: on an H100, W2 at M = 96 / 128,
// m64 unsplit is 3.7 / 7.8% faster than the pick). `fp4gap tune` verifies and times the policy's
// best-ranked plans on the device at hand and records every one of them here, keyed by that
// device and the exact problem, so no measured plan is lost; the prefill backends then run the
// fastest verified plan where the active cache has one. Plain C++, host-tested.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/dispatch.hpp"
#include "fp4gap/problem.hpp"

namespace fp4gap::tune {

// A cache file's format version; load() refuses any other.
inline constexpr int kCacheVersion = 1;

// Which GPU a measurement belongs to: a plan measured on one card is never used on another.
struct DeviceKey {
  std::string name;  // e.g. "NVIDIA H200"
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  bool operator==(const DeviceKey&) const = default;
};
DeviceKey device_key(const DeviceContext& device);

// The problem a measurement belongs to, exactly: the backend that runs it (its formats) and the
// shape. Another M is another problem (the plans' tile counts change with it).
struct ProblemKey {
  std::string backend;  // e.g. "fp4gap-prefill-w4a16"
  std::int64_t m = 0, n = 0, k = 0;
  OutputType out_type = OutputType::bf16;
  bool operator==(const ProblemKey&) const = default;
};

// One plan as `fp4gap tune` ran it.
struct MeasuredPlan {
  std::string config;     // prefill::TileConfig::name()
  int split_k = 1;
  bool workspace_reduction = false;  // split-K partials added in a global workspace, not a cluster
  // The launch where it is not the configuration's own (prefill::launches_programmatically): true,
  // a programmatic dependent launch; false, a plain one; nullopt, the configuration's.
  std::optional<bool> programmatic;
  double predicted_us = 0.0;         // the policy's cost model
  bool passed = false;               // verified against the reference (then timed)
  std::optional<double> graph_us;    // graph-timed median, cold weights
  std::optional<double> event_us;
  std::string note;                  // why not passed, or the runner's own config line
};

// Where both kernel families serve the problem (M <= decode::kMaxM): the decode kernel and the
// prefill kernel (the entry's fastest verified plan, else the policy's pick) timed in one run
// behind `after`, as a serving graph runs a GEMM and as the dispatching backends' boundary was fit
// (a norm for W4A16, the activation quantizer for W4A4; include/fp4gap/dispatch.hpp).
struct FamilyTiming {
  std::string after;           // timing.hpp's predecessor name, e.g. "norm"
  std::string decode_config;   // the decode runner's config line
  std::string prefill_config;  // the prefill plan timed
  std::optional<double> decode_us, prefill_us;  // graph-timed medians; nullopt: not verified or not timed
  // The faster of the two; nullopt when either time is missing.
  std::optional<KernelFamily> faster() const;
};

struct Entry {
  DeviceKey device;
  ProblemKey problem;
  std::string policy_config;  // the policy's pick, as measured[] names it
  int policy_split_k = 1;
  bool policy_workspace_reduction = false;
  std::vector<MeasuredPlan> measured;
  // What ran before each timed launch of the measured plans (timing.hpp's predecessor name,
  // `fp4gap tune --after`): "itself", back to back, where a programmatic launch overlaps the GEMM's
  // own previous launch; "norm" as a layer runs it (PERF-LOG run 142: the wide tiles' launch mode
  // ranks differently there).
  std::string timed_after = "itself";
  std::optional<FamilyTiming> families;  // absent where only the prefill kernel serves the problem
  std::string build;          // fp4gap commit that measured it (build_info)
  std::string driver;         // CUDA driver version

  // Index into measured of the fastest plan that passed and was timed; nullopt when none.
  std::optional<std::size_t> best() const;
  // Index of the policy's pick in measured, launched as its configuration launches; nullopt when
  // it was not measured.
  std::optional<std::size_t> policy() const;
};

class Cache {
 public:
  // Throws InvalidArgument naming the file and the rule broken: not JSON, another format version,
  // a missing or mistyped field (with the entry's index).
  static Cache load(const std::string& path);
  static Cache from_json_text(const std::string& text, const std::string& origin);
  std::string to_json_text() const;
  // Writes a temporary file beside `path` and renames it over `path`, so an interrupted save
  // leaves the old cache whole; creates the directory. Throws RuntimeError on I/O failure.
  void save(const std::string& path) const;

  const Entry* find(const DeviceKey& device, const ProblemKey& problem) const;
  // Adds `entry`, replacing the one with the same device and problem.
  void put(Entry entry);
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// The cache the prefill backends consult. Empty until use_cache_file() or, at the first call of
// active_cache(), the environment variable FP4GAP_TUNE_CACHE names a file. A file that cannot be
// loaded throws from use_cache_file(); from the environment it is reported by active_cache_note()
// and no cache is used.
void use_cache_file(const std::string& path);
void clear_active_cache();
const Cache* active_cache();
std::string active_cache_note();          // one line for the report header; empty without one

// The kernel family the active cache measured faster for exactly this problem on `device` (the
// entry of fp4gap-prefill-w4a16 / -w4a4 holding FamilyTiming), with a note saying so; nullopt:
// no such measurement. Only the exact M: the decode kernel's time grows with M where the prefill
// tile's does not, so no other M stands in.
struct TunedFamily {
  KernelFamily family = KernelFamily::decode;
  std::string note;  // e.g. "measured after norm: decode 8.10 us, prefill 9.02 us"
};
std::optional<TunedFamily> tuned_family(bool w4a4, std::int64_t m, std::int64_t n, std::int64_t k, OutputType out,
                                        const DeviceContext& device);

}  // namespace fp4gap::tune
