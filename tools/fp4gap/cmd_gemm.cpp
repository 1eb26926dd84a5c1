// fp4gap gemm: every chosen backend on every chosen shape, verified against the reference, then
// timed and placed on the roofline. Exit 1 when any backend computed a wrong result.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/gemm_bench.hpp"

namespace fp4gap::cli {
namespace {

struct GemmArgs {
  ShapeOptions shape;
  std::string a_format = "nvfp4";
  std::string b_format = "nvfp4";
  std::string out = "bf16";
  std::string backends = "all";
  std::uint64_t seed = 1;
  std::string distribution = "random";
  std::string format = "table";
  std::string output;
  std::string ceilings;
  std::string after = "itself";
  double sustain_ms = 0.0;
  bool progress = false;
  std::string tune_cache;
};

std::vector<GemmCase> make_cases(const GemmArgs& a, CLI::App& cmd) {
  GemmProblem formats;
  formats.a_format = parse_operand_format(a.a_format);
  formats.b_format = parse_operand_format(a.b_format);
  formats.out_type = parse_out_option(a.out);
  return shape_cases(a.shape, formats, cmd);
}

void run_gemm(const GemmArgs& a, CLI::App& cmd) {
  const std::vector<GemmCase> cases = make_cases(a, cmd);
  check_sustain_option(a.sustain_ms, a.after);
  GemmBenchOptions options = gemm_bench_options(query_device(0));
  options.seed = a.seed;
  options.distribution = parse_input_distribution(a.distribution);
  const std::vector<GemmBackend*> backends = select_backends(a.backends);
  // "all" includes the CPU reference backend, which would take minutes on large shapes; named
  // explicitly it runs at any size its own limit allows.
  if (a.backends == "all") options.host_backend_max_macs = 8589934592.0;  // 2^33
  if (!a.ceilings.empty()) options.repro_extra = "--ceilings " + a.ceilings;
  apply_sustain_option(a.sustain_ms, a.after, options);
  if (a.progress) options.on_row = row_line;

  RunContext context;
  context.device = options.device;
  const CeilingsChoice ceilings = choose_ceilings(options.device, a.ceilings);
  context.ceilings = ceilings.ceilings;
  context.notes = ceilings.notes;
  apply_after_option(a.after, options, context.notes);
  apply_tune_cache_option(a.tune_cache, context.notes);
  options.ceilings = ceilings.ceilings;

  const std::vector<GemmRow> rows = run_gemm_bench(cases, backends, options);

  std::ostringstream text;
  if (a.format == "table") {
    write_run_header(text, context);
    text << "\n";
    write_table(text, rows);
  } else if (a.format == "csv") {
    write_run_header(std::cerr, context);
    write_csv(text, rows);
  } else {
    text << to_json(context, rows);
  }
  write_output(a.output, text.str());
  std::cerr << rows_summary(rows) << (a.output.empty() ? "" : "; written to " + a.output) << "\n";
  const int code = exit_code_for(rows);
  if (code != kExitOk) exit_with(code);
}

}  // namespace

void add_gemm_command(CLI::App& app) {
  auto args = std::make_shared<GemmArgs>();
  CLI::App* cmd = app.add_subcommand("gemm", "Verify, time and place on the roofline every backend for the given shapes");
  add_shape_options(*cmd, args->shape);
  cmd->add_option("--a-format", args->a_format, "A (activation) format")->check(CLI::IsMember({"nvfp4", "bf16", "e4m3"}));
  cmd->add_option("--b-format", args->b_format, "B (weight, N x K) format")->check(CLI::IsMember({"nvfp4", "bf16", "e4m3"}));
  cmd->add_option("--out", args->out, "output type")->check(CLI::IsMember({"bf16", "fp16", "f16", "f32", "fp32"}));
  cmd->add_option("--backends", args->backends, "comma-separated backend names, or all");
  cmd->add_option("--seed", args->seed, "input seed (same inputs for every backend)");
  cmd->add_option("--distribution", args->distribution, "input values")->check(CLI::IsMember({"random", "exact-grid"}));
  cmd->add_option("--format", args->format, "report format")->check(CLI::IsMember({"table", "csv", "json"}));
  cmd->add_option("--output", args->output, "write the report to FILE instead of stdout");
  add_after_option(*cmd, args->after);
  add_sustain_option(*cmd, args->sustain_ms);
  add_tune_cache_option(*cmd, args->tune_cache);
  cmd->add_flag("--progress", args->progress, "print each row to stderr as soon as it is finished");
  cmd->add_option("--ceilings", args->ceilings,
                  "roofline ceilings: FILE from `fp4gap peak --output`, datasheet, or measure (default: measure "
                  "when a device exists)");
  cmd->callback([args, cmd] { run_gemm(*args, *cmd); });
}

}  // namespace fp4gap::cli
