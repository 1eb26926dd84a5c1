#include "fp4gap/tune_cache.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "fp4gap/report.hpp"
#include "fp4gap/status.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap::tune {
namespace {

using Json = nlohmann::ordered_json;

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json to_json(const MeasuredPlan& p) {
  Json j{{"config", p.config}, {"split_k", p.split_k}, {"workspace_reduction", p.workspace_reduction}};
  if (p.programmatic) j["programmatic"] = *p.programmatic;  // only where it overrides the config's launch
  j["predicted_us"] = p.predicted_us;
  j["passed"] = p.passed;
  j["graph_us"] = opt(p.graph_us);
  j["event_us"] = opt(p.event_us);
  j["note"] = p.note;
  return j;
}

Json to_json(const Entry& e) {
  Json measured = Json::array();
  for (const MeasuredPlan& p : e.measured) measured.push_back(to_json(p));
  Json j{{"device", {{"name", e.device.name},
                          {"sm_count", e.device.sm_count},
                          {"cc_major", e.device.cc_major},
                          {"cc_minor", e.device.cc_minor}}},
              {"problem", {{"backend", e.problem.backend},
                           {"m", e.problem.m},
                           {"n", e.problem.n},
                           {"k", e.problem.k},
                           {"out", std::string(to_string(e.problem.out_type))}}},
              {"policy", {{"config", e.policy_config},
                          {"split_k", e.policy_split_k},
                          {"workspace_reduction", e.policy_workspace_reduction}}},
              {"measured", measured},
              {"families", e.families ? Json{{"after", e.families->after},
                                             {"decode_config", e.families->decode_config},
                                             {"prefill_config", e.families->prefill_config},
                                             {"decode_us", opt(e.families->decode_us)},
                                             {"prefill_us", opt(e.families->prefill_us)}}
                                      : Json(nullptr)},
              {"build", e.build},
              {"driver", e.driver}};
  if (e.timed_after != "itself") j["timed_after"] = e.timed_after;  // only where not back to back
  return j;
}

// Reads fields with messages that name the file, the entry and the field.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  const Json& at(const Json& obj, const char* key) const {
    if (!obj.is_object()) fail(std::string("expected an object holding \"") + key + "\"");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(std::string("missing field \"") + key + "\"");
    return *it;
  }
  std::string str(const Json& obj, const char* key) const {
    const Json& v = at(obj, key);
    if (!v.is_string()) fail(std::string("field \"") + key + "\" must be a string");
    return v.get<std::string>();
  }
  std::int64_t integer(const Json& obj, const char* key) const {
    const Json& v = at(obj, key);
    if (!v.is_number_integer()) fail(std::string("field \"") + key + "\" must be an integer");
    return v.get<std::int64_t>();
  }
  double number(const Json& obj, const char* key) const {
    const Json& v = at(obj, key);
    if (!v.is_number()) fail(std::string("field \"") + key + "\" must be a number");
    return v.get<double>();
  }
  std::optional<double> optional_number(const Json& obj, const char* key) const {
    const Json& v = at(obj, key);
    if (v.is_null()) return std::nullopt;
    return number(obj, key);
  }
  bool boolean(const Json& obj, const char* key) const {
    const Json& v = at(obj, key);
    if (!v.is_boolean()) fail(std::string("field \"") + key + "\" must be true or false");
    return v.get<bool>();
  }
  [[noreturn]] void fail(const std::string& what) const { throw InvalidArgument(where_ + ": " + what); }

 private:
  std::string where_;
};

Entry entry_from_json(const Json& j, const Reader& r) {
  Entry e;
  const Json& device = r.at(j, "device");
  e.device.name = r.str(device, "name");
  e.device.sm_count = static_cast<int>(r.integer(device, "sm_count"));
  e.device.cc_major = static_cast<int>(r.integer(device, "cc_major"));
  e.device.cc_minor = static_cast<int>(r.integer(device, "cc_minor"));
  const Json& problem = r.at(j, "problem");
  e.problem.backend = r.str(problem, "backend");
  e.problem.m = r.integer(problem, "m");
  e.problem.n = r.integer(problem, "n");
  e.problem.k = r.integer(problem, "k");
  try {
    e.problem.out_type = parse_output_type(r.str(problem, "out"));
  } catch (const InvalidArgument& ex) {
    r.fail(ex.what());
  }
  const Json& policy = r.at(j, "policy");
  e.policy_config = r.str(policy, "config");
  e.policy_split_k = static_cast<int>(r.integer(policy, "split_k"));
  e.policy_workspace_reduction = r.boolean(policy, "workspace_reduction");
  const Json& measured = r.at(j, "measured");
  if (!measured.is_array()) r.fail("field \"measured\" must be an array");
  for (const Json& m : measured) {
    MeasuredPlan p;
    p.config = r.str(m, "config");
    p.split_k = static_cast<int>(r.integer(m, "split_k"));
    p.workspace_reduction = r.boolean(m, "workspace_reduction");
    // Optional: absent in caches written before launch modes were measured, and for every plan
    // launched as its configuration launches.
    if (m.contains("programmatic")) p.programmatic = r.boolean(m, "programmatic");
    p.predicted_us = r.number(m, "predicted_us");
    p.passed = r.boolean(m, "passed");
    p.graph_us = r.optional_number(m, "graph_us");
    p.event_us = r.optional_number(m, "event_us");
    p.note = r.str(m, "note");
    e.measured.push_back(std::move(p));
  }
  // Optional: absent in caches written before `fp4gap tune --after` and for back-to-back timing.
  if (j.contains("timed_after")) {
    e.timed_after = r.str(j, "timed_after");
    try {
      parse_predecessor(e.timed_after);
    } catch (const InvalidArgument& ex) {
      r.fail("field \"timed_after\": " + std::string(ex.what()));
    }
  }
  // Optional: caches written before the family timings were measured have no such field.
  if (j.contains("families") && !j.at("families").is_null()) {
    const Json& f = r.at(j, "families");
    FamilyTiming t;
    t.after = r.str(f, "after");
    t.decode_config = r.str(f, "decode_config");
    t.prefill_config = r.str(f, "prefill_config");
    t.decode_us = r.optional_number(f, "decode_us");
    t.prefill_us = r.optional_number(f, "prefill_us");
    e.families = std::move(t);
  }
  e.build = r.str(j, "build");
  e.driver = r.str(j, "driver");
  return e;
}

}  // namespace

DeviceKey device_key(const DeviceContext& device) {
  return DeviceKey{device.name, device.sm_count, device.cc_major, device.cc_minor};
}

std::optional<KernelFamily> FamilyTiming::faster() const {
  if (!decode_us || !prefill_us) return std::nullopt;
  return *decode_us <= *prefill_us ? KernelFamily::decode : KernelFamily::prefill;
}

std::optional<std::size_t> Entry::best() const {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const MeasuredPlan& p = measured[i];
    if (!p.passed || !p.graph_us) continue;
    if (!best || *p.graph_us < *measured[*best].graph_us) best = i;
  }
  return best;
}

std::optional<std::size_t> Entry::policy() const {
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const MeasuredPlan& p = measured[i];
    if (p.config == policy_config && p.split_k == policy_split_k &&
        p.workspace_reduction == policy_workspace_reduction && !p.programmatic) {
      return i;
    }
  }
  return std::nullopt;
}

Cache Cache::from_json_text(const std::string& text, const std::string& origin) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(origin + ": not a JSON tune cache: " + e.what());
  }
  const Reader top(origin);
  const std::int64_t version = top.integer(j, "version");
  if (version != kCacheVersion) {
    top.fail("format version " + std::to_string(version) + ", this build reads version " +
             std::to_string(kCacheVersion) + " (run fp4gap tune again to rewrite it)");
  }
  const Json& entries = top.at(j, "entries");
  if (!entries.is_array()) top.fail("field \"entries\" must be an array");
  Cache cache;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    cache.put(entry_from_json(entries[i], Reader(origin + ": entry " + std::to_string(i))));
  }
  return cache;
}

Cache Cache::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("tune cache " + path + ": cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), "tune cache " + path);
}

std::string Cache::to_json_text() const {
  Json entries = Json::array();
  for (const Entry& e : entries_) entries.push_back(to_json(e));
  return Json{{"version", kCacheVersion}, {"entries", entries}}.dump(1) + "\n";
}

void Cache::save(const std::string& path) const {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw RuntimeError("tune cache " + path + ": cannot create its directory: " + ec.message());
  const fs::path temporary = fs::path(path + ".tmp");
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << to_json_text();
    out.flush();
    if (!out) throw RuntimeError("tune cache " + path + ": cannot write " + temporary.string());
  }
  fs::rename(temporary, target, ec);
  if (ec) {
    fs::remove(temporary, ec);
    throw RuntimeError("tune cache " + path + ": cannot replace it with " + temporary.string());
  }
}

const Entry* Cache::find(const DeviceKey& device, const ProblemKey& problem) const {
  for (const Entry& e : entries_) {
    if (e.device == device && e.problem == problem) return &e;
  }
  return nullptr;
}

void Cache::put(Entry entry) {
  for (Entry& e : entries_) {
    if (e.device == entry.device && e.problem == entry.problem) {
      e = std::move(entry);
      return;
    }
  }
  entries_.push_back(std::move(entry));
}

namespace {

struct ActiveCache {
  std::mutex mutex;
  bool environment_read = false;
  std::optional<Cache> cache;
  std::string path;
  std::string error;
};

ActiveCache& active() {
  static ActiveCache a;
  return a;
}

void read_environment(ActiveCache& a) {
  if (a.environment_read) return;
  a.environment_read = true;
  const char* env = std::getenv("FP4GAP_TUNE_CACHE");
  if (env == nullptr || *env == '\0') return;
  a.path = env;
  try {
    a.cache = Cache::load(a.path);
  } catch (const InvalidArgument& e) {
    a.error = e.what();
  }
}

}  // namespace

void use_cache_file(const std::string& path) {
  Cache cache = Cache::load(path);
  ActiveCache& a = active();
  const std::lock_guard lock(a.mutex);
  a.environment_read = true;
  a.cache = std::move(cache);
  a.path = path;
  a.error.clear();
}

void clear_active_cache() {
  ActiveCache& a = active();
  const std::lock_guard lock(a.mutex);
  a.environment_read = true;
  a.cache.reset();
  a.path.clear();
  a.error.clear();
}

const Cache* active_cache() {
  ActiveCache& a = active();
  const std::lock_guard lock(a.mutex);
  read_environment(a);
  return a.cache ? &*a.cache : nullptr;
}

std::optional<TunedFamily> tuned_family(bool w4a4, std::int64_t m, std::int64_t n, std::int64_t k, OutputType out,
                                        const DeviceContext& device) {
  const Cache* cache = active_cache();
  if (cache == nullptr) return std::nullopt;
  const Entry* e =
      cache->find(device_key(device), ProblemKey{w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16", m, n, k, out});
  if (e == nullptr || !e->families || !e->families->faster()) return std::nullopt;
  std::ostringstream os;
  os << "measured after " << e->families->after << ": decode " << format_fixed(*e->families->decode_us, 2)
     << " us, prefill " << format_fixed(*e->families->prefill_us, 2) << " us";
  return TunedFamily{*e->families->faster(), os.str()};
}

std::string active_cache_note() {
  ActiveCache& a = active();
  const std::lock_guard lock(a.mutex);
  read_environment(a);
  if (!a.error.empty()) return "tuned plans: none used, FP4GAP_TUNE_CACHE could not be loaded: " + a.error;
  if (!a.cache) return {};
  return "tuned plans: " + a.path + " (" + std::to_string(a.cache->entries().size()) +
         " entries; the prefill backends run a measured plan where one matches the device and problem)";
}

}  // namespace fp4gap::tune
