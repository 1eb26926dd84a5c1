#include "fp4gap/gemm_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>

#include "fp4gap/reference.hpp"
#include "fp4gap/verify.hpp"

namespace fp4gap {
namespace {

constexpr int kMaxInputSets = 64;

void append_joined(std::string& s, std::string_view separator, std::string_view item) {
  if (!s.empty()) s += separator;
  s += item;
}

double multiply_adds(const GemmProblem& p) {
  return static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

// Identifies what an operand multiplies by its dequantized values, so an NVFP4 view and the
// exact BF16 view of the same matrix (cuBLAS BF16 on dequantized weights) share one reference.
std::uint64_t hash_values(const OperandView& v) {
  const std::vector<float> values = operand_values(v);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, over the float32 bit patterns
  for (float f : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (bits >> (8 * byte)) & 0xFFu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

struct OperandKey {
  std::int64_t a_rows = 0, b_rows = 0, k = 0;
  std::uint64_t a_hash = 0, b_hash = 0;
  double alpha = 0.0;
  bool operator==(const OperandKey&) const = default;
};

OperandKey key_of(const GemmRunner& r) {
  const OperandView a = r.a_operand(), b = r.b_operand();
  return {a.rows, b.rows, a.k, hash_values(a), hash_values(b), r.alpha()};
}

struct CachedReference {
  OperandKey key;
  std::string source;  // "cpu" or "gpu-reference"
  std::shared_ptr<const ReferenceResult> result;
};

// The references of one problem, reused by every backend that multiplies the same operands.
class ReferenceCache {
 public:
  CachedReference get(const GemmRunner& runner, bool cpu_only, const GemmProblem& p,
                             const GemmBenchOptions& o, std::string& warnings) {
    const OperandKey key = key_of(runner);
    for (const CachedReference& c : entries_) {
      if (c.key == key && (!cpu_only || c.source == "cpu")) return c;
    }
    const OperandView a = runner.a_operand(), b = runner.b_operand();
    const bool on_gpu = !cpu_only && o.device_reference && o.device.available &&
                        multiply_adds(p) >= o.gpu_reference_min_macs;
    if (on_gpu) {
      try {
        auto r = std::make_shared<const ReferenceResult>(o.device_reference(a, b, runner.alpha()));
        entries_.push_back({key, std::string(kGpuReferenceBackend), std::move(r)});
        return entries_.back();
      } catch (const std::exception& e) {
        append_joined(warnings, "; ", std::string("GPU reference failed (") + e.what() +
                                         "): checked against the CPU reference");
      }
    }
    auto r = std::make_shared<const ReferenceResult>(reference_gemm(a, b, runner.alpha(), o.reference_threads));
    entries_.push_back({key, "cpu", std::move(r)});
    return entries_.back();
  }

 private:
  std::vector<CachedReference> entries_;
};

void add_warning(GemmRow& row, const std::string& w) {
  append_joined(row.warnings, "; ", w);
}

// `repro_backends` is what the repro line passes to --backends: the row's backend, or for a problem
// no backend may run, the backends the user asked for.
GemmRow base_row(const GemmCase& c, std::string_view backend, std::string_view repro_backends,
                 const GemmBenchOptions& o) {
  GemmRow row;
  row.backend = std::string(backend);
  row.shape_name = c.shape_name;
  row.problem = c.problem.label();
  row.m = c.problem.m;
  row.n = c.problem.n;
  row.k = c.problem.k;
  row.a_format = std::string(to_string(c.problem.a_format));
  row.b_format = std::string(to_string(c.problem.b_format));
  row.out_type = std::string(to_string(c.problem.out_type));
  row.repro = repro_command(c.problem, repro_backends, o.seed, o.distribution, o.repro_extra);
  return row;
}

void time_on_host(GemmRunner& runner, int runs, GemmRow& row) {
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    runner.run(0, nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const TimingStats s = summarize_samples(std::move(samples));
  row.mode = "host";
  row.median_us = s.median_us;
  row.p20_us = s.p20_us;
  row.p80_us = s.p80_us;
  row.samples = s.samples;
}

void time_on_device(GemmRunner& runner, const GemmProblem& p, const GemmBenchOptions& o, GemmRow& row) {
  const Timing t = o.time_device_runner(runner, p, o.predecessor, o.device, o.timing);
  row.mode = o.predecessor == Predecessor::itself ? "graph" : "graph-after-" + std::string(to_string(o.predecessor));
  row.median_us = t.graph.median_us;
  row.p20_us = t.graph.p20_us;
  row.p80_us = t.graph.p80_us;
  row.samples = t.graph.samples;
  row.event_median_us = t.event.median_us;
  row.event_p20_us = t.event.p20_us;
  row.event_p80_us = t.event.p80_us;
  row.floor_us = t.graph_floor_us;
  row.event_floor_us = t.event_floor_us;
  if (t.sm_clock_mhz > 0) row.sm_clock_mhz = t.sm_clock_mhz;
  if (t.sustained) {
    row.sustained_us = t.sustained->per_launch_us;
    row.sustained_ms = t.sustained->window_ms;
    const DeviceSampleSummary& d = t.sustained->device;
    if (d.sm_clock_mhz > 0) row.sustained_sm_clock_mhz = d.sm_clock_mhz;
    if (d.power_w > 0.0) row.sustained_power_w = d.power_w;
    if (d.samples > 0) row.sustained_clock_reasons = clock_event_reason_names(d.clock_event_reasons);
  }
  for (const std::string& w : t.warnings) add_warning(row, w);
}

// Rates from the median, and the roofline of what the runner moves (GPU rows only: the ceilings
// are the GPU's), with how its launch fills the SMs where the runner says.
void fill_rates(const GemmProblem& p, OperandFormat a_moved, OperandFormat b_moved, bool device_row,
                const std::optional<LaunchFill>& fill, const GemmBenchOptions& o, GemmRow& row) {
  if (!row.median_us || *row.median_us <= 0) return;
  const double seconds = *row.median_us * 1e-6;
  GemmProblem moved = p;
  moved.a_format = a_moved;
  moved.b_format = b_moved;
  row.tflops = gemm_flops(p) / seconds / 1e12;
  row.gbps = gemm_min_bytes(moved) / seconds / 1e9;
  if (device_row && row.mode == "graph" && o.time_device_read) {
    try {
      const Timing read = o.time_device_read(gemm_min_bytes(moved), o.device, o.timing);
      if (read.graph.median_us > 0) {
        row.read_us = read.graph.median_us;
        row.pct_of_read = read.graph.median_us / *row.median_us * 100.0;
      }
    } catch (const std::exception& e) {
      add_warning(row, std::string("read floor not measured: ") + e.what());
    }
  }
  if (!device_row || !o.ceilings) return;

  const RooflinePoint own = roofline(p, a_moved, b_moved, *o.ceilings);
  row.bound = std::string(to_string(own.bound));
  row.bound_reason = own.reason;
  if (own.bound == Bound::unknown) return;
  row.roof_us = own.roof_s * 1e6;
  row.pct_of_roof = own.roof_s / seconds * 100.0;
  row.pct_compute_roof = own.compute_roof_s / seconds * 100.0;
  row.pct_memory_roof = own.memory_roof_s / seconds * 100.0;
  const RooflinePoint problem_roof = roofline(p, p.a_format, p.b_format, *o.ceilings);
  if (problem_roof.bound != Bound::unknown) row.pct_of_problem_roof = problem_roof.roof_s / seconds * 100.0;
  if (o.device.sm_count > 0) {
    if (fill) {
      // The runner's own launch says how the SMs fill; the 128 x 128 tile count is only a guess.
      try {
        row.bound_reason += "; " + summarize_launch_fill(*fill, o.device.sm_count).text;
      } catch (const InvalidArgument& e) {
        add_warning(row, std::string("launch fill not shown: ") + e.what());
      }
    } else if (const TileCoverage tiles = tile_coverage(p, o.device.sm_count); tiles.starved) {
      row.bound_reason += "; " + tiles.text;
    }
  }
  // DESIGN: a point above its roof is a counting error (or a ceiling set too low).
  if (*row.pct_of_roof > 100.0) {
    add_warning(row, "faster than its roof (" + format_fixed(*row.pct_of_roof, 1) +
                         "%): a byte/FLOP counting error or a ceiling below the device's");
  }
}

void run_backend(GemmBackend& backend, const GemmInputs& inputs, const GemmBenchOptions& o,
                 ReferenceCache& references, GemmRow& row) {
  const GemmProblem& p = inputs.problem;
  auto say = [&](const std::string& step) {
    if (o.progress) o.progress(p.label() + ": " + std::string(backend.name()) + ": " + step);
  };
  say("prepare");
  std::unique_ptr<GemmRunner> runner = backend.prepare(inputs, 1);
  const bool device_row = runner->on_device();
  const double macs = multiply_adds(p);
  if (!device_row && o.host_backend_max_macs > 0 && macs > o.host_backend_max_macs) {
    row.status = RowStatus::not_supported;
    row.reason = "host backend skipped: " + format_fixed(macs / 1e9, 1) + "e9 multiply-adds is above " +
                 format_fixed(o.host_backend_max_macs / 1e9, 1) + "e9 (name it in --backends to run it)";
    return;
  }
  const OperandFormat a_moved = runner->a_operand().format;
  const OperandFormat b_moved = runner->b_operand().format;
  row.operands = std::string(to_string(a_moved)) + " x " + std::string(to_string(b_moved));
  row.rounds_operands = !holds_exactly(p.a_format, a_moved) || !holds_exactly(p.b_format, b_moved);
  if (device_row && o.device.l2_bytes > 0) {
    GemmProblem moved = p;
    moved.a_format = a_moved;
    moved.b_format = b_moved;
    const double bytes = gemm_min_bytes(moved);
    const int sets = input_sets_for_cold_cache(bytes, o.device.l2_bytes, kMaxInputSets);
    if (sets * bytes <= 2.0 * static_cast<double>(o.device.l2_bytes)) {
      add_warning(row, "input sets capped at " + std::to_string(sets) + ": " + format_bytes(sets * bytes) +
                           " is under 2x L2, so part of the data stays cached");
    }
    if (sets > 1) {
      runner.reset();  // free the single-set copy before allocating the rotation
      say("prepare " + std::to_string(sets) + " input sets");
      runner = backend.prepare(inputs, sets);
    }
  }
  if (device_row && o.time_device_runner && predecessor_allows_early_launch(o.predecessor)) {
    runner->request_programmatic_launch();
  }
  row.config = runner->config();
  const int sets = runner->input_sets();

  say("run and verify");
  runner->poison_output();
  runner->run(0, nullptr);
  if (sets > 1) runner->run(sets - 1, nullptr);
  const bool cpu_only = backend.name() == kGpuReferenceBackend;
  const CachedReference ref = references.get(*runner, cpu_only, p, o, row.warnings);
  row.reference = ref.source;
  const auto expected = static_cast<std::size_t>(p.m * p.n);
  // The first and the last input set: a rotation copy that differs shows up here, not in timing.
  VerifyResult v;
  for (int set : sets > 1 ? std::vector<int>{0, sets - 1} : std::vector<int>{0}) {
    const std::vector<float> got = runner->read_output(set);
    if (got.size() != expected) {
      row.status = RowStatus::incorrect;
      row.reason = "read_output(" + std::to_string(set) + ") returned " + std::to_string(got.size()) +
                   " values, expected m*n = " + std::to_string(expected);
      return;
    }
    v = verify_gemm_output(got.data(), *ref.result, p.k, p.out_type, runner->tensor_core_error_bound());
    row.max_abs_error = std::max(row.max_abs_error.value_or(0.0), v.max_abs_error);
    row.max_rel_error = std::max(row.max_rel_error.value_or(0.0), v.max_rel_error);
    if (!v.passed) {
      row.status = RowStatus::incorrect;
      row.reason = (set > 0 ? "input set " + std::to_string(set) + ": " : std::string()) + v.message;
      return;
    }
  }
  row.status = RowStatus::passed;

  if (device_row) {
    if (o.time_device_runner) {
      say("time");
      try {
        time_on_device(*runner, p, o, row);
      } catch (const std::exception& e) {
        // A fault while timing (other input sets, graph replay) is not a clean pass.
        row.status = RowStatus::error;
        row.reason = std::string("timing failed after the output verified: ") + e.what();
        return;
      }
    } else {
      add_warning(row, "not timed: no GPU timer in this build");
    }
  } else if (o.host_timing_runs > 0) {
    say("time on the host");
    time_on_host(*runner, o.host_timing_runs, row);
  }
  fill_rates(p, a_moved, b_moved, device_row, runner->launch_fill(), o, row);
}

void rows_for_case(const GemmCase& c, const std::vector<GemmBackend*>& backends, const GemmBenchOptions& o,
                   std::vector<GemmRow>& rows) {
  const Status valid = c.status.is_ok() ? validate_problem(c.problem) : c.status;
  if (!valid.is_ok()) {
    std::string names;
    for (const GemmBackend* backend : backends) append_joined(names, ",", backend->name());
    GemmRow row = base_row(c, "-", names, o);
    row.status = RowStatus::invalid_problem;
    row.reason = valid.reason;
    if (o.on_row) o.on_row(row);
    rows.push_back(std::move(row));
    return;
  }
  std::unique_ptr<GemmInputs> inputs;  // made once, for the first backend that runs
  ReferenceCache references;
  for (GemmBackend* backend : backends) {
    GemmRow row = base_row(c, backend->name(), backend->name(), o);
    try {
      const Status s = backend->supports(c.problem, o.device);
      if (!s.is_ok()) {
        row.status = s.code == StatusCode::invalid_problem ? RowStatus::invalid_problem : RowStatus::not_supported;
        row.reason = s.reason;
      } else {
        if (!inputs) {
          if (o.progress) o.progress(c.problem.label() + ": inputs (seed " + std::to_string(o.seed) + ")");
          inputs = std::make_unique<GemmInputs>(make_gemm_inputs(c.problem, o.seed, o.distribution));
        }
        run_backend(*backend, *inputs, o, references, row);
      }
    } catch (const std::exception& e) {
      row.status = RowStatus::error;
      row.reason = e.what();
    }
    if (o.on_row) o.on_row(row);
    rows.push_back(std::move(row));
  }
}

}  // namespace

std::vector<GemmRow> run_gemm_bench(const std::vector<GemmCase>& cases, const std::vector<GemmBackend*>& backends,
                                    const GemmBenchOptions& options) {
  std::vector<GemmRow> rows;
  for (const GemmCase& c : cases) rows_for_case(c, backends, options, rows);
  fill_speedups(rows);
  return rows;
}

void fill_speedups(std::vector<GemmRow>& rows) {
  for (GemmRow& r : rows) {
    r.speedup_vs_cublas_bf16.reset();
    r.sustained_vs_cublas_bf16.reset();
    if (r.status != RowStatus::passed || !r.median_us || *r.median_us <= 0) continue;
    for (const GemmRow& base : rows) {
      if (base.backend == kCublasBf16Backend && base.status == RowStatus::passed && base.median_us &&
          base.problem == r.problem && base.shape_name == r.shape_name && base.mode == r.mode) {
        r.speedup_vs_cublas_bf16 = *base.median_us / *r.median_us;
        if (base.sustained_us && r.sustained_us && *r.sustained_us > 0) {
          r.sustained_vs_cublas_bf16 = *base.sustained_us / *r.sustained_us;
        }
        break;
      }
    }
  }
}

std::vector<GemmBackend*> select_backends(std::string_view list) {
  if (list == "all") return gemm_backends();
  std::vector<GemmBackend*> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = list.find(',', begin);
    const std::string_view name = list.substr(begin, comma == std::string_view::npos ? std::string_view::npos
                                                                                    : comma - begin);
    GemmBackend* b = find_gemm_backend(name);
    if (!b) {
      std::string known;
      for (GemmBackend* r : gemm_backends()) append_joined(known, ", ", r->name());
      throw InvalidArgument("unknown backend \"" + std::string(name) + "\" (registered: " +
                            (known.empty() ? "none" : known) + "; or \"all\")");
    }
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::string_view input_distribution_name(InputDistribution d) {
  return d == InputDistribution::random ? "random" : "exact-grid";
}

InputDistribution parse_input_distribution(std::string_view s) {
  if (s == "random") return InputDistribution::random;
  if (s == "exact-grid") return InputDistribution::exact_grid;
  throw InvalidArgument("unknown input distribution \"" + std::string(s) + "\" (choices: random, exact-grid)");
}

std::string repro_command(const GemmProblem& p, std::string_view backend, std::uint64_t seed,
                          InputDistribution distribution, std::string_view extra) {
  std::ostringstream s;
  s << "fp4gap gemm --m " << p.m << " --n " << p.n << " --k " << p.k << " --a-format " << to_string(p.a_format)
    << " --b-format " << to_string(p.b_format) << " --out " << to_string(p.out_type) << " --backends " << backend
    << " --seed " << seed << " --distribution " << input_distribution_name(distribution);
  if (!extra.empty()) s << " " << extra;
  return s.str();
}

}  // namespace fp4gap
