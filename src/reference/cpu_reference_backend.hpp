#pragma once
// The "cpu-reference" backend: reference_gemm run as a backend, so a whole pipeline (supports,
// prepare, run, verify, report) can be exercised on a machine without a GPU.
#include <memory>

#include "fp4gap/backend.hpp"

namespace fp4gap {

std::unique_ptr<GemmBackend> make_cpu_reference_backend();

}  // namespace fp4gap
