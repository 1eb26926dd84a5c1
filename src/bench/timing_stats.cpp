// Host side of timing.hpp: sample statistics and the cold-cache rotation count.
#include <algorithm>
#include <cmath>
#include <sstream>

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

}  // namespace fp4gap
