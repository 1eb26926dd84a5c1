// fp4gap bench-quantize: the GPU NVFP4 quantizer, first checked bit for bit against the CPU
// quantizer (codes, scales with padding, report, global scale), then timed in graph and event
// modes and compared with the memory roof and with a copy of the same bytes timed the same way.
// Exit 1 on a mismatch, 3 without a CUDA device.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/report.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap::cli {
namespace {

struct BenchQuantizeArgs {
  std::int64_t m = 8192;
  std::int64_t k = 8192;
  std::string dtype = "bf16";
  std::string layout = "swizzled";
  std::string global_scale;  // empty: computed on the device from the amax
  std::uint64_t seed = 1;
  std::string ceilings;      // as in `fp4gap gemm --ceilings`
};

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw RuntimeError(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

// Owning device allocation (the CLI does not include the CUDA library's private headers).
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes) : bytes_(bytes) { cuda_check(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  ~DeviceBytes() { static_cast<void>(cudaFree(ptr_)); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::uint8_t* get() const { return static_cast<std::uint8_t*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> host(bytes_);
    cuda_check(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

float parse_global_scale(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) || !(v > 0)) {
    throw InvalidArgument("--global-scale must be a finite float32 number > 0: got \"" + text + "\"");
  }
  return v;
}

// Seeded normal values whose row magnitudes spread over several octaves, as bf16/fp16 bits.
std::vector<std::uint8_t> make_input(std::int64_t m, std::int64_t k, ElementType type, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(m * k * 2));
  auto* out = reinterpret_cast<std::uint16_t*>(bytes.data());
  for (std::int64_t r = 0; r < m; ++r) {
    const float row_scale = std::ldexp(1.0f + 0.5f * static_cast<float>(r % 3), static_cast<int>(r % 7) - 3);
    for (std::int64_t c = 0; c < k; ++c) {
      const float v = normal(rng) * row_scale;
      out[r * k + c] = type == ElementType::bf16 ? float_to_bf16(v) : float_to_fp16(v);
    }
  }
  return bytes;
}

// "" when equal, else where and how they differ.
std::string compare_bytes(const char* what, const std::vector<std::uint8_t>& gpu, const std::vector<std::uint8_t>& cpu) {
  if (gpu.size() != cpu.size()) {
    return std::string(what) + ": GPU has " + std::to_string(gpu.size()) + " bytes, CPU " + std::to_string(cpu.size());
  }
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i] != cpu[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return {};
  std::ostringstream os;
  os << what << ": " << bad << " of " << gpu.size() << " bytes differ, first at byte " << first << " (GPU 0x"
     << std::hex << static_cast<int>(gpu[first]) << ", CPU 0x" << static_cast<int>(cpu[first]) << ")";
  return os.str();
}

bool same_report(const QuantizeReport& a, const QuantizeReport& b) {
  return a.nan_count == b.nan_count && a.inf_count == b.inf_count && a.first_nan_row == b.first_nan_row &&
         a.first_nan_col == b.first_nan_col && a.first_inf_row == b.first_inf_row &&
         a.first_inf_col == b.first_inf_col && a.saturated_scales == b.saturated_scales &&
         a.zero_scale_blocks == b.zero_scale_blocks && float_bits(a.amax) == float_bits(b.amax);
}

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

void run_bench_quantize(const BenchQuantizeArgs& args) {
  if (args.m < 1 || args.k < 1) {
    throw InvalidArgument("--m and --k must be >= 1: m = " + std::to_string(args.m) + ", k = " + std::to_string(args.k));
  }
  if (args.k % kBlockSize != 0) {
    throw InvalidArgument("--k % 16 != 0: k = " + std::to_string(args.k) + " (NVFP4 blocks are 16 elements)");
  }
  const ElementType type = args.dtype == "bf16" ? ElementType::bf16 : ElementType::f16;
  const ScaleLayout layout = args.layout == "linear" ? ScaleLayout::linear : ScaleLayout::swizzled_128x4;
  const std::optional<float> given_gs =
      args.global_scale.empty() ? std::nullopt : std::optional<float>(parse_global_scale(args.global_scale));

  const DeviceContext device = query_device();
  if (!device.available) {
    std::cerr << "bench-quantize needs a CUDA device: " << describe_unavailable(device) << "\n";
    exit_with(kExitNoDevice);
  }
  cuda_check(cudaSetDevice(device.ordinal), "cudaSetDevice");

  std::ostringstream title;
  title << "[" << args.m << ", " << args.k << "] " << args.dtype << " -> nvfp4, " << to_string(layout) << " scales, gs "
        << (given_gs ? "given" : "computed (2688 / amax)") << ", seed " << args.seed;
  progress_line("generate " + title.str());
  const std::vector<std::uint8_t> input = make_input(args.m, args.k, type, args.seed);

  progress_line("CPU quantizer");
  QuantizeReport cpu_report;
  const Nvfp4Matrix cpu = quantize_nvfp4(input.data(), type, args.m, args.k, QuantizeOptions{layout, given_gs}, &cpu_report);

  // ---- verify: report path, then the plain (timed) path ----
  progress_line("GPU quantizer: verify");
  const std::size_t code_bytes = cpu.codes.size();
  const std::size_t scale_bytes = cpu.scales.size();
  DeviceBytes d_input(input.size());
  cuda_check(cudaMemcpy(d_input.get(), input.data(), input.size(), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  DeviceBytes d_codes(code_bytes), d_scales(scale_bytes);
  DeviceQuantizeWorkspace ws;
  std::vector<std::string> problems;
  for (const bool with_report : {true, false}) {
    cuda_check(cudaMemset(d_codes.get(), 0xAB, code_bytes), "cudaMemset");  // poison
    cuda_check(cudaMemset(d_scales.get(), 0xAB, scale_bytes), "cudaMemset");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    QuantizeReport gpu_report;
    quantize_nvfp4_device(d_input.get(), type, args.m, args.k, layout, given_gs, d_codes.get(), d_scales.get(), ws,
                          nullptr, with_report ? &gpu_report : nullptr);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const char* path = with_report ? "report path" : "plain path";
    if (with_report && !same_report(gpu_report, cpu_report)) {
      problems.push_back(std::string("report (") + path + "): GPU " + gpu_report.summary() + "; CPU " +
                         cpu_report.summary());
    }
    const float gpu_gs = ws.read_global_scale(nullptr);
    if (float_bits(gpu_gs) != float_bits(cpu.global_scale)) {
      std::ostringstream os;
      os.precision(9);
      os << "global scale (" << path << "): GPU " << gpu_gs << ", CPU " << cpu.global_scale;
      problems.push_back(os.str());
    }
    for (const std::string& p : {compare_bytes("codes", d_codes.download(), cpu.codes),
                                 compare_bytes("scales", d_scales.download(), cpu.scales)}) {
      if (!p.empty()) problems.push_back(p + " (" + path + ")");
    }
  }
  std::cout << "bench-quantize " << title.str() << "\n";
  for (const std::string& line : describe_device(device)) std::cout << line << "\n";
  if (!problems.empty()) {
    std::cout << "BROKEN: the GPU quantizer differs from the CPU quantizer; not timed\n";
    for (const std::string& p : problems) std::cout << "  " << p << "\n";
    std::cout << "repro: fp4gap bench-quantize --m " << args.m << " --k " << args.k << " --dtype " << args.dtype
              << " --layout " << args.layout << (given_gs ? " --global-scale " + args.global_scale : "")
              << " --seed " << args.seed << "\n";
    exit_with(kExitIncorrect);
  }
  std::cout << "verified: codes, scales (padding included), report and global scale bit-identical to the CPU "
               "quantizer on both paths; report: "
            << cpu_report.summary() << "\n";
  if (cpu_report.saturated_scales > 0) {
    std::cout << "note: " << cpu_report.saturated_scales << " of " << args.m * (args.k / kBlockSize)
              << " block scales saturated (the global scale is too large for this data): those blocks take the "
                 "exact slow path, so the timings below are not comparable with a run at the default scale\n";
  }

  // ---- time ----
  const double io_bytes = static_cast<double>(input.size() + code_bytes + scale_bytes);
  const int sets = input_sets_for_cold_cache(io_bytes, device.l2_bytes, 64);
  std::vector<std::unique_ptr<DeviceBytes>> inputs, codes, scales;
  for (int s = 0; s < sets; ++s) {
    inputs.push_back(std::make_unique<DeviceBytes>(input.size()));
    cuda_check(cudaMemcpy(inputs.back()->get(), d_input.get(), input.size(), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    codes.push_back(std::make_unique<DeviceBytes>(code_bytes));
    scales.push_back(std::make_unique<DeviceBytes>(scale_bytes));
  }
  struct Path {
    std::string name;
    std::optional<float> gs;
    double bytes;
  };
  // The quantize kernel alone runs with a given gs (the CPU's gs when none was given, which is
  // the one the device computes); the computed-gs path adds the amax pass, one more input read.
  std::vector<Path> paths = {{"quantize (gs given)", given_gs ? given_gs : std::optional<float>(cpu.global_scale), io_bytes}};
  if (!given_gs) {
    paths.push_back({"amax + quantize (gs computed)", std::nullopt, io_bytes + static_cast<double>(input.size())});
  }

  const CeilingsChoice ceilings = choose_ceilings(device, args.ceilings);
  const TimingOptions timing_options;

  // The yardstick of the quantizer's target: `fp4gap peak`'s copy kernel moving the same bytes
  // (half read, half written), timed the same way, so launch cost and ramp count on both sides.
  const auto copy_half = static_cast<std::size_t>(io_bytes / 2) / 16 * 16;
  std::vector<std::unique_ptr<DeviceBytes>> copy_buffers;
  for (int s = 0; s < 2 * sets; ++s) copy_buffers.push_back(std::make_unique<DeviceBytes>(copy_half));
  progress_line("time the same-size copy");
  const Timing copy_timing = time_launch(
      [&](int set, void* stream) {
        const auto s = static_cast<std::size_t>(set);
        launch_copy(copy_buffers[2 * s]->get(), copy_buffers[2 * s + 1]->get(), copy_half, device, stream);
      },
      sets, device, timing_options);
  const double copy_bytes_per_s = 2.0 * static_cast<double>(copy_half) / (copy_timing.graph.median_us * 1e-6);

  std::vector<std::vector<std::string>> table = {{"path", "bytes", "graph us (p20-p80)", "event us", "GB/s (graph)",
                                                  "% of memory roof", "% of same-size copy"}};
  std::vector<std::string> notes;
  const auto add_row = [&](const std::string& name, double bytes, const Timing& t) {
    const double bytes_per_s = bytes / (t.graph.median_us * 1e-6);
    std::string pct = "n/a";
    if (ceilings.ceilings && ceilings.ceilings->memory_bytes_per_s > 0) {
      pct = format_fixed(100.0 * bytes_per_s / ceilings.ceilings->memory_bytes_per_s, 1);
    }
    table.push_back({name, format_bytes(bytes),
                     format_fixed(t.graph.median_us, 2) + " (" + format_fixed(t.graph.p20_us, 2) + "-" +
                         format_fixed(t.graph.p80_us, 2) + ")",
                     format_fixed(t.event.median_us, 2), format_fixed(bytes_per_s / 1e9, 0), pct,
                     format_fixed(100.0 * bytes_per_s / copy_bytes_per_s, 1)});
  };
  add_row("copy (same bytes)", 2.0 * static_cast<double>(copy_half), copy_timing);
  for (const Path& p : paths) {
    progress_line("time " + p.name);
    const Timing t = time_launch(
        [&](int set, void* stream) {
          const auto s = static_cast<std::size_t>(set);
          quantize_nvfp4_device(inputs[s]->get(), type, args.m, args.k, layout, p.gs, codes[s]->get(),
                                scales[s]->get(), ws, stream, nullptr);
        },
        sets, device, timing_options);
    add_row(p.name, p.bytes, t);
    notes.push_back(p.name + ": floors graph " + format_fixed(t.graph_floor_us, 2) + " us per launch, event " +
                    format_fixed(t.event_floor_us, 2) + " us" +
                    (t.sm_clock_mhz > 0 ? ", SM clock " + std::to_string(t.sm_clock_mhz) + " MHz" : ""));
    for (const std::string& w : t.warnings) notes.push_back(p.name + ": warning: " + w);
  }

  std::vector<std::size_t> width(table[0].size(), 0);
  for (const auto& row : table)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : table) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) line += pad(row[c], width[c] + 2);
    std::cout << line << "\n";
  }
  std::cout << "bytes = input read (twice with the amax pass) + codes + scales written; the copy moves the same "
               "bytes (half read, half written); "
            << sets
            << " input set(s) rotated (together > 2x L2 where possible)\n";
  for (const std::string& n : notes) std::cout << n << "\n";
  if (ceilings.ceilings) std::cout << "memory roof: " << format_rate(ceilings.ceilings->memory_bytes_per_s, "B/s") << "\n";
  for (const std::string& n : ceilings.notes) std::cout << n << "\n";
}

}  // namespace

void add_bench_quantize_command(CLI::App& app) {
  auto args = std::make_shared<BenchQuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench-quantize",
      "Verify the GPU NVFP4 quantizer bit for bit against the CPU quantizer, then time it against the memory roof");
  cmd->add_option("--m", args->m, "rows (default 8192)");
  cmd->add_option("--k", args->k, "columns, K % 16 == 0 (default 8192)");
  cmd->add_option("--dtype", args->dtype, "input element type (default bf16)")->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_option("--layout", args->layout, "scale layout: linear [M, K/16] or swizzled (128x4 tiles; default)")
      ->check(CLI::IsMember({"linear", "swizzled"}));
  cmd->add_option("--global-scale", args->global_scale,
                  "static global scale gs (float32 > 0); default 2688 / amax, computed on the device");
  cmd->add_option("--seed", args->seed, "seed of the random input (default 1)");
  cmd->add_option("--ceilings", args->ceilings,
                  "memory roof: measure (default), datasheet, or a file written by `fp4gap peak --output`");
  cmd->callback([args] { run_bench_quantize(*args); });
}

}  // namespace fp4gap::cli
