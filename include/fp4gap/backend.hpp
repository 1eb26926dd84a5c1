#pragma once
// The backend registry: every implementation (own kernels, cuBLAS baselines, references) answers
// supports(problem, device) with a reason, and runs on the same seeded inputs.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/problem.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap {

// The CUDA device at hand, or why there is none. Plain data: filled by query_device() (CUDA
// library); host code and tests construct it freely.
struct DeviceContext {
  bool available = false;
  std::string unavailable_reason;  // e.g. "no CUDA device: cudaGetDeviceCount: no CUDA-capable device"
  int ordinal = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::int64_t smem_per_block_optin = 0;  // bytes
  std::int64_t l2_bytes = 0;
  std::int64_t global_mem_bytes = 0;
  int sm_clock_mhz = 0;                   // max SM clock from the device properties
  std::string driver_version;             // e.g. "13.0"
  std::string runtime_version;
  std::string cublas_version;
};

enum class InputDistribution {
  random,      // seeded normal values, per-row magnitudes varying over a few octaves, then quantized
  exact_grid,  // E2M1 grid values with power-of-two block scales: every partial sum exact in fp32
};

// Host inputs of one problem, identical for every backend.
struct GemmInputs {
  GemmProblem problem;
  std::uint64_t seed = 0;
  InputDistribution distribution = InputDistribution::random;
  Nvfp4Matrix a_fp4, b_fp4;                // filled for nvfp4 operands (LINEAR scales)
  std::vector<std::uint16_t> a_bf16, b_bf16;  // bf16 operands; for nvfp4 operands the exact
                                              // dequantized values e2m1*scale (no global scale)
  double alpha = 1.0;                      // 1/(gs_a*gs_b) over the nvfp4 operands

  OperandView a_view() const;  // the problem's operands as the reference multiplies them
  OperandView b_view() const;
};
GemmInputs make_gemm_inputs(const GemmProblem& problem, std::uint64_t seed,
                            InputDistribution distribution = InputDistribution::random);

// How one launch of a runner fills the SMs (GemmRunner::launch_fill), for the report's "why":
// the CTAs it launches, how many of them the device holds at once (clusters and shared memory
// counted), and the tiles of equal work they run: as many as the CTAs, or more where persistent
// CTAs loop over tiles. `halved_wave_cost`: where a persistent launch runs its partial last wave
// as pairs of units (half tiles, or halves of K: charged as half tiles, as the cost model charges
// them), that wave's time in whole tiles (0: no such wave). `m` (0: not said), `tile_rows`,
// `row_tiles`: the GEMM's rows and how its tiles cover them, row_tiles = ceil(m / tile_rows); the
// rows past m cost tensor work that no output keeps.
struct LaunchFill {
  std::int64_t ctas = 0;
  std::int64_t ctas_at_once = 0;
  std::int64_t tiles = 0;
  double halved_wave_cost = 0.0;
  std::int64_t m = 0;
  std::int64_t tile_rows = 0;
  std::int64_t row_tiles = 0;
};

// One backend prepared for one problem: its operands resident (on the device for GPU backends),
// `input_sets` rotated copies so that timed launches read cold weights.
class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  virtual int input_sets() const = 0;
  // One launch on input set `set`, asynchronous on `stream` (a cudaStream_t; ignored on the CPU).
  virtual void run(int set, void* stream) = 0;
  virtual void poison_output() = 0;                        // fill every output with NaN
  virtual std::vector<float> read_output(int set) = 0;     // blocking; converted to float
  // What this runner really multiplies (e.g. FP8 re-quantizes), for the reference and roofline.
  virtual OperandView a_operand() const = 0;
  virtual OperandView b_operand() const = 0;
  virtual double alpha() const = 0;
  virtual std::string config() const { return {}; }        // chosen tactic/tile, printable
  // Accumulation error beyond float32's, relative to sum |a*b| (verify.hpp). 0 for paths whose
  // products are exact and summed in float32; FP8 tensor cores on Hopper align each group of
  // products to its largest exponent and keep ~14 bits (DeepSeek-V3 report, section 3.3.2), so
  // a 32-product group can be off by 32 * 2^-14 = 2^-9 of its absolute sum.
  virtual double tensor_core_error_bound() const { return 0.0; }
  virtual bool on_device() const = 0;
  // The device bf16 activations [M, K] (row-major, a_operand()'s values) that run(set) reads, for
  // a caller that rewrites them right before the GEMM, as the previous kernel of a serving graph
  // does (`fp4gap gemm --after norm`: they are then in L2); nullptr where the runner reads no
  // such buffer (NVFP4, FP8 or fp16 activations, host runners).
  virtual std::uint16_t* bf16_activations(int set) {
    static_cast<void>(set);
    return nullptr;
  }
  // Asks the runner to launch its next runs as programmatic dependents of the kernel before them
  // (sm_90 griddepcontrol: they start while it runs and wait for it before they read what it
  // wrote). Behind a kernel that lets the next one launch early this hides the launch and the
  // first weight loads; behind one that does not, or behind itself, it can cost (PERF-LOG run
  // 90). Returns whether the runner now launches so; runners whose launches do not change
  // (cuBLAS, host, the prefill tiles that always launch so) return false and ignore it.
  virtual bool request_programmatic_launch() { return false; }
  // How the main launch fills the SMs; none where the runner does not say (cuBLAS chooses inside).
  virtual std::optional<LaunchFill> launch_fill() const { return std::nullopt; }
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual Status supports(const GemmProblem& p, const DeviceContext& device) const = 0;
  // Called only after supports() returned ok.
  virtual std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int input_sets) = 0;
};

// The registry. The host library registers cpu-reference; the CUDA library's
// register_cuda_backends() adds the GPU backends. Names are unique.
void register_gemm_backend(std::unique_ptr<GemmBackend> backend);
std::vector<GemmBackend*> gemm_backends();
GemmBackend* find_gemm_backend(std::string_view name);  // nullptr when unknown
void register_host_backends();                          // idempotent

}  // namespace fp4gap
