// The tune cache (measured plans on disk) and how the prefill backends resolve a cached plan:
// plain C++, no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>

#include "fp4gap/prefill.hpp"
#include "fp4gap/status.hpp"
#include "fp4gap/tune_cache.hpp"
#include "test_support.hpp"

namespace fp4gap::tune {
namespace {

using test::h200_context;

std::string temp_path(const std::string& name) { return test::scratch_file("tune_cache_test", name); }

MeasuredPlan measured(const prefill::TileConfig& c, int split, bool workspace, double predicted,
                      std::optional<double> graph, bool passed = true) {
  MeasuredPlan p;
  p.config = c.name();
  p.split_k = split;
  p.workspace_reduction = workspace;
  p.predicted_us = predicted;
  p.passed = passed;
  p.graph_us = graph;
  if (graph) p.event_us = *graph + 1.0;
  p.note = passed ? "" : "BROKEN: max error 3 ulp";
  return p;
}

// W2 at M = 128 as run 120 measured it on an H100: the policy's m128 split 2 behind m64 G4 unsplit.
Entry w2_entry(const DeviceContext& device) {
  const auto& configs = prefill::tile_configs();
  Entry e;
  e.device = device_key(device);
  e.problem = ProblemKey{"fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16};
  e.policy_config = configs[1].name();
  e.policy_split_k = 2;
  e.measured.push_back(measured(configs[1], 2, false, 11.2, 11.70));
  e.measured.push_back(measured(configs[9], 1, false, 11.6, 10.79));
  e.measured.push_back(measured(configs[2], 1, false, 12.0, 9.00, /*passed=*/false));
  e.measured.push_back(measured(configs[6], 2, false, 11.4, std::nullopt));
  e.build = "abc123";
  e.driver = "13.0";
  return e;
}

TEST(TuneCache, BestIsTheFastestVerifiedPlanAndNeverABrokenOne) {
  const Entry e = w2_entry(h200_context());
  ASSERT_TRUE(e.best().has_value());
  // The broken plan's 9.00 us is faster, but it computed a wrong result.
  EXPECT_EQ(*e.best(), 1u);
  ASSERT_TRUE(e.policy().has_value());
  EXPECT_EQ(*e.policy(), 0u);
  Entry none = e;
  for (MeasuredPlan& p : none.measured) p.passed = false;
  EXPECT_FALSE(none.best().has_value());
}

TEST(TuneCache, JsonRoundTripKeepsEveryMeasuredPlan) {
  Cache cache;
  cache.put(w2_entry(h200_context()));
  const Cache back = Cache::from_json_text(cache.to_json_text(), "test");
  ASSERT_EQ(back.entries().size(), 1u);
  const Entry& e = back.entries()[0];
  const Entry want = w2_entry(h200_context());
  EXPECT_EQ(e.device, want.device);
  EXPECT_EQ(e.problem, want.problem);
  EXPECT_EQ(e.policy_config, want.policy_config);
  EXPECT_EQ(e.policy_split_k, 2);
  ASSERT_EQ(e.measured.size(), want.measured.size());
  for (std::size_t i = 0; i < e.measured.size(); ++i) {
    EXPECT_EQ(e.measured[i].config, want.measured[i].config) << i;
    EXPECT_EQ(e.measured[i].split_k, want.measured[i].split_k) << i;
    EXPECT_EQ(e.measured[i].passed, want.measured[i].passed) << i;
    EXPECT_EQ(e.measured[i].graph_us, want.measured[i].graph_us) << i;
    EXPECT_EQ(e.measured[i].event_us, want.measured[i].event_us) << i;
    EXPECT_EQ(e.measured[i].note, want.measured[i].note) << i;
  }
  EXPECT_EQ(e.build, "abc123");
  EXPECT_EQ(e.driver, "13.0");
  EXPECT_FALSE(e.families.has_value());
}

void expect_load_error(const std::string& text, const std::string& needle) {
  try {
    static_cast<void>(Cache::from_json_text(text, "tune cache x.json"));
    ADD_FAILURE() << "no error for: " << text;
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tune cache x.json"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

FamilyTiming families(std::optional<double> decode_us, std::optional<double> prefill_us) {
  FamilyTiming t;
  t.after = "norm";
  t.decode_config = "decode m16 tile";
  t.prefill_config = "sm90a m16 split 8";
  t.decode_us = decode_us;
  t.prefill_us = prefill_us;
  return t;
}

TEST(TuneCache, FamilyTimingsRoundTripAndOlderCachesWithoutThemLoad) {
  Entry with = w2_entry(h200_context());
  with.families = families(8.10, 9.02);
  Cache cache;
  cache.put(with);
  const std::string text = cache.to_json_text();
  const Entry back = Cache::from_json_text(text, "test").entries()[0];
  ASSERT_TRUE(back.families.has_value());
  EXPECT_EQ(back.families->after, "norm");
  EXPECT_EQ(back.families->decode_config, "decode m16 tile");
  EXPECT_EQ(back.families->prefill_config, "sm90a m16 split 8");
  EXPECT_EQ(back.families->decode_us, 8.10);
  EXPECT_EQ(back.families->prefill_us, 9.02);
  // A cache written before the family timings existed has no such field.
  std::string older = text;
  const std::size_t at = older.find("\"families\"");
  ASSERT_NE(at, std::string::npos);
  older.erase(at, older.find("\"build\"", at) - at);
  EXPECT_FALSE(Cache::from_json_text(older, "older").entries()[0].families.has_value());
  std::string mistyped = text;
  mistyped.replace(mistyped.find("\"decode_us\": 8.1"), 16, "\"decode_us\": \"8\"");
  expect_load_error(mistyped, "entry 0: field \"decode_us\" must be a number");
}

TEST(TuneCache, TheFasterFamilyNeedsBothTimes) {
  EXPECT_EQ(families(8.10, 9.02).faster(), KernelFamily::decode);
  EXPECT_EQ(families(9.02, 8.10).faster(), KernelFamily::prefill);
  EXPECT_EQ(families(8.10, 8.10).faster(), KernelFamily::decode);
  EXPECT_FALSE(families(std::nullopt, 8.10).faster().has_value());
  EXPECT_FALSE(families(8.10, std::nullopt).faster().has_value());
}

TEST(TuneCache, TunedFamilyIsTheMeasuredOneForExactlyThisProblem) {
  const DeviceContext device = h200_context();
  Entry e = w2_entry(device);  // W2 at M = 128 ...
  e.problem.m = 20;            // ... moved to M = 20, where both families serve
  e.families = families(8.10, 9.02);
  Entry w4a4 = e;
  w4a4.problem.backend = "fp4gap-prefill-w4a4";
  w4a4.families = families(std::nullopt, 9.02);  // the decode kernel did not pass
  Cache cache;
  cache.put(e);
  cache.put(w4a4);
  const std::string path = temp_path("families.json");
  cache.save(path);
  clear_active_cache();
  EXPECT_FALSE(tuned_family(false, 20, 6144, 2048, OutputType::bf16, device).has_value());
  use_cache_file(path);
  const std::optional<TunedFamily> f = tuned_family(false, 20, 6144, 2048, OutputType::bf16, device);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->family, KernelFamily::decode);
  EXPECT_EQ(f->note, "measured after norm: decode 8.10 us, prefill 9.02 us");
  // Another M (the decode kernel's time grows with M), card or output; a timing missing one side.
  EXPECT_FALSE(tuned_family(false, 19, 6144, 2048, OutputType::bf16, device).has_value());
  EXPECT_FALSE(tuned_family(false, 20, 6144, 2048, OutputType::f32, device).has_value());
  DeviceContext h100 = device;
  h100.name = "NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(tuned_family(false, 20, 6144, 2048, OutputType::bf16, h100).has_value());
  EXPECT_FALSE(tuned_family(true, 20, 6144, 2048, OutputType::bf16, device).has_value());
  clear_active_cache();
}

TEST(TuneCache, PutReplacesTheSameDeviceAndProblemOnly) {
  Cache cache;
  const Entry first = w2_entry(h200_context());
  cache.put(first);
  Entry other_m = first;
  other_m.problem.m = 96;
  cache.put(other_m);
  Entry other_card = first;
  other_card.device.name = "NVIDIA H100 80GB HBM3";
  cache.put(other_card);
  ASSERT_EQ(cache.entries().size(), 3u);
  Entry again = first;
  again.measured.pop_back();
  cache.put(again);
  ASSERT_EQ(cache.entries().size(), 3u);
  const Entry* found = cache.find(first.device, first.problem);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->measured.size(), first.measured.size() - 1);
  // Another card, another problem or another output type finds nothing of this entry.
  ProblemKey f32 = first.problem;
  f32.out_type = OutputType::f32;
  EXPECT_EQ(cache.find(first.device, f32), nullptr);
  DeviceKey fewer_sms = first.device;
  fewer_sms.sm_count = 114;
  EXPECT_EQ(cache.find(fewer_sms, first.problem), nullptr);
}

TEST(TuneCache, SaveThenLoadAndSaveReplacesTheFileWhole) {
  const std::string path = temp_path("sub/dir/cache.json");
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  Cache cache;
  cache.put(w2_entry(h200_context()));
  cache.save(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const Cache loaded = Cache::load(path);
  ASSERT_EQ(loaded.entries().size(), 1u);
  Cache bigger = loaded;
  Entry other = w2_entry(h200_context());
  other.problem.m = 256;
  bigger.put(other);
  bigger.save(path);
  EXPECT_EQ(Cache::load(path).entries().size(), 2u);
}

TEST(TuneCache, LoadErrorsNameTheFileAndTheRuleBroken) {
  expect_load_error("{ not json", "not a JSON tune cache");
  expect_load_error(R"({"version": 99, "entries": []})", "format version 99, this build reads version 1");
  expect_load_error(R"({"entries": []})", "missing field \"version\"");
  expect_load_error(R"({"version": 1, "entries": {}})", "\"entries\" must be an array");
  // A field missing in the second entry names that entry.
  Cache cache;
  cache.put(w2_entry(h200_context()));
  std::string text = cache.to_json_text();
  const std::string good_entries = text.substr(text.find('[') + 1, text.rfind(']') - text.find('[') - 1);
  std::string broken = good_entries;
  broken.replace(broken.find("\"split_k\""), 9, "\"splitk\"");
  expect_load_error(R"({"version": 1, "entries": [)" + good_entries + "," + broken + "]}",
                    "entry 1: missing field \"split_k\"");
  std::string mistyped = good_entries;
  mistyped.replace(mistyped.find("\"m\": 128"), 8, "\"m\": \"128\"");
  expect_load_error(R"({"version": 1, "entries": [)" + mistyped + "]}", "entry 0: field \"m\" must be an integer");
  std::string bad_out = good_entries;
  bad_out.replace(bad_out.find("\"out\": \"bf16\""), 13, "\"out\": \"int8\"");
  expect_load_error(R"({"version": 1, "entries": [)" + bad_out + "]}", "entry 0:");
  EXPECT_THROW(Cache::load(temp_path("does-not-exist.json")), InvalidArgument);
}

TEST(TuneCache, ActiveCacheFromAFileAndItsNote) {
  const std::string path = temp_path("active.json");
  Cache cache;
  cache.put(w2_entry(h200_context()));
  cache.save(path);
  use_cache_file(path);
  ASSERT_NE(active_cache(), nullptr);
  EXPECT_NE(active_cache_note().find(path + " (1 entries"), std::string::npos) << active_cache_note();
  clear_active_cache();
  EXPECT_EQ(active_cache(), nullptr);
  EXPECT_TRUE(active_cache_note().empty());
  // A file that cannot be loaded is refused and the active cache stays as it was.
  std::ofstream(temp_path("broken.json")) << "{";
  EXPECT_THROW(use_cache_file(temp_path("broken.json")), InvalidArgument);
  EXPECT_EQ(active_cache(), nullptr);
}

TEST(TunedPlan, RunsTheFastestVerifiedPlanOfTheActiveCache) {
  const DeviceContext device = h200_context();
  const Entry e = w2_entry(device);
  const std::string path = temp_path("tuned.json");
  Cache cache;
  cache.put(e);
  cache.save(path);
  const auto candidates = prefill::plan_candidates(128, 6144, 2048, device);
  const prefill::Plan policy = prefill::best_candidate(candidates)->plan;

  clear_active_cache();
  EXPECT_FALSE(
      prefill::tuned_plan("fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16, device, candidates, policy).plan);

  use_cache_file(path);
  const prefill::TunedChoice t =
      prefill::tuned_plan("fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16, device, candidates, policy);
  ASSERT_TRUE(t.plan.has_value()) << t.note;
  EXPECT_EQ(t.plan->config.name(), prefill::tile_configs()[9].name());
  EXPECT_EQ(t.plan->split_k, 1);
  EXPECT_EQ(t.note, "tuned on this device: 10.79 us against the policy's pick's 11.70");
  // An M whose tiles differ (m64: 1 row tile at M = 64, 2 at 128), another output type, backend or
  // card: no entry, no note, the policy decides.
  for (const auto& [backend, m, out] : {std::tuple{"fp4gap-prefill-w4a16", 64, OutputType::bf16},
                                        std::tuple{"fp4gap-prefill-w4a16", 128, OutputType::f32},
                                        std::tuple{"fp4gap-prefill-w4a4", 128, OutputType::bf16}}) {
    const prefill::TunedChoice none = prefill::tuned_plan(backend, m, 6144, 2048, out, device, candidates, policy);
    EXPECT_FALSE(none.plan.has_value());
    EXPECT_TRUE(none.note.empty()) << none.note;
  }
  DeviceContext h100 = device;
  h100.name = "NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(
      prefill::tuned_plan("fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16, h100, candidates, policy).plan);
  clear_active_cache();
}

// W13 at M = 1024, where the policy runs the 6-stage m256 unsplit, launched plainly as its
// configuration launches; fp4gap tune also times it launched programmatically.
Entry launch_entry(const DeviceContext& device, double plain_us, double programmatic_us) {
  const prefill::TileConfig& m256 = prefill::tile_configs()[0];
  Entry e;
  e.device = device_key(device);
  e.problem = ProblemKey{"fp4gap-prefill-w4a16", 1024, 4096, 6144, OutputType::bf16};
  e.policy_config = m256.name();
  e.measured.push_back(measured(m256, 1, false, 23.4, plain_us));
  MeasuredPlan flipped = measured(m256, 1, false, 23.4, programmatic_us);
  flipped.programmatic = true;
  e.measured.push_back(flipped);
  return e;
}

TEST(TuneCache, ALaunchModeOverrideRoundTripsAndIsNotThePolicysPick) {
  Cache cache;
  cache.put(launch_entry(h200_context(), 24.2, 23.1));
  const std::string text = cache.to_json_text();
  const Entry back = Cache::from_json_text(text, "test").entries()[0];
  ASSERT_EQ(back.measured.size(), 2u);
  EXPECT_FALSE(back.measured[0].programmatic.has_value());  // the config's own launch: not written
  ASSERT_TRUE(back.measured[1].programmatic.has_value());
  EXPECT_TRUE(*back.measured[1].programmatic);
  EXPECT_EQ(text.find("\"programmatic\""), text.rfind("\"programmatic\""));  // written once
  // The policy runs its pick as the configuration launches: the first, not the override.
  ASSERT_TRUE(back.policy().has_value());
  EXPECT_EQ(*back.policy(), 0u);
  ASSERT_TRUE(back.best().has_value());
  EXPECT_EQ(*back.best(), 1u);
}

TEST(TunedPlan, ALaunchModeMeasuredFasterIsTheOneRun) {
  const DeviceContext device = h200_context();
  const auto candidates = prefill::plan_candidates(1024, 4096, 6144, device);
  const prefill::Plan policy = prefill::best_candidate(candidates)->plan;
  ASSERT_EQ(policy.config.name(), prefill::tile_configs()[0].name()) << policy.describe();
  ASSERT_FALSE(policy.programmatic);
  EXPECT_EQ(prefill::launch_override(policy), "");
  const std::string path = temp_path("launch.json");
  for (const auto& [plain_us, programmatic_us] : {std::pair{24.2, 23.1}, std::pair{24.2, 25.0}}) {
    Cache cache;
    cache.put(launch_entry(device, plain_us, programmatic_us));
    cache.save(path);
    use_cache_file(path);
    const prefill::TunedChoice t =
        prefill::tuned_plan("fp4gap-prefill-w4a16", 1024, 4096, 6144, OutputType::bf16, device, candidates, policy);
    ASSERT_TRUE(t.plan.has_value()) << t.note;
    EXPECT_EQ(t.plan->describe(), policy.describe());
    const bool faster = programmatic_us < plain_us;
    EXPECT_EQ(t.plan->programmatic, faster) << t.note;
    EXPECT_EQ(prefill::launch_override(*t.plan), faster ? ", launched programmatically" : "");
    // The pick's time is the plain launch's, the one the policy runs.
    EXPECT_NE(t.note.find("against the policy's pick's 24.20"), std::string::npos) << t.note;
    // measures() tells the launches apart.
    EXPECT_TRUE(prefill::measures(t.entry->measured[0], policy));
    EXPECT_FALSE(prefill::measures(t.entry->measured[1], policy));
    EXPECT_TRUE(prefill::measures(t.entry->measured[faster ? 1 : 0], *t.plan));
  }
  clear_active_cache();
}

// `fp4gap tune --after norm`: the entry says what ran before each timed launch, and a backend
// that follows it says so; back to back (the default) is not written, so older caches load as it.
TEST(TuneCache, WhatRanBeforeTheTimedLaunchesRoundTripsAndIsNamedWhereFollowed) {
  const DeviceContext device = h200_context();
  Entry behind_norm = launch_entry(device, 20.84, 21.35);
  behind_norm.timed_after = "norm";
  Cache cache;
  cache.put(behind_norm);
  const std::string text = cache.to_json_text();
  EXPECT_NE(text.find("\"timed_after\": \"norm\""), std::string::npos) << text;
  EXPECT_EQ(Cache::from_json_text(text, "test").entries()[0].timed_after, "norm");
  Cache back_to_back;
  back_to_back.put(launch_entry(device, 24.2, 23.1));
  EXPECT_EQ(back_to_back.to_json_text().find("timed_after"), std::string::npos);
  EXPECT_EQ(Cache::from_json_text(back_to_back.to_json_text(), "test").entries()[0].timed_after, "itself");
  std::string unknown = text;
  unknown.replace(unknown.find("\"norm\""), 6, "\"silu\"");
  expect_load_error(unknown, "entry 0: field \"timed_after\"");
  expect_load_error(unknown, "silu");

  // Behind the norm the plain launch measured faster: the backend runs it and names the timing.
  const std::string path = temp_path("after-norm.json");
  cache.save(path);
  use_cache_file(path);
  const auto candidates = prefill::plan_candidates(1024, 4096, 6144, device);
  const prefill::Plan policy = prefill::best_candidate(candidates)->plan;
  const prefill::TunedChoice t =
      prefill::tuned_plan("fp4gap-prefill-w4a16", 1024, 4096, 6144, OutputType::bf16, device, candidates, policy);
  ASSERT_TRUE(t.plan.has_value()) << t.note;
  EXPECT_FALSE(t.plan->programmatic);
  EXPECT_EQ(t.note, "tuned on this device (timed after norm): 20.84 us against the policy's pick's 20.84");
  clear_active_cache();
}

TEST(TunedPlan, AnEntryThatCannotRunHereIsReportedAndThePolicyDecides) {
  const DeviceContext device = h200_context();
  const auto candidates = prefill::plan_candidates(128, 6144, 2048, device);
  const prefill::Plan policy = prefill::best_candidate(candidates)->plan;
  const std::string path = temp_path("stale.json");
  auto tuned_with = [&](const std::string& config, int split, bool workspace) {
    Entry e = w2_entry(device);
    e.measured = {e.measured[0], e.measured[1]};
    e.measured[1].config = config;
    e.measured[1].split_k = split;
    e.measured[1].workspace_reduction = workspace;
    Cache cache;
    cache.put(e);
    cache.save(path);
    use_cache_file(path);
    return prefill::tuned_plan("fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16, device, candidates, policy);
  };
  const prefill::TunedChoice unknown = tuned_with("sm90a bf16 x nvfp4 m96n128k64 5 stages", 1, false);
  EXPECT_FALSE(unknown.plan.has_value());
  EXPECT_NE(unknown.note.find("'sm90a bf16 x nvfp4 m96n128k64 5 stages' is not in this build"), std::string::npos)
      << unknown.note;
  EXPECT_NE(unknown.note.find("the policy's pick"), std::string::npos) << unknown.note;
  // m128 takes no workspace reduction (tiles of at most 64 rows do).
  const prefill::TunedChoice no_such_split = tuned_with(prefill::tile_configs()[1].name(), 2, true);
  EXPECT_FALSE(no_such_split.plan.has_value());
  EXPECT_NE(no_such_split.note.find("takes no split-k 2 with a workspace reduction"), std::string::npos)
      << no_such_split.note;
  // The entry's best plan on a device whose shared memory does not hold it: the candidate's reason.
  DeviceContext small = device;
  small.smem_per_block_optin = 100 * 1024;
  const auto small_candidates = prefill::plan_candidates(128, 6144, 2048, small);
  Entry e = w2_entry(small);
  Cache cache;
  cache.put(e);
  cache.save(path);
  use_cache_file(path);
  const prefill::TunedChoice too_big =
      prefill::tuned_plan("fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16, small, small_candidates,
                          prefill::best_candidate(small_candidates)->plan);
  EXPECT_FALSE(too_big.plan.has_value());
  EXPECT_NE(too_big.note.find("bytes of shared memory"), std::string::npos) << too_big.note;
  clear_active_cache();
}

TEST(TunedPlan, AnEntryOfAnotherMServesTheMWhereItsPlansRunTheSameTiles) {
  const DeviceContext device = h200_context();
  const auto& configs = prefill::tile_configs();
  const std::int64_t n = 6144, k = 2048;
  auto candidates_at = [&](std::int64_t m) { return prefill::plan_candidates(m, n, k, device); };
  const auto at_100 = candidates_at(100);
  const prefill::Plan policy_100 = prefill::best_candidate(at_100)->plan;
  // The seed's policy at M = 100 has tiles of 64 rows or more (else no neighbour could serve it).
  ASSERT_GE(policy_100.config.block_m, 64) << policy_100.describe();
  // An entry measuring the policy's pick at 100 and one plan of 64 / 128-row tiles, faster.
  const prefill::TileConfig& other = policy_100.config.name() == configs[9].name() ? configs[1] : configs[9];
  auto entry_at = [&](std::int64_t m, double pick_us, double other_us) {
    Entry e = w2_entry(device);
    e.problem.m = m;
    e.policy_config = policy_100.config.name();
    e.policy_split_k = policy_100.split_k;
    e.measured = {measured(policy_100.config, policy_100.split_k, policy_100.workspace_reduction(), 11.0, pick_us),
                  measured(other, 1, false, 11.5, other_us)};
    return e;
  };
  const std::string path = temp_path("neighbours.json");
  auto use = [&](const std::vector<Entry>& entries) {
    Cache cache;
    for (const Entry& e : entries) cache.put(e);
    cache.save(path);
    use_cache_file(path);
  };
  auto tuned = [&](std::int64_t m, const std::vector<prefill::PlanCandidate>& c, const prefill::Plan& policy) {
    return prefill::tuned_plan("fp4gap-prefill-w4a16", m, n, k, OutputType::bf16, device, c, policy);
  };

  use({entry_at(128, 12.0, 10.0)});
  const prefill::TunedChoice t = tuned(100, at_100, policy_100);
  ASSERT_TRUE(t.plan.has_value()) << t.note;
  EXPECT_EQ(t.plan->config.name(), other.name());
  EXPECT_EQ(t.plan->m_tiles, (100 + other.block_m - 1) / other.block_m);
  EXPECT_EQ(t.note, "tuned on this device at M = 128 (the same tiles as at M = 100): 10.00 us against the policy's "
                    "pick's 12.00");
  // At M = 64 the 64-row tiles are one per column, not two as at 128: not the launches measured,
  // even where the policy would run a plan the entry measured.
  const auto at_64 = candidates_at(64);
  const prefill::Plan measured_policy_at_64 =
      prefill::make_plan(64, n, k, policy_100.config, policy_100.split_k, policy_100.reduction);
  EXPECT_FALSE(tuned(64, at_64, measured_policy_at_64).plan.has_value());
  // A policy pick the entry did not measure (m256 here): the entry says nothing of it.
  const prefill::Plan m256 = prefill::make_plan(100, n, k, configs[0], 1);
  EXPECT_FALSE(tuned(100, at_100, m256).plan.has_value());

  // The nearest M serves; on a tie the larger; an exact entry before any other.
  use({entry_at(128, 12.0, 10.0), entry_at(80, 12.0, 9.0)});
  EXPECT_NE(tuned(100, at_100, policy_100).note.find("at M = 80 (the same tiles as at M = 100): 9.00 us"),
            std::string::npos);
  use({entry_at(128, 12.0, 10.0), entry_at(72, 12.0, 9.0)});
  EXPECT_NE(tuned(100, at_100, policy_100).note.find("at M = 128"), std::string::npos);
  use({entry_at(128, 12.0, 10.0), entry_at(80, 12.0, 9.0), entry_at(100, 12.0, 11.0)});
  EXPECT_EQ(tuned(100, at_100, policy_100).note, "tuned on this device: 11.00 us against the policy's pick's 12.00");

  // Another card, N or output type: never a neighbour.
  use({entry_at(128, 12.0, 10.0)});
  DeviceContext h100 = device;
  h100.name = "NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(
      prefill::tuned_plan("fp4gap-prefill-w4a16", 100, n, k, OutputType::bf16, h100, at_100, policy_100).plan);
  EXPECT_FALSE(
      prefill::tuned_plan("fp4gap-prefill-w4a16", 100, n, k, OutputType::f32, device, at_100, policy_100).plan);
  const auto n4096 = prefill::plan_candidates(100, 4096, k, device);
  EXPECT_FALSE(prefill::tuned_plan("fp4gap-prefill-w4a16", 100, 4096, k, OutputType::bf16, device, n4096,
                                   prefill::best_candidate(n4096)->plan)
                   .plan);
  clear_active_cache();
}

}  // namespace
}  // namespace fp4gap::tune
