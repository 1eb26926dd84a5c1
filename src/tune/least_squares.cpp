#include "fp4gap/least_squares.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "fp4gap/status.hpp"

namespace fp4gap {

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& rows,
                                              const std::vector<double>& targets) {
  if (rows.empty()) throw InvalidArgument("nonnegative_least_squares: no rows");
  if (targets.size() != rows.size()) {
    throw InvalidArgument("nonnegative_least_squares: " + std::to_string(rows.size()) + " rows but " +
                          std::to_string(targets.size()) + " targets");
  }
  const std::size_t n = rows[0].size();
  for (const std::vector<double>& r : rows) {
    if (r.size() != n) {
      throw InvalidArgument("nonnegative_least_squares: rows of " + std::to_string(n) + " and " +
                            std::to_string(r.size()) + " terms");
    }
  }
  std::vector<double> x(n, 0.0), residual = targets, norm2(n, 0.0);
  for (std::size_t j = 0; j < n; ++j) {
    for (const std::vector<double>& r : rows) norm2[j] += r[j] * r[j];
  }
  constexpr int kMaxSweeps = 1000000;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    double largest_move = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      if (norm2[j] == 0.0) continue;  // a term no row has: stays 0
      double dot = 0.0;
      for (std::size_t i = 0; i < rows.size(); ++i) dot += rows[i][j] * residual[i];
      const double moved = std::max(0.0, x[j] + dot / norm2[j]) - x[j];
      if (moved == 0.0) continue;
      for (std::size_t i = 0; i < rows.size(); ++i) residual[i] -= rows[i][j] * moved;
      x[j] += moved;
      largest_move = std::max(largest_move, std::fabs(moved) / (1.0 + std::fabs(x[j])));
    }
    if (largest_move <= 1e-12) return x;
  }
  throw std::runtime_error("nonnegative_least_squares: no convergence after " + std::to_string(kMaxSweeps) +
                           " sweeps");
}

}  // namespace fp4gap
