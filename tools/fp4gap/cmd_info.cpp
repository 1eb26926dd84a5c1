// fp4gap info: what this binary is, which CUDA devices it sees, the datasheet figures it knows, and
// the backends `fp4gap gemm --backends` can name.
#include <iostream>

#include <fp4gap/build_info.hpp>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/device_specs.hpp"

namespace fp4gap::cli {
namespace {

// query_device answers "unavailable" past the last ordinal; no machine has more than this.
constexpr int kMaxDevices = 64;

void run_info() {
  std::cout << "fp4gap " << build_info::kVersion << " (git " << build_info::kGitHash << ", " << build_info::kBuildType
            << " build)\n"
            << "CUDA architectures compiled: " << build_info::kCudaArchitectures << " (nvcc "
            << build_info::kCudaCompilerVersion << ")\n"
            << "Blackwell (sm_100a, sm_120a): code compiled for them has never been run by fp4gap's developers\n"
            << "  (no such GPU was available); cublaslt-nvfp4 and every kernel there are unverified on Blackwell.\n\n";

  const DeviceContext first = query_device(0);
  if (!first.available) {
    std::cout << describe_unavailable(first) << "\n";
  } else {
    std::cout << "CUDA devices:\n";
    for (int ordinal = 0; ordinal < kMaxDevices; ++ordinal) {
      const DeviceContext d = ordinal == 0 ? first : query_device(ordinal);
      if (!d.available) break;
      for (const std::string& line : describe_device(d)) std::cout << "  " << line << "\n";
      const DeviceSpec* spec = find_device_spec(d.name);
      std::cout << "  datasheet entry: " << (spec ? std::string(spec->name) : std::string("none")) << "\n";
    }
  }
  std::cout << "\n";
  write_datasheet_table(std::cout);

  register_host_backends();
  register_cuda_backends();
  std::cout << "\nbackends (fp4gap gemm --backends NAME,...; each says per problem whether it serves it, and why not):\n";
  for (const GemmBackend* b : gemm_backends()) std::cout << "  " << b->name() << ": " << b->description() << "\n";
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("info", "Version, build, CUDA devices found, the datasheet figures used, and the backends");
  cmd->callback([] { run_info(); });
}

}  // namespace fp4gap::cli
