#include "fp4gap/presets.hpp"

#include <array>
#include <string>

namespace fp4gap {
namespace {

// A MoE model's expert shapes: hidden and moe_intermediate sizes, and whether the project's fixed
// seed shape (2048 x 6144) rides along.
struct ModelShapes {
  std::string_view name;
  std::int64_t hidden, intermediate;
  bool seed;
};
// glm5: SPEC-nvfp4 section 7. deepseek-v3: DeepSeek-V3 / R1's routed experts (hidden 7168,
// moe_intermediate_size 2048, the published model config; Kimi K2 shares them).
constexpr std::array<ModelShapes, 2> kModels = {ModelShapes{"glm5", 6144, 2048, true},
                                                ModelShapes{"deepseek-v3", 7168, 2048, false}};
constexpr std::array<std::int64_t, 10> kPresetM = {1, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192};
constexpr std::int64_t kSeedN = 2048, kSeedK = 6144;

const ModelShapes& model_of(std::string_view preset) {
  for (const ModelShapes& m : kModels) {
    if (m.name == preset) return m;
  }
  std::string known;
  for (const ModelShapes& m : kModels) known += (known.empty() ? "" : ", ") + std::string(m.name);
  throw InvalidArgument("unknown preset \"" + std::string(preset) + "\" (known: " + known + ")");
}

// A weight dimension split over tp ranks; `dim` names it in the reason when tp does not divide.
struct Split {
  std::int64_t value;
  std::string error;  // empty when tp divides
};
Split split_by_tp(std::int64_t full, int tp, std::string_view dim) {
  if (full % tp == 0) return {full / tp, {}};
  return {full / tp, std::string(dim) + " = " + std::to_string(full) + " is not divisible by tp = " +
                         std::to_string(tp)};
}

Split whole(std::int64_t v) { return {v, std::string()}; }

}  // namespace

std::vector<std::string_view> preset_names() {
  std::vector<std::string_view> names;
  for (const ModelShapes& m : kModels) names.push_back(m.name);
  return names;
}

std::vector<std::int64_t> preset_m_values(std::string_view preset) {
  model_of(preset);
  return {kPresetM.begin(), kPresetM.end()};
}

std::vector<PresetShape> preset_shapes(std::string_view preset, int tp, const GemmProblem& formats,
                                       std::span<const std::int64_t> m_values) {
  const ModelShapes& model = model_of(preset);
  if (tp < 1) throw InvalidArgument("tp must be >= 1: tp = " + std::to_string(tp));
  const std::vector<std::int64_t> ms =
      m_values.empty() ? preset_m_values(preset) : std::vector<std::int64_t>(m_values.begin(), m_values.end());

  struct Weight {
    const char* name;
    Split n, k;
  };
  std::vector<Weight> weights;
  weights.push_back({"W13", split_by_tp(2 * model.intermediate, tp, "W13 N (2 x intermediate)"), whole(model.hidden)});
  weights.push_back({"W2", whole(model.hidden), split_by_tp(model.intermediate, tp, "W2 K (intermediate)")});
  // The seed shape is the project's fixed benchmark point (KERNEL-NOTES compares every kernel at
  // M=512 on it), so tp leaves it alone: its tp-split form is W13 at 2*tp anyway.
  if (model.seed) weights.push_back({"seed", whole(kSeedN), whole(kSeedK)});

  std::vector<PresetShape> out;
  for (const Weight& w : weights) {
    for (std::int64_t m : ms) {
      PresetShape s;
      s.name = std::string(model.name) + "." + w.name + (tp > 1 && std::string_view(w.name) != "seed"
                                                    ? "/tp" + std::to_string(tp) : "");
      s.problem = formats;
      s.problem.m = m;
      s.problem.n = w.n.value;
      s.problem.k = w.k.value;
      if (!w.n.error.empty() || !w.k.error.empty()) {
        s.status = Status::invalid_problem(!w.n.error.empty() ? w.n.error : w.k.error);
      } else {
        s.status = validate_problem(s.problem);
        if (!s.status.is_ok() && tp > 1) s.status.reason += " (at tp = " + std::to_string(tp) + ")";
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace fp4gap
