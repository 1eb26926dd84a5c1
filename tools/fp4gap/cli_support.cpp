#include "cli_support.hpp"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "fp4gap/cuda_api.hpp"
#include "fp4gap/cuda_reference.hpp"
#include "fp4gap/device_specs.hpp"
#include "fp4gap/presets.hpp"
#include "fp4gap/ranges.hpp"
#include "fp4gap/timing.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap::cli {

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return;
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) throw RuntimeError("cannot open output file " + path + " for writing");
  f << text;
  f.close();
  if (!f) throw RuntimeError("writing output file " + path + " failed");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RuntimeError("cannot open " + path + " for reading");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

CeilingsChoice choose_ceilings(const DeviceContext& device, const std::string& choice) {
  CeilingsChoice out;
  auto datasheet = [&](const std::string& why) {
    const DeviceSpec* spec = device.available ? find_device_spec(device.name) : nullptr;
    if (spec) out.ceilings = datasheet_ceilings(*spec);
    if (out.ceilings) {
      out.notes.push_back("ceilings: " + why + "datasheet " + std::string(spec->name));
    } else {
      out.notes.push_back("ceilings: none (" + why + (device.available ? "no datasheet entry for " + device.name
                                                                       : describe_unavailable(device)) +
                          "): roofline columns stay empty");
    }
  };
  if (choice.empty() || choice == "measure") {
    if (!device.available) {
      datasheet("");
      return out;
    }
    try {
      out.ceilings = measure_ceilings(device);
      out.notes.push_back("ceilings: measured (" + out.ceilings->source + ")");
    } catch (const std::exception& e) {
      if (choice == "measure") throw;
      datasheet(std::string("measuring failed: ") + e.what() + "; ");
    }
    return out;
  }
  if (choice == "datasheet") {
    datasheet("");
    return out;
  }
  out.ceilings = ceilings_from_json(read_file(choice));
  out.notes.push_back("ceilings: from " + choice + " (" + out.ceilings->source + ")");
  return out;
}

void write_run_header(std::ostream& out, const RunContext& context) {
  for (const std::string& line : describe_device(context.device)) out << line << "\n";
  if (context.ceilings) out << "ceilings: " << describe_ceilings(*context.ceilings) << "\n";
  const DeviceSpec* spec = context.device.available ? find_device_spec(context.device.name) : nullptr;
  if (const auto sheet = spec ? datasheet_ceilings(*spec) : std::nullopt) {
    if (!context.ceilings || context.ceilings->source != sheet->source) {
      out << "datasheet: " << describe_ceilings(*sheet) << "\n";
    }
  }
  for (const std::string& note : context.notes) out << note << "\n";
}

std::string basename_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void progress_line(const std::string& text) {
  if (::isatty(STDERR_FILENO)) std::cerr << "  .. " << text << "\n";
}

void row_line(const GemmRow& r) {
  std::ostringstream os;
  os << "row: " << r.problem << " " << r.backend << " " << to_string(r.status);
  if (r.median_us) os << " " << format_fixed(*r.median_us, 2) << " us " << r.mode;
  if (r.event_median_us) os << ", event " << format_fixed(*r.event_median_us, 2) << " us";
  os << " | " << (r.reason.empty() ? r.config : r.reason) << "\n";
  std::cerr << os.str() << std::flush;
}

GemmBenchOptions gemm_bench_options(const DeviceContext& device) {
  register_host_backends();
  register_cuda_backends();
  GemmBenchOptions o;
  o.device = device;
  o.time_device_runner = [](GemmRunner& runner, const GemmProblem& p, Predecessor before, const DeviceContext& d,
                             const TimingOptions& t) { return time_runner_after(runner, p, before, d, t); };
  // One read-floor timing per byte count: every backend of a case moving the same bytes shares it.
  o.time_device_read = [cache = std::make_shared<std::map<double, Timing>>()](
                           double bytes, const DeviceContext& d, const TimingOptions& t) {
    auto it = cache->find(bytes);
    if (it == cache->end()) it = cache->emplace(bytes, time_read(bytes, d, t)).first;
    return it->second;
  };
  o.device_reference = [](const OperandView& a, const OperandView& b, double alpha) {
    return gpu_reference_gemm(a, b, alpha);
  };
  o.progress = progress_line;
  return o;
}

OutputType parse_out_option(const std::string& s) {
  if (s == "fp16") return OutputType::f16;
  if (s == "fp32") return OutputType::f32;
  return parse_output_type(s);
}

void add_tune_cache_option(CLI::App& cmd, std::string& path) {
  cmd.add_option("--tune-cache", path,
                 "FILE written by `fp4gap tune`: the prefill backends run its fastest verified plan where it has one "
                 "for this device and problem (default: $FP4GAP_TUNE_CACHE, else none)");
}

void apply_tune_cache_option(const std::string& path, std::vector<std::string>& notes) {
  if (!path.empty()) tune::use_cache_file(path);
  const std::string note = tune::active_cache_note();
  if (!note.empty()) notes.push_back(note);
}

void add_after_option(CLI::App& cmd, std::string& after) {
  std::vector<std::string> names;
  for (const std::string_view name : predecessor_names()) names.emplace_back(name);
  cmd.add_option("--after", after,
                 "what runs before each timed GPU launch: itself (the same GEMM back to back; default), norm (an "
                 "elementwise kernel over the M x K bf16 activations), norm-pdl (the same, letting the GEMM launch "
                 "early), quantize (the NVFP4 activation quantizer)")
      ->check(CLI::IsMember(names));
}

void apply_after_option(const std::string& after, GemmBenchOptions& options, std::vector<std::string>& notes) {
  options.predecessor = parse_predecessor(after);
  if (options.predecessor == Predecessor::itself) return;
  options.repro_extra += (options.repro_extra.empty() ? "" : " ") + std::string("--after ") + after;
  notes.push_back("timed after " + after + " (--after): each GPU launch follows " +
                  std::string(predecessor_description(options.predecessor)) +
                  "; a row's time is the sequence's less that kernel's own, mode graph-after-" + after +
                  ", no read floor (it is timed back to back)");
}

void add_sustain_option(CLI::App& cmd, double& sustain_ms) {
  cmd.add_option("--sustain", sustain_ms,
                 "MS: after the graph timing, replay each GPU row back to back for MS milliseconds and report its "
                 "time per launch over the last half, with NVML's SM clock, power and clock-event reasons (0: off)");
}

void check_sustain_option(double sustain_ms, const std::string& after) {
  TimingOptions timing;
  timing.sustain_ms = sustain_ms;
  validate_sustain_options(timing);
  if (sustain_ms > 0.0 && after != "itself") {
    throw InvalidArgument("--sustain times back-to-back launches only: it cannot be combined with --after " + after);
  }
}

void apply_sustain_option(double sustain_ms, const std::string& after, GemmBenchOptions& options) {
  check_sustain_option(sustain_ms, after);
  options.timing.sustain_ms = sustain_ms;
  if (sustain_ms > 0.0) {
    std::ostringstream os;
    os << "--sustain " << sustain_ms;
    options.repro_extra += (options.repro_extra.empty() ? "" : " ") + os.str();
  }
}

int exit_code_for(const std::vector<GemmRow>& rows) {
  bool error = false;
  for (const GemmRow& r : rows) {
    if (r.status == RowStatus::incorrect) return kExitIncorrect;
    if (r.status == RowStatus::error) error = true;
  }
  return error ? kExitError : kExitOk;
}

std::string rows_summary(const std::vector<GemmRow>& rows) {
  int counts[5] = {0, 0, 0, 0, 0};
  for (const GemmRow& r : rows) ++counts[static_cast<int>(r.status)];
  std::ostringstream s;
  s << rows.size() << " rows: " << counts[static_cast<int>(RowStatus::passed)] << " passed, "
    << counts[static_cast<int>(RowStatus::incorrect)] << " BROKEN (incorrect), "
    << counts[static_cast<int>(RowStatus::not_supported)] << " not supported, "
    << counts[static_cast<int>(RowStatus::invalid_problem)] << " invalid problems, "
    << counts[static_cast<int>(RowStatus::error)] << " errors";
  return s.str();
}

void write_datasheet_table(std::ostream& out) {
  auto opt = [](const std::optional<double>& v, int decimals) {
    return v ? format_fixed(*v, decimals) : std::string("n/a");
  };
  auto bytes = [](const std::optional<std::int64_t>& v, double unit, const char* suffix) {
    return v ? format_fixed(static_cast<double>(*v) / unit, 0) + suffix : std::string("n/a");
  };
  out << "datasheet figures (dense tensor-core rates, FP32 accumulate):\n";
  std::vector<std::vector<std::string>> rows = {
      {"gpu", "arch", "SMs", "BF16 TFLOP/s", "FP8 TFLOP/s", "FP4 TFLOP/s", "memory TB/s", "smem/block", "L2"}};
  for (const DeviceSpec& s : device_specs()) {
    rows.push_back({std::string(s.name), std::string(s.architecture),
                    s.sm_count ? std::to_string(*s.sm_count) : "n/a", opt(s.bf16_dense_tflops, 1),
                    opt(s.fp8_dense_tflops, 1), s.has_fp4_tensor_cores ? opt(s.fp4_dense_tflops, 1) : "n/a",
                    opt(s.memory_tb_per_s, 2), bytes(s.smem_per_block_optin_bytes, 1024.0, " KiB"),
                    bytes(s.l2_bytes, 1024.0 * 1024.0, " MiB")});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line = " ";
    for (std::size_t c = 0; c < r.size(); ++c) line += " " + r[c] + std::string(width[c] - r[c].size() + 1, ' ');
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
  out << "sources:\n";
  for (const DeviceSpec& s : device_specs()) out << "  " << s.name << ": " << s.sources << "\n";
}

void add_shape_options(CLI::App& cmd, ShapeOptions& shape) {
  cmd.add_option("--m", shape.m, "M values: list/ranges, e.g. 1,16,64 or 16:4096:x2 or 128:1024:+128");
  cmd.add_option("--n", shape.n, "N values (same syntax)");
  cmd.add_option("--k", shape.k, "K values (same syntax)");
  add_preset_option(cmd, shape.preset);
  cmd.add_option("--tp", shape.tp, "tensor-parallel degree splitting the preset's intermediate dimension")
      ->check(CLI::PositiveNumber);
}

void add_preset_option(CLI::App& cmd, std::string& preset) {
  std::vector<std::string> presets;
  for (const std::string_view name : preset_names()) presets.emplace_back(name);
  cmd.add_option("--preset", preset,
                 "named shape set: an MoE model's expert weights W13 and W2 over M (glm5 adds the seed shape; "
                 "deepseek-v3: hidden 7168, intermediate 2048)")
      ->check(CLI::IsMember(presets));
}

std::vector<GemmCase> shape_cases(const ShapeOptions& shape, const GemmProblem& formats, CLI::App& cmd) {
  const auto& [m, n, k, preset, tp] = shape;
  std::vector<GemmCase> cases;
  if (!preset.empty()) {
    if (cmd.count("--n") || cmd.count("--k")) {
      throw InvalidArgument("--n and --k cannot be combined with --preset (the preset fixes them; --m may narrow M)");
    }
    const std::vector<std::int64_t> ms = m.empty() ? std::vector<std::int64_t>{} : parse_range_list(m);
    for (const PresetShape& s : preset_shapes(preset, tp, formats, ms)) {
      cases.push_back({s.name, s.problem, s.status});
    }
    return cases;
  }
  if (cmd.count("--tp")) throw InvalidArgument("--tp applies to --preset shapes only");
  if (m.empty() || n.empty() || k.empty()) {
    throw InvalidArgument("--m, --n and --k are all required unless --preset is given");
  }
  const auto ms = parse_range_list(m), ns = parse_range_list(n), ks = parse_range_list(k);
  for (std::int64_t nv : ns) {
    for (std::int64_t kv : ks) {
      for (std::int64_t mv : ms) {
        GemmProblem p = formats;
        p.m = mv;
        p.n = nv;
        p.k = kv;
        cases.push_back({"", p, Status::ok()});
      }
    }
  }
  return cases;
}

}  // namespace fp4gap::cli
