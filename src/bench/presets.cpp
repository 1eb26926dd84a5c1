#include "fp4gap/presets.hpp"

#include <array>

namespace fp4gap {
namespace {

constexpr std::int64_t kGlm5Hidden = 6144;
constexpr std::int64_t kGlm5Intermediate = 2048;
constexpr std::array<std::int64_t, 10> kGlm5M = {1, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192};

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

std::vector<std::string_view> preset_names() { return {"glm5"}; }

std::vector<std::int64_t> preset_m_values(std::string_view preset) {
  if (preset == "glm5") return {kGlm5M.begin(), kGlm5M.end()};
  throw InvalidArgument("unknown preset \"" + std::string(preset) + "\" (known: glm5)");
}

std::vector<PresetShape> preset_shapes(std::string_view preset, int tp, const GemmProblem& formats,
                                       std::span<const std::int64_t> m_values) {
  if (preset != "glm5") throw InvalidArgument("unknown preset \"" + std::string(preset) + "\" (known: glm5)");
  if (tp < 1) throw InvalidArgument("tp must be >= 1: tp = " + std::to_string(tp));
  const std::vector<std::int64_t> ms =
      m_values.empty() ? preset_m_values(preset) : std::vector<std::int64_t>(m_values.begin(), m_values.end());

  struct Weight {
    const char* name;
    Split n, k;
  };
  std::vector<Weight> weights;
  weights.push_back({"W13", split_by_tp(2 * kGlm5Intermediate, tp, "W13 N (2 x intermediate)"), whole(kGlm5Hidden)});
  weights.push_back({"W2", whole(kGlm5Hidden), split_by_tp(kGlm5Intermediate, tp, "W2 K (intermediate)")});
  // The seed shape is the project's fixed benchmark point (KERNEL-NOTES compares every kernel at
  // M=512 on it), so tp leaves it alone: its tp-split form is W13 at 2*tp anyway.
  weights.push_back({"seed", whole(kGlm5Intermediate), whole(kGlm5Hidden)});

  std::vector<PresetShape> out;
  for (const Weight& w : weights) {
    for (std::int64_t m : ms) {
      PresetShape s;
      s.name = std::string("glm5.") + w.name + (tp > 1 && std::string_view(w.name) != "seed"
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
