#pragma once
// Helpers shared by the fp4gap subcommands: exit codes, output files, the device/ceilings header.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fp4gap/backend.hpp"
#include "fp4gap/gemm_bench.hpp"
#include "fp4gap/report.hpp"
#include "fp4gap/roofline.hpp"

namespace fp4gap::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitIncorrect = 1;  // a backend produced a wrong result
inline constexpr int kExitError = 2;      // bad input, I/O or CUDA failure (an exception)
inline constexpr int kExitNoDevice = 3;   // the command needs a CUDA device

// Ends the subcommand with `code`; main() returns it (CLI11's RuntimeError carries it).
[[noreturn]] inline void exit_with(int code) { throw CLI::RuntimeError(code); }

// Writes `text` to `path`, or to stdout when path is empty or "-". Throws RuntimeError on I/O failure.
void write_output(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

// The ceilings a run measures against. `choice`: "" (auto: measured when a device exists, the
// datasheet of the device when measuring fails), "measure", "datasheet", or a file written by
// `fp4gap peak --output`. notes say where they came from and what failed on the way.
struct CeilingsChoice {
  std::optional<Ceilings> ceilings;
  std::vector<std::string> notes;
};
CeilingsChoice choose_ceilings(const DeviceContext& device, const std::string& choice);

// Device lines, ceilings and notes, one per line.
void write_run_header(std::ostream& out, const RunContext& context);

// Progress lines on stderr when it is a terminal (keeps pipes and logs clean).
// The file name of a path (what sidecar JSON files record, so the set can be moved together).
std::string basename_of(const std::string& path);
void progress_line(const std::string& text);
// --progress: one line per finished row on stderr (status, graph and event medians, config or
// reason), whether or not stderr is a terminal, so that a run cut short leaves its results.
void row_line(const GemmRow& row);

// --out: the names the rest of the tool prints (f16, f32) and the common spellings (fp16, fp32).
OutputType parse_out_option(const std::string& s);

// --m, --n, --k, --preset and --tp: the shapes of gemm, plan and tune.
struct ShapeOptions {
  std::string m, n, k;
  std::string preset;
  int tp = 1;
};
// Registers them; shape_cases reads them.
void add_shape_options(CLI::App& cmd, ShapeOptions& shape);
// --preset alone, checked against presets.hpp's names.
void add_preset_option(CLI::App& cmd, std::string& preset);

// The shapes of a command's --m/--n/--k (every combination) or of --preset [--m] [--tp], with
// the operand formats and output type of `formats`. Throws InvalidArgument naming the rule when
// the options are combined wrongly (reads cmd.count for --n, --k, --tp).
std::vector<GemmCase> shape_cases(const ShapeOptions& shape, const GemmProblem& formats, CLI::App& cmd);

// Registers the host and CUDA backends and returns pipeline options wired to the CUDA library's
// timer (time_runner_after) and GPU reference (gpu_reference_gemm), with progress on a terminal.
GemmBenchOptions gemm_bench_options(const DeviceContext& device);

// --after NAME (gemm, diagnose): what runs before each timed GPU launch (timing.hpp).
void add_after_option(CLI::App& cmd, std::string& after);
// Sets options.predecessor from --after, appends it to the repro lines and, unless it is itself,
// a header note saying what the times mean.
void apply_after_option(const std::string& after, GemmBenchOptions& options, std::vector<std::string>& notes);

// --sustain MS (gemm, diagnose): each GPU row's graph also replayed for MS milliseconds at the
// power and clock the GPU settles at (timing.hpp). Throws InvalidArgument naming the rule for an
// MS outside [0, 60000] or combined with an --after other than itself (check_sustain_option, so a
// command can reject it before any work); apply_sustain_option also appends it to the repros.
void add_sustain_option(CLI::App& cmd, double& sustain_ms);
void check_sustain_option(double sustain_ms, const std::string& after);
void apply_sustain_option(double sustain_ms, const std::string& after, GemmBenchOptions& options);

// --tune-cache FILE (gemm, diagnose): the prefill backends run the plans `fp4gap tune` measured
// fastest there for this device and problem. apply_tune_cache_option loads it (InvalidArgument
// naming the file and the rule broken when it cannot) and adds the header note that says which
// cache is in use, FP4GAP_TUNE_CACHE's too.
void add_tune_cache_option(CLI::App& cmd, std::string& path);
void apply_tune_cache_option(const std::string& path, std::vector<std::string>& notes);

// kExitIncorrect when a row is incorrect, else kExitError when a row is an error, else kExitOk.
int exit_code_for(const std::vector<GemmRow>& rows);
// "12 rows: 9 passed, 1 BROKEN (incorrect), 2 not supported, 0 invalid, 0 errors"
std::string rows_summary(const std::vector<GemmRow>& rows);

// The datasheet table of every known GPU with its sources, for `info` and `peak`.
void write_datasheet_table(std::ostream& out);

}  // namespace fp4gap::cli
