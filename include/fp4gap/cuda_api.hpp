#pragma once
// Entry points of the CUDA library (fp4gap_cuda) that host-side code (the CLI) calls.
// Everything here works on a machine without a GPU: it reports the absence, never crashes.
#include <cstddef>
#include <memory>
#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/roofline.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap {

DeviceContext query_device(int ordinal = 0);
void register_cuda_backends();  // idempotent; adds every GPU backend to the registry

// fp4gap peak: memory bandwidth (large copy counting read + written bytes, and a read-dominated
// kernel; the higher is the memory roof) and cuBLAS BF16 / cuBLASLt FP8 rates at a large shape.
// Throws RuntimeError when no device is available.
Ceilings measure_ceilings(const DeviceContext& device);

// Enqueues the copy kernel that measure_ceilings times (16-byte vectors, 8 thread blocks per SM)
// on `stream` (a cudaStream_t), so other commands can time a copy of the bytes they move.
// src, dst and bytes must be multiples of 16 (InvalidArgument otherwise, quoting them).
void launch_copy(const void* src, void* dst, std::size_t bytes, const DeviceContext& device, void* stream);

// The read-floor yardstick of `fp4gap gemm` (the read_us column): measure_ceilings' read kernel
// streaming `bytes` (rounded up to 16) from HBM, timed like a GEMM runner (time_launch: graph
// and event mode, copies rotated so that each is cold, input_sets_for_cold_cache). What any
// kernel that reads that many bytes once costs under the same timing, launch and ramp included.
// The sustained mode (TimingOptions::sustain_ms) is not run. Throws InvalidArgument for bytes <= 0.
Timing time_read(double bytes, const DeviceContext& device, const TimingOptions& options);

// The prefill policy's count of CTAs that run at once, from the occupancy API of the current
// device, when the prefill kernels can run on it; an empty function otherwise (the policy then
// assumes floor(SMs / split) * split), with the reason in `why_not`.
prefill::ConcurrentCtas prefill_occupancy(std::string* why_not = nullptr);

// fp4gap-prefill-w4a16 (w4a4 false) or fp4gap-prefill-w4a4 running `plan` (made for the problem it
// is prepared for), whatever the policy or the tune cache would pick: what `fp4gap tune` verifies
// and times, one plan at a time. Its rows' config names the plan.
std::unique_ptr<GemmBackend> make_prefill_plan_backend(bool w4a4, const prefill::Plan& plan);

}  // namespace fp4gap
