// fp4gap plan: which prefill tile and split-K factor the policy takes for each shape, every
// alternative it weighed with its predicted time, and why the others cannot run. Host logic only:
// on a machine without a GPU, --device names a datasheet entry to plan for.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/device_specs.hpp"
#include "fp4gap/dispatch.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/roofline.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap::cli {
namespace {

struct PlanArgs {
  ShapeOptions shape;
  std::string device;
  std::string tune_cache;
};

// The W4A16 plan's time in the tune cache entry the backend follows (TunedChoice::entry), when it
// has it.
std::string measured_us(const tune::Entry* entry, const prefill::PlanCandidate& p) {
  if (entry == nullptr) return "-";
  for (const tune::MeasuredPlan& m : entry->measured) {
    if (prefill::measures(m, p.plan)) return m.graph_us ? format_fixed(*m.graph_us, 1) : m.passed ? "-" : "BROKEN";
  }
  return "-";
}

// One shape: the decode kernels' plan where they serve it, then every prefill plan, fastest first.
void write_shape(std::ostream& out, const GemmCase& shape, const DeviceContext& device,
                 const prefill::ConcurrentCtas& occupancy, const tune::Cache* cache) {
  const GemmProblem& s = shape.problem;
  std::vector<prefill::PlanCandidate> c = prefill::plan_candidates(s.m, s.n, s.k, device, occupancy);
  // Copies: the sort below moves the candidates.
  const std::int64_t dequant_smem = prefill::dynamic_smem_limit(device.smem_per_block_optin);
  const prefill::Plan chosen = prefill::policy_plan(c, false, s.k, dequant_smem, device).plan;
  const auto [w4a4_chosen, w4a4_in_kernel] = prefill::policy_plan(c, true, s.k, dequant_smem, device);
  const bool w4a4_differs = w4a4_chosen.describe() != chosen.describe();
  std::stable_sort(c.begin(), c.end(), [](const prefill::PlanCandidate& a, const prefill::PlanCandidate& b) {
    if (a.status.is_ok() != b.status.is_ok()) return a.status.is_ok();
    return a.status.is_ok() && a.predicted_us < b.predicted_us;
  });
  auto dispatched = [&](const char* backend, std::int64_t decode_max_m, const char* mark) {
    if (s.m > decode_max_m) return std::string(backend) + " takes " + mark;
    return std::string(backend) + " takes the decode kernel (M <= " + std::to_string(decode_max_m) + ")";
  };
  out << "\n" << (shape.shape_name.empty() ? "" : shape.shape_name + " ") << "m" << s.m << " n" << s.n << " k" << s.k << ": "
      << dispatched("fp4gap-w4a16", decode_max_m(false, s.n, s.k), "*") << ", "
      << dispatched("fp4gap-w4a4", decode_max_m(true, s.n, s.k), w4a4_differs ? "+" : "*")
      << "; fp4gap-prefill-w4a16 takes *, fp4gap-prefill-w4a4 takes " << (w4a4_differs ? "+" : "*")
      << (w4a4_in_kernel ? " (activations dequantized in the kernel)"
                         : w4a4_differs ? " (behind its activation pass: no workspace split)" : "")
      << "\n";
  // The entry the backend follows, which may be one of another M with the same tiles.
  const tune::Entry* tuned = nullptr;
  if (cache != nullptr) {
    const prefill::TunedChoice t =
        prefill::tuned_plan("fp4gap-prefill-w4a16", s.m, s.n, s.k, s.out_type, device, c, chosen);
    tuned = t.entry;
    out << "  tune cache: ";
    if (t.plan) {
      out << "fp4gap-prefill-w4a16 runs " << t.plan->describe() << prefill::launch_override(*t.plan) << " (" << t.note
          << ")\n";
    } else {
      out << (t.note.empty() ? "no entry for this device and shape" : t.note) << "\n";
    }
    // Where fp4gap tune timed both kernel families for this very problem, that decides the
    // dispatching backends' choice instead of the boundary above.
    for (const bool w4a4 : {false, true}) {
      if (const std::optional<tune::TunedFamily> f = tune::tuned_family(w4a4, s.m, s.n, s.k, s.out_type, device)) {
        out << "  tune cache: " << (w4a4 ? "fp4gap-w4a4" : "fp4gap-w4a16") << " takes the " << to_string(f->family)
            << " kernel (" << f->note << ")\n";
      }
    }
  }
  if (s.m <= decode::kMaxM) {
    // The decode kernels' own policy (docs/KERNELS-decode.md), for the same shape, both maths.
    // A prediction is printed only where the model was fitted to measurements.
    for (const decode::Math math : {decode::Math::w4a16, decode::Math::w4a4}) {
      out << "  decode kernel (fp4gap-decode-" << decode::to_string(math) << "): ";
      try {
        const decode::Plan d = decode::choose_plan(s.m, s.n, s.k, math, decode::WeightLayout::shuffled, device);
        out << d.describe();
        if (decode::cost_model_is_fitted(d.config, math)) {
          out << "; its model predicts " << std::fixed << std::setprecision(1) << decode::estimate_plan_us(d, device)
              << " us";
        } else {
          out << " (its cost model was never fitted to measurements: no prediction)";
        }
      } catch (const InvalidArgument& e) {
        out << "not supported: " << e.what();
      }
      out << "\n";
    }
  }
  // Wide enough for the longest configuration name ("... 9 stages, 3 K blocks per copy").
  constexpr int kConfigWidth = 62;
  out << "    " << std::left << std::setw(kConfigWidth) << "config" << std::right << std::setw(6) << "split" << std::setw(7)
      << "CTAs" << std::setw(9) << "at once" << std::setw(7) << "waves" << std::setw(7) << "idle" << std::setw(8)
      << "past M" << std::setw(14)
      << "predicted us" << (cache != nullptr ? "   measured us" : "") << "  split-K reduction\n";
  for (const prefill::PlanCandidate& p : c) {
    const bool pick = p.status.is_ok() && p.plan.describe() == chosen.describe();
    const bool w4a4_pick = w4a4_differs && p.status.is_ok() && p.plan.describe() == w4a4_chosen.describe();
    out << (pick ? "  * " : w4a4_pick ? "  + " : "    ") << std::left << std::setw(kConfigWidth) << p.config.name() << std::right;
    if (!p.status.is_ok()) {
      out << "  not supported: " << p.status.reason << "\n";
      continue;
    }
    // The share of SM time the launch's waves leave idle (every tile the same work), and of the
    // tiles' rows that lie past M (tensor work no output keeps).
    std::ostringstream idle, past_m;
    if (device.sm_count > 0) {
      LaunchFill fill = prefill::launch_fill(p.plan, p.concurrent_ctas);
      fill.m = s.m;
      const LaunchFillSummary summary = summarize_launch_fill(fill, device.sm_count);
      idle << std::fixed << std::setprecision(0) << summary.idle_fraction * 100.0 << "%";
      past_m << std::fixed << std::setprecision(0) << summary.rows_past_m * 100.0 << "%";
    } else {
      idle << "-";
      past_m << "-";
    }
    out << std::setw(6) << p.split_k << std::setw(7) << p.plan.ctas() << std::setw(9) << p.concurrent_ctas
        << std::setw(7) << p.waves << std::setw(7) << idle.str() << std::setw(8) << past_m.str() << std::setw(14)
        << std::fixed << std::setprecision(1) << p.predicted_us;
    if (cache != nullptr) out << std::setw(14) << measured_us(tuned, p);
    out << "  " << (p.split_k == 1 ? "-" : p.reduction == prefill::SplitReduction::cluster ? "cluster" : "workspace") << "\n";
    if (p.config.persistent) {
      const prefill::PersistentSchedule sched = prefill::persistent_schedule(p.plan.ctas(), p.concurrent_ctas);
      if (sched.halved_tiles > 0 && prefill::last_wave_splits_k(p.plan.k_blocks)) {
        out << "        its last wave: " << sched.halved_tiles << " tiles as " << 2 * sched.halved_tiles
            << " units over half of K each, in pairs that exchange partial tiles\n";
      } else if (sched.halved_tiles > 0) {
        out << "        its last wave: " << sched.halved_tiles << " tiles as " << 2 * sched.halved_tiles << " half tiles of "
            << p.config.block_m / 2 << " rows\n";
      }
    }
  }
}

void run_plan(const PlanArgs& a, CLI::App& cmd) {
  GemmProblem formats;
  formats.a_format = OperandFormat::bf16;
  formats.b_format = OperandFormat::nvfp4;
  const std::vector<GemmCase> shapes = shape_cases(a.shape, formats, cmd);
  DeviceContext device;
  prefill::ConcurrentCtas occupancy;
  // A datasheet has no GPC layout: clusters must fit inside one GPC, so a real device can run
  // fewer split-K clusters at once than this bound.
  std::string at_once =
      "floor(SMs / split) x split, an upper bound without a device to ask (clusters must fit inside one GPC: "
      "the H200 runs 117 for split 3, 120 for 4 and 8, 102 for 6)";
  if (!a.device.empty()) {
    const DeviceSpec* spec = find_device_spec(a.device);
    if (spec == nullptr) {
      throw InvalidArgument("--device names no datasheet entry (see fp4gap info): " + a.device);
    }
    device = datasheet_device_context(*spec);
    occupancy = prefill::datasheet_concurrent_ctas(*spec);
    if (occupancy) {
      at_once = "the occupancy API's answer on an " + std::string(spec->name) +
                ", kept in its datasheet entry (clusters of split CTAs fit inside one GPC)";
    }
  } else {
    device = query_device(0);
    if (!device.available) {
      std::cerr << "error: " << describe_unavailable(device)
                << "; plan for a datasheet GPU instead, e.g. --device 'H200 SXM' (fp4gap info lists them)\n";
      exit_with(kExitNoDevice);
    }
    std::string why_not;
    occupancy = prefill_occupancy(&why_not);
    at_once = occupancy ? "the occupancy API of this device (clusters of split CTAs fit inside one GPC)"
                        : "floor(SMs / split) x split, an upper bound (" + why_not + ")";
  }
  std::vector<std::string> notes;
  apply_tune_cache_option(a.tune_cache, notes);
  std::ostringstream out;
  for (const std::string& n : notes) out << n << "\n";
  out << "device: " << device.name << ", " << device.sm_count << " SMs, " << device.smem_per_block_optin
      << " bytes of shared memory per block\n"
      << "CTAs at once: " << at_once << "\n"
      << "predicted us: the per-tile cost model fitted on an H200 (docs/KERNELS-prefill.md), a ranking, not a "
         "measurement (fp4gap gemm measures)\n";
  if (device.cc_major != 9 || device.cc_minor != 0) {
    out << "prefill kernels: not supported on " << device.name << " (compute capability " << device.cc_major << "."
        << device.cc_minor << "): they need wgmma, sm_90a\n";
    write_output("", out.str());
    return;
  }
  for (const GemmCase& s : shapes) {
    Status valid = s.status;
    if (valid.is_ok()) valid = validate_problem(s.problem);
    if (!valid.is_ok()) {
      out << "\n" << (s.shape_name.empty() ? "" : s.shape_name + " ") << s.problem.label() << ": not a valid problem: "
          << valid.reason << "\n";
      continue;
    }
    write_shape(out, s, device, occupancy, tune::active_cache());
  }
  write_output("", out.str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "The prefill tile and split-K factor chosen for each shape, beside every alternative and its predicted time");
  add_shape_options(*cmd, args->shape);
  cmd->add_option("--device", args->device,
                  "plan for this datasheet GPU (e.g. 'H200 SXM'; fp4gap info lists them) instead of the CUDA device");
  add_tune_cache_option(*cmd, args->tune_cache);
  cmd->callback([args, cmd] { run_plan(*args, *cmd); });
}

}  // namespace fp4gap::cli
