#pragma once
// Programmatic dependent launch (PTX griddepcontrol, sm_90+), shared by the decode and prefill
// kernels. Both return at once when the launch was not programmatic (or below sm_90).
//
// allow_dependent_launch: the next kernel in the stream may start (its CTAs wait in
// wait_for_previous_grid until this grid has completed and its writes are visible). The first call
// of any thread of a CTA counts for the CTA. The kernels allow it after their main loop: allowed
// at their start, each launch let the next start at once and that one the one after it, three
// grids resident and two prefetching (PERF-LOG run 8: decode up to 1.3x slower at N = 4096,
// K = 6144).

#include <cuda_runtime.h>

namespace fp4gap::cuda {

// The launch attribute (cudaLaunchKernelEx) that makes a launch a programmatic dependent of the
// previous kernel in its stream.
inline cudaLaunchAttribute programmatic_launch_attribute() {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace fp4gap::cuda
