#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "fp4gap/status.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

TEST(SummarizeSamples, OddCountMedianIsMiddleElement) {
  const TimingStats t = summarize_samples({5.0, 1.0, 3.0, 4.0, 2.0});
  EXPECT_EQ(t.samples, 5);
  EXPECT_DOUBLE_EQ(t.median_us, 3.0);
  // Type-7 quantiles of 1..5: position q*(n-1).
  EXPECT_DOUBLE_EQ(t.p20_us, 1.8);
  EXPECT_DOUBLE_EQ(t.p80_us, 4.2);
}

TEST(SummarizeSamples, EvenCountMedianInterpolates) {
  const TimingStats t = summarize_samples({10.0, 2.0, 4.0, 8.0});
  EXPECT_DOUBLE_EQ(t.median_us, 6.0);
  EXPECT_DOUBLE_EQ(t.p20_us, 2.0 + 0.6 * 2.0);  // position 0.6 between 2 and 4
  EXPECT_DOUBLE_EQ(t.p80_us, 8.0 + 0.4 * 2.0);  // position 2.4 between 8 and 10
}

TEST(SummarizeSamples, SingleSampleIsEveryQuantile) {
  const TimingStats t = summarize_samples({7.5});
  EXPECT_EQ(t.samples, 1);
  EXPECT_DOUBLE_EQ(t.median_us, 7.5);
  EXPECT_DOUBLE_EQ(t.p20_us, 7.5);
  EXPECT_DOUBLE_EQ(t.p80_us, 7.5);
}

TEST(SummarizeSamples, QuantilesAreOrderedForUnsortedInput) {
  std::vector<double> s;
  for (int i = 0; i < 31; ++i) s.push_back(static_cast<double>((i * 17) % 31));  // a permutation of 0..30
  const TimingStats t = summarize_samples(s);
  EXPECT_DOUBLE_EQ(t.median_us, 15.0);
  EXPECT_DOUBLE_EQ(t.p20_us, 6.0);
  EXPECT_DOUBLE_EQ(t.p80_us, 24.0);
  EXPECT_LE(t.p20_us, t.median_us);
  EXPECT_LE(t.median_us, t.p80_us);
}

TEST(SummarizeSamples, RejectsEmptyAndNonFinite) {
  EXPECT_THROW(summarize_samples({}), InvalidArgument);
  EXPECT_THROW(summarize_samples({1.0, std::numeric_limits<double>::quiet_NaN()}), InvalidArgument);
  EXPECT_THROW(summarize_samples({std::numeric_limits<double>::infinity()}), InvalidArgument);
  EXPECT_THROW(summarize_samples({-1.0}), InvalidArgument);
}

TEST(InputSetsForColdCache, SetsTogetherExceedTwiceL2) {
  const std::int64_t l2 = 60 * 1024 * 1024;  // H200-like
  for (double bytes : {1e3, 4.5e6, 7.1e6, 25e6, 119e6, 121e6, 500e6}) {
    const int n = input_sets_for_cold_cache(bytes, l2, 1 << 20);
    EXPECT_GT(n * bytes, 2.0 * static_cast<double>(l2)) << "bytes_per_set=" << bytes;
    // Minimal: one set fewer would not exceed 2x L2.
    if (n > 1) {
      EXPECT_LE((n - 1) * bytes, 2.0 * static_cast<double>(l2)) << "bytes_per_set=" << bytes;
    }
  }
}

TEST(InputSetsForColdCache, ExactBoundaryNeedsOneMore) {
  // 4 sets of exactly L2/2 equal 2x L2: not more than it, so 5.
  EXPECT_EQ(input_sets_for_cold_cache(512.0, 1024, 64), 5);
  EXPECT_EQ(input_sets_for_cold_cache(4096.0, 1024, 64), 1);
  EXPECT_EQ(input_sets_for_cold_cache(100.0, 0, 64), 1);
}

TEST(InputSetsForColdCache, ClampedToMaxSets) {
  EXPECT_EQ(input_sets_for_cold_cache(1.0, 1 << 30, 64), 64);
  EXPECT_EQ(input_sets_for_cold_cache(1.0, 1 << 30, 3), 3);
}

TEST(InputSetsForColdCache, RejectsBadArguments) {
  EXPECT_THROW(input_sets_for_cold_cache(0.0, 1024, 64), InvalidArgument);
  EXPECT_THROW(input_sets_for_cold_cache(-5.0, 1024, 64), InvalidArgument);
  EXPECT_THROW(input_sets_for_cold_cache(std::numeric_limits<double>::quiet_NaN(), 1024, 64), InvalidArgument);
  EXPECT_THROW(input_sets_for_cold_cache(10.0, -1, 64), InvalidArgument);
  EXPECT_THROW(input_sets_for_cold_cache(10.0, 1024, 0), InvalidArgument);
}

TEST(PlanSamples, FastLaunchesKeepEveryCount) {
  const TimingOptions o;  // 32 launches x 20 replays, 30 event samples, 0.2 s per mode
  for (const double us : {1.0, 10.0, 300.0}) {
    const SamplePlan p = plan_samples(o, 3, us);
    EXPECT_EQ(p.graph_launches, 32) << us;
    EXPECT_EQ(p.graph_replays, 20) << us;
    EXPECT_EQ(p.event_samples, 30) << us;
    EXPECT_EQ(p.more_warmup_launches, o.warmup_launches - 1) << us;
  }
  // More input sets than launches: every set is read once per replay.
  EXPECT_EQ(plan_samples(o, 40, 1.0).graph_launches, 40);
}

TEST(PlanSamples, SlowLaunchesShortenGraphsFirstThenSamples) {
  const TimingOptions o;
  // 1 ms: 200 ms / (1 ms x 20 replays) = 10 launches per graph, replays kept.
  SamplePlan p = plan_samples(o, 2, 1000.0);
  EXPECT_EQ(p.graph_launches, 10);
  EXPECT_EQ(p.graph_replays, 20);
  EXPECT_EQ(p.event_samples, 30);
  // 20 ms: graphs down to the input sets, 200 / (20 x 2) = 5 replays, 10 event samples.
  p = plan_samples(o, 2, 20000.0);
  EXPECT_EQ(p.graph_launches, 2);
  EXPECT_EQ(p.graph_replays, 5);
  EXPECT_EQ(p.event_samples, 10);
  EXPECT_EQ(p.more_warmup_launches, o.warmup_launches - 1);  // 10 fit the budget
  // 2 s: the minimum of samples, whatever the budget says.
  p = plan_samples(o, 1, 2e6);
  EXPECT_EQ(p.more_warmup_launches, 0);
  EXPECT_EQ(p.graph_launches, 1);
  EXPECT_EQ(p.graph_replays, o.min_samples);
  EXPECT_EQ(p.event_samples, o.min_samples);
  // Requested counts below the minimum stay as requested.
  TimingOptions few;
  few.graph_replays = 3;
  few.event_samples = 2;
  p = plan_samples(few, 1, 2e6);
  EXPECT_EQ(p.graph_replays, 3);
  EXPECT_EQ(p.event_samples, 2);
}

TEST(PlanSamples, RejectsBadArguments) {
  const TimingOptions o;
  EXPECT_THROW(plan_samples(o, 1, 0.0), InvalidArgument);
  EXPECT_THROW(plan_samples(o, 1, std::numeric_limits<double>::infinity()), InvalidArgument);
  EXPECT_THROW(plan_samples(o, 0, 10.0), InvalidArgument);
  TimingOptions bad;
  bad.min_samples = 0;
  EXPECT_THROW(plan_samples(bad, 1, 10.0), InvalidArgument);
  TimingOptions negative;
  negative.warmup_launches = -1;
  EXPECT_THROW(plan_samples(negative, 1, 10.0), InvalidArgument);
}

TEST(DeviceSamples, OnlyTheWindowCountsAndMissingFieldsAreLeftOut) {
  const std::vector<DeviceSample> samples = {
      {10.0, 1980, 300.0, 0x1},   // before the window: idle clocks, not counted
      {60.0, 1710, 690.0, 0x4},
      {70.0, 0, 0.0, 0x0},        // a reading that failed: counted, but gives no clock or power
      {80.0, 1650, 700.0, 0x4},
      {90.0, 1620, 705.0, 0x8},
      {100.0, 1600, 710.0, 0x0},  // the window's end is included
      {110.0, 1300, 720.0, 0x40}, // after it
  };
  const DeviceSampleSummary d = summarize_device_samples(samples, 50.0, 100.0);
  EXPECT_EQ(d.samples, 5);
  EXPECT_EQ(d.sm_clock_mhz, 1635);  // median of 1600, 1620, 1650, 1710
  EXPECT_EQ(d.min_sm_clock_mhz, 1600);
  EXPECT_DOUBLE_EQ(d.power_w, 702.5);
  EXPECT_EQ(d.clock_event_reasons, 0xCu);
}

TEST(DeviceSamples, AnEmptyWindowSaysSo) {
  const DeviceSampleSummary d = summarize_device_samples({{5.0, 1980, 100.0, 0x1}}, 10.0, 20.0);
  EXPECT_EQ(d.samples, 0);
  EXPECT_EQ(d.sm_clock_mhz, 0);
  EXPECT_EQ(d.power_w, 0.0);
  EXPECT_EQ(d.clock_event_reasons, 0u);
}

TEST(DeviceSamples, ReasonBitsAreNamedInBitOrder) {
  EXPECT_EQ(clock_event_reason_names(0), "none");
  EXPECT_EQ(clock_event_reason_names(0x4), "SW power cap");
  EXPECT_EQ(clock_event_reason_names(0x4 | 0x40 | 0x1), "GPU idle, SW power cap, HW thermal slowdown");
  EXPECT_EQ(clock_event_reason_names(0x80 | 0x200), "HW power brake slowdown, 0x200");
}

TEST(DeviceSamples, SustainOptionsAreChecked) {
  TimingOptions o;
  EXPECT_NO_THROW(validate_sustain_options(o));  // off by default
  o.sustain_ms = 2000.0;
  EXPECT_NO_THROW(validate_sustain_options(o));
  o.sustain_ms = -1.0;
  try {
    validate_sustain_options(o);
    ADD_FAILURE() << "a negative sustain_ms was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("0 (off) to 60000 ms: sustain_ms = -1"), std::string::npos) << e.what();
  }
  o.sustain_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(validate_sustain_options(o), InvalidArgument);
  o.sustain_ms = 1000.0;
  o.clock_sample_ms = 0.5;
  EXPECT_THROW(validate_sustain_options(o), InvalidArgument);
}

}  // namespace
}  // namespace fp4gap
