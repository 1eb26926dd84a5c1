#pragma once
// The naive GPU reference GEMM (CUDA library): one thread per output element, operands
// dequantized on the fly by format.hpp's codecs (the same arithmetic as operand_values()), so it
// is obviously correct and verifies shapes too large for the CPU reference.
// This header needs no CUDA headers: streams are passed as void* (a cudaStream_t).
#include <cstdint>

#include "fp4gap/problem.hpp"
#include "fp4gap/reference.hpp"

namespace fp4gap {

// D[m, n] = alpha * A[m, k] * B[n, k]^T with float32 accumulation in k order, written to d_out
// as `out` (row-major, m*n elements; alpha applied in double, then rounded once to the output
// type). a and b are OperandViews whose pointers are
// DEVICE addresses. Asynchronous on `stream`; capturable into a CUDA graph.
// Throws InvalidArgument when a.k != b.k, a shape is < 1, an nvfp4 operand has k % 16 != 0, or
// a pointer the format needs is null.
void gpu_reference_gemm_device(const OperandView& a, const OperandView& b, double alpha, OutputType out,
                               void* d_out, void* stream);

// The reference result computed on the GPU for host operands (pointers are HOST addresses):
// uploads them, accumulates in double like reference_gemm() (d and abs_sum), and downloads.
// Blocking. Throws RuntimeError when no device is usable.
ReferenceResult gpu_reference_gemm(const OperandView& a, const OperandView& b, double alpha);

// Bytes of an operand's arrays as OperandView describes them (payload, and scales for nvfp4).
std::int64_t operand_payload_bytes(const OperandView& v);
std::int64_t operand_scale_bytes(const OperandView& v);

}  // namespace fp4gap
