// fp4gap diagnose: the main job. With a CUDA device: ceilings, then every backend on a preset's
// shapes (glm5 unless --preset says otherwise) at decode/mid/prefill M, then a verdict per shape.
// Without one: says so plainly and checks the verification pipeline with the CPU reference on
// small problems.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/gemm_bench.hpp"
#include "fp4gap/presets.hpp"
#include "fp4gap/ranges.hpp"

namespace fp4gap::cli {
namespace {

struct DiagnoseArgs {
  std::string preset = "glm5";
  std::string m = "16,512,4096";
  std::string formats = "w4a4,w4a16";
  int tp = 1;
  std::uint64_t seed = 1;
  std::string ceilings;
  std::string output;
  std::string after = "itself";
  double sustain_ms = 0.0;
  bool progress = false;
  std::string tune_cache;
};

bool is_reference_backend(std::string_view name) {
  constexpr std::string_view suffix = "-reference";
  return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

// Small W4A4 and W4A16 problems the CPU reference checks in well under a second.
std::vector<GemmCase> cpu_check_cases() {
  std::vector<GemmCase> cases;
  for (const auto& [name, a_format] : {std::pair{"W4A4", OperandFormat::nvfp4}, std::pair{"W4A16", OperandFormat::bf16}}) {
    for (std::int64_t m : {1, 16}) {
      GemmProblem p;
      p.m = m;
      p.n = 256;
      p.k = 512;
      p.a_format = a_format;
      p.b_format = OperandFormat::nvfp4;
      p.out_type = OutputType::bf16;
      cases.push_back({name, p, Status::ok()});
    }
  }
  return cases;
}

// The operand formats of the diagnose table: w4a4 (nvfp4 x nvfp4, the cutlass_scaled_fp4_mm
// serving case) and w4a16 (bf16 activations x nvfp4 weight), both -> bf16.
std::vector<GemmProblem> diagnose_formats(const std::string& list) {
  std::vector<GemmProblem> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t comma = list.find(',', begin);
    const std::string name = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    GemmProblem p;
    p.b_format = OperandFormat::nvfp4;
    p.out_type = OutputType::bf16;
    if (name == "w4a4") {
      p.a_format = OperandFormat::nvfp4;
    } else if (name == "w4a16") {
      p.a_format = OperandFormat::bf16;
    } else {
      throw InvalidArgument("--formats takes w4a4 and/or w4a16, comma-separated: got \"" + name + "\"");
    }
    out.push_back(p);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

int diagnose_without_device(const DeviceContext& device, const DiagnoseArgs& a, std::ostream& out) {
  out << describe_unavailable(device) << "; measurement needs a CUDA device\n"
      << "Checking the verification pipeline on the CPU instead: the cpu-reference backend on small W4A4 "
         "and W4A16 problems (m 1 and 16, n 256, k 512), verified like every GPU backend would be.\n\n";
  GemmBenchOptions options = gemm_bench_options(device);
  options.seed = a.seed;
  if (a.progress) options.on_row = row_line;
  GemmBackend* cpu = find_gemm_backend("cpu-reference");
  if (!cpu) throw RuntimeError("the cpu-reference backend is not registered");
  const std::vector<GemmRow> rows = run_gemm_bench(cpu_check_cases(), {cpu}, options);
  write_table(out, rows);
  out << "\n" << rows_summary(rows) << "\n";
  const int code = exit_code_for(rows);
  out << (code == kExitOk ? "The CPU pipeline is sound. " : "The CPU pipeline FAILED its checks. ")
      << "Run fp4gap diagnose on a machine with a CUDA device to measure kernels.\n";
  return code;
}

// `formats` and `ms`: --formats and --m, parsed by run_diagnose.
int diagnose_with_device(const DeviceContext& device, const DiagnoseArgs& a, const std::vector<GemmProblem>& formats,
                         const std::vector<std::int64_t>& ms, std::ostream& out) {
  GemmBenchOptions options = gemm_bench_options(device);
  options.seed = a.seed;
  RunContext context;
  context.device = device;
  const CeilingsChoice ceilings = choose_ceilings(device, a.ceilings);
  context.ceilings = ceilings.ceilings;
  context.notes = ceilings.notes;
  options.ceilings = ceilings.ceilings;
  if (!a.ceilings.empty()) options.repro_extra = "--ceilings " + a.ceilings;
  apply_sustain_option(a.sustain_ms, a.after, options);
  apply_after_option(a.after, options, context.notes);
  apply_tune_cache_option(a.tune_cache, context.notes);
  if (a.progress) options.on_row = row_line;
  write_run_header(out, context);
  out << "\n";

  std::vector<GemmCase> cases;
  for (const GemmProblem& f : formats) {
    for (const PresetShape& s : preset_shapes(a.preset, a.tp, f, ms)) cases.push_back({s.name, s.problem, s.status});
  }
  std::vector<GemmBackend*> backends;
  for (GemmBackend* b : gemm_backends()) {
    if (!is_reference_backend(b->name())) backends.push_back(b);
  }
  const std::vector<GemmRow> rows = run_gemm_bench(cases, backends, options);
  write_table(out, rows);
  out << "\nverdict:\n";
  for (const std::string& line : shape_verdicts(rows)) out << "  " << line << "\n";
  out << "\n" << rows_summary(rows) << "\n";
  return exit_code_for(rows);
}

void run_diagnose(const DiagnoseArgs& a) {
  // A bad --formats, --m or --sustain is an error on any machine, before any work.
  const std::vector<GemmProblem> formats = diagnose_formats(a.formats);
  const std::vector<std::int64_t> ms = parse_range_list(a.m);
  check_sustain_option(a.sustain_ms, a.after);
  const DeviceContext device = query_device(0);
  // Straight to stdout, so a long GPU run shows its header before the table is done.
  std::ostringstream buffered;
  std::ostream& out = a.output.empty() ? std::cout : buffered;
  const int code =
      device.available ? diagnose_with_device(device, a, formats, ms, out) : diagnose_without_device(device, a, out);
  out << std::flush;
  if (!a.output.empty()) write_output(a.output, buffered.str());
  if (code != kExitOk) exit_with(code);
}

}  // namespace

void add_diagnose_command(CLI::App& app) {
  auto args = std::make_shared<DiagnoseArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diagnose", "The main job: ceilings, every backend on a model's expert shapes (glm5 by default), and a verdict "
                  "per shape");
  add_preset_option(*cmd, args->preset);
  cmd->add_option("--m", args->m, "M values of the preset's shapes (list/ranges)");
  cmd->add_option("--formats", args->formats, "operand formats of the table: w4a4, w4a16 or both (comma-separated)");
  cmd->add_option("--tp", args->tp, "tensor-parallel degree splitting the intermediate dimension")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "input seed");
  cmd->add_option("--ceilings", args->ceilings, "FILE from `fp4gap peak --output`, datasheet, or measure (default)");
  cmd->add_option("--output", args->output, "write the report to FILE instead of stdout");
  add_after_option(*cmd, args->after);
  add_sustain_option(*cmd, args->sustain_ms);
  add_tune_cache_option(*cmd, args->tune_cache);
  cmd->add_flag("--progress", args->progress, "print each row to stderr as soon as it is finished");
  cmd->callback([args] { run_diagnose(*args); });
}

}  // namespace fp4gap::cli
