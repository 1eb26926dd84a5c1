#pragma once
// Host entry points of the Hopper prefill kernels (prefill_gemm.cu), used by
// src/backends/prefill_backends.cu and the device tests.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "fp4gap/prefill.hpp"
#include "fp4gap/problem.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap::prefill {

// ok when this binary holds the sm_90a kernels and the current device can run them; otherwise
// not_supported with the reason (checked once per process by launching a probe kernel).
Status kernels_available();

// CTAs of `config` that can run at once in clusters of `split` on the current device (clusters
// must fit inside one GPC, so this can be less than the SM count), from the occupancy API; cached.
// Sets the kernel's shared-memory attribute first.
int concurrent_ctas(const TileConfig& config, int split);

// Sets the kernel's dynamic shared-memory limit and loads it: call before capturing a launch of
// `plan` into a graph. launch_gemm calls it too.
void prepare_launch(const Plan& plan);

// CTAs launch_gemm launches for `plan`: plan.ctas(), or for a persistent config at most as many
// as can be resident at once (each loops over its tiles).
std::int64_t launch_ctas(const Plan& plan);

// Tensor maps of a row-major [m, k] bf16 activation matrix with the 128-byte swizzle (rows beyond m
// read as zeros) for `config`'s tiles: boxes of kBlockK x block_m (`tile`), kBlockK x block_m / 2
// (`half_tile`, for the half tiles of a persistent schedule) and, for a config copying several K
// blocks at once (TileConfig::copy_group), `group`: copy_group such boxes at consecutive K blocks
// in one copy. k * 2 must be a multiple of 16. launch_gemm checks that they match its plan.
struct ActivationMaps {
  CUtensorMap tile{};
  CUtensorMap half_tile{};
  CUtensorMap group{};
  CUtensorMap edge{};       // boxes of m % block_m rows: the last row of tiles where M ends inside it
  CUtensorMap half_edge{};  // m % (block_m / 2) rows: a persistent CTA's half tile there
  std::int64_t m = 0, k = 0;
  int block_m = 0, copy_group = 0;
};
ActivationMaps make_activation_maps(const void* act_bf16, std::int64_t m, std::int64_t k, const TileConfig& config);

// NVFP4 activations for a launch that dequantizes them in the kernel (W4A4 without the separate
// pass; check_activation_dequant_in_kernel says which plans can): row-major [m, k] E2M1 codes
// (k / 2 bytes a row, 16-byte aligned) and LINEAR E4M3 block scales (k / 16 bytes a row, 2-byte
// aligned), no global scale (alpha carries it).
struct Nvfp4Activations {
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scales = nullptr;
  std::int64_t m = 0, k = 0;
};

// Words per CTA of the optional timeline: %globaltimer (ns) at the CTA's start, when its first stage
// had arrived, at the end of its main loop and at the end of its epilogue, then its SM id and the
// SM clock cycles (32-bit clock) from the first stage's arrival to the end of the main loop, then
// two more %globaltimer marks inside a cluster split-K epilogue: when every partial tile of the
// cluster is written (its first cluster barrier returned) and when this CTA's share of the tile is
// reduced and stored (before its last cluster barrier); other epilogues leave both at the main
// loop's end.
inline constexpr int kTimelineFields = 8;
// After every CTA's fields, kTimelineArrivals words per CTA: the SM clock cycles from the CTA's
// start (after its barrier setup) to the arrival of each of its first K blocks (the first pass
// over the ring, at most kTimelineArrivals; 0 beyond), watched by an otherwise idle producer thread.
inline constexpr int kTimelineArrivals = 16;

// D[m, n] = alpha * A * W^T on `stream`. `act_maps` from make_activation_maps(.., plan.config);
// `packed` from pack_weights (uploaded); `out` row-major [m, n] of `out_type`. Graph-capturable.
// `timeline`: nullptr, or launch_ctas(plan) x (kTimelineFields + kTimelineArrivals) words of device
// memory that thread 0 and one producer thread of each CTA fill (a diagnostic: where a CTA's time
// goes; costs one wait and six timer reads on the consumers' side).
// `programmatic`: a programmatic dependent launch (sm_90): the kernel may start while the
// previous one in the stream still runs; it requests its first weight stages at once and waits
// for that kernel to complete before it reads A or writes D. It lets the next kernel start once
// each CTA's main loop is done.
// `workspace`: plan.workspace_bytes() of device memory (or nullptr when that is 0), its counters
// zero before the first launch (each launch leaves them zero); launches sharing one must be
// ordered in one stream. Throws InvalidArgument when the plan needs one and none is given.
void launch_gemm(const Plan& plan, const ActivationMaps& act_maps, const std::uint8_t* packed, void* out,
                 OutputType out_type, std::int64_t m, std::int64_t n, float alpha, cudaStream_t stream,
                 std::uint64_t* timeline = nullptr, bool programmatic = false, void* workspace = nullptr);

// The kernel's own (static) shared memory, as CUDA reports it for the instantiation of `config`
// (the one dequantizing activations where `dequant_act`); kKernelStaticSmemBytes bounds it
// (device-tested). Throws InvalidArgument for a config without that instantiation.
std::int64_t kernel_static_smem_bytes(const TileConfig& config, bool dequant_act);

// check_activation_dequant_in_kernel against what the kernel may request on the current device
// (the opt-in limit less kKernelStaticSmemBytes).
Status check_activation_dequant_on_device(const Plan& plan, std::int64_t k);

// prefill.hpp's w4a4_dequantizes_in_kernel against what the kernel may request on the current
// device (as check_activation_dequant_on_device).
bool w4a4_dequantizes_in_kernel(const Plan& plan, std::int64_t k);
// The shared memory a kernel dequantizing NVFP4 activations may request on the current device: the
// opt-in limit less that kernel's own (prefill.hpp's policy_plan `smem_per_block` on the device).
std::int64_t activation_dequant_smem_limit();

// The same with NVFP4 activations that the kernel's consumer warpgroups dequantize into shared
// memory (no tensor maps, no separate pass), with activation_dequant_smem_bytes(plan) of it. Throws
// InvalidArgument naming the rule when the plan or K cannot (check_activation_dequant_on_device)
// or the activations do not fit the plan or are misaligned.
// Reads `act` only after the previous kernel has completed (programmatic launch).
void launch_gemm(const Plan& plan, const Nvfp4Activations& act, const std::uint8_t* packed, void* out,
                 OutputType out_type, std::int64_t m, std::int64_t n, float alpha, cudaStream_t stream,
                 std::uint64_t* timeline = nullptr, bool programmatic = false, void* workspace = nullptr);

// Exact NVFP4 -> bf16 dequantization of a row-major [m, k] matrix with LINEAR scales (no global
// scale): out = e2m1 * e4m3. k % 16 == 0. Graph-capturable. A kernel launched programmatically
// behind it may start once all of its CTAs have started (and must wait for it before reading out).
// `programmatic`: launched as a programmatic dependent launch, it may start while the previous
// kernel in the stream still runs, and reads and writes only once that kernel has completed.
void launch_dequantize_bf16(const std::uint8_t* codes, const std::uint8_t* scales, std::uint16_t* out,
                            std::int64_t m, std::int64_t k, cudaStream_t stream, bool programmatic = false);

}  // namespace fp4gap::prefill
