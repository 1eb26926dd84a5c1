// The one list of GPU backend registration calls (see registration.hpp). Append ONE line per
// backend family to register_all_gpu_backends().
#include "backends/registration.hpp"

namespace fp4gap {

void register_all_gpu_backends() {
  register_cublas_backends();
  // ---- other engineers: append your register_<x>_backends(); call below this line ----
  register_gpu_reference_backends();
  register_decode_backends();
  register_prefill_backends();
  register_dispatch_backends();
}

}  // namespace fp4gap
