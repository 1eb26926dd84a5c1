#pragma once
// Lets the pure format math be compiled for the host and, unchanged, for CUDA kernels, so the CPU
// reference and the GPU kernels run literally the same arithmetic.
#if defined(__CUDACC__)
#define FP4GAP_HD __host__ __device__ __forceinline__
#else
#define FP4GAP_HD inline
#endif
