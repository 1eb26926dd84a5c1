// Diagnostic (disabled), not a test of speed: how fast one CTA's stream of bulk copies arrives when
// nothing is computed. The producer issues `cp.async.bulk` copies into an mbarrier ring exactly as
// the prefill kernel's producer does (one thread, expect_tx per stage), and consumer warps only
// wait for each stage and hand it back. PERF-LOG run 37 found the narrow prefill tiles receiving
// ~23 GB/s per CTA (one 6.6 KB stage per ~0.28 us, 16 stages ahead) whatever they computed; this
// measures what the copy engine alone delivers per CTA at that stage size and ring depth, and at
// larger stages, so the kernel's side and the copy engine's side can be told apart (PERF-LOG run
// 42: the copies in flight per CTA, not their bytes, bound it). Run by hand:
//   fp4gap_device_tests --gtest_also_run_disabled_tests --gtest_filter='BulkCopy.DISABLED_StreamRate'
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/prefill/prefill_ptx.cuh"
#include "device_test_support.hpp"

namespace fp4gap::test {
namespace {

// Per CTA: timeline[2 c] = when the producer started, timeline[2 c + 1] = when the last stage had
// arrived (global timer, ns). `sink` keeps the consumers' reads of the data alive.
__global__ void bulk_stream_kernel(const std::uint8_t* src, std::int64_t bytes_per_cta, int stage_bytes, int stages,
                                   int copies_per_stage, std::uint64_t* timeline, std::uint32_t* sink) {
#if FP4GAP_PREFILL_SM90A
  namespace ptx = prefill::ptx;
  extern __shared__ std::uint8_t smem_raw[];
  const std::uint32_t ring = (ptx::smem_addr(smem_raw) + 127u) & ~127u;
  const std::uint32_t bars = ring + static_cast<std::uint32_t>(stages * stage_bytes);
  const int consumer_warps = static_cast<int>(blockDim.x / 32) - 1;
  auto full_bar = [&](int s) { return bars + 8u * static_cast<std::uint32_t>(s); };
  auto empty_bar = [&](int s) { return bars + 8u * static_cast<std::uint32_t>(stages + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      ptx::mbarrier_init(full_bar(s), 1);
      ptx::mbarrier_init(empty_bar(s), static_cast<std::uint32_t>(consumer_warps));
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const std::int64_t n_stages = bytes_per_cta / stage_bytes;
  const std::uint8_t* my_src = src + static_cast<std::int64_t>(blockIdx.x) * bytes_per_cta;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (warp == consumer_warps) {
    if (lane == 0) {
      timeline[2 * blockIdx.x] = ptx::global_timer();
      const std::uint32_t piece = static_cast<std::uint32_t>(stage_bytes / copies_per_stage);
      int stage = 0;
      std::uint32_t phase = 0;
      for (std::int64_t i = 0; i < n_stages; ++i) {
        ptx::mbarrier_wait(empty_bar(stage), phase ^ 1u);
        ptx::mbarrier_arrive_expect_tx(full_bar(stage), static_cast<std::uint32_t>(stage_bytes));
        for (int c = 0; c < copies_per_stage; ++c) {
          ptx::bulk_load(ring + static_cast<std::uint32_t>(stage * stage_bytes) + c * piece,
                         my_src + i * stage_bytes + c * piece, piece, full_bar(stage));
        }
        stage = stage == stages - 1 ? 0 : stage + 1;
        phase ^= stage == 0 ? 1u : 0u;
      }
    }
  } else {
    std::uint32_t acc = 0;
    int stage = 0;
    std::uint32_t phase = 0;
    for (std::int64_t i = 0; i < n_stages; ++i) {
      ptx::mbarrier_wait(full_bar(stage), phase);
      acc ^= ptx::ld_shared_u32(ring + static_cast<std::uint32_t>(stage * stage_bytes) + 4u * lane);
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(empty_bar(stage));
      stage = stage == stages - 1 ? 0 : stage + 1;
      phase ^= stage == 0 ? 1u : 0u;
    }
    if (warp == 0 && lane == 0) timeline[2 * blockIdx.x + 1] = ptx::global_timer();
    if (acc == 0x9E3779B9u) *sink = acc;  // practically never: keeps the loads
  }
#endif
}

TEST(BulkCopy, DISABLED_StreamRate) {
  if (gpu().cc_major != 9) GTEST_SKIP() << "the bulk-copy stream is sm_90a code";
  constexpr std::int64_t kBytesPerCta = 2 << 20;
  struct Ring {
    int stage_bytes, stages;
  };
  const int sms = gpu().sm_count;
  int smem_per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  cuda::DeviceBuffer<std::uint8_t> src(static_cast<std::size_t>(kBytesPerCta) * 2 * static_cast<std::size_t>(sms));
  src.fill_bytes(0x3C);
  cuda::DeviceBuffer<std::uint8_t> flush(static_cast<std::size_t>(2 * gpu().l2_bytes));
  cuda::DeviceBuffer<std::uint64_t> timeline(static_cast<std::size_t>(4 * sms));
  cuda::DeviceBuffer<std::uint32_t> sink(1);
  std::printf("%6s %8s %6s %6s %9s | %12s %12s %12s | %10s\n", "CTAs", "stage B", "stages", "copies", "ahead KB",
              "CTA GB/s p50", "p10", "p90", "all GB/s");
  for (int ctas : {1, 16, sms, 2 * sms}) {
    for (const Ring r : {Ring{4608, 4}, Ring{4608, 16}, Ring{6656, 16}, Ring{9216, 8}, Ring{9216, 16}, Ring{18432, 4},
                         Ring{18432, 8}, Ring{36864, 4}}) {
      for (int copies : {1, 4}) {
        const int smem = r.stages * r.stage_bytes + 16 * r.stages + 128;
        CUDA_CHECK(cudaFuncSetAttribute(bulk_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        // Two CTAs per SM only where two rings fit.
        if (ctas > sms && 2 * (smem + 1024) > smem_per_sm) continue;
        flush.fill_bytes(0x5A);
        bulk_stream_kernel<<<ctas, 64, smem>>>(src.get(), kBytesPerCta, r.stage_bytes, r.stages, copies, timeline.get(),
                                               sink.get());
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<std::uint64_t> t = timeline.download();
        std::vector<double> rate;
        std::uint64_t begin = t[0], end = t[1];
        const std::int64_t streamed = kBytesPerCta / r.stage_bytes * r.stage_bytes;
        for (int c = 0; c < ctas; ++c) {
          ASSERT_GT(t[2 * c + 1], t[2 * c]) << "CTA " << c;
          rate.push_back(static_cast<double>(streamed) / static_cast<double>(t[2 * c + 1] - t[2 * c]));
          begin = std::min(begin, t[2 * c]);
          end = std::max(end, t[2 * c + 1]);
        }
        std::sort(rate.begin(), rate.end());
        auto pct = [&](double q) { return rate[static_cast<std::size_t>(q * static_cast<double>(rate.size() - 1))]; };
        std::printf("%6d %8d %6d %6d %9.1f | %12.1f %12.1f %12.1f | %10.0f\n", ctas, r.stage_bytes, r.stages, copies,
                    r.stages * r.stage_bytes / 1024.0, pct(0.5), pct(0.1), pct(0.9),
                    static_cast<double>(streamed) * ctas / static_cast<double>(end - begin));
      }
    }
  }
}

}  // namespace
}  // namespace fp4gap::test
