// Host side of timing.hpp: sample statistics, the cold-cache rotation count, predecessor names.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>

#include "fp4gap/status.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

// Linear interpolation between closest ranks (the "type 7" quantile of R / numpy's default), so
// p20/median/p80 are stable for the small sample counts timing uses.
double quantile_sorted(const std::vector<double>& s, double q) {
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

}  // namespace

TimingStats summarize_samples(std::vector<double> samples_us) {
  if (samples_us.empty()) throw InvalidArgument("summarize_samples: no samples (at least 1 needed)");
  for (std::size_t i = 0; i < samples_us.size(); ++i) {
    if (!std::isfinite(samples_us[i]) || samples_us[i] < 0.0) {
      std::ostringstream os;
      os << "summarize_samples: sample " << i << " is not finite and >= 0: " << samples_us[i];
      throw InvalidArgument(os.str());
    }
  }
  std::sort(samples_us.begin(), samples_us.end());
  TimingStats t;
  t.median_us = quantile_sorted(samples_us, 0.5);
  t.p20_us = quantile_sorted(samples_us, 0.2);
  t.p80_us = quantile_sorted(samples_us, 0.8);
  t.samples = static_cast<int>(samples_us.size());
  return t;
}

int input_sets_for_cold_cache(double bytes_per_set, std::int64_t l2_bytes, int max_sets) {
  if (!(bytes_per_set > 0.0) || !std::isfinite(bytes_per_set)) {
    std::ostringstream os;
    os << "input_sets_for_cold_cache: bytes_per_set must be finite and > 0: " << bytes_per_set;
    throw InvalidArgument(os.str());
  }
  if (l2_bytes < 0) {
    std::ostringstream os;
    os << "input_sets_for_cold_cache: l2_bytes must be >= 0: " << l2_bytes;
    throw InvalidArgument(os.str());
  }
  if (max_sets < 1) {
    std::ostringstream os;
    os << "input_sets_for_cold_cache: max_sets must be >= 1: " << max_sets;
    throw InvalidArgument(os.str());
  }
  // Smallest n with n * bytes_per_set > 2 * L2: by the time a set is read again, at least 2x L2
  // of other data has streamed through the cache.
  const double needed = std::floor(2.0 * static_cast<double>(l2_bytes) / bytes_per_set) + 1.0;
  return static_cast<int>(std::min(needed, static_cast<double>(max_sets)));
}

SamplePlan plan_samples(const TimingOptions& o, int input_sets, double launch_us) {
  if (!(launch_us > 0.0) || !std::isfinite(launch_us)) {
    std::ostringstream os;
    os << "plan_samples: launch_us must be finite and > 0: " << launch_us;
    throw InvalidArgument(os.str());
  }
  if (input_sets < 1 || o.warmup_launches < 0 || o.graph_launches < 1 || o.graph_replays < 1 ||
      o.event_samples < 1 || o.min_samples < 1 || !(o.budget_us_per_mode > 0.0)) {
    std::ostringstream os;
    os << "plan_samples: input_sets, graph_launches, graph_replays, event_samples, min_samples >= 1, "
          "warmup_launches >= 0 and budget_us_per_mode > 0 required: input_sets = "
       << input_sets << ", graph_launches = " << o.graph_launches << ", graph_replays = " << o.graph_replays
       << ", event_samples = " << o.event_samples << ", min_samples = " << o.min_samples
       << ", warmup_launches = " << o.warmup_launches << ", budget_us_per_mode = " << o.budget_us_per_mode;
    throw InvalidArgument(os.str());
  }
  // How many launches fit the budget, as a double: a budget over a tiny launch_us exceeds int.
  const auto fitting = [&](double per_unit_us) { return std::floor(o.budget_us_per_mode / per_unit_us); };
  const auto clamp_count = [](double v, int lo, int hi) {
    return static_cast<int>(std::clamp(v, static_cast<double>(lo), static_cast<double>(std::max(lo, hi))));
  };
  SamplePlan plan;
  plan.more_warmup_launches = clamp_count(fitting(launch_us), 0, o.warmup_launches - 1);
  // Launches per graph go first: they only amortize the graph launch, which a slow launch does not need.
  plan.graph_launches = clamp_count(fitting(launch_us * o.graph_replays), input_sets, o.graph_launches);
  plan.graph_replays = clamp_count(fitting(launch_us * plan.graph_launches), std::min(o.min_samples, o.graph_replays),
                                   o.graph_replays);
  plan.event_samples = clamp_count(fitting(launch_us), std::min(o.min_samples, o.event_samples), o.event_samples);
  return plan;
}

DeviceSampleSummary summarize_device_samples(const std::vector<DeviceSample>& samples, double from_ms, double to_ms) {
  std::vector<double> clocks, powers;
  DeviceSampleSummary d;
  for (const DeviceSample& s : samples) {
    if (s.t_ms < from_ms || s.t_ms > to_ms) continue;
    ++d.samples;
    d.clock_event_reasons |= s.clock_event_reasons;
    if (s.sm_clock_mhz > 0) clocks.push_back(s.sm_clock_mhz);
    if (s.power_w > 0.0) powers.push_back(s.power_w);
  }
  if (!clocks.empty()) {
    std::sort(clocks.begin(), clocks.end());
    d.sm_clock_mhz = static_cast<int>(std::lround(quantile_sorted(clocks, 0.5)));
    d.min_sm_clock_mhz = static_cast<int>(clocks.front());
  }
  if (!powers.empty()) {
    std::sort(powers.begin(), powers.end());
    d.power_w = quantile_sorted(powers, 0.5);
  }
  return d;
}

std::string clock_event_reason_names(std::uint64_t bits) {
  if (bits == 0) return "none";
  // nvml.h's nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) bits.
  constexpr std::pair<std::uint64_t, std::string_view> kNames[] = {
      {0x1, "GPU idle"},           {0x2, "applications clocks setting"}, {0x4, "SW power cap"},
      {0x8, "HW slowdown"},        {0x10, "sync boost"},                 {0x20, "SW thermal slowdown"},
      {0x40, "HW thermal slowdown"}, {0x80, "HW power brake slowdown"},  {0x100, "display clock setting"},
  };
  std::string out;
  for (int b = 0; b < 64; ++b) {
    const std::uint64_t bit = std::uint64_t{1} << b;
    if ((bits & bit) == 0) continue;
    std::string name;
    for (const auto& [value, text] : kNames) {
      if (value == bit) name = text;
    }
    if (name.empty()) {
      std::ostringstream os;
      os << "0x" << std::hex << bit;
      name = os.str();
    }
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

void validate_sustain_options(const TimingOptions& o) {
  std::ostringstream os;
  if (!std::isfinite(o.sustain_ms) || o.sustain_ms < 0.0 || o.sustain_ms > 60000.0) {
    os << "the sustained mode runs 0 (off) to 60000 ms: sustain_ms = " << o.sustain_ms;
  } else if (!std::isfinite(o.clock_sample_ms) || o.clock_sample_ms < 1.0 || o.clock_sample_ms > 1000.0) {
    os << "NVML is read every 1 to 1000 ms: clock_sample_ms = " << o.clock_sample_ms;
  }
  if (!os.str().empty()) throw InvalidArgument(os.str());
}

namespace {
struct PredecessorName {
  Predecessor value;
  std::string_view name, description;
};
constexpr PredecessorName kPredecessors[] = {
    {Predecessor::itself, "itself", "the previous launch of the same GEMM"},
    {Predecessor::norm, "norm", "an elementwise kernel reading and writing the M x K bf16 activations"},
    {Predecessor::norm_pdl, "norm-pdl",
     "an elementwise kernel reading and writing the M x K bf16 activations that lets the next kernel launch at its start"},
    {Predecessor::quantize, "quantize", "fp4gap's NVFP4 quantizer of the M x K bf16 activations"},
};
}  // namespace

std::string_view to_string(Predecessor p) {
  for (const PredecessorName& e : kPredecessors) {
    if (e.value == p) return e.name;
  }
  return "?";
}

std::string_view predecessor_description(Predecessor p) {
  for (const PredecessorName& e : kPredecessors) {
    if (e.value == p) return e.description;
  }
  return "?";
}

bool predecessor_allows_early_launch(Predecessor p) {
  return p == Predecessor::norm_pdl || p == Predecessor::quantize;
}

std::vector<std::string_view> predecessor_names() {
  std::vector<std::string_view> names;
  for (const PredecessorName& e : kPredecessors) names.push_back(e.name);
  return names;
}

Predecessor parse_predecessor(std::string_view s) {
  std::string names;
  for (const PredecessorName& e : kPredecessors) {
    if (e.name == s) return e.value;
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  }
  throw InvalidArgument("unknown predecessor '" + std::string(s) + "' (one of: " + names + ")");
}

}  // namespace fp4gap
