// Diagnostic (disabled), not a test of speed: how many SM cycles one tensor-core instruction of the
// kinds the kernels use occupies, with nothing else in the loop. The narrow prefill tiles issue 8
// register-A wgmmas (m64nNk16, N = 16 or 32) per K block and take ~574 cycles per K block (PERF-LOG
// run 48), the decode kernels 2 x M / 8 mma.sync m16n8k16 per 256 weight values; streaming the
// weight at the H200's memory roof needs ~29 weight values per cycle per SM. This measures, per SM,
// cycles per instruction and weight (A) values per cycle for each N and each number of issuing
// warpgroups (or warps), so a kernel's tensor-side ceiling can be read off. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_*'
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/prefill/prefill_ptx.cuh"
#include "device_test_support.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/timing.hpp"

namespace fp4gap::test {
namespace {

constexpr int kStepsPerGroup = 4;  // k16 steps per commit: one K block of the prefill kernels

// `groups` commit groups of kStepsPerGroup register-A wgmmas on the B tile of `desc`, one group
// left in flight as the prefill consumers do; returns once all have completed.
template <int N>
__device__ __forceinline__ void issue_wgmma_groups(int groups, std::uint32_t (&a)[4], std::uint64_t desc,
                                                   float (&d)[N / 2]) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  for (int g = 0; g < groups; ++g) {
#pragma unroll
    for (int r = 0; r < 4; ++r) ptx::fence_register(a[r]);
    ptx::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kStepsPerGroup; ++s) ptx::wgmma_rs<N>(d, a, desc + 2u * static_cast<std::uint32_t>(s));
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();
  }
  ptx::wgmma_wait<0>();
#else
  (void)groups, (void)a, (void)desc, (void)d;
#endif
}

// Every warpgroup issues `groups` commit groups of kStepsPerGroup register-A wgmmas on a zero B
// tile, one group left in flight as the prefill consumers do. cycles[blockIdx.x] = the SM cycles
// from the first issue to the last completion, taken by thread 0.
template <int N>
__global__ void wgmma_rate_kernel(int groups, std::uint64_t* cycles, float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  const std::uint32_t tile = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  for (int i = static_cast<int>(threadIdx.x); i < N * 128 / 4; i += static_cast<int>(blockDim.x)) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(tile + 4u * static_cast<std::uint32_t>(i)), "r"(0u) : "memory");
  }
  ptx::fence_proxy_async();
  __syncthreads();
  const std::uint64_t desc = ptx::sw128_kmajor_desc(tile);
  std::uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const long long start = clock64();
  issue_wgmma_groups<N>(groups, a, desc, d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) ptx::fence_register(d[i]);
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
  if (d[0] == 1.2345f) *sink = d[1];  // never: keeps the accumulators
#endif
}

// As wgmma_rate_kernel (one B tile of N rows, `wgs` warpgroups, one group in flight), while the
// last warp's elected thread, if `stage_bytes` > 0, keeps `stages` bulk copies of `stage_bytes` in
// flight from this CTA's L2-resident `src_bytes` into a ring, each stage copied again as soon as
// its previous copy has landed (as the prefill producer, without consumers to wait for). With
// `issue_wgmma` false the warpgroups only wait `idle_cycles` (the copies alone). out[2 c] = the
// warpgroups' SM cycles, out[2 c + 1] = bytes the copies delivered meanwhile.
template <int N>
__global__ void wgmma_with_copies_kernel(int groups, bool issue_wgmma, long long idle_cycles, int wgs,
                                         const std::uint8_t* src, int src_bytes, int stage_bytes, int stages,
                                         std::uint64_t* out, float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ alignas(8) std::uint64_t bars[8];
  __shared__ volatile int done;
  const std::uint32_t tile = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t ring = tile + N * 128u;
  auto bar = [&](int s) { return ptx::smem_addr(&bars[s]); };
  for (int i = static_cast<int>(threadIdx.x); i < N * 128 / 4; i += static_cast<int>(blockDim.x)) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(tile + 4u * static_cast<std::uint32_t>(i)), "r"(0u) : "memory");
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbarrier_init(bar(s), 1);
    done = 0;
    ptx::fence_barrier_init();
  }
  ptx::fence_proxy_async();
  __syncthreads();
  const int consumers = 128 * wgs;
  if (static_cast<int>(threadIdx.x) >= consumers) {
    if (threadIdx.x != static_cast<unsigned>(consumers) || stage_bytes == 0) return;
    const std::uint8_t* my_src = src + static_cast<std::int64_t>(blockIdx.x) * src_bytes;
    int offset = 0;
    auto copy = [&](int s) {
      ptx::mbarrier_arrive_expect_tx(bar(s), static_cast<std::uint32_t>(stage_bytes));
      ptx::bulk_load(ring + static_cast<std::uint32_t>(s * stage_bytes), my_src + offset,
                     static_cast<std::uint32_t>(stage_bytes), bar(s));
      offset = offset + 2 * stage_bytes > src_bytes ? 0 : offset + stage_bytes;
    };
    for (int s = 0; s < stages; ++s) copy(s);
    std::uint64_t bytes = 0;
    int s = 0;
    std::uint32_t phase = 0;
    auto next = [&] {
      s = s + 1 == stages ? 0 : s + 1;
      phase ^= s == 0 ? 1u : 0u;
    };
    while (done == 0) {
      ptx::mbarrier_wait(bar(s), phase);
      bytes += static_cast<std::uint64_t>(stage_bytes);
      copy(s);
      next();
    }
    for (int j = 0; j < stages; ++j, next()) ptx::mbarrier_wait(bar(s), phase);  // shared memory outlives them
    out[2 * blockIdx.x + 1] = bytes;
    return;
  }
  const std::uint64_t desc = ptx::sw128_kmajor_desc(tile);
  std::uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  ptx::named_barrier(1, static_cast<std::uint32_t>(consumers));
  const long long start = clock64();
  if (issue_wgmma) {
    issue_wgmma_groups<N>(groups, a, desc, d);
  } else {
    while (clock64() - start < idle_cycles) {
    }
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) ptx::fence_register(d[i]);
  ptx::named_barrier(1, static_cast<std::uint32_t>(consumers));
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
    done = 1;
  }
  if (d[0] == 1.2345f) *sink = d[1];  // never: keeps the accumulators
#endif
}

// Every warp issues `groups` x 8 mma.sync m16n8k16 (bf16, f32 accumulate), `n_tiles` n8 tiles
// sharing one A fragment per k16 step, as the decode kernels do for M = 8 x n_tiles.
template <int NT>
__global__ void mma_sync_rate_kernel(int groups, std::uint64_t* cycles, float* sink) {
  std::uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  std::uint32_t b[2] = {threadIdx.x * 11u, threadIdx.x * 13u};
  float d[2][NT][4] = {};  // two accumulator sets, as the decode kernels keep, so mma need not wait on mma
  __syncthreads();
  const long long start = clock64();
  for (int g = 0; g < groups; ++g) {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float(&acc)[4] = d[s & 1][t];
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
  float x = 0.0f;
#pragma unroll
  for (int t = 0; t < NT; ++t) x += d[0][t][0] + d[1][t][1];
  if (x == 1.2345f) *sink = x;  // never
}

// D[64 x 192] += A[64 x 16] * B[16 x 192], both bf16 K-major in shared memory (128-byte swizzle),
// fp32 accumulators: the consumer instruction of a tile whose weight is the B operand
// (docs/KERNELS-prefill.md, "Not done yet", item 1d).
// Defined only where the kernel below has a body, so the other architectures' passes do not see an
// unused function.
#if FP4GAP_PREFILL_SM90A
__device__ __forceinline__ void wgmma_m64n192k16_ss(float (&d)[96], std::uint64_t a_desc, std::uint64_t b_desc) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(a_desc), "l"(b_desc), "r"(1));
}

// The stand-in for a dequantizing warpgroup (and the copy engine) of the kernels below: per pass
// thread t loads 3 x 16 bytes (the packed weight) and stores `writer_stores` x 16 bytes into a
// region nobody reads, until the consumers set `done`. out[1] = its passes, out[2] = its SM cycles.
__device__ __forceinline__ void stand_in_dequantizer(volatile int& done, std::uint32_t reads, std::uint32_t writes,
                                                     int writer_stores, int t, std::uint64_t* out) {
  namespace ptx = prefill::ptx;
  const long long start = clock64();
  std::uint32_t passes = 0;
  while (done == 0) {
    uint4 w[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) w[j] = ptx::ld_shared_v4_u32(reads + static_cast<std::uint32_t>(j * 128 + t) * 16u);
    const std::uint32_t x = w[0].x ^ w[1].y ^ w[2].z ^ passes;
    for (int j = 0; j < writer_stores; ++j) {
      ptx::st_shared_v4_u32(writes + static_cast<std::uint32_t>(j * 128 + t) * 16u, x, w[0].y, w[1].z, w[2].w);
    }
    ++passes;
  }
  if (t == 0) {
    out[1] = passes;
    out[2] = static_cast<std::uint64_t>(clock64() - start);
  }
}

#endif

// Per SM, two consumer warpgroups issue commit groups of 4 m64n192k16 with A (64 activation rows
// each) and B (192 weight rows, shared) from shared memory, one group in flight, while a third
// warpgroup, if `writer_stores` > 0, stands in for the dequantizer and the copy engine
// (`stand_in_dequantizer`; 12 stores: the dequantized tile, 24: with the copies' bytes too) until
// the consumers are done. out[3 c] = the consumers' SM cycles, out[3 c + 1] = the writer's passes,
// out[3 c + 2] = the writer's SM cycles.
__global__ void __launch_bounds__(384, 1)
    shared_b_with_writes_kernel(int groups, int writer_stores, std::uint64_t* out, float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ volatile int done;
  const std::uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  constexpr std::uint32_t kA = 8192, kB = 192 * 128, kWrites = 24 * 128 * 16, kReads = 3 * 128 * 16;
  const std::uint32_t b_tile = base + 2 * kA, writes = b_tile + kB, reads = writes + kWrites;
  for (std::uint32_t i = threadIdx.x; i < (reads + kReads - base) / 16; i += blockDim.x) {
    ptx::st_shared_v4_u32(base + 16u * i, 0u, 0u, 0u, 0u);
  }
  if (threadIdx.x == 0) done = 0;
  ptx::fence_proxy_async();
  __syncthreads();
  const int warpgroup = static_cast<int>(threadIdx.x) / 128, t = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup < 2) {
    const std::uint64_t a_desc = ptx::sw128_kmajor_desc(base + static_cast<std::uint32_t>(warpgroup) * kA);
    const std::uint64_t b_desc = ptx::sw128_kmajor_desc(b_tile);
    float d[96];
#pragma unroll
    for (int i = 0; i < 96; ++i) d[i] = 0.0f;
    const long long start = clock64();
    for (int g = 0; g < groups; ++g) {
      ptx::wgmma_fence();
#pragma unroll
      for (int s = 0; s < kStepsPerGroup; ++s) {
        wgmma_m64n192k16_ss(d, a_desc + 2u * static_cast<std::uint32_t>(s), b_desc + 2u * static_cast<std::uint32_t>(s));
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 96; ++i) ptx::fence_register(d[i]);
    ptx::named_barrier(1, 256);
    if (threadIdx.x == 0) {
      out[3 * blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
      done = 1;
    }
    if (d[0] == 1.2345f) *sink = d[1];  // never: keeps the accumulators
  } else if (writer_stores > 0) {
    stand_in_dequantizer(done, reads, writes, writer_stores, t, out + 3 * blockIdx.x);
  }
#else
  (void)groups, (void)writer_stores, (void)out, (void)sink;
#endif
}

// As shared_b_with_writes_kernel, with each consumer warpgroup's 64 activation rows taken from
// global memory straight into wgmma's A registers (item 1e: no activation copy in shared memory, so
// only the weight tile is read there). Thread (warp w, lane l) of warpgroup g loads per K block the
// 32 bytes at column byte (l % 4) * 32 of rows 64 g + 16 w + l / 4 and + 8: four 16-byte loads,
// four lanes covering a row's 128 bytes (so the kernel would permute K inside a block, as the
// weight's offline layout can, to match the fragment). Loads run kAhead K blocks ahead, into staging
// registers that the consumers, raised to 216 registers by setmaxnreg, move into a fragment set
// before the fence; with `load_activations` false they reuse the first blocks. Activation rows are
// the CTA's 128 of `act` (act_rows x k_blocks x 128 bytes, L2-resident as in a GEMM whose weight
// columns share them). out as shared_b_with_writes_kernel's.
template <int kAhead>
__global__ void __launch_bounds__(384, 1)
    register_a_activation_with_writes_kernel(int groups, int writer_stores, bool load_activations, const uint4* act,
                                             int act_rows, int k_blocks, std::uint64_t* out, float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ volatile int done;
  const std::uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  constexpr std::uint32_t kB = 192 * 128, kWrites = 24 * 128 * 16, kReads = 3 * 128 * 16;
  const std::uint32_t b_tile = base, writes = b_tile + kB, reads = writes + kWrites;
  for (std::uint32_t i = threadIdx.x; i < (reads + kReads - base) / 16; i += blockDim.x) {
    ptx::st_shared_v4_u32(base + 16u * i, 0u, 0u, 0u, 0u);
  }
  if (threadIdx.x == 0) done = 0;
  ptx::fence_proxy_async();
  __syncthreads();
  const int warpgroup = static_cast<int>(threadIdx.x) / 128, t = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup < 2) {
    const int row = static_cast<int>(blockIdx.x) % (act_rows / 128) * 128 + 64 * warpgroup + 16 * (t / 32) + t % 32 / 4;
    const std::size_t row_stride = static_cast<std::size_t>(k_blocks) * 8;  // uint4 per row
    const uint4* row_lo = act + static_cast<std::size_t>(row) * row_stride + 2 * (t % 4);
    const uint4* row_hi = row_lo + 8 * row_stride;
    const std::uint64_t b_desc = ptx::sw128_kmajor_desc(b_tile);
    float d[96];
#pragma unroll
    for (int i = 0; i < 96; ++i) d[i] = 0.0f;
    // The loads land in `staged`, which no wgmma reads, and are moved into a fragment set just before
    // the fence: loading straight into a set that an earlier group read makes ptxas serialize the
    // wgmmas (C7512).
    ptx::claim_registers<216>();
    uint4 staged[kAhead][4], frag[2][4];
    auto load = [&](uint4(&slot)[4], int kb) {
      const std::size_t k = static_cast<std::size_t>(kb % k_blocks) * 8;
      slot[0] = __ldg(row_lo + k);
      slot[1] = __ldg(row_lo + k + 1);
      slot[2] = __ldg(row_hi + k);
      slot[3] = __ldg(row_hi + k + 1);
    };
    std::uint64_t desc[kStepsPerGroup];
    // Issues the block staged in `slot` from fragment set `cur`, waits for the previous group, then
    // stages block kb in `slot`.
    auto step = [&](uint4(&cur)[4], uint4(&slot)[4], int kb) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        cur[h] = slot[h];
        ptx::fence_register(cur[h].x), ptx::fence_register(cur[h].y);
        ptx::fence_register(cur[h].z), ptx::fence_register(cur[h].w);
      }
#pragma unroll
      for (int s = 0; s < kStepsPerGroup; ++s) {
        desc[s] = b_desc + 2u * static_cast<std::uint32_t>(s);
        ptx::fence_register(desc[s]);
      }
      ptx::wgmma_fence();
      // Step s takes row lo's words 2s, 2s + 1 and row hi's, in the fragment's order.
      ptx::wgmma_m64n192k16_rs(d, {cur[0].x, cur[2].x, cur[0].y, cur[2].y}, desc[0]);
      ptx::wgmma_m64n192k16_rs(d, {cur[0].z, cur[2].z, cur[0].w, cur[2].w}, desc[1]);
      ptx::wgmma_m64n192k16_rs(d, {cur[1].x, cur[3].x, cur[1].y, cur[3].y}, desc[2]);
      ptx::wgmma_m64n192k16_rs(d, {cur[1].z, cur[3].z, cur[1].w, cur[3].w}, desc[3]);
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
      if (load_activations) load(slot, kb);
    };
#pragma unroll
    for (int i = 0; i < kAhead; ++i) load(staged[i], i);
    const long long start = clock64();
    for (int g = 0; g + 2 <= groups; g += 2) {
      step(frag[0], staged[0], g + kAhead);
      step(frag[1], staged[1 % kAhead], g + 1 + kAhead);
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 96; ++i) ptx::fence_register(d[i]);
    ptx::named_barrier(1, 256);
    if (threadIdx.x == 0) {
      out[3 * blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
      done = 1;
    }
    if (d[0] == 1.2345f) *sink = d[1];  // never: keeps the accumulators
  } else {
    // The CTA holds 168 x 384 registers from its launch: 2 x 128 x 216 + 128 x 72 = 64512.
    ptx::release_registers<72>();
    if (writer_stores > 0) stand_in_dequantizer(done, reads, writes, writer_stores, t, out + 3 * blockIdx.x);
  }
#else
  (void)groups, (void)writer_stores, (void)load_activations, (void)act, (void)act_rows, (void)k_blocks, (void)out,
      (void)sink;
#endif
}

// What dequant_wgmma_loop_kernel and its test share: sources of kRowTiles row tiles (M = 512) by
// kSrcBlocks K blocks (K = 2048), and per stage an activation tile and the warpgroups' chunks.
struct ConsumerLoopLayout {
  static constexpr int kRowTiles = 4, kSrcBlocks = 32;
  static constexpr std::uint32_t kActBytes = 128 * 128;
  __host__ __device__ static constexpr std::uint32_t weight_bytes(int wgs) {
    return (wgs == 3 ? 2u : 1u) * prefill::kChunkBytes;
  }
};

// The prefill consumers' main loop (KERNELS-prefill items 1 and 1f): per K block each
// of WGS consumer warpgroups dequantizes its 64 weight rows' fragments from a packed chunk with the
// kernel's decode::dequant_block_fragments, and issues 4 register-A m64n128k16 on a 128-row
// activation tile, IN_FLIGHT groups left in flight. The data
// stay resident: kStages stages of an activation tile and the chunks (one per two warpgroups),
// cycled as the ring is, every stage and fragment buffer a constant. One CTA per SM. FEED adds a producer warpgroup and the kernel's full / empty mbarrier protocol, its
// thread 0 refilling each stage per K block by bulk copies from L2-resident sources laid out as a
// GEMM's at 512 x (33 x 128 or 192) x 2048 reads them (`act_src`: 4 row tiles x 32 K blocks of
// 16 KB, each read by the CTAs of its row; `wgt_src`: 33 column tiles x 32 K blocks of the
// warpgroups' chunks, each read by 4 CTAs): 1 both, 2 the activation tiles only, 3 the weight
// chunks only (the other stays resident). HOIST (with FEED): each warpgroup waits for the next K
// block's stage and loads its code and scale words right after committing a group, before it
// waits for the previous group, instead of after. cycles[c] = the SM cycles of `blocks` K blocks.
template <int WGS, int IN_FLIGHT, int FEED, bool HOIST = false, int STAGES = 6>
__global__ void __launch_bounds__(128 * WGS + (FEED != 0 ? 128 : 0), 1)
    dequant_wgmma_loop_kernel(int blocks, const std::uint8_t* act_src, const std::uint8_t* wgt_src,
                              std::uint64_t* cycles, float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  using prefill::chunk_code_word_offset, prefill::chunk_scale_offset, prefill::kChunkBytes;
  constexpr int kStages = STAGES;  // a multiple of the buffer count, so one unrolled pass repeats
  constexpr int kBuffers = IN_FLIGHT + 1;
  static_assert(kStages % kBuffers == 0);
  constexpr std::uint32_t kActBytes = ConsumerLoopLayout::kActBytes;
  constexpr std::uint32_t kWgtBytes = ConsumerLoopLayout::weight_bytes(WGS);
  constexpr int kRowTiles = ConsumerLoopLayout::kRowTiles, kSrcBlocks = ConsumerLoopLayout::kSrcBlocks;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ alignas(8) std::uint64_t bars[2 * kStages];  // full, then empty
  auto full_bar = [&](int st) { return ptx::smem_addr(&bars[st]); };
  auto empty_bar = [&](int st) { return ptx::smem_addr(&bars[kStages + st]); };
  const std::uint32_t base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t act = base, wgt = base + kStages * kActBytes;
  // 0x22 everywhere: e2m1 1.0 codes, finite multipliers and activations.
  for (std::uint32_t i = threadIdx.x; i < kStages * (kActBytes + kWgtBytes) / 16; i += blockDim.x) {
    ptx::st_shared_v4_u32(base + 16u * i, 0x22222222u, 0x22222222u, 0x22222222u, 0x22222222u);
  }
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      ptx::mbarrier_init(full_bar(st), 1);
      ptx::mbarrier_init(empty_bar(st), 4 * WGS);
    }
    ptx::fence_barrier_init();
  }
  ptx::fence_proxy_async();
  __syncthreads();
  const int warpgroup = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup == WGS) {  // the producer warpgroup (FEED only)
    if (tid != 0) return;
    const std::uint8_t* act_tiles = act_src + static_cast<std::size_t>(blockIdx.x % kRowTiles) * kSrcBlocks * kActBytes;
    const std::uint8_t* wgt_chunks = wgt_src + static_cast<std::size_t>(blockIdx.x / kRowTiles) * kSrcBlocks * kWgtBytes;
    for (int b = 0; b < blocks; ++b) {
      const int st = b % kStages;
      if (b >= kStages) ptx::mbarrier_wait(empty_bar(st), static_cast<std::uint32_t>(b / kStages - 1) & 1u);
      ptx::mbarrier_arrive_expect_tx(full_bar(st), (FEED != 3 ? kActBytes : 0u) + (FEED != 2 ? kWgtBytes : 0u));
      if (FEED != 3) {
        ptx::bulk_load(act + st * kActBytes, act_tiles + static_cast<std::size_t>(b % kSrcBlocks) * kActBytes,
                       kActBytes, full_bar(st));
      }
      if (FEED != 2) {
        ptx::bulk_load(wgt + st * kWgtBytes, wgt_chunks + static_cast<std::size_t>(b % kSrcBlocks) * kWgtBytes,
                       kWgtBytes, full_bar(st));
      }
    }
    return;
  }
  const int row = 64 * (warpgroup % 2) + 16 * (tid / 32) + tid % 32 / 4;  // first fragment row in its chunk
  const std::uint32_t chunk = wgt + static_cast<std::uint32_t>(warpgroup / 2 * kChunkBytes);
  const std::uint32_t code_addr = chunk + chunk_code_word_offset(warpgroup % 2, tid, 0);
  const std::uint32_t scale_addr = chunk + chunk_scale_offset(row, 0);
  constexpr std::uint32_t kScaleRow8 = chunk_scale_offset(8, 0) - chunk_scale_offset(0, 0);
  const std::uint64_t desc0 = ptx::sw128_kmajor_desc(act);
  const std::uint32_t desc_lo = static_cast<std::uint32_t>(desc0);
  const std::uint64_t desc_hi = desc0 & ~std::uint64_t{0xFFFFFFFFu};
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  std::uint32_t frag[kBuffers][kStepsPerGroup][4];
  constexpr bool kHoist = HOIST && FEED != 0;
  uint4 next_codes{};  // kHoist: the next block's words, loaded before the previous group's wait
  std::uint32_t next_lo = 0, next_hi = 0;
  auto load_next = [&](int stg, int block) {
    ptx::mbarrier_wait(full_bar(stg), static_cast<std::uint32_t>(block / kStages) & 1u);
    const std::uint32_t wgt_stage = static_cast<std::uint32_t>(stg) * kWgtBytes;
    next_codes = ptx::ld_shared_v4_u32(code_addr + wgt_stage);
    next_lo = ptx::ld_shared_u32(scale_addr + wgt_stage);
    next_hi = ptx::ld_shared_u32(scale_addr + wgt_stage + kScaleRow8);
  };
  if constexpr (kHoist) load_next(0, 0);
  auto issue_block = [&](auto stage, auto buffer, int block) {
    constexpr int stg = decltype(stage)::value, b = decltype(buffer)::value;
    uint4 codes = next_codes;
    std::uint32_t scales_lo = next_lo, scales_hi = next_hi;
    if constexpr (!kHoist) {
      constexpr std::uint32_t wgt_stage = stg * kWgtBytes;
      if constexpr (FEED != 0) ptx::mbarrier_wait(full_bar(stg), static_cast<std::uint32_t>(block / kStages) & 1u);
      codes = ptx::ld_shared_v4_u32(code_addr + wgt_stage);
      scales_lo = ptx::ld_shared_u32(scale_addr + wgt_stage);
      scales_hi = ptx::ld_shared_u32(scale_addr + wgt_stage + kScaleRow8);
    }
    const std::uint32_t words[kStepsPerGroup] = {codes.x, codes.y, codes.z, codes.w};
    decode::dequant_block_fragments<decode::Math::w4a16>(words, scales_lo, scales_hi, frag[b]);
    std::uint64_t desc[kStepsPerGroup];
#pragma unroll
    for (int j = 0; j < kStepsPerGroup; ++j) {
      desc[j] = desc_hi | (desc_lo + stg * (kActBytes >> 4) + 2u * j);
      ptx::fence_register(desc[j]);
#pragma unroll
      for (int r = 0; r < 4; ++r) ptx::fence_register(frag[b][j][r]);
    }
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kStepsPerGroup; ++j) ptx::wgmma_m64n128k16_rs(acc, frag[b][j], desc[j]);
    ptx::wgmma_commit();
    if constexpr (kHoist) {
      if (block + 1 < blocks) load_next((stg + 1) % kStages, block + 1);
    }
    ptx::wgmma_wait<IN_FLIGHT>();
    // Block `block - IN_FLIGHT` is complete: each warp releases its stage.
    if (FEED != 0 && block >= IN_FLIGHT && tid % 32 == 0) {
      ptx::mbarrier_arrive(empty_bar((stg + kStages - IN_FLIGHT) % kStages));
    }
  };
  const long long start = clock64();
  for (int i = 0; i + kStages <= blocks; i += kStages) {
    [&]<int... S>(std::integer_sequence<int, S...>) {
      (issue_block(std::integral_constant<int, S>{}, std::integral_constant<int, S % kBuffers>{}, i + S), ...);
    }(std::make_integer_sequence<int, kStages>{});
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 64; ++i) ptx::fence_register(acc[i]);
  ptx::named_barrier(1, 128 * WGS);
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
  if (acc[0] == 1.2345f) *sink = acc[1];  // never: keeps the accumulators
#else
  (void)blocks, (void)act_src, (void)wgt_src, (void)cycles, (void)sink;
#endif
}

double median(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

// Medians over the CTAs of the writer kernels' outputs (3 per CTA): the consumers' cycles, the
// writer's passes and its cycles.
std::array<double, 3> consumer_writer_medians(const std::vector<std::uint64_t>& out) {
  std::array<std::vector<std::uint64_t>, 3> columns;
  for (std::size_t i = 0; i < out.size(); ++i) columns[i % 3].push_back(out[i]);
  return {median(columns[0]), median(columns[1]), median(columns[2])};
}

TEST(TensorRate, DISABLED_RegisterAWgmmaAndMmaSync) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "register-A wgmma is sm_90a code";
  const int sms = gpu().sm_count;
  constexpr int kGroups = 4096;
  cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(sms));
  cuda::DeviceBuffer<float> sink(1);
  // More than half an SM's shared memory per CTA: one CTA per SM, whatever the grid.
  int smem_per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  const int smem = smem_per_sm / 2 + 1024;
  std::printf("%-28s %10s | %14s %18s\n", "instruction", "issuers/SM", "SM cycles/inst", "weight values/cycle");
  auto report = [&](const char* kind, int issuers, double instructions, double a_values_per_inst) {
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const double c = median(cycles.download());
    ASSERT_GT(c, 0.0) << kind;
    std::printf("%-28s %10d | %14.1f %18.1f\n", kind, issuers, c / instructions, a_values_per_inst * instructions / c);
  };
  auto wgmma_rows = [&]<int N>(std::integral_constant<int, N>) {
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_rate_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int wgs : {1, 2, 4}) {
      if (N == 256 && wgs == 4) continue;  // 512 threads x 128 accumulators: more registers than an SM has
      wgmma_rate_kernel<N><<<sms, 128 * wgs, smem>>>(kGroups, cycles.get(), sink.get());
      char name[64];
      std::snprintf(name, sizeof(name), "wgmma m64n%dk16 (A: regs)", N);
      report(name, wgs, static_cast<double>(kGroups) * kStepsPerGroup * wgs, 64.0 * 16.0);
    }
  };
  wgmma_rows(std::integral_constant<int, 16>{});
  wgmma_rows(std::integral_constant<int, 32>{});
  wgmma_rows(std::integral_constant<int, 64>{});
  wgmma_rows(std::integral_constant<int, 128>{});
  wgmma_rows(std::integral_constant<int, 256>{});
  auto mma_rows = [&]<int NT>(std::integral_constant<int, NT>) {
    CUDA_CHECK(cudaFuncSetAttribute(mma_sync_rate_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int warps : {4, 8, 16}) {
      mma_sync_rate_kernel<NT><<<sms, 32 * warps, smem>>>(kGroups / 4, cycles.get(), sink.get());
      char name[64];
      std::snprintf(name, sizeof(name), "mma.sync m16n8k16 x %d n8", NT);
      // Weight values per instruction: 256 per k16 step, shared by its NT n8 tiles.
      report(name, warps, static_cast<double>(kGroups / 4) * 8 * NT * warps, 256.0 / NT);
    }
  };
  mma_rows(std::integral_constant<int, 1>{});
  mma_rows(std::integral_constant<int, 2>{});
  mma_rows(std::integral_constant<int, 4>{});
}

// Diagnostic (disabled), not a test of speed: whether a tile with the weight as wgmma's B operand
// (KERNELS-prefill, "Not done yet", item 1d: 128 activation rows x 192 weight rows) can keep the
// tensor cores busy while its weight is dequantized into shared memory. Its arithmetic puts the
// shared-memory traffic at ~154 bytes per tensor cycle against 128, i.e. ~82% of the tensor rate.
// One CTA per SM: the consumers alone, then beside a writer storing 12 or 24 x 16 bytes per thread
// and pass (the dequantized tile; plus the copies' bytes). The tile needs one writer pass per
// commit group at 12 stores (24 with the copies, which the copy engine would make instead). Run by
// hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_SharedBWeightBesideDequantWrites'
TEST(TensorRate, DISABLED_SharedBWeightBesideDequantWrites) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "wgmma is sm_90a code";
  const int sms = gpu().sm_count;
  constexpr int kGroups = 4096;
  cuda::DeviceBuffer<std::uint64_t> out(static_cast<std::size_t>(3 * sms));
  cuda::DeviceBuffer<float> sink(1);
  int smem_per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  const int smem = std::max(smem_per_sm / 2 + 1024, 2 * 8192 + 192 * 128 + 27 * 128 * 16 + 1024);
  CUDA_CHECK(cudaFuncSetAttribute(shared_b_with_writes_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("%13s | %12s %14s %14s %16s\n", "writer stores", "cycles/group", "tensor rate", "passes/group",
              "writer B/cycle");
  for (int stores : {0, 12, 24}) {
    out.fill_bytes(0);
    shared_b_with_writes_kernel<<<sms, 384, smem>>>(kGroups, stores, out.get(), sink.get());
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<std::uint64_t> o = out.download();
    const auto [c, p, wc] = consumer_writer_medians(o);
    ASSERT_GT(c, 0.0) << stores;
    if (stores > 0) ASSERT_GT(p, 0.0) << stores;
    // 2 x 4 m64n192k16 per group, 96 SM cycles each at 2048 bf16 FMA per cycle.
    const double ideal = 2.0 * kStepsPerGroup * 96.0;
    std::printf("%13d | %12.1f %13.0f%% %14.2f %16.1f\n", stores, c / kGroups, 100.0 * ideal * kGroups / c,
                p / kGroups, stores > 0 ? p * 128.0 * (stores + 3) * 16.0 / wc : 0.0);
  }
}

// Diagnostic (disabled), not a test of speed: item 1e's premise (KERNELS-prefill, "Not done yet").
// With the activation rows in wgmma's A registers, loaded by the consumers from L2, shared memory
// carries per K block of a 128 x 192 tile only the weight: B read by both warpgroups (48 KB), the
// dequantized tile written (24 KB), the packed chunk written by the copy and read (2 x 6.9 KB):
// ~112 bytes per tensor cycle where item 1d needs ~154, and L2 gives each SM 16 KB of activations
// and 6.9 KB of weight per 768 cycles (~30 bytes per cycle; run 104 measured 34-40 with every SM
// copying). Rows: consumers alone (activations not reloaded), with their loads, and beside a
// writer storing 12, 16 (the tile and the copy's chunk) or 24 x 16 bytes per thread and pass.
// Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_ActivationInRegistersBesideDequantWrites'
TEST(TensorRate, DISABLED_ActivationInRegistersBesideDequantWrites) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "wgmma is sm_90a code";
  const int sms = gpu().sm_count;
  constexpr int kGroups = 4096;
  constexpr int kActRows = 512, kKBlocks = 32;  // W2 at M = 512: K = 2048
  cuda::DeviceBuffer<std::uint64_t> out(static_cast<std::size_t>(3 * sms));
  cuda::DeviceBuffer<float> sink(1);
  cuda::DeviceBuffer<uint4> act(static_cast<std::size_t>(kActRows) * kKBlocks * 8);
  act.fill_bytes(0x3C);
  int smem_per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  const int smem = std::max(smem_per_sm / 2 + 1024, 192 * 128 + 27 * 128 * 16 + 1024);
  std::printf("%5s %6s %13s | %12s %12s %14s %16s %16s\n", "ahead", "loads", "writer stores", "cycles/group",
              "tensor rate", "passes/group", "writer B/cycle", "loaded B/cycle");
  auto rows = [&]<int kAhead>(std::integral_constant<int, kAhead>) {
    CUDA_CHECK(cudaFuncSetAttribute(register_a_activation_with_writes_kernel<kAhead>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (auto [loads, stores] : {std::pair{false, 0}, {true, 0}, {true, 12}, {true, 16}, {true, 24}}) {
      out.fill_bytes(0);
      register_a_activation_with_writes_kernel<kAhead><<<sms, 384, smem>>>(kGroups, stores, loads, act.get(),
                                                                          kActRows, kKBlocks, out.get(), sink.get());
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<std::uint64_t> o = out.download();
      const auto [c, p, wc] = consumer_writer_medians(o);
      ASSERT_GT(c, 0.0) << stores;
      if (stores > 0) ASSERT_GT(p, 0.0) << stores;
      const double ideal = 2.0 * kStepsPerGroup * 96.0;
      std::printf("%5d %6s %13d | %12.1f %11.0f%% %14.2f %16.1f %16.1f\n", kAhead, loads ? "yes" : "no", stores,
                  c / kGroups, 100.0 * ideal * kGroups / c, p / kGroups,
                  stores > 0 ? p * 128.0 * (stores + 3) * 16.0 / wc : 0.0, loads ? 16384.0 * kGroups / c : 0.0);
    }
  };
  rows(std::integral_constant<int, 1>{});
  rows(std::integral_constant<int, 2>{});
}

// Diagnostic (disabled), not a test of speed: what the prefill consumers' own loop costs
// (KERNELS-prefill items 1 and 1f), in SM cycles per K block against the tensor cores' 256 per
// warpgroup: with 2 or 3 warpgroups and 1 or 2 groups in flight on resident data, then fed by a
// producer warpgroup (both operands, either one), with the next block's wait hoisted, and on 8
// stages instead of 6. The m128 kernel takes ~638-685 per K block (runs 29, 45), run 107's
// three-warpgroup tile ~1000 for 768. Runs 157-158 (an H100): 516-548 and 768 on resident data
// (the dequantization hides behind the wgmmas); fed, 15-22% more at 6 stages whatever the copies
// carry, hoisting changes nothing, 8 stages take 8-9% off: the ring's depth against the copies'
// round trip. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_DequantizingConsumerLoop'
TEST(TensorRate, DISABLED_DequantizingConsumerLoop) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "wgmma is sm_90a code";
  const int sms = gpu().sm_count;
  constexpr int kBlocks = 6 * 700;
  using Layout = ConsumerLoopLayout;
  constexpr std::size_t kSrcBlocks = Layout::kSrcBlocks, kRowTiles = Layout::kRowTiles;
  cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(sms));
  cuda::DeviceBuffer<float> sink(1);
  cuda::DeviceBuffer<std::uint8_t> act_src(kRowTiles * kSrcBlocks * Layout::kActBytes);
  // A column tile per kRowTiles CTAs, each as wide as three warpgroups' chunks.
  cuda::DeviceBuffer<std::uint8_t> wgt_src((static_cast<std::size_t>(sms) + kRowTiles - 1) / kRowTiles * kSrcBlocks *
                                           Layout::weight_bytes(3));
  act_src.fill_bytes(0x22);
  wgt_src.fill_bytes(0x22);
  auto smem_bytes = [](int wgs, int stages) {
    return stages * static_cast<int>(Layout::kActBytes + Layout::weight_bytes(wgs)) + 1024;
  };
  constexpr const char* kFeeds[] = {"none", "both", "act", "weight"};
  std::printf("%10s %9s %7s %6s %7s | %15s %12s %12s\n", "warpgroups", "in flight", "copies", "hoist", "stages",
              "cycles/K block", "tensor", "tensor rate");
  auto row = [&]<int WGS, int IN_FLIGHT, int FEED, bool HOIST = false, int STAGES = 6>(
                 std::integral_constant<int, WGS>, std::integral_constant<int, IN_FLIGHT>,
                 std::integral_constant<int, FEED>, std::bool_constant<HOIST> = {},
                 std::integral_constant<int, STAGES> = {}) {
    const int smem = smem_bytes(WGS, STAGES);
    CUDA_CHECK(cudaFuncSetAttribute(dequant_wgmma_loop_kernel<WGS, IN_FLIGHT, FEED, HOIST, STAGES>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cycles.fill_bytes(0);
    dequant_wgmma_loop_kernel<WGS, IN_FLIGHT, FEED, HOIST, STAGES>
        <<<sms, 128 * WGS + (FEED != 0 ? 128 : 0), smem>>>(kBlocks, act_src.get(), wgt_src.get(), cycles.get(),
                                                           sink.get());
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const double c = median(cycles.download()) / kBlocks;
    ASSERT_GT(c, 0.0) << WGS << " " << IN_FLIGHT << " " << FEED;
    std::printf("%10d %9d %7s %6s %7d | %15.1f %12d %11.0f%%\n", WGS, IN_FLIGHT, kFeeds[FEED], HOIST ? "yes" : "no",
                STAGES, c, 256 * WGS, 100.0 * 256 * WGS / c);
  };
  using std::integral_constant;
  row(integral_constant<int, 2>{}, integral_constant<int, 2>{}, integral_constant<int, 0>{});
  row(integral_constant<int, 3>{}, integral_constant<int, 2>{}, integral_constant<int, 0>{});
  auto feeds = [&](auto wgs) {
    row(wgs, integral_constant<int, 1>{}, integral_constant<int, 0>{});
    row(wgs, integral_constant<int, 1>{}, integral_constant<int, 1>{});
    row(wgs, integral_constant<int, 1>{}, integral_constant<int, 2>{});
    row(wgs, integral_constant<int, 1>{}, integral_constant<int, 3>{});
  };
  feeds(integral_constant<int, 2>{});
  feeds(integral_constant<int, 3>{});
  // Two groups in flight beside the copies would compile with serialized wgmmas (C7513), so not here.
  row(integral_constant<int, 2>{}, integral_constant<int, 1>{}, integral_constant<int, 1>{}, std::true_type{});
  row(integral_constant<int, 3>{}, integral_constant<int, 1>{}, integral_constant<int, 1>{}, std::true_type{});
  // A deeper ring: whether the copies' round trip, not their bytes, sets the pace.
  row(integral_constant<int, 2>{}, integral_constant<int, 1>{}, integral_constant<int, 1>{}, std::false_type{},
      integral_constant<int, 8>{});
  row(integral_constant<int, 2>{}, integral_constant<int, 1>{}, integral_constant<int, 3>{}, std::false_type{},
      integral_constant<int, 8>{});
  row(integral_constant<int, 3>{}, integral_constant<int, 1>{}, integral_constant<int, 1>{}, std::false_type{},
      integral_constant<int, 8>{});
}

// What wgmma_with_copies_kernel needs on every SM: 128 KB of source per CTA (all of them together
// stay in L2), its outputs, and a dynamic shared-memory size above half an SM's, so one CTA runs
// per SM.
struct CopyKernelSetup {
  static constexpr int kStages = 4;
  static constexpr int kSrcBytes = 128 << 10;
  int sms = gpu().sm_count;
  cuda::DeviceBuffer<std::uint8_t> src{static_cast<std::size_t>(kSrcBytes) * static_cast<std::size_t>(sms)};
  cuda::DeviceBuffer<std::uint64_t> out{static_cast<std::size_t>(2 * sms)};
  cuda::DeviceBuffer<float> sink{1};
  CopyKernelSetup() { src.fill_bytes(0x3C); }
  template <int N>
  int prepare() const {
    int smem_per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
    const int smem = std::max(smem_per_sm / 2 + 1024, N * 128 + kStages * 32768 + 1024);
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_with_copies_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return smem;
  }
  // One run of `ctas` CTAs (wgs consumer warpgroups and the producer warp each); its outputs.
  template <int N>
  std::vector<std::uint64_t> run(int ctas, int smem, int groups, bool issue_wgmma, long long idle_cycles, int wgs,
                                 int stage_bytes) {
    out.fill_bytes(0);
    wgmma_with_copies_kernel<N><<<ctas, 128 * wgs + 32, smem>>>(groups, issue_wgmma, idle_cycles, wgs, src.get(),
                                                                 kSrcBytes, stage_bytes, kStages, out.get(), sink.get());
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
  }
};

// Diagnostic (disabled), not a test of speed: whether the tensor cores' reads of a wgmma's shared-
// memory operand and the copy engine's writes share one shared-memory bandwidth, and at what rate.
// A K block of the m256 x 128 prefill tile moves ~101 KB through shared memory in ~1053 SM cycles
// and run 29's m128 probe without dequantization 52.6 KB in 562, both ~95 bytes per cycle; a tile
// of 64 weight rows (branch experiment/k-interleaved-n64) needs ~128. Per SM: register-A wgmma
// m64nNk16 (N x 32 bytes of B read each) by 1 or 2 warpgroups, alone, beside a stream of bulk
// copies from L2, and the copies alone; the median over one CTA per SM. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_WgmmaWithConcurrentCopies'
TEST(TensorRate, DISABLED_WgmmaWithConcurrentCopies) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "register-A wgmma is sm_90a code";
  constexpr int kGroups = 4096;
  CopyKernelSetup setup;
  const int sms = setup.sms;
  std::printf("%-26s %4s %9s | %13s %12s %12s %12s\n", "wgmma", "WGs", "copy B", "cycles/wgmma", "B read B/cyc",
              "copy B/cyc", "total B/cyc");
  auto rows = [&]<int N>(std::integral_constant<int, N>) {
    const int smem = setup.prepare<N>();
    for (int wgs : {1, 2}) {
      double alone_cycles = 0.0;
      for (int stage_bytes : {0, 16384, 32768}) {
        for (bool wgmma : {true, false}) {
          if (!wgmma && stage_bytes == 0) continue;
          const std::vector<std::uint64_t> o =
              setup.run<N>(sms, smem, kGroups, wgmma, static_cast<long long>(alone_cycles), wgs, stage_bytes);
          std::vector<double> cycles, copy_rate;
          for (int c = 0; c < sms; ++c) {
            cycles.push_back(static_cast<double>(o[2 * c]));
            copy_rate.push_back(static_cast<double>(o[2 * c + 1]) / static_cast<double>(std::max<std::uint64_t>(o[2 * c], 1)));
          }
          std::sort(cycles.begin(), cycles.end());
          std::sort(copy_rate.begin(), copy_rate.end());
          const double c = cycles[cycles.size() / 2], copies = copy_rate[copy_rate.size() / 2];
          ASSERT_GT(c, 0.0);
          if (wgmma && stage_bytes == 0) alone_cycles = c;
          const double instructions = static_cast<double>(kGroups) * kStepsPerGroup * wgs;
          const double reads = wgmma ? 32.0 * N * instructions / c : 0.0;
          char name[64] = "none (copies alone)";
          if (wgmma) std::snprintf(name, sizeof(name), "m64n%dk16 (A: regs)", N);
          std::printf("%-26s %4d %9d | %13.1f %12.1f %12.1f %12.1f\n", name, wgs, stage_bytes,
                      wgmma ? c / instructions : 0.0, reads, copies, reads + copies);
        }
      }
    }
  };
  rows(std::integral_constant<int, 128>{});
  rows(std::integral_constant<int, 256>{});
}

// Diagnostic (disabled): what bounds the bulk copies' ~36-40 bytes per cycle per SM with every SM
// copying (run 104). The same copies alone (4 in flight, each CTA its own L2-resident source) from
// 8 CTAs up to one per SM: if the rate per SM rises as fewer SMs copy, the bound is shared (L2
// or the crossbar), and fewer L2 reads (TMA multicast of the activation tile to a cluster) would
// raise it; if it stays flat, each SM's own path is the bound and multicast cannot help. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_CopyRateBySmCount'
TEST(TensorRate, DISABLED_CopyRateBySmCount) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "the copy kernel is sm_90a code";
  constexpr long long kWindowCycles = 2'000'000;
  CopyKernelSetup setup;
  const int sms = setup.sms;
  const int smem = setup.prepare<128>();
  std::printf("%6s %9s | %17s %17s\n", "CTAs", "copy B", "B/cycle per SM", "B/cycle, all SMs");
  for (int stage_bytes : {16384, 32768}) {
    for (int ctas : {8, 16, 33, 66, sms}) {
      const std::vector<std::uint64_t> o = setup.run<128>(ctas, smem, 0, false, kWindowCycles, 1, stage_bytes);
      std::vector<double> rate;
      for (int c = 0; c < ctas; ++c) {
        ASSERT_GT(o[2 * c], 0u) << "CTA " << c << " timed no window";
        rate.push_back(static_cast<double>(o[2 * c + 1]) / static_cast<double>(o[2 * c]));
      }
      std::sort(rate.begin(), rate.end());
      const double per_sm = rate[rate.size() / 2];
      ASSERT_GT(per_sm, 0.0) << "no copy landed in " << kWindowCycles << " cycles at " << ctas << " CTAs";
      std::printf("%6d %9d | %17.1f %17.0f\n", ctas, stage_bytes, per_sm, per_sm * ctas);
    }
  }
}

// ---- Activation multicast at the power cap ----
//
// The m256 prefill tile's main loop without the dequantization, in pairs of CTAs (clusters of 2)
// that share their activation rows as two CTAs of adjacent weight tiles do: per K block each CTA's
// two consumer warpgroups wait for a stage, issue 4 register-A wgmma m64n256k16 on its activation
// tile (one group in flight, as the kernel) with their 16 bytes of the stage's weight chunk as the
// A fragment, and release the stage; one producer thread refills a ring of kPairStages stages, each
// 32 KB of activations (256 rows x 64 bf16, the pair's source) and one 4608-byte weight chunk (the
// CTA's own). Unicast: each CTA copies its whole activation tile, as the prefill kernel does today.
// Multicast: each CTA copies half of it into both CTAs' stages, so the pair reads each activation
// byte from L2 once instead of twice (36.6 -> 20.6 KB of L2 reads per CTA and K block), and a stage
// is refilled only once both CTAs' consumers have released it (each consumer warp arrives on its
// own and its peer's empty barrier). The sources cycle through kPairSourceBlocks K blocks, L2-resident
// (19 MB in all), a count prime to the stages so that each stage receives different blocks in turn.
// `ctas` CTAs of `threads` threads in clusters of 2, each with `smem` bytes of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_in_pairs(void (*kernel)(Params...), int ctas, int threads, int smem, cudaStream_t stream, Args&&... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

constexpr int kPairStages = 6;
constexpr int kPairActBytes = 256 * 64 * 2;
constexpr int kPairWeightBytes = 4608;
constexpr int kPairStageBytes = kPairActBytes + kPairWeightBytes;
constexpr int kPairSourceBlocks = 7;
constexpr int kPairConsumerWarps = 8;
constexpr int kPairThreads = 32 * kPairConsumerWarps + 32;  // 2 consumer warpgroups + the producer warp
constexpr int kPairSmemBytes = kPairStages * kPairStageBytes + 1024;

// out[blockIdx.x] = thread 0's SM cycles from its first wait to its last wgmma; `mismatches` counts
// the 16-byte words of the ring's final contents that differ from the source blocks copied last
// (each stage must hold both halves of its activation tile, whichever CTA copied them).
__global__ void __launch_bounds__(kPairThreads, 1)
    paired_m256_main_loop_kernel(int k_blocks, int multicast, const std::uint8_t* act_src,
                                 const std::uint8_t* wgt_src, std::uint64_t* cycles, unsigned int* mismatches,
                                 float* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  __shared__ alignas(8) std::uint64_t bars[2 * kPairStages];
  const std::uint32_t ring = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  auto act_stage = [&](int s) { return ring + static_cast<std::uint32_t>(s * kPairActBytes); };
  auto wgt_stage = [&](int s) {
    return ring + static_cast<std::uint32_t>(kPairStages * kPairActBytes + s * kPairWeightBytes);
  };
  auto full_bar = [&](int s) { return ptx::smem_addr(&bars[s]); };
  auto empty_bar = [&](int s) { return ptx::smem_addr(&bars[kPairStages + s]); };
  const std::uint32_t rank = ptx::cluster_rank(), peer = rank ^ 1u;
  const std::uint8_t* const pair_act =
      act_src + static_cast<std::int64_t>(blockIdx.x / 2) * kPairSourceBlocks * kPairActBytes;
  const std::uint8_t* const own_wgt =
      wgt_src + static_cast<std::int64_t>(blockIdx.x) * kPairSourceBlocks * kPairWeightBytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kPairStages; ++s) {
      ptx::mbarrier_init(full_bar(s), 1);
      ptx::mbarrier_init(empty_bar(s), kPairConsumerWarps * (multicast ? 2 : 1));
    }
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();  // the peer's copies and arrivals find these barriers initialized

  if (threadIdx.x >= 32 * kPairConsumerWarps) {
    if (threadIdx.x == 32 * kPairConsumerWarps) {
      int stage = 0;
      std::uint32_t phase = 0;
      for (int kb = 0; kb < k_blocks; ++kb) {
        if (kb >= kPairStages) ptx::mbarrier_wait(empty_bar(stage), phase ^ 1u);
        ptx::mbarrier_arrive_expect_tx(full_bar(stage), kPairStageBytes);
        const int src = kb % kPairSourceBlocks;
        if (multicast) {
          constexpr std::uint32_t kHalf = kPairActBytes / 2;
          ptx::bulk_load_multicast(act_stage(stage) + rank * kHalf, pair_act + src * kPairActBytes + rank * kHalf, kHalf,
                                   full_bar(stage), 0b11);
        } else {
          ptx::bulk_load(act_stage(stage), pair_act + src * kPairActBytes, kPairActBytes, full_bar(stage));
        }
        ptx::bulk_load(wgt_stage(stage), own_wgt + src * kPairWeightBytes, kPairWeightBytes, full_bar(stage));
        stage = stage + 1 == kPairStages ? 0 : stage + 1;
        phase ^= stage == 0 ? 1u : 0u;
      }
    }
    __syncwarp();
  } else {
    const int lane = threadIdx.x % 32, warpgroup = threadIdx.x / 128;
    const std::uint64_t desc0 = ptx::sw128_kmajor_desc(act_stage(0));
    auto release = [&](int s) {
      if (lane != 0) return;
      ptx::mbarrier_arrive(empty_bar(s));
      if (multicast) ptx::mbarrier_arrive_cluster(ptx::map_to_rank(empty_bar(s), peer));
    };
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    int stage = 0, previous = 0;
    std::uint32_t phase = 0;
    const long long start = clock64();
    for (int kb = 0; kb < k_blocks; ++kb) {
      ptx::mbarrier_wait(full_bar(stage), phase);
      const uint4 w = ptx::ld_shared_v4_u32(wgt_stage(stage) + static_cast<std::uint32_t>(threadIdx.x) * 16u);
      std::uint32_t a[4] = {w.x, w.y, w.z, w.w};
      const std::uint64_t desc = desc0 + static_cast<std::uint64_t>(stage) * (kPairActBytes >> 4);
#pragma unroll
      for (int r = 0; r < 4; ++r) ptx::fence_register(a[r]);
      ptx::wgmma_fence();
#pragma unroll
      for (int j = 0; j < kStepsPerGroup; ++j) ptx::wgmma_m64n256k16_rs(d, a, desc + 2u * static_cast<std::uint32_t>(j));
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
      if (kb > 0) release(previous);
      previous = stage;
      stage = stage + 1 == kPairStages ? 0 : stage + 1;
      phase ^= stage == 0 ? 1u : 0u;
    }
    ptx::wgmma_wait<0>();
    if (k_blocks > 0) release(previous);
#pragma unroll
    for (int i = 0; i < 128; ++i) ptx::fence_register(d[i]);
    ptx::named_barrier(1, 32 * kPairConsumerWarps);
    if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<std::uint64_t>(clock64() - start);
    // Every copy into this CTA's ring has landed (each was waited for): compare its final contents.
    unsigned int wrong = 0;
    for (int s = 0; s < kPairStages && s < k_blocks; ++s) {
      const int last = s + ((k_blocks - 1 - s) / kPairStages) * kPairStages;  // the last K block in stage s
      const int src = last % kPairSourceBlocks;
      for (int i = static_cast<int>(threadIdx.x); i < kPairStageBytes / 16; i += 32 * kPairConsumerWarps) {
        const bool act = i < kPairActBytes / 16;
        const uint4 got = ptx::ld_shared_v4_u32(act ? act_stage(s) + 16u * i : wgt_stage(s) + 16u * (i - kPairActBytes / 16));
        const uint4 want = act ? reinterpret_cast<const uint4*>(pair_act + src * kPairActBytes)[i]
                               : reinterpret_cast<const uint4*>(own_wgt + src * kPairWeightBytes)[i - kPairActBytes / 16];
        wrong += got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w ? 1u : 0u;
      }
    }
    if (wrong > 0) atomicAdd(mismatches, wrong);
    if (d[0] == 1.2345f && warpgroup == 0) *sink = d[1];  // never: keeps the accumulators
  }
  ptx::cluster_sync();  // the peer's last arrivals on this CTA's barriers have landed
#else
  (void)k_blocks, (void)multicast, (void)act_src, (void)wgt_src, (void)cycles, (void)mismatches, (void)sink;
#endif
}

// Diagnostic (disabled): what TMA multicast of the activation tile would buy the m256 prefill tile
// (docs/KERNELS-prefill.md, "Not done yet", item 4). Its main loop runs at 97-98% of the tensor
// rate in a burst, so multicast cannot shorten it there; at M >= 2048 the GPU runs at its power
// cap, where fewer L2 reads could leave power for a higher SM clock. Per mode (unicast, multicast):
// one launch of kBurstBlocks K blocks per CTA (SM cycles per K block, the ring's contents checked),
// then launches of kLaunchBlocks (the K blocks of one m256 CTA at K = 6144) timed by graph replays
// and replayed back to back for FP4GAP_MULTICAST_SUSTAIN_MS (default 1000) as `fp4gap gemm
// --sustain` does: time per launch, SM clock and board power at the cap. Two rounds, to see drift
// as the GPU heats. Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='TensorRate.DISABLED_ActivationMulticastAtThePowerCap'
TEST(TensorRate, DISABLED_ActivationMulticastAtThePowerCap) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "register-A wgmma and TMA multicast are sm_90a code";
  constexpr int kBurstBlocks = 2048, kLaunchBlocks = 96;
  const int ctas = gpu().sm_count / 2 * 2;
  const char* env = std::getenv("FP4GAP_MULTICAST_SUSTAIN_MS");
  TimingOptions options;
  options.sustain_ms = env != nullptr ? std::atof(env) : 1000.0;

  // Activations: bf16 values of a unit normal (as a norm's output); weight chunks: random bytes.
  std::mt19937 rng(20261205u);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> act(static_cast<std::size_t>(ctas / 2) * kPairSourceBlocks * kPairActBytes / 2);
  for (auto& v : act) v = float_to_bf16(normal(rng));
  std::vector<std::uint8_t> wgt(static_cast<std::size_t>(ctas) * kPairSourceBlocks * kPairWeightBytes);
  for (auto& v : wgt) v = static_cast<std::uint8_t>(rng());
  cuda::DeviceBuffer<std::uint16_t> act_dev(act.size());
  cuda::DeviceBuffer<std::uint8_t> wgt_dev(wgt.size());
  act_dev.upload(act);
  wgt_dev.upload(wgt);
  cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(ctas));
  cuda::DeviceBuffer<unsigned int> mismatches(1);
  cuda::DeviceBuffer<float> sink(1);
  auto launch = [&](int k_blocks, bool multicast, void* stream) {
    launch_in_pairs(paired_m256_main_loop_kernel, ctas, kPairThreads, kPairSmemBytes, static_cast<cudaStream_t>(stream),
                    k_blocks, multicast ? 1 : 0, reinterpret_cast<const std::uint8_t*>(act_dev.get()), wgt_dev.get(),
                    cycles.get(), mismatches.get(), sink.get());
  };

  std::printf("%-9s %5s | %15s | %12s %12s %9s %7s  %s\n", "copies", "round", "burst cyc/block", "graph us",
              "sustained us", "SM MHz", "W", "clock-event reasons");
  double sustained[2][2] = {};
  for (int round = 0; round < 2; ++round) {
    for (bool multicast : {false, true}) {
      const char* mode = multicast ? "multicast" : "unicast";
      mismatches.fill_bytes(0);
      launch(kBurstBlocks, multicast, nullptr);
      CUDA_CHECK(cudaGetLastError());
      synchronize_within(nullptr);
      ASSERT_EQ(mismatches.download()[0], 0u) << mode << ": the ring does not hold the blocks copied last";
      const double median_cycles = median(cycles.download());
      ASSERT_GT(median_cycles, 0.0) << mode;
      const double per_block = median_cycles / kBurstBlocks;
      const Timing t = time_launch([&](int, void* stream) { launch(kLaunchBlocks, multicast, stream); }, 1, gpu(), options);
      ASSERT_EQ(mismatches.download()[0], 0u) << mode << " (timed launches)";
      const double graph_us = t.graph.median_us;
      double sustained_us = 0.0, power_w = 0.0;
      int mhz = 0;
      std::string reasons = "no sustained mode";
      if (t.sustained) {
        sustained_us = t.sustained->per_launch_us;
        mhz = t.sustained->device.sm_clock_mhz;
        power_w = t.sustained->device.power_w;
        reasons = t.sustained->device.samples > 0 ? clock_event_reason_names(t.sustained->device.clock_event_reasons)
                                                  : "no NVML readings";
      }
      sustained[round][multicast ? 1 : 0] = sustained_us;
      std::printf("%-9s %5d | %15.1f | %12.2f %12.2f %9d %7.0f  %s\n", mode, round + 1, per_block, graph_us,
                  sustained_us, mhz, power_w, reasons.c_str());
    }
  }
  for (int round = 0; round < 2; ++round) {
    if (sustained[round][1] > 0.0) {
      std::printf("round %d: multicast takes %.3fx unicast's time per launch, sustained\n", round + 1,
                  sustained[round][1] / sustained[round][0]);
    }
  }
}

// ---- The cluster split's exchange of partial tiles: distributed shared memory against L2 ----
//
// A cluster split of 2 (prefill_gemm.cu) writes each CTA's whole fp32 partial tile to its own
// shared memory, passes a cluster barrier, and each CTA adds its band (half the tile's rows) from
// both CTAs' shared memory. Run 169 timed that band's reduction at 2.3 us for m128 and 3.8-4.1 us
// for m256 (128 KB partials), and run 170 found it neither latency-bound (two pairs of quads per
// round of loads: no faster) nor bound by the CTA's own half (read locally: no faster). This
// measures, with every SM of the GPU exchanging at once as a split plan's one wave does, the same
// band through distributed shared memory (mode 0, today's: the whole partial to shared memory,
// barrier, the band read from both CTAs) and three ways that move only the other CTA's band while
// the own band stays in registers: through L2 (mode 1: stores to a global workspace, barrier,
// loads), pushed (mode 2: barrier, stores into the other CTA's shared memory, barrier) and copied
// (mode 3: the band to the CTA's own shared memory, barrier, one bulk copy into the other CTA's,
// completing on its mbarrier). Per mode and tile: SM cycles per exchange until the other band is
// here, for the band's reduction, and for the closing barrier, medians over CTAs of the mean over
// `reps` exchanges; every sum is checked (exact: small integers).
constexpr int kExchangeThreads = 256;                        // the two consumer warpgroups
constexpr int kExchangeSmemBytes = 200 * 1024;               // one CTA per SM, as the kernels

#if FP4GAP_PREFILL_SM90A
__device__ __forceinline__ void store_cluster_f4(std::uint32_t addr, float4 v) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
// `bytes` of this CTA's shared memory at `src` into the cluster window's `dst`, completing on the
// barrier `bar` of the destination CTA.
__device__ __forceinline__ void bulk_copy_to_cluster(std::uint32_t dst, std::uint32_t src, std::uint32_t bytes,
                                                     std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "r"(src), "r"(bytes), "r"(bar)
               : "memory");
}
#endif

template <int QUADS, int MODE>
__global__ void __launch_bounds__(kExchangeThreads, 1)
    pair_exchange_kernel(int reps, float4* workspace, std::uint64_t* cycles, unsigned int* mismatches) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  constexpr int kHalf = QUADS / 2;
  extern __shared__ float4 partial[];  // [QUADS][kExchangeThreads], then the band [kHalf][threads]
  float4* const band = partial + QUADS * kExchangeThreads;
  // Modes 2 and 3: the band going out (mode 3), then the band coming in.
  float4* const outgoing = partial;
  float4* const incoming = partial + kHalf * kExchangeThreads;
  __shared__ alignas(8) std::uint64_t incoming_bar;
  const int thread = static_cast<int>(threadIdx.x);
  const std::uint32_t rank = ptx::cluster_rank();
  const std::uint32_t bar = ptx::smem_addr(&incoming_bar);
  if (thread == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();
  // CTA c's partial quad i: small integers, so that every sum is exact.
  auto value = [](std::uint32_t cta, int i, int th) {
    const float v = static_cast<float>((static_cast<int>(cta) * 7 + i * 3 + th) % 1024);
    return make_float4(v, v + 1.0f, v + 2.0f, -v);
  };
  float4 acc[QUADS];
#pragma unroll
  for (int i = 0; i < QUADS; ++i) acc[i] = value(blockIdx.x, i, thread);
  // This pair's workspace: [rank that reads it][kHalf][threads].
  float4* const pair_ws = workspace + static_cast<std::size_t>(blockIdx.x / 2) * 2 * kHalf * kExchangeThreads;
  std::uint64_t t_exchange = 0, t_reduce = 0, t_close = 0;
  unsigned int bad = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const std::uint64_t t0 = clock64();
    // The other CTA's band of this partial, at compile-time indices (acc stays in registers).
    auto for_other_band = [&](auto&& f) {
      auto run = [&](auto first) {
        constexpr int kFirst = decltype(first)::value;
#pragma unroll
        for (int j = 0; j < kHalf; ++j) f(j, acc[kFirst + j]);
      };
      if (rank == 0) {
        run(std::integral_constant<int, kHalf>{});
      } else {
        run(std::integral_constant<int, 0>{});
      }
    };
    if constexpr (MODE == 0) {
#pragma unroll
      for (int i = 0; i < QUADS; ++i) partial[i * kExchangeThreads + thread] = acc[i];
    } else if constexpr (MODE == 2) {
      ptx::cluster_sync();  // the other CTA's shared memory is free (its main loop is done)
      for_other_band([&](int j, float4 v) {
        store_cluster_f4(ptx::map_to_rank(ptx::smem_addr(&incoming[j * kExchangeThreads + thread]), rank ^ 1u), v);
      });
    } else if constexpr (MODE == 3) {
      if (thread == 0) ptx::mbarrier_arrive_expect_tx(bar, kHalf * kExchangeThreads * 16);
      for_other_band([&](int j, float4 v) { outgoing[j * kExchangeThreads + thread] = v; });
      ptx::fence_proxy_async();  // the band, before the copy engine reads it
    } else {
      // The other CTA's band of this partial (rank 0 owns quads [0, kHalf), rank 1 the rest).
      float4* const dst = pair_ws + static_cast<std::size_t>(rank ^ 1u) * kHalf * kExchangeThreads;
      for_other_band([&](int j, float4 v) { dst[j * kExchangeThreads + thread] = v; });
    }
    ptx::cluster_sync();
    if constexpr (MODE == 3) {
      if (thread == 0) {
        bulk_copy_to_cluster(ptx::map_to_rank(ptx::smem_addr(incoming), rank ^ 1u), ptx::smem_addr(outgoing),
                             kHalf * kExchangeThreads * 16, ptx::map_to_rank(bar, rank ^ 1u));
      }
      ptx::mbarrier_wait(bar, static_cast<std::uint32_t>(rep & 1));
    }
    const std::uint64_t t1 = clock64();
    const int own = static_cast<int>(rank) * kHalf;
    if constexpr (MODE == 0) {
      for (int j = 0; j < kHalf; ++j) {
        const std::uint32_t local = ptx::smem_addr(&partial[(own + j) * kExchangeThreads + thread]);
        const float4 a = ptx::load_cluster_f4(ptx::map_to_rank(local, 0)), b = ptx::load_cluster_f4(ptx::map_to_rank(local, 1));
        band[j * kExchangeThreads + thread] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
      }
    } else if constexpr (MODE == 2 || MODE == 3) {
      auto reduce_own = [&](auto first) {
        constexpr int kFirst = decltype(first)::value;
#pragma unroll
        for (int j = 0; j < kHalf; ++j) {
          const float4 o = incoming[j * kExchangeThreads + thread], m = acc[kFirst + j];
          band[j * kExchangeThreads + thread] = make_float4(m.x + o.x, m.y + o.y, m.z + o.z, m.w + o.w);
        }
      };
      if (rank == 0) {
        reduce_own(std::integral_constant<int, 0>{});
      } else {
        reduce_own(std::integral_constant<int, kHalf>{});
      }
    } else {
      const float4* const src = pair_ws + static_cast<std::size_t>(rank) * kHalf * kExchangeThreads;
      auto reduce_own = [&](auto first) {
        constexpr int kFirst = decltype(first)::value;
#pragma unroll
        for (int j = 0; j < kHalf; ++j) {
          float4 o;
          const float4* const at = &src[j * kExchangeThreads + thread];
          asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(o.x), "=f"(o.y), "=f"(o.z), "=f"(o.w) : "l"(at) : "memory");
          const float4 m = acc[kFirst + j];
          band[j * kExchangeThreads + thread] = make_float4(m.x + o.x, m.y + o.y, m.z + o.z, m.w + o.w);
        }
      };
      if (rank == 0) {
        reduce_own(std::integral_constant<int, 0>{});
      } else {
        reduce_own(std::integral_constant<int, kHalf>{});
      }
    }
    __syncthreads();
    const std::uint64_t t2 = clock64();
    // Mode 0: no CTA rewrites (or, in a kernel, leaves) its partial while the other reads it; mode
    // 3: the copy engine has read the outgoing band; mode 1: the workspace is rewritten only in
    // this loop, not in a kernel; mode 2: the next exchange's first barrier covers it.
    if constexpr (MODE != 2) ptx::cluster_sync();
    const std::uint64_t t3 = clock64();
    t_exchange += t1 - t0;
    t_reduce += t2 - t1;
    t_close += t3 - t2;
    for (int j = 0; j < kHalf; ++j) {
      const float4 x = value(blockIdx.x & ~1u, own + j, thread), y = value(blockIdx.x | 1u, own + j, thread);
      const float4 got = band[j * kExchangeThreads + thread];
      if (got.x != x.x + y.x || got.y != x.y + y.y || got.z != x.z + y.z || got.w != x.w + y.w) ++bad;
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
  if (thread == 0) {
    cycles[3 * blockIdx.x] = t_exchange / static_cast<std::uint64_t>(reps);
    cycles[3 * blockIdx.x + 1] = t_reduce / static_cast<std::uint64_t>(reps);
    cycles[3 * blockIdx.x + 2] = t_close / static_cast<std::uint64_t>(reps);
  }
#else
  (void)reps, (void)workspace, (void)cycles, (void)mismatches;
#endif
}

// Run by hand on the GPU:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='ClusterExchange.DISABLED_DistributedSharedMemoryAgainstL2'
TEST(ClusterExchange, DISABLED_DistributedSharedMemoryAgainstL2) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "the cluster split's kernels are sm_90a code";
  constexpr int kReps = 200;
  const int ctas = gpu().sm_count / 2 * 2;
  cuda::DeviceBuffer<float4> workspace(static_cast<std::size_t>(ctas) * 32 * kExchangeThreads);
  cuda::DeviceBuffer<std::uint64_t> cycles(static_cast<std::size_t>(3 * ctas));
  cuda::DeviceBuffer<unsigned int> mismatches(1);
  std::printf("%-30s %-6s | %5s | %15s %13s %16s %14s  (SM cycles per exchange, medians over CTAs)\n", "mode",
              "tile", "CTAs", "other band here", "band reduced", "closing barrier", "in a kernel");
  auto run = [&](auto kernel, const char* mode, const char* tile, bool kernel_closes) {
    mismatches.fill_bytes(0);
    cycles.fill_bytes(0);
    launch_in_pairs(kernel, ctas, kExchangeThreads, kExchangeSmemBytes, nullptr, kReps, workspace.get(), cycles.get(),
                    mismatches.get());
    CUDA_CHECK(cudaGetLastError());
    synchronize_within(nullptr);
    ASSERT_EQ(mismatches.download()[0], 0u) << mode << ", " << tile << ": a band's sum differs from the partials'";
    const std::vector<std::uint64_t> c = cycles.download();
    std::vector<std::uint64_t> part[3];
    for (int i = 0; i < ctas; ++i) {
      for (int f = 0; f < 3; ++f) part[f].push_back(c[static_cast<std::size_t>(3 * i + f)]);
    }
    ASSERT_GT(median(part[1]), 0.0) << mode << ", " << tile;
    const double in_kernel = median(part[0]) + median(part[1]) + (kernel_closes ? median(part[2]) : 0.0);
    std::printf("%-30s %-6s | %5d | %15.0f %13.0f %16.0f %14.0f\n", mode, tile, ctas, median(part[0]),
                median(part[1]), median(part[2]), in_kernel);
  };
  run(pair_exchange_kernel<16, 0>, "distributed shared memory", "m128", true);
  run(pair_exchange_kernel<16, 1>, "L2 (band of the other)", "m128", false);
  run(pair_exchange_kernel<16, 2>, "pushed (band of the other)", "m128", false);
  run(pair_exchange_kernel<16, 3>, "bulk copy (band of the other)", "m128", true);
  run(pair_exchange_kernel<32, 0>, "distributed shared memory", "m256", true);
  run(pair_exchange_kernel<32, 1>, "L2 (band of the other)", "m256", false);
  run(pair_exchange_kernel<32, 2>, "pushed (band of the other)", "m256", false);
  run(pair_exchange_kernel<32, 3>, "bulk copy (band of the other)", "m256", true);
}

}  // namespace
}  // namespace fp4gap::test
