#pragma once
// Each subcommand of the fp4gap tool lives in its own file and adds itself to the app here.
#include <CLI/CLI.hpp>

namespace fp4gap::cli {

void add_info_command(CLI::App& app);            // cmd_info.cpp
void add_quantize_command(CLI::App& app);        // cmd_quantize.cpp
void add_gemm_command(CLI::App& app);            // cmd_gemm.cpp
void add_diagnose_command(CLI::App& app);        // cmd_diagnose.cpp
void add_peak_command(CLI::App& app);            // cmd_peak.cpp
void add_bench_quantize_command(CLI::App& app);  // cmd_bench_quantize.cpp
void add_shuffle_command(CLI::App& app);         // cmd_shuffle.cpp
void add_plan_command(CLI::App& app);            // cmd_plan.cpp
void add_tune_command(CLI::App& app);            // cmd_tune.cpp

}  // namespace fp4gap::cli
