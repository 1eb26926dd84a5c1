// fp4gap peak: the device's measured ceilings beside its datasheet figures; --output writes them
// as JSON for `fp4gap gemm --ceilings FILE`. Exit 3 without a CUDA device.
#include <iostream>
#include <memory>
#include <string>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/device_specs.hpp"

namespace fp4gap::cli {
namespace {

void run_peak(const std::string& output) {
  const DeviceContext device = query_device(0);
  if (!device.available) {
    std::cerr << describe_unavailable(device) << "; fp4gap peak measures a CUDA device and needs one\n";
    exit_with(kExitNoDevice);
  }
  for (const std::string& line : describe_device(device)) std::cout << line << "\n";
  std::cout << "measuring (large copy and read kernels, cuBLAS BF16 and cuBLASLt FP8 at a large shape)...\n"
            << std::flush;
  const Ceilings measured = measure_ceilings(device);

  const DeviceSpec* spec = find_device_spec(device.name);
  const std::optional<Ceilings> sheet = spec ? datasheet_ceilings(*spec) : std::nullopt;
  std::cout << "\n" << "ceiling        measured          datasheet" << (spec ? " (" + std::string(spec->name) + ")" : "")
            << "   measured/datasheet\n";
  auto line = [&](const char* name, double m, double d, std::string_view unit) {
    auto cell = [&](double v) { return v > 0 ? format_rate(v, unit) : std::string("n/a"); };
    std::string a = cell(m), b = sheet ? cell(d) : std::string("no entry");
    a.resize(std::max<std::size_t>(a.size(), 16), ' ');
    b.resize(std::max<std::size_t>(b.size(), 16), ' ');
    std::string n(name);
    n.resize(13, ' ');
    std::cout << n << "  " << a << "  " << b << "  " << (m > 0 && d > 0 ? format_fixed(100.0 * m / d, 1) + "%" : "-")
              << "\n";
  };
  const Ceilings none;
  const Ceilings& d = sheet ? *sheet : none;
  line("memory", measured.memory_bytes_per_s, d.memory_bytes_per_s, "B/s");
  line("BF16 dense", measured.bf16_flops_per_s, d.bf16_flops_per_s, "FLOP/s");
  line("FP8 dense", measured.fp8_flops_per_s, d.fp8_flops_per_s, "FLOP/s");
  line("FP4 dense", measured.fp4_flops_per_s, d.fp4_flops_per_s, "FLOP/s");
  std::cout << "source: " << measured.source << "\n";
  if (spec) std::cout << "datasheet sources: " << spec->sources << "\n";
  if (!output.empty()) {
    write_output(output, ceilings_to_json(measured, device.name));
    std::cout << "wrote " << output << " (use with: fp4gap gemm --ceilings " << output << ")\n";
  }
}

}  // namespace

void add_peak_command(CLI::App& app) {
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("peak", "Measure the device's memory and tensor-core ceilings, beside the datasheet");
  cmd->add_option("--output", *output, "write the measured ceilings as JSON (read by gemm --ceilings FILE)");
  cmd->callback([output] { run_peak(*output); });
}

}  // namespace fp4gap::cli
