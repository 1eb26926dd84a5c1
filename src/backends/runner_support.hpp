#pragma once
// Checks shared by the GPU backends' runners.
#include <string>

#include "fp4gap/status.hpp"

namespace fp4gap {

// A runner holds input sets 0..sets-1 (GemmRunner::input_sets); `what` names the call refused.
inline void check_input_set(int set, int sets, const char* what) {
  if (set < 0 || set >= sets) {
    throw InvalidArgument(std::string(what) + ": set " + std::to_string(set) + " outside 0.." + std::to_string(sets - 1));
  }
}

}  // namespace fp4gap
