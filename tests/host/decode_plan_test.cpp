// The decode kernels' host policy: tile configurations and their feasibility, shape rules, the
// split-K choice, workspace sizes and launch-argument checks (include/fp4gap/decode.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "fp4gap/decode.hpp"
#include "test_support.hpp"

namespace fp4gap::decode {
namespace {

using test::h200_context;

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << text << "\" lacks \"" << part << "\"";
}

TEST(DecodePlan, ConfigsCoverEveryMInIncreasingOrder) {
  const auto& configs = tile_configs();
  ASSERT_FALSE(configs.empty());
  int previous = 0, previous_streaming = 0;
  for (const TileConfig& c : configs) {
    EXPECT_EQ(c.warps % c.k_warps, 0);
    EXPECT_TRUE(check_tile_config(c, Math::w4a16, h200_context()).is_ok()) << c.name(Math::w4a16, WeightLayout::shuffled);
    if (c.streaming()) {
      // Streaming configs follow the register-prefetch ones, in increasing M too.
      EXPECT_EQ(previous, kMaxM);
      EXPECT_GE(c.max_m(), previous_streaming);
      previous_streaming = c.max_m();
      EXPECT_EQ(c.windows_per_chunk, 1);
      EXPECT_GE(c.stages, 2);
      EXPECT_EQ(c.stream_slot_bytes(), c.mt * 1152 + c.nt * 2048);
      EXPECT_EQ(c.smem_bytes(Math::w4a16), std::max<std::int64_t>(c.warps * c.stages * c.stream_slot_bytes(), c.reduction_scratch_bytes()) + 16);
      EXPECT_TRUE(c.serves(WeightLayout::shuffled));
      EXPECT_FALSE(c.serves(WeightLayout::plain));
      continue;
    }
    EXPECT_GE(c.max_m(), previous);
    previous = c.max_m();
    EXPECT_EQ(c.activation_row_bytes() % 128, 64) << c.name(Math::w4a16, WeightLayout::shuffled);
    EXPECT_GE(c.activation_row_bytes(), c.windows_per_block_chunk() * 4 * 80);
    EXPECT_EQ(c.smem_bytes(Math::w4a16), std::max(2 * c.max_m() * c.activation_row_bytes(), c.reduction_scratch_bytes()) + 16);
    EXPECT_EQ(c.smem_bytes(Math::w4a4), std::max(c.max_m() * c.activation_row_bytes(), c.reduction_scratch_bytes()) + 16);
    EXPECT_TRUE(check_tile_config(c, Math::w4a4, h200_context()).is_ok());
    EXPECT_TRUE(c.serves(WeightLayout::plain));
  }
  EXPECT_EQ(previous, kMaxM);
  EXPECT_GT(previous_streaming, 0);
}

TEST(DecodePlan, ConfigNameSaysArchTypesTileAndStages) {
  const TileConfig& c = tile_configs()[2];
  const std::string name = c.name(Math::w4a16, WeightLayout::shuffled);
  expect_contains(name, "sm80+ mma.sync w4a16 bf16 x nvfp4(shuffled)");
  expect_contains(name, "tile n64 m8 k256, 4 warps x 1 m16, 2 stages");
  expect_contains(tile_configs()[0].name(Math::w4a16, WeightLayout::plain), "tile n16 m8 k2048, 8 warps (1 x 8 k-split) x 1 m16");
  expect_contains(tile_configs()[10].name(Math::w4a4, WeightLayout::plain), "nvfp4 x nvfp4(plain) -> fp16 mma tile n256 m64 k128");
  const Plan p = make_plan(1, 2048, 6144, Math::w4a16, WeightLayout::shuffled, 2, 8);
  expect_contains(p.describe(), "split-k 8 (3 chunks of 256 per split, 256 blocks)");
}

TEST(DecodePlan, InfeasibleConfigsSayWhy) {
  DeviceContext small = h200_context();
  small.smem_per_block_optin = 1000;
  const Status s = check_tile_config(tile_configs()[10], Math::w4a16, small);
  EXPECT_EQ(s.code, StatusCode::not_supported);
  expect_contains(s.reason, "needs " + std::to_string(tile_configs()[10].smem_bytes(Math::w4a16)) +
                                " bytes of shared memory per block; NVIDIA H200 allows 1000");
  EXPECT_THROW(choose_plan(64, 4096, 6144, Math::w4a16, WeightLayout::shuffled, small), InvalidArgument);
  DeviceContext old = h200_context();
  old.name = "Tesla V100";
  old.cc_major = 7;
  const Status v = check_tile_config(tile_configs()[0], Math::w4a4, old);
  EXPECT_EQ(v.code, StatusCode::not_supported);
  expect_contains(v.reason, "needs mma.sync m16n8k16 (sm_80+); Tesla V100 is sm_70");
}

TEST(DecodePlan, ShapeRulesNameTheShape) {
  EXPECT_TRUE(check_shape(1, 17, 32, Math::w4a16).is_ok());
  EXPECT_TRUE(check_shape(64, 32, 96, Math::w4a4).is_ok());
  Status s = check_shape(65, 4096, 6144, Math::w4a16);
  EXPECT_EQ(s.code, StatusCode::invalid_problem);
  expect_contains(s.reason, "M > 64: M = 65, N = 4096, K = 6144 (decode kernel serves M <= 64)");
  s = check_shape(4, 64, 48, Math::w4a16);
  expect_contains(s.reason, "K % 32 != 0: M = 4, N = 64, K = 48");
  s = check_shape(4, 48, 64, Math::w4a4);
  expect_contains(s.reason, "N % 32 != 0: M = 4, N = 48, K = 64");
  s = check_shape(0, 48, 64, Math::w4a16);
  expect_contains(s.reason, "M, N, K >= 1 required: M = 0");
}

TEST(DecodePlan, MakePlanRejectsBadChoices) {
  EXPECT_THROW(make_plan(9, 64, 256, Math::w4a16, WeightLayout::shuffled, 0, 1), InvalidArgument);  // M > 8
  EXPECT_THROW(make_plan(1, 64, 256, Math::w4a16, WeightLayout::shuffled, static_cast<int>(tile_configs().size()), 1),
               InvalidArgument);
  EXPECT_THROW(make_plan(1, 64, 256, Math::w4a16, WeightLayout::shuffled, 0, 2), InvalidArgument);  // 1 chunk
  try {
    make_plan(1, 64, 6144, Math::w4a16, WeightLayout::shuffled, 2, 25);
    FAIL();
  } catch (const InvalidArgument& e) {
    expect_contains(e.what(), "split_k outside [1, 24] (chunks of 256 in K = 6144): split_k = 25");
  }
  const auto& configs = tile_configs();
  const auto streaming = std::find_if(configs.begin(), configs.end(), [](const TileConfig& c) { return c.streaming(); });
  ASSERT_NE(streaming, configs.end());
  const int si = static_cast<int>(streaming - configs.begin());
  EXPECT_NO_THROW(make_plan(1, 64, 256, Math::w4a16, WeightLayout::shuffled, si, 1));
  const Plan w4a4 = make_plan(3, 64, 2080, Math::w4a4, WeightLayout::shuffled, si, 1);
  EXPECT_TRUE(w4a4.dequantizes_activations());
  EXPECT_EQ(w4a4.activation_workspace_bytes(), 12544);  // FP16 [3, 2080] = 12480 bytes, 256-aligned
  EXPECT_EQ(w4a4.workspace_bytes(), w4a4.activation_workspace_bytes());
  const Plan w4a4_split = make_plan(3, 64, 2080, Math::w4a4, WeightLayout::shuffled, si, 2);
  EXPECT_EQ(w4a4_split.workspace_bytes(),
            w4a4_split.activation_workspace_bytes() + w4a4_split.workspace_partial_floats() * 4 + 256);
  EXPECT_FALSE(make_plan(3, 64, 256, Math::w4a4, WeightLayout::shuffled, 0, 1).dequantizes_activations());
  alignas(256) static std::uint8_t buf[64];
  try {
    check_gemm_args(w4a4, GemmArgs{.a = buf, .a_scales = buf, .w_codes = buf, .w_scales = buf, .d = buf});
    FAIL() << "no workspace accepted for the activation pass";
  } catch (const InvalidArgument& e) {
    expect_contains(e.what(), "decode: workspace of 0 bytes, split-k 1 needs 12544 (12544 of them the fp16 activations)");
  }
  EXPECT_FALSE(make_plan(3, 64, 256, Math::w4a16, WeightLayout::shuffled, si, 1).dequantizes_activations());
  for (Math math : {Math::w4a16, Math::w4a4}) {
    try {
      make_plan(1, 64, 256, math, WeightLayout::plain, si, 1);
      FAIL() << "a streaming config accepted " << to_string(math) << " plain";
    } catch (const InvalidArgument& e) {
      expect_contains(e.what(), "streams the shuffled weight only");
    }
  }
  expect_contains(streaming->name(Math::w4a16, WeightLayout::shuffled), "-window cp.async ring per warp");
  expect_contains(streaming->name(Math::w4a4, WeightLayout::shuffled), "cp.async ring per warp after an fp16 activation pass");
  const Plan p = make_plan(1, 100, 6176, Math::w4a16, WeightLayout::plain, 2, 25);
  EXPECT_EQ(p.row_blocks, 2);
  EXPECT_EQ(p.k_windows, 49);
  EXPECT_EQ(p.k_chunks, 25);
}

TEST(DecodePlan, SplitRangesPartitionTheChunksEvenly) {
  for (std::int64_t chunks : {1, 2, 7, 24, 48, 97}) {
    for (int split = 1; split <= chunks; ++split) {
      std::int64_t next = 0, smallest = chunks, largest = 0;
      for (int s = 0; s < split; ++s) {
        const ChunkRange r = split_chunk_range(chunks, split, s);
        ASSERT_EQ(r.begin, next) << chunks << " chunks, split " << split << ", s " << s;
        ASSERT_GT(r.end, r.begin) << chunks << " chunks, split " << split << ", s " << s;
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        next = r.end;
      }
      EXPECT_EQ(next, chunks);
      EXPECT_LE(largest - smallest, 1);
      EXPECT_EQ(largest, split_chunk_range(chunks, split, 0).end);
    }
  }
}

TEST(DecodePlan, WorkspaceHoldsEveryPartialAndTheCounters) {
  const Plan one = make_plan(16, 2048, 6144, Math::w4a16, WeightLayout::shuffled, 5, 1);
  EXPECT_EQ(one.workspace_bytes(), 0);
  const Plan p = make_plan(16, 2048, 6144, Math::w4a16, WeightLayout::shuffled, 5, 6);
  // 6 splits x 32 row blocks x 4 row groups x (1 x 2 x 4 accumulators) x 32 lanes.
  EXPECT_EQ(p.workspace_partial_floats(), 6 * 32 * 4 * 8 * 32);
  EXPECT_EQ(p.workspace_bytes(), 6 * 32 * 4 * 8 * 32 * 4 + 256);
  // With k-split warps only one warp per row group stores: 8 warps = 2 row groups x 4 k parts.
  const Plan k_split = make_plan(16, 2048, 6144, Math::w4a16, WeightLayout::shuffled, 4, 2);
  EXPECT_EQ(k_split.row_blocks, 64);
  EXPECT_EQ(k_split.k_chunks, 6);
  EXPECT_EQ(k_split.workspace_partial_floats(), 2 * 64 * 2 * 8 * 32);
}

// The policy on the shapes: the smallest tile holding M, the weight spread over the SMs,
// the model's time near the weight floor where memory-bound (M <= 16; above, the mma work rather
// than the bytes bounds it).
TEST(DecodePlan, ChoosesTilesAndSplitsThatFillTheMachine) {
  struct NK {
    std::int64_t n, k;
  };
  const DeviceContext dev = h200_context();
  for (const NK nk : {NK{2048, 6144}, NK{4096, 6144}, NK{6144, 2048}, NK{8192, 8192}}) {
    for (std::int64_t m : {1, 3, 8, 9, 16, 17, 32, 33, 64}) {
      for (Math math : {Math::w4a16, Math::w4a4}) {
        const Plan p = choose_plan(m, nk.n, nk.k, math, WeightLayout::shuffled, dev);
        const double us = estimate_plan_us(p, dev);
        const std::string what = "m" + std::to_string(m) + " n" + std::to_string(nk.n) + " k" + std::to_string(nk.k) +
                                 ": " + p.describe() + ", model " + std::to_string(us) + " us";
        EXPECT_GE(p.config.max_m(), m) << what;
        // W4A16 takes the streaming kernel exactly up to kStreamingMaxM; W4A4 may take either there.
        if (math == Math::w4a16 || m > kStreamingMaxM) {
          EXPECT_EQ(p.config.streaming(), m <= kStreamingMaxM) << what;
        }
        for (const TileConfig& c : tile_configs()) {
          if (c.max_m() >= m && c.streaming() == p.config.streaming() && c.serves(WeightLayout::shuffled)) {
            EXPECT_LE(p.config.max_m(), c.max_m()) << what;
          }
        }
        const double busiest = busiest_sm_chunks(p, dev.sm_count);
        const double fair = static_cast<double>(p.row_blocks * p.k_chunks) / dev.sm_count;
        // The busiest SM streams at most 1/0.7 of its fair share: finer balance costs split-K
        // tails or activation re-reads, which the model weighs (docs/KERNELS-decode.md).
        EXPECT_GE(fair / busiest, 0.7) << what << ", balance " << fair / busiest;
        const double floor_us = static_cast<double>(nk.n) * static_cast<double>(nk.k) * 0.5625 / 4.27e6;
        EXPECT_GE(us, floor_us) << what;  // no plan beats the weight bytes
      }
    }
  }
}

// A point of a tuning sweep: the plan the policy must pick there and that plan's measured time.
struct SweptPick {
  std::int64_t m, n, k;
  int config, split;
  double measured_us;
};

// The policy picks each point's plan, and the model is within 20% of its measured time.
void expect_picks(Math math, std::initializer_list<SweptPick> points) {
  const DeviceContext dev = h200_context();
  for (const SweptPick& pt : points) {
    const Plan p = choose_plan(pt.m, pt.n, pt.k, math, WeightLayout::shuffled, dev);
    const std::string what = std::string(to_string(math)) + " m" + std::to_string(pt.m) + " n" +
                             std::to_string(pt.n) + " k" + std::to_string(pt.k) + ": " + p.describe();
    EXPECT_EQ(p.config_index, pt.config) << what;
    EXPECT_EQ(p.split_k, pt.split) << what;
    const double us = estimate_plan_us(p, dev);
    EXPECT_NEAR(us / pt.measured_us, 1.0, 0.2) << what << ": model " << us << " us, measured " << pt.measured_us;
  }
}

// The streaming policy against the H200 sweep its model was fit to (PERF-LOG run 24,
// docs/data/decode-streaming-sweep-run24.csv: every streaming config x swept split at M = 1, 4,
// 8, 16, graph-timed, cold weights): the plan it picks at each point, within 7% of the sweep's
// fastest (in brackets where another was faster).
TEST(DecodePlan, PicksTheStreamingSweepsBestPlanOnTheH200) {
  expect_picks(Math::w4a16,
               {SweptPick{1, 2048, 6144, 11, 1, 4.97}, SweptPick{1, 4096, 6144, 12, 1, 7.73},   // [13: 7.26]
                SweptPick{1, 6144, 2048, 13, 1, 5.47}, SweptPick{1, 8192, 8192, 13, 1, 13.77},
                SweptPick{4, 2048, 6144, 11, 1, 5.87}, SweptPick{4, 4096, 6144, 12, 1, 7.84},   // [13: 7.63]
                SweptPick{4, 6144, 2048, 13, 1, 5.91}, SweptPick{4, 8192, 8192, 12, 1, 14.65},
                SweptPick{8, 2048, 6144, 13, 1, 6.73}, SweptPick{8, 4096, 6144, 12, 1, 8.72},
                SweptPick{8, 6144, 2048, 13, 1, 6.78}, SweptPick{8, 8192, 8192, 12, 1, 17.36},
                SweptPick{16, 2048, 6144, 15, 1, 8.90}, SweptPick{16, 4096, 6144, 16, 1, 10.38},
                SweptPick{16, 6144, 2048, 16, 1, 8.40}, SweptPick{16, 8192, 8192, 16, 1, 20.51}});
}

// The W4A4 policy against the H200 sweep its constants were fit to (PERF-LOG run 96,
// docs/data/decode-sweep-run96-after-quantize.csv: every register-prefetch and every streaming
// config x swept split at M = 1, 4, 8, 12, 16, each behind the NVFP4 quantizer, launched
// programmatically, less the quantizer; graph-timed, cold weights): the plan it picks at each
// point (configs 0-5 register-prefetch, 11-16 streaming) with its measured time, in brackets where
// another was faster.
TEST(DecodePlan, PicksTheW4a4SweepsBestPlanOnTheH200) {
  expect_picks(Math::w4a4,
               {SweptPick{1, 2048, 6144, 11, 1, 5.54}, SweptPick{1, 4096, 6144, 13, 1, 8.02},  // [0: 7.96]
                SweptPick{1, 6144, 2048, 1, 1, 5.51}, SweptPick{1, 8192, 8192, 13, 1, 14.43},
                SweptPick{4, 2048, 6144, 11, 1, 6.53}, SweptPick{4, 4096, 6144, 12, 1, 8.85},  // [13: 8.50]
                SweptPick{4, 6144, 2048, 1, 1, 5.74}, SweptPick{4, 8192, 8192, 12, 1, 15.44},
                SweptPick{8, 2048, 6144, 2, 13, 7.42},  // [1 split 4: 7.39]
                SweptPick{8, 4096, 6144, 12, 1, 9.59}, SweptPick{8, 6144, 2048, 1, 1, 6.38},
                SweptPick{8, 8192, 8192, 12, 1, 17.06},
                SweptPick{12, 2048, 6144, 5, 13, 9.06},  // [15: 8.99]
                SweptPick{12, 4096, 6144, 16, 1, 11.15}, SweptPick{12, 6144, 2048, 4, 1, 7.87},
                SweptPick{12, 8192, 8192, 16, 1, 19.47}, SweptPick{16, 2048, 6144, 5, 13, 9.18},
                SweptPick{16, 4096, 6144, 16, 1, 12.00}, SweptPick{16, 6144, 2048, 4, 1, 8.55},
                SweptPick{16, 8192, 8192, 5, 4, 22.42}});  // [16: 22.14]
}

// The sweep's split ladder, which the fitted policies choose from.
TEST(DecodePlan, SweptSplitsStepByHalfFromFour) {
  std::vector<int> ladder;
  for (int s = 1; s <= 64; s = next_swept_split(s)) ladder.push_back(s);
  EXPECT_EQ(ladder, (std::vector<int>{1, 2, 3, 4, 6, 9, 13, 19, 28, 42, 63}));
  for (std::int64_t m : {1, 16}) {
    for (Math math : {Math::w4a16, Math::w4a4}) {
      const Plan p = choose_plan(m, 8192, 32768, math, WeightLayout::shuffled, h200_context());
      EXPECT_NE(std::find(ladder.begin(), ladder.end(), p.split_k), ladder.end()) << p.describe();
    }
  }
}

TEST(DecodePlan, HugeNNeedsNoSplit) {
  const Plan p = choose_plan(4, 131072, 1024, Math::w4a16, WeightLayout::shuffled, h200_context());
  EXPECT_EQ(p.split_k, 1) << p.describe();
}

TEST(DecodePlan, ChoiceIsDeterministicAndModelMonotoneInBytes) {
  const DeviceContext dev = h200_context();
  const Plan a = choose_plan(7, 4096, 6144, Math::w4a4, WeightLayout::shuffled, dev);
  const Plan b = choose_plan(7, 4096, 6144, Math::w4a4, WeightLayout::shuffled, dev);
  EXPECT_EQ(a.describe(), b.describe());
  const Plan small = make_plan(7, 2048, 6144, Math::w4a4, WeightLayout::shuffled, 2, 8);
  const Plan large = make_plan(7, 4096, 6144, Math::w4a4, WeightLayout::shuffled, 2, 8);
  EXPECT_LT(estimate_plan_us(small, dev), estimate_plan_us(large, dev));
}

TEST(DecodePlan, LaunchArgumentChecksNameTheProblem) {
  const Plan p = make_plan(4, 64, 256, Math::w4a4, WeightLayout::shuffled, 0, 1);
  const Plan split = make_plan(4, 64, 512, Math::w4a4, WeightLayout::shuffled, 2, 2);
  alignas(256) static std::uint8_t buf[4096];
  GemmArgs args;
  args.a = buf;
  args.a_scales = buf;
  args.w_codes = buf;
  args.w_scales = buf;
  args.d = buf;
  EXPECT_NO_THROW(check_gemm_args(p, args));
  auto message = [](const Plan& plan, const GemmArgs& a) -> std::string {
    try {
      check_gemm_args(plan, a);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  GemmArgs bad = args;
  bad.a_scales = nullptr;
  expect_contains(message(p, bad), "decode: A scales is null [M = 4, N = 64, K = 256, w4a4 shuffled]");
  bad = args;
  bad.w_codes = buf + 8;
  expect_contains(message(p, bad), "weight codes is not 16-byte aligned");
  bad = args;
  bad.d = buf + 1;
  expect_contains(message(p, bad), "D (output) is not 2-byte aligned");
  expect_contains(message(split, args), "decode: workspace of 0 bytes, split-k 2 needs " +
                                            std::to_string(split.workspace_bytes()));
  GemmArgs ok_split = args;
  ok_split.workspace = buf;
  ok_split.workspace_bytes = split.workspace_bytes();
  EXPECT_NO_THROW(check_gemm_args(split, ok_split));
}

}  // namespace
}  // namespace fp4gap::decode
