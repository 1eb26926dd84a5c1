#include <cmath>
#include <random>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/numeric.hpp"

namespace fp4gap {

namespace {

// Independent streams for A and B (splitmix64 of seed and stream index), so the weights B of a
// seed do not change when only M changes.
std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draws from raw 64-bit mt19937_64 outputs with integer and correctly rounded IEEE arithmetic
// only: identical on every platform (std::normal_distribution and libm's log/cos are not).
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t bits() { return rng_(); }
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1p-53; }  // [0, 1)

  // Approximately standard normal: the sum of eight uniform 16-bit draws (Irwin-Hall, tails to
  // about 4.9 sigma), centred and scaled to unit variance.
  double normal() {
    std::uint64_t sum = 0;
    for (int d = 0; d < 2; ++d) {
      const std::uint64_t x = rng_();
      for (int i = 0; i < 4; ++i) sum += (x >> (16 * i)) & 0xFFFFu;
    }
    static const double unit_variance = std::sqrt(1.5);  // 1 / sqrt(8 * (1/12))
    return (static_cast<double>(sum + 4) * 0x1p-16 - 4.0) * unit_variance;
  }

 private:
  std::mt19937_64 rng_;
};

// Realistic values: normal, each row scaled by 2^e * (1 + u) with e in [-3, 1], so row magnitudes
// spread over about five octaves as activation rows and weight channels do.
std::vector<float> realistic_values(Draws& draws, std::int64_t rows, std::int64_t k) {
  std::vector<float> x(static_cast<std::size_t>(rows * k));
  for (std::int64_t r = 0; r < rows; ++r) {
    const int octave = static_cast<int>(draws.bits() % 5) - 3;
    const double row_scale = std::ldexp(1.0 + draws.uniform(), octave);
    for (std::int64_t c = 0; c < k; ++c) x[static_cast<std::size_t>(r * k + c)] = static_cast<float>(draws.normal() * row_scale);
  }
  return x;
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

// Exact-grid operands: E2M1 codes with block scales 0.5 (0x30) or 1.0 (0x38). Every value is a
// multiple of 2^-2 with magnitude <= 6, every product a multiple of 2^-4 with magnitude <= 36, so
// every partial sum in any order is a multiple of 2^-4 below 36*K: exact in float32 for K <= 29127
// (36 * K * 16 <= 2^24). The global scales are powers of two, so alpha is applied exactly too.
constexpr std::uint8_t kGridScaleBytes[2] = {0x30, 0x38};
constexpr float kGridGlobalScale[2] = {64.0f, 32.0f};  // A, B

Nvfp4Matrix grid_nvfp4(Draws& draws, std::int64_t rows, std::int64_t k, float global_scale) {
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = k;
  m.layout = ScaleLayout::linear;
  m.global_scale = global_scale;
  m.codes.resize(static_cast<std::size_t>(rows * k / 2));
  for (std::size_t i = 0; i < m.codes.size(); i += 8) {
    std::uint64_t x = draws.bits();
    for (std::size_t b = i; b < i + 8 && b < m.codes.size(); ++b, x >>= 8) m.codes[b] = static_cast<std::uint8_t>(x);
  }
  m.scales.resize(static_cast<std::size_t>(rows * (k / kBlockSize)));
  for (std::uint8_t& s : m.scales) s = kGridScaleBytes[draws.bits() & 1u];
  return m;
}

std::vector<float> grid_values(Draws& draws, std::int64_t rows, std::int64_t k) {
  std::vector<float> x(static_cast<std::size_t>(rows * k));
  for (std::size_t b = 0; b < x.size(); b += kBlockSize) {
    const float scale = e4m3_to_float(kGridScaleBytes[draws.bits() & 1u]);
    std::uint64_t codes = draws.bits();
    for (std::size_t i = b; i < b + kBlockSize && i < x.size(); ++i, codes >>= 4) {
      x[i] = e2m1_to_float(static_cast<std::uint8_t>(codes & 0xFu)) * scale;
    }
  }
  return x;
}

struct Operand {
  Nvfp4Matrix fp4;
  std::vector<std::uint16_t> bf16;
};

Operand make_operand(OperandFormat format, InputDistribution distribution, std::uint64_t seed, std::int64_t rows,
                     std::int64_t k, float grid_global_scale) {
  Draws draws(seed);
  Operand op;
  if (format == OperandFormat::nvfp4) {
    if (distribution == InputDistribution::exact_grid) {
      op.fp4 = grid_nvfp4(draws, rows, k, grid_global_scale);
    } else {
      op.fp4 = quantize_nvfp4(realistic_values(draws, rows, k), rows, k, QuantizeOptions{});
    }
    op.bf16 = to_bf16(dequantize_nvfp4_unscaled(op.fp4));  // exact: E2M1 x E4M3 fits bf16
  } else {
    op.bf16 = to_bf16(distribution == InputDistribution::exact_grid ? grid_values(draws, rows, k)
                                                                    : realistic_values(draws, rows, k));
  }
  return op;
}

OperandView view_of(OperandFormat format, std::int64_t rows, std::int64_t k, const Nvfp4Matrix& fp4,
                    const std::vector<std::uint16_t>& bf16) {
  return format == OperandFormat::nvfp4 ? nvfp4_operand(fp4) : bf16_operand(bf16, rows, k);
}

}  // namespace

OperandView GemmInputs::a_view() const { return view_of(problem.a_format, problem.m, problem.k, a_fp4, a_bf16); }
OperandView GemmInputs::b_view() const { return view_of(problem.b_format, problem.n, problem.k, b_fp4, b_bf16); }

GemmInputs make_gemm_inputs(const GemmProblem& problem, std::uint64_t seed, InputDistribution distribution) {
  const Status status = validate_problem(problem);
  if (!status.is_ok()) throw InvalidArgument(status.reason);
  for (const auto& [name, format] : {std::pair{"A", problem.a_format}, std::pair{"B", problem.b_format}}) {
    if (format == OperandFormat::e4m3) {
      throw InvalidArgument(std::string("e4m3 is not an input format: ") + name +
                            " format = e4m3 (inputs are nvfp4 or bf16; e4m3 is the FP8 baseline's own "
                            "re-quantization) [problem: " + problem.label() + "]");
    }
  }

  GemmInputs in;
  in.problem = problem;
  in.seed = seed;
  in.distribution = distribution;
  Operand a = make_operand(problem.a_format, distribution, stream_seed(seed, 0), problem.m, problem.k, kGridGlobalScale[0]);
  Operand b = make_operand(problem.b_format, distribution, stream_seed(seed, 1), problem.n, problem.k, kGridGlobalScale[1]);
  in.a_fp4 = std::move(a.fp4);
  in.a_bf16 = std::move(a.bf16);
  in.b_fp4 = std::move(b.fp4);
  in.b_bf16 = std::move(b.bf16);

  double global_scales = 1.0;
  if (problem.a_format == OperandFormat::nvfp4) global_scales *= static_cast<double>(in.a_fp4.global_scale);
  if (problem.b_format == OperandFormat::nvfp4) global_scales *= static_cast<double>(in.b_fp4.global_scale);
  in.alpha = 1.0 / global_scales;
  return in;
}

}  // namespace fp4gap
