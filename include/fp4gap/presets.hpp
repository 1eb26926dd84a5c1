#pragma once
// Named shape sets of real workloads.
//
// glm5 (SPEC-nvfp4 section 7: hidden 6144, moe_intermediate 2048), per expert:
//   W13   N = 4096, K = 6144   (gate and up fused: 2 x intermediate by hidden)
//   W2    N = 6144, K = 2048   (down: hidden by intermediate)
//   seed  N = 2048, K = 6144   (the project's benchmark shape)
// deepseek-v3 (DeepSeek-V3 / R1 and Kimi K2 routed experts: hidden 7168, moe_intermediate 2048):
//   W13   N = 4096, K = 7168
//   W2    N = 7168, K = 2048
// each at M in {1, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192}. Tensor parallelism tp splits
// the intermediate dimension: W13 N = 4096/tp, W2 K = 2048/tp.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/problem.hpp"

namespace fp4gap {

struct PresetShape {
  std::string name;     // "glm5.W13", "glm5.W2", "glm5.seed", "deepseek-v3.W13"; "/tpN" appended when tp > 1
  GemmProblem problem;  // formats from the caller
  Status status;        // invalid_problem when tp does not divide the shape or a GEMM rule fails
};

std::vector<std::string_view> preset_names();  // {"glm5", "deepseek-v3"}
std::vector<std::int64_t> preset_m_values(std::string_view preset);

// Shapes of a preset at the given M values (empty: the preset's own list), weights split by tp,
// operand/output formats from `formats` (its m, n, k are ignored). Shapes that tp makes invalid
// stay in the list with status invalid_problem and a reason naming tp and the dimension. Throws
// InvalidArgument for an unknown preset name (listing the known ones) or tp < 1.
std::vector<PresetShape> preset_shapes(std::string_view preset, int tp, const GemmProblem& formats,
                                       std::span<const std::int64_t> m_values = {});

}  // namespace fp4gap
