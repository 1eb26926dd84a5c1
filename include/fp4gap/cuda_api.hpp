#pragma once
// Entry points of the CUDA library (fp4gap_cuda) that host-side code (the CLI) calls.
// Everything here works on a machine without a GPU: it reports the absence, never crashes.
#include <string>

#include "fp4gap/backend.hpp"

namespace fp4gap {

DeviceContext query_device(int ordinal = 0);
void register_cuda_backends();  // idempotent; adds every GPU backend to the registry

}  // namespace fp4gap
