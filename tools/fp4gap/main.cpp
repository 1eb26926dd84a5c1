// fp4gap: NVFP4 GEMM diagnosis. Exit codes: 0 success, 1 an incorrect result was found,
// 2 an error (bad input, I/O, CUDA), 3 a command needs a CUDA device and none is present.
#include <exception>
#include <iostream>
#include <string>

#include <fp4gap/build_info.hpp>

#include "cli_support.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fp4gap: how fast NVFP4 matrix products run on this GPU, how far from the limit, and why",
               "fp4gap"};
  app.set_version_flag("--version", std::string("fp4gap ") + fp4gap::build_info::kVersion + " (" +
                                        fp4gap::build_info::kGitHash + ")");
  app.require_subcommand(1);
  fp4gap::cli::add_info_command(app);
  fp4gap::cli::add_quantize_command(app);
  fp4gap::cli::add_shuffle_command(app);
  fp4gap::cli::add_gemm_command(app);
  fp4gap::cli::add_plan_command(app);
  fp4gap::cli::add_tune_command(app);
  fp4gap::cli::add_diagnose_command(app);
  fp4gap::cli::add_peak_command(app);
  fp4gap::cli::add_bench_quantize_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    // A subcommand finished and chose its exit code (see cli_support.hpp).
    return e.get_exit_code();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n(run fp4gap --help for usage)\n";
    return fp4gap::cli::kExitError;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return fp4gap::cli::kExitError;
  }
  return fp4gap::cli::kExitOk;
}
