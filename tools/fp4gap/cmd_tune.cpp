// fp4gap tune: the prefill policy's best-ranked plans for each shape, each verified against the
// reference and then graph-timed on the device at hand; every measured plan goes into the tune
// cache (tune_cache.hpp), which the prefill backends then follow for that device and problem.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/build_info.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/dispatch.hpp"
#include "fp4gap/gemm_bench.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap::cli {
namespace {

struct TuneArgs {
  ShapeOptions shape;
  std::string formats = "w4a16";
  std::string out = "bf16";
  int plans = 6;
  std::string cache;
  std::uint64_t seed = 1;
  std::string after = "itself";
};

std::string default_cache_path() {
  const char* env = std::getenv("FP4GAP_TUNE_CACHE");
  return env != nullptr && *env != '\0' ? env : "fp4gap-tune.json";
}

std::vector<bool> parse_formats(const std::string& list) {
  std::vector<bool> w4a4;
  std::stringstream ss(list);
  for (std::string f; std::getline(ss, f, ',');) {
    if (f == "w4a16") {
      w4a4.push_back(false);
    } else if (f == "w4a4") {
      w4a4.push_back(true);
    } else {
      throw InvalidArgument("--formats takes w4a16 and/or w4a4, comma-separated: '" + f + "' is neither");
    }
  }
  if (w4a4.empty()) throw InvalidArgument("--formats names no format");
  return w4a4;
}

struct PlanToMeasure {
  prefill::Plan plan;
  double predicted_us = 0.0;
};

// The policy's plan first, then the other runnable candidates by predicted time, `count` in all;
// for W4A16, where the policy's plan launches plainly (the wide tiles), also that plan launched
// programmatically, right after it. W4A4 behind its activation pass always launches
// programmatically, and the narrow tiles' programmatic launch was measured faster (run 16).
// Behind a predecessor that lets the GEMM launch early every plan is launched programmatically
// (predecessor_allows_early_launch), so there is no other launch to time.
std::vector<PlanToMeasure> plans_to_measure(const std::vector<prefill::PlanCandidate>& candidates,
                                            const prefill::Plan& policy, int count, bool w4a4,
                                            Predecessor after) {
  std::vector<const prefill::PlanCandidate*> ok;
  for (const prefill::PlanCandidate& c : candidates) {
    if (c.status.is_ok()) ok.push_back(&c);
  }
  std::stable_sort(ok.begin(), ok.end(), [&](const prefill::PlanCandidate* a, const prefill::PlanCandidate* b) {
    const bool a_policy = a->plan.describe() == policy.describe();
    const bool b_policy = b->plan.describe() == policy.describe();
    if (a_policy != b_policy) return a_policy;
    return a->predicted_us < b->predicted_us;
  });
  if (static_cast<int>(ok.size()) > count) ok.resize(static_cast<std::size_t>(count));
  std::vector<PlanToMeasure> plans;
  for (const prefill::PlanCandidate* c : ok) plans.push_back({c->plan, c->predicted_us});
  if (!w4a4 && !predecessor_allows_early_launch(after) && !plans.empty() && !plans.front().plan.programmatic) {
    PlanToMeasure flipped = plans.front();
    flipped.plan.programmatic = true;
    plans.insert(plans.begin() + 1, flipped);
  }
  return plans;
}

tune::MeasuredPlan measured_plan(const PlanToMeasure& c, const GemmRow& row) {
  tune::MeasuredPlan p;
  p.config = c.plan.config.name();
  p.split_k = c.plan.split_k;
  p.workspace_reduction = c.plan.workspace_reduction();
  if (!prefill::launch_override(c.plan).empty()) p.programmatic = c.plan.programmatic;
  p.predicted_us = c.predicted_us;
  p.passed = row.status == RowStatus::passed && row.median_us.has_value();
  p.graph_us = p.passed ? row.median_us : std::nullopt;
  p.event_us = p.passed ? row.event_median_us : std::nullopt;
  if (row.status == RowStatus::passed && !row.median_us) {
    p.note = "verified, not timed";
  } else if (row.status != RowStatus::passed) {
    p.note = std::string(row.status == RowStatus::incorrect ? "BROKEN" : to_string(row.status)) + ": " + row.reason;
  }
  return p;
}

std::string us(const std::optional<double>& v) { return v ? format_fixed(*v, 2) : "-"; }

std::optional<double> timed(const GemmRow& row) {
  return row.status == RowStatus::passed ? row.median_us : std::nullopt;
}

// Where the decode kernel serves the problem too: it and the prefill kernel on `prefill_plan`,
// timed in one run behind the kernel a serving graph puts before the GEMM (the predecessor the
// dispatching backends' boundary was fit behind: a norm for W4A16, the quantizer for W4A4).
std::optional<tune::FamilyTiming> time_families(const GemmCase& shape, bool w4a4, const prefill::Plan& prefill_plan,
                                                GemmBenchOptions options, bool& broken) {
  const GemmProblem& p = shape.problem;
  GemmBackend* decode = find_gemm_backend(w4a4 ? "fp4gap-decode-w4a4" : "fp4gap-decode-w4a16");
  if (p.m > decode::kMaxM || decode == nullptr || !decode->supports(p, options.device).is_ok()) return std::nullopt;
  options.predecessor = w4a4 ? Predecessor::quantize : Predecessor::norm;
  const std::unique_ptr<GemmBackend> prefill = make_prefill_plan_backend(w4a4, prefill_plan);
  const std::vector<GemmRow> rows = run_gemm_bench({shape}, {decode, prefill.get()}, options);
  if (rows.size() != 2) return std::nullopt;
  broken = broken || rows[0].status == RowStatus::incorrect || rows[1].status == RowStatus::incorrect;
  tune::FamilyTiming t;
  t.after = std::string(to_string(options.predecessor));
  t.decode_config = rows[0].config;
  t.prefill_config = prefill_plan.describe() + prefill::launch_override(prefill_plan);
  t.decode_us = timed(rows[0]);
  t.prefill_us = timed(rows[1]);
  return t;
}

void write_families(std::ostream& out, const tune::FamilyTiming& t, bool w4a4, const GemmProblem& p) {
  out << "  after " << t.after << ": decode kernel " << us(t.decode_us) << " us, prefill kernel " << us(t.prefill_us)
      << " us (" << t.prefill_config << "): ";
  const std::int64_t boundary = decode_max_m(w4a4, p.n, p.k);
  const std::string backend = w4a4 ? "fp4gap-w4a4" : "fp4gap-w4a16";
  if (const std::optional<KernelFamily> f = t.faster()) {
    out << backend << " takes the " << to_string(*f) << " kernel here (without the cache the "
        << (p.m <= boundary ? "decode" : "prefill") << " kernel: decode up to M = " << boundary << ")\n";
  } else {
    out << "one of them was not verified or timed: " << backend << " keeps its boundary (decode up to M = "
        << boundary << ")\n";
  }
}

void write_entry(std::ostream& out, const GemmCase& shape, const tune::Entry& e) {
  out << "\n"
      << (shape.shape_name.empty() ? "" : shape.shape_name + " ") << shape.problem.label() << " ("
      << e.problem.backend << "): " << e.measured.size() << " plans verified, then graph-timed with cold weights"
      << (e.timed_after == "itself" ? std::string(" back to back") : ", each after " + e.timed_after) << "\n";
  out << "  " << std::left << std::setw(10) << "graph_us" << std::setw(10) << "event_us" << std::setw(14)
      << "predicted_us" << "plan\n";
  const std::optional<std::size_t> best = e.best(), policy = e.policy();
  for (std::size_t i = 0; i < e.measured.size(); ++i) {
    const tune::MeasuredPlan& p = e.measured[i];
    out << (best && *best == i ? "* " : "  ") << std::left << std::setw(10) << us(p.graph_us) << std::setw(10)
        << us(p.event_us) << std::setw(14) << format_fixed(p.predicted_us, 2) << p.config << ", split-k " << p.split_k
        << (p.workspace_reduction ? " (partials in global memory)" : "")
        << (p.programmatic ? prefill::launch_label(*p.programmatic) : "")
        << (policy && *policy == i ? "  [policy's pick]" : "") << (p.note.empty() ? "" : "  " + p.note) << "\n";
  }
  if (!best) {
    out << "  no plan passed: the backends keep the policy's pick here\n";
  } else if (policy && *policy == *best) {
    out << "  the policy's pick is the fastest measured\n";
  } else if (policy && e.measured[*policy].graph_us) {
    const double gain = *e.measured[*policy].graph_us / *e.measured[*best].graph_us - 1.0;
    out << "  tuned: " << format_fixed(gain * 100.0, 1) << "% faster than the policy's pick\n";
  }
}

void run_tune(const TuneArgs& a, CLI::App& cmd) {
  const std::vector<bool> formats = parse_formats(a.formats);
  if (a.plans < 1) throw InvalidArgument("--plans must be at least 1: --plans " + std::to_string(a.plans));
  GemmProblem formats_of_shapes;  // the operand formats are set per format below
  formats_of_shapes.out_type = parse_out_option(a.out);
  const std::vector<GemmCase> shapes = shape_cases(a.shape, formats_of_shapes, cmd);
  const std::string path = a.cache.empty() ? default_cache_path() : a.cache;
  // An existing cache that cannot be read is left as it is rather than overwritten.
  tune::Cache cache;
  if (std::filesystem::exists(path)) cache = tune::Cache::load(path);

  GemmBenchOptions options = gemm_bench_options(query_device(0));
  const DeviceContext& device = options.device;
  if (!device.available) {
    std::cerr << "fp4gap tune verifies and times plans on a GPU: " << describe_unavailable(device) << "\n";
    exit_with(kExitNoDevice);
  }
  std::string why_not;
  const prefill::ConcurrentCtas occupancy = prefill_occupancy(&why_not);
  if (!occupancy) {
    std::cout << "nothing to tune on " << device.name << ": " << why_not << "\n";
    return;
  }
  options.seed = a.seed;
  options.time_device_read = {};  // the read floor is not what ranks plans
  options.ceilings.reset();
  std::vector<std::string> notes;
  apply_after_option(a.after, options, notes);

  std::cout << "device: " << device.name << " (" << device.sm_count << " SMs); cache: " << path << "\n";
  for (const std::string& note : notes) std::cout << note << "\n";
  bool broken = false;
  int written = 0;
  for (const bool w4a4 : formats) {
    for (const GemmCase& base : shapes) {
      GemmCase shape = base;
      shape.problem.a_format = w4a4 ? OperandFormat::nvfp4 : OperandFormat::bf16;
      shape.problem.b_format = OperandFormat::nvfp4;
      const GemmProblem& p = shape.problem;
      if (!shape.status.is_ok() || !validate_problem(p).is_ok()) {
        std::cout << "\n" << p.label() << ": not tuned: "
                  << (shape.status.is_ok() ? validate_problem(p).reason : shape.status.reason) << "\n";
        continue;
      }
      const std::vector<prefill::PlanCandidate> candidates =
          prefill::plan_candidates(p.m, p.n, p.k, device, occupancy);
      // Throws, naming the shared memory needed and available, where no plan can run.
      const prefill::Plan policy =
          prefill::policy_plan(candidates, w4a4, p.k, prefill::dynamic_smem_limit(device.smem_per_block_optin), device)
              .plan;
      const std::vector<PlanToMeasure> chosen = plans_to_measure(candidates, policy, a.plans, w4a4, options.predecessor);
      std::vector<std::unique_ptr<GemmBackend>> owned;
      std::vector<GemmBackend*> backends;
      for (const PlanToMeasure& c : chosen) {
        owned.push_back(make_prefill_plan_backend(w4a4, c.plan));
        backends.push_back(owned.back().get());
      }
      const std::vector<GemmRow> rows = run_gemm_bench({shape}, backends, options);

      tune::Entry e;
      e.device = tune::device_key(device);
      e.problem = tune::ProblemKey{w4a4 ? "fp4gap-prefill-w4a4" : "fp4gap-prefill-w4a16", p.m, p.n, p.k, p.out_type};
      e.policy_config = policy.config.name();
      e.policy_split_k = policy.split_k;
      e.policy_workspace_reduction = policy.workspace_reduction();
      e.timed_after = std::string(to_string(options.predecessor));
      for (std::size_t i = 0; i < chosen.size() && i < rows.size(); ++i) {
        e.measured.push_back(measured_plan(chosen[i], rows[i]));
        broken = broken || rows[i].status == RowStatus::incorrect;
      }
      // The prefill kernel at its fastest measured plan (the policy's pick where none passed)
      // against the decode kernel, where that serves the problem too.
      const std::optional<std::size_t> fastest = e.best();
      e.families = time_families(shape, w4a4, fastest ? chosen[*fastest].plan : policy, options, broken);
      e.build = build_info::kGitHash;
      e.driver = device.driver_version;
      write_entry(std::cout, shape, e);
      if (e.families) write_families(std::cout, *e.families, w4a4, p);
      cache.put(std::move(e));
      // Saved after every shape: a run cut short keeps what it measured.
      cache.save(path);
      ++written;
    }
  }
  std::cout << "\n" << written << " entries measured and written to " << path << " (" << cache.entries().size()
            << " in all); fp4gap gemm --tune-cache " << path << " (or FP4GAP_TUNE_CACHE=" << path
            << ") runs the fastest verified plan of each\n";
  if (broken) exit_with(kExitIncorrect);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Verify and time the prefill policy's best-ranked plans for each shape on this GPU, and the decode "
              "kernel beside the fastest where both serve the shape; record them in the tune cache that the prefill "
              "and dispatching backends follow");
  add_shape_options(*cmd, args->shape);
  cmd->add_option("--formats", args->formats, "w4a16 (bf16 activations), w4a4 (NVFP4 activations), or both comma-separated");
  cmd->add_option("--out", args->out, "output type")->check(CLI::IsMember({"bf16", "fp16", "f16", "f32", "fp32"}));
  cmd->add_option("--plans", args->plans, "plans measured per shape: the policy's pick, then the best predicted");
  cmd->add_option("--cache", args->cache,
                  "the tune cache to add to (default: $FP4GAP_TUNE_CACHE, else fp4gap-tune.json)");
  cmd->add_option("--seed", args->seed, "input seed");
  add_after_option(*cmd, args->after);
  cmd->callback([args, cmd] { run_tune(*args, *cmd); });
}

}  // namespace fp4gap::cli
