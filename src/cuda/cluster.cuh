#pragma once
// Thread-block clusters (PTX, sm_90+): the split-K reductions of the prefill and decode kernels
// through distributed shared memory. Below sm_90 these are not assembled (the kernels that call
// them are reported unsupported there by their tile checks and never launched).
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4gap::cuda {

__device__ __forceinline__ std::uint32_t cluster_rank() {
  std::uint32_t r = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Every thread of every CTA of the cluster: shared-memory writes before it are visible to
// distributed shared-memory reads after it.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The address of the same shared-memory location in the CTA of cluster rank `rank`.
__device__ __forceinline__ std::uint32_t map_to_rank(std::uint32_t addr, std::uint32_t rank) {
  std::uint32_t r = addr;
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
#endif
  return r;
}

__device__ __forceinline__ float4 load_cluster_f4(std::uint32_t addr) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
#endif
  return v;
}

}  // namespace fp4gap::cuda
