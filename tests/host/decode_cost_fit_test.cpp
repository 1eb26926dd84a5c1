// The decode cost model's fitted constants, reproduced from the sweep they were fit to, and the
// least-squares routine that fits them. Plain C++, no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "fp4gap/decode.hpp"
#include "fp4gap/least_squares.hpp"
#include "test_support.hpp"

namespace fp4gap::decode {
namespace {

using test::h200_context;

TEST(NonnegativeLeastSquares, RecoversAnExactNonnegativeSolution) {
  // b = 2 * x0 + 0.5 * x1 + 0 * x2 on rows that determine it.
  const std::vector<std::vector<double>> a = {{1, 0, 1}, {0, 1, 1}, {1, 1, 0}, {2, 1, 3}};
  std::vector<double> b;
  for (const auto& r : a) b.push_back(2 * r[0] + 0.5 * r[1]);
  const std::vector<double> x = nonnegative_least_squares(a, b);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_NEAR(x[0], 2.0, 1e-9);
  EXPECT_NEAR(x[1], 0.5, 1e-9);
  EXPECT_NEAR(x[2], 0.0, 1e-9);
}

TEST(NonnegativeLeastSquares, ClampsATermWhoseFreeOptimumIsNegative) {
  // Unconstrained, b = 3 * x0 - 1 * x1 exactly; with x1 >= 0 the optimum is x1 = 0 and x0 the
  // one-term fit sum(a0 * b) / sum(a0^2).
  const std::vector<std::vector<double>> a = {{1, 1}, {2, 1}, {3, 2}};
  const std::vector<double> b = {2, 5, 7};
  const std::vector<double> x = nonnegative_least_squares(a, b);
  EXPECT_EQ(x[1], 0.0);
  EXPECT_NEAR(x[0], (2 + 10 + 21) / 14.0, 1e-9);
}

TEST(NonnegativeLeastSquares, RejectsMalformedInput) {
  EXPECT_THROW(nonnegative_least_squares({}, {}), InvalidArgument);
  EXPECT_THROW(nonnegative_least_squares({{1, 2}, {1}}, {1, 2}), InvalidArgument);
  EXPECT_THROW(nonnegative_least_squares({{1, 2}}, {1, 2}), InvalidArgument);
}

// One plan of a sweep CSV (docs/data/decode-sweep-run96-after-quantize.csv; columns math, m, n,
// k, family, tile "nR mM kC", warps, split, graph_us, ...).
struct SweptPlan {
  std::int64_t m, n, k;
  int config, split;
  double us;
};

std::vector<SweptPlan> read_w4a4_sweep(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::string line;
  // Lines may end in CRLF (Python's csv module writes them).
  const auto next_line = [&] {
    if (!std::getline(f, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  next_line();
  EXPECT_EQ(line, "math,m,n,k,family,tile,warps,split,graph_us,model_us,policy_pick") << path;
  std::vector<SweptPlan> plans;
  while (next_line()) {
    std::vector<std::string> c;
    std::stringstream ss(line);
    for (std::string field; std::getline(ss, field, ',');) c.push_back(field);
    if (c.size() != 11 || c[0] != "w4a4") {
      ADD_FAILURE() << "unexpected line: " << line;
      continue;
    }
    SweptPlan p{std::stoll(c[1]), std::stoll(c[2]), std::stoll(c[3]), -1, std::stoi(c[7]), std::stod(c[8])};
    for (int i = 0; i < static_cast<int>(tile_configs().size()); ++i) {
      const TileConfig& t = tile_configs()[static_cast<std::size_t>(i)];
      if (t.streaming() == (c[4] == "streaming") && t.warps == std::stoi(c[6]) && t.tile() == c[5]) p.config = i;
    }
    EXPECT_GE(p.config, 0) << "no config for " << line;
    if (p.config >= 0) plans.push_back(p);
  }
  return plans;
}

// Refits the W4A4 constants (both families) as PERF-LOG run 96 did: per configuration,
// non-negative least squares on the relative error, the plans within 1.3x of their point's
// fastest weighted 1 and the others 0.3. The committed constants are that fit rounded to 1e-4:
// a change to them, or to the model's features, without a refit fails here.
TEST(DecodeCostFit, Run96SweepReproducesTheW4a4Constants) {
  const std::vector<SweptPlan> plans =
      read_w4a4_sweep(std::string(FP4GAP_SOURCE_DIR) + "/docs/data/decode-sweep-run96-after-quantize.csv");
  ASSERT_GT(plans.size(), 1000u);
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, double> fastest;
  for (const SweptPlan& p : plans) {
    const auto key = std::make_tuple(p.m, p.n, p.k);
    if (!fastest.count(key) || p.us < fastest[key]) fastest[key] = p.us;
  }
  std::map<int, std::pair<std::vector<std::vector<double>>, std::vector<double>>> systems;
  for (const SweptPlan& p : plans) {
    if (!cost_model_is_fitted(tile_configs()[static_cast<std::size_t>(p.config)], Math::w4a4)) continue;
    const Plan plan = make_plan(p.m, p.n, p.k, Math::w4a4, WeightLayout::shuffled, p.config, p.split);
    const double weight = p.us <= 1.3 * fastest[std::make_tuple(p.m, p.n, p.k)] ? 1.0 : 0.3;
    std::vector<double> row;
    for (const double f : fitted_cost_features(plan, h200_context())) row.push_back(f * weight / p.us);
    systems[p.config].first.push_back(row);
    systems[p.config].second.push_back(weight);
  }
  EXPECT_EQ(systems.size(), 12u) << "the six register-prefetch and six streaming W4A4 configs";
  for (const auto& [config, system] : systems) {
    const TileConfig& c = tile_configs()[static_cast<std::size_t>(config)];
    const std::vector<double> fit = nonnegative_least_squares(system.first, system.second);
    const FittedCost committed = fitted_cost_constants(c, Math::w4a4);
    for (std::size_t i = 0; i < committed.size(); ++i) {
      EXPECT_NEAR(fit[i], committed[i], 1e-4) << "config " << config << " (" << c.name(Math::w4a4, WeightLayout::shuffled)
                                              << "), constant " << i;
    }
  }
}

// The model is the dot product of the features and the constants.
TEST(DecodeCostFit, EstimateIsFeaturesTimesConstants) {
  for (const Math math : {Math::w4a16, Math::w4a4}) {
    for (int ci = 0; ci < static_cast<int>(tile_configs().size()); ++ci) {
      const TileConfig& c = tile_configs()[static_cast<std::size_t>(ci)];
      if (!c.serves(WeightLayout::shuffled) || c.max_m() < 8) continue;
      const Plan p = make_plan(8, 4096, 6144, math, WeightLayout::shuffled, ci, 2);
      if (!cost_model_is_fitted(c, math)) {
        EXPECT_THROW(fitted_cost_features(p, h200_context()), InvalidArgument) << p.describe();
        continue;
      }
      const FittedCost x = fitted_cost_features(p, h200_context()), k = fitted_cost_constants(c, math);
      double dot = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) dot += x[i] * k[i];
      EXPECT_DOUBLE_EQ(estimate_plan_us(p, h200_context()), dot) << p.describe();
      EXPECT_EQ(x[0], 1.0);
      EXPECT_EQ(x[1], 1.0);  // split 2
      EXPECT_EQ(x[2], 2.0);
    }
  }
}

}  // namespace
}  // namespace fp4gap::decode
