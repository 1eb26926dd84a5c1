#pragma once
// The one GEMM pipeline behind `fp4gap gemm` and `fp4gap diagnose`, for a list of problems x
// backends:
//   validate -> supports -> make_gemm_inputs(seed) -> prepare -> poison_output -> run -> read_output
//   -> reference (CPU, or on the GPU for large problems) -> verify_gemm_output
//   -> time (GPU: graph + event modes over cold input sets; CPU: std::chrono) -> roofline -> row.
// A backend whose output fails verification is reported incorrect (BROKEN) and never timed.
// Host code: GPU timing is injected (time_device_runner), so the pipeline runs and is tested
// without the CUDA library.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/report.hpp"
#include "fp4gap/roofline.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {

struct GemmCase {
  std::string shape_name;        // e.g. "glm5.W13"; empty for plain shapes
  GemmProblem problem;
  Status status = Status::ok();  // a preset's own verdict (tp); validate_problem runs as well
};

inline constexpr std::string_view kGpuReferenceBackend = "gpu-reference";
inline constexpr std::string_view kCublasBf16Backend = "cublas-bf16";

struct GemmBenchOptions {
  std::uint64_t seed = 1;
  InputDistribution distribution = InputDistribution::random;
  DeviceContext device;               // unavailable: only host backends can run
  std::optional<Ceilings> ceilings;   // roofline columns of GPU rows stay empty without
  TimingOptions timing;
  // What runs before each timed launch of a GPU row (timing.hpp). Not itself: the row's mode is
  // "graph-after-<name>" and its time what the GEMM adds to that sequence; the read floor, timed
  // back to back, is then left out.
  Predecessor predecessor = Predecessor::itself;
  // Times a verified runner of the problem that lives on the device, behind the predecessor (the
  // CLI passes fp4gap::time_runner_after). Empty: such rows are verified but not timed, with a
  // warning.
  std::function<Timing(GemmRunner&, const GemmProblem&, Predecessor, const DeviceContext&, const TimingOptions&)>
      time_device_runner;
  // Times the read floor of a GPU row's bytes (the CLI passes fp4gap::time_read, remembering each
  // byte count it timed). Empty: read_us and pct_of_read stay empty.
  std::function<Timing(double bytes, const DeviceContext&, const TimingOptions&)> time_device_read;
  int host_timing_runs = 3;           // std::chrono samples of a host runner; 0: not timed
  // The reference computed on the device for host operands (the CLI passes
  // fp4gap::gpu_reference_gemm: double accumulation, d and abs_sum like reference_gemm). Used
  // for problems of at least gpu_reference_min_macs multiply-adds when the device is available
  // (the CPU reference would take too long); otherwise, when it fails, and always for the
  // kGpuReferenceBackend's own row, reference_gemm on the CPU.
  std::function<ReferenceResult(const OperandView& a, const OperandView& b, double alpha)> device_reference;
  double gpu_reference_min_macs = 4.0e9;
  // Host backends (runner not on the device) skip problems above this many multiply-adds, with a
  // not_supported row. 0: never skip.
  double host_backend_max_macs = 0.0;
  int reference_threads = 0;          // 0: all hardware threads
  std::function<void(const std::string&)> progress;  // one line per step; may be empty
  // Called with each row as it is finished (speedups are filled only at the end), so that a long
  // run that is cut short still leaves what it measured; may be empty.
  std::function<void(const GemmRow&)> on_row;
  std::string repro_extra;            // appended to every repro line, e.g. "--ceilings datasheet"
};

// Rows in case order, backends in the given order within a case. A case that fails validation
// gives one row with backend "-". Exceptions of a backend become a row with status error.
std::vector<GemmRow> run_gemm_bench(const std::vector<GemmCase>& cases,
                                    const std::vector<GemmBackend*>& backends,
                                    const GemmBenchOptions& options);

// Fills speedup_vs_cublas_bf16 of every timed row from the passed cublas-bf16 row of the same
// problem and timing mode (run_gemm_bench does this; exposed for tests).
void fill_speedups(std::vector<GemmRow>& rows);

// "all" (every registered backend) or a comma-separated list of names. Throws InvalidArgument
// naming the unknown backend and listing the registered ones.
std::vector<GemmBackend*> select_backends(std::string_view list);

std::string_view input_distribution_name(InputDistribution d);       // "random", "exact-grid"
InputDistribution parse_input_distribution(std::string_view s);      // throws InvalidArgument

// The command line that reruns one (problem, backend) pair.
std::string repro_command(const GemmProblem& p, std::string_view backend, std::uint64_t seed,
                          InputDistribution distribution, std::string_view extra = {});

}  // namespace fp4gap
