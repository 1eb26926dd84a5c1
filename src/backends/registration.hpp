#pragma once
// Registration entry points of the GPU backends. register_cuda_backends() (src/cuda/device_query.cu)
// calls each of them once, through the list in src/backends/registration.cu.
//
// To add your backends: declare `void register_<x>_backends();` below (one line) and append ONE
// call line to the list in src/backends/registration.cu. Each function registers its backends
// with register_gemm_backend(); it is called at most once per process.
namespace fp4gap {

// Calls every register_<x>_backends() below once; used by register_cuda_backends().
void register_all_gpu_backends();

void register_cublas_backends();  // cublas-bf16, cublaslt-fp8, cublaslt-nvfp4 (src/backends/cublas_backends.cu)

// ---- other engineers: add your declarations below this line ----
void register_gpu_reference_backends();  // gpu-reference (src/backends/gpu_reference_backend.cu)
void register_decode_backends();  // fp4gap-decode-w4a16, fp4gap-decode-w4a4 (src/backends/decode_backends.cu)
void register_prefill_backends();  // fp4gap-prefill-w4a16, fp4gap-prefill-w4a4 (src/backends/prefill_backends.cu)
void register_dispatch_backends();  // fp4gap-w4a16, fp4gap-w4a4 (src/backends/dispatch_backends.cu); after the two above

}  // namespace fp4gap
