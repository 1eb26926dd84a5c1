#pragma once
// Non-negative least squares, for fitting cost models' constants to measured sweeps (plain C++).
#include <vector>

namespace fp4gap {

// x >= 0 minimising sum_i (rows[i] . x - targets[i])^2, by cyclic coordinate descent (each step
// the exact minimiser along one coordinate, clamped at 0) until no coordinate moves by more than
// 1e-12 (relative). Weighted and relative-error fits scale a row and its target before calling.
// Throws InvalidArgument for no rows, rows of different lengths or a target count that differs,
// and std::runtime_error if it has not converged after 1,000,000 sweeps.
std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& rows,
                                              const std::vector<double>& targets);

}  // namespace fp4gap
