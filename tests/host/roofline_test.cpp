// Roofline arithmetic worked by hand, bound classification and the tile-coverage text.
#include <gtest/gtest.h>

#include "fp4gap/roofline.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

Ceilings hopper_like() {
  Ceilings c;
  c.memory_bytes_per_s = 4e12;
  c.bf16_flops_per_s = 800e12;
  c.fp8_flops_per_s = 1600e12;
  c.fp4_flops_per_s = 0.0;
  c.source = "test";
  return c;
}

using test::make_problem;

TEST(Roofline, DecodeW4A4IsMemoryBoundWithBytesCountedByHand) {
  const GemmProblem p = make_problem(16, 4096, 6144, OperandFormat::nvfp4, OperandFormat::nvfp4);
  const RooflinePoint r = roofline(p, OperandFormat::nvfp4, OperandFormat::nvfp4, hopper_like());
  // A: 16*6144/2 payload + 16*6144/16 scales; B: 4096*6144/2 + 4096*6144/16; D: 16*4096*2.
  const double bytes = (16.0 * 3072 + 16.0 * 384) + (4096.0 * 3072 + 4096.0 * 384) + 16.0 * 4096 * 2;
  const double flops = 2.0 * 16 * 4096 * 6144;
  EXPECT_DOUBLE_EQ(r.bytes, bytes);
  EXPECT_DOUBLE_EQ(r.flops, flops);
  EXPECT_DOUBLE_EQ(r.memory_roof_s, bytes / 4e12);
  // No FP4 tensor cores: NVFP4 runs at the BF16 rate.
  EXPECT_DOUBLE_EQ(r.compute_roof_s, flops / 800e12);
  EXPECT_DOUBLE_EQ(r.roof_s, bytes / 4e12);
  EXPECT_EQ(r.bound, Bound::memory);
  EXPECT_NE(r.reason.find("moves 14.3 MB"), std::string::npos) << r.reason;
}

TEST(Roofline, PrefillBf16IsComputeBound) {
  const GemmProblem p = make_problem(4096, 4096, 6144, OperandFormat::bf16, OperandFormat::bf16);
  const RooflinePoint r = roofline(p, OperandFormat::bf16, OperandFormat::bf16, hopper_like());
  const double flops = 2.0 * 4096 * 4096 * 6144;
  const double bytes = 4096.0 * 6144 * 2 * 2 + 4096.0 * 4096 * 2;
  EXPECT_DOUBLE_EQ(r.compute_roof_s, flops / 800e12);
  EXPECT_DOUBLE_EQ(r.memory_roof_s, bytes / 4e12);
  EXPECT_EQ(r.bound, Bound::compute);
  EXPECT_NE(r.reason.find("BF16"), std::string::npos) << r.reason;
}

TEST(Roofline, TinyProblemIsUnderTheLaunchFloor) {
  const GemmProblem p = make_problem(1, 256, 512, OperandFormat::nvfp4, OperandFormat::nvfp4);
  const RooflinePoint r = roofline(p, OperandFormat::nvfp4, OperandFormat::nvfp4, hopper_like());
  ASSERT_LT(r.roof_s, kLaunchFloorSeconds);
  EXPECT_EQ(r.bound, Bound::launch_latency);
  EXPECT_NE(r.reason.find("is under the launch floor"), std::string::npos) << r.reason;
  EXPECT_EQ(r.reason.rfind("roof ", 0), 0u) << r.reason;
}

TEST(Roofline, MovedFormatsDecideBytesAndRate) {
  // cuBLAS BF16 on an NVFP4 problem moves BF16 operands: 16x the payload of FP4 per element pair.
  const GemmProblem p = make_problem(16, 2048, 6144, OperandFormat::nvfp4, OperandFormat::nvfp4);
  const RooflinePoint own = roofline(p, OperandFormat::bf16, OperandFormat::bf16, hopper_like());
  EXPECT_DOUBLE_EQ(own.bytes, 16.0 * 6144 * 2 + 2048.0 * 6144 * 2 + 16.0 * 2048 * 2);
}

TEST(Roofline, ComputeCeilingIsTheSlowerOperandsRate) {
  Ceilings c = hopper_like();
  EXPECT_DOUBLE_EQ(compute_ceiling(OperandFormat::nvfp4, OperandFormat::nvfp4, c), 800e12);
  EXPECT_DOUBLE_EQ(compute_ceiling(OperandFormat::e4m3, OperandFormat::e4m3, c), 1600e12);
  EXPECT_EQ(compute_ceiling_name(OperandFormat::e4m3, OperandFormat::e4m3, c), "FP8");
  c.fp4_flops_per_s = 3200e12;  // a Blackwell-like device
  EXPECT_DOUBLE_EQ(compute_ceiling(OperandFormat::nvfp4, OperandFormat::nvfp4, c), 3200e12);
  EXPECT_EQ(compute_ceiling_name(OperandFormat::nvfp4, OperandFormat::nvfp4, c), "FP4");
  EXPECT_DOUBLE_EQ(compute_ceiling(OperandFormat::bf16, OperandFormat::nvfp4, c), 800e12);  // W4A16
  EXPECT_DOUBLE_EQ(compute_ceiling(OperandFormat::e4m3, OperandFormat::nvfp4, c), 1600e12);
}

TEST(Roofline, MissingCeilingGivesUnknown) {
  Ceilings c = hopper_like();
  c.memory_bytes_per_s = 0;
  const RooflinePoint r =
      roofline(make_problem(512, 2048, 6144, OperandFormat::nvfp4, OperandFormat::nvfp4), OperandFormat::nvfp4,
               OperandFormat::nvfp4, c);
  EXPECT_EQ(r.bound, Bound::unknown);
  EXPECT_EQ(r.roof_s, 0.0);
  EXPECT_FALSE(r.reason.empty());
}

TEST(Roofline, BoundNames) {
  EXPECT_EQ(to_string(Bound::memory), "memory");
  EXPECT_EQ(to_string(Bound::compute), "compute");
  EXPECT_EQ(to_string(Bound::launch_latency), "launch_latency");
}

TEST(TileCoverage, SeedShapeStarvesAnH200) {
  const TileCoverage t = tile_coverage(make_problem(512, 2048, 6144, OperandFormat::nvfp4, OperandFormat::nvfp4), 132);
  EXPECT_EQ(t.tiles, 64);
  EXPECT_TRUE(t.starved);
  EXPECT_EQ(t.text, "64 output tiles of 128x128 for 132 SMs");
}

TEST(TileCoverage, PartialTilesRoundUpAndLargeShapesReportWaves) {
  const GemmProblem p = make_problem(129, 4096, 6144, OperandFormat::nvfp4, OperandFormat::nvfp4);
  const TileCoverage t = tile_coverage(p, 132);
  EXPECT_EQ(t.tiles, 2 * 32);
  const TileCoverage big = tile_coverage(make_problem(4096, 4096, 64, OperandFormat::bf16, OperandFormat::bf16), 132);
  EXPECT_EQ(big.tiles, 1024);
  EXPECT_FALSE(big.starved);
  EXPECT_DOUBLE_EQ(big.waves, 1024.0 / 132.0);
  EXPECT_EQ(big.text, "1024 output tiles of 128x128 for 132 SMs (7.76 waves)");
  const TileCoverage custom = tile_coverage(make_problem(16, 4096, 64, OperandFormat::bf16, OperandFormat::bf16), 188, 64, 256);
  EXPECT_EQ(custom.tiles, 16);
  EXPECT_EQ(custom.text, "16 output tiles of 64x256 for 188 SMs");
  EXPECT_THROW(tile_coverage(p, 0), InvalidArgument);
}

// The glm5 W2 shape at M = 512 on the 6-stage m256 tiles: 96 CTAs, one partial wave (run 115).
TEST(LaunchFill, OnePartialWaveLeavesTheOtherSmsIdle) {
  const LaunchFillSummary s = summarize_launch_fill({.ctas = 96, .ctas_at_once = 132, .tiles = 96}, 132);
  EXPECT_DOUBLE_EQ(s.waves, 1.0);
  EXPECT_DOUBLE_EQ(s.idle_fraction, 36.0 / 132.0);
  EXPECT_EQ(s.text, "launch: 96 CTAs for 132 SMs, 1 wave, 27% of SM time idle");
  const LaunchFillSummary full = summarize_launch_fill({.ctas = 264, .ctas_at_once = 132, .tiles = 264}, 132);
  EXPECT_DOUBLE_EQ(full.waves, 2.0);
  EXPECT_DOUBLE_EQ(full.idle_fraction, 0.0);
  EXPECT_EQ(full.text, "launch: 264 CTAs, 132 at once, for 132 SMs, 2 waves, 0% of SM time idle");
}

// Clusters of 4 that fit 120 CTAs at once: 128 CTAs take a second wave of 8, and the 12 SMs no
// cluster fits idle through both.
TEST(LaunchFill, ClustersThatLeaveSmsEmptyCountThemIdle) {
  const LaunchFillSummary s = summarize_launch_fill({.ctas = 128, .ctas_at_once = 120, .tiles = 128}, 132);
  EXPECT_DOUBLE_EQ(s.waves, 2.0);
  EXPECT_DOUBLE_EQ(s.idle_fraction, 1.0 - 128.0 / 264.0);
  EXPECT_EQ(s.text, "launch: 128 CTAs, 120 at once, for 132 SMs, 2 waves, 52% of SM time idle");
  // Several CTAs per SM: the CTAs resident at once are the slots.
  const LaunchFillSummary two_per_sm = summarize_launch_fill({.ctas = 264, .ctas_at_once = 264, .tiles = 264}, 132);
  EXPECT_DOUBLE_EQ(two_per_sm.idle_fraction, 0.0);
  EXPECT_EQ(two_per_sm.text, "launch: 264 CTAs for 132 SMs, 1 wave, 0% of SM time idle");
}

// Persistent CTAs over W2 at M = 1024 (192 m256 tiles): a full wave, then 60 tiles, run whole or
// as 120 half tiles, here at 0.65 of a tile (the runner passes its cost model's share, ~0.75:
// KERNELS-prefill, "Halved last wave").
TEST(LaunchFill, PersistentCtasCountTilesAndAHalvedLastWave) {
  const LaunchFillSummary whole = summarize_launch_fill({.ctas = 132, .ctas_at_once = 132, .tiles = 192}, 132);
  EXPECT_DOUBLE_EQ(whole.waves, 2.0);
  EXPECT_DOUBLE_EQ(whole.idle_fraction, 1.0 - 192.0 / 264.0);
  EXPECT_EQ(whole.text, "launch: 132 persistent CTAs over 192 tiles for 132 SMs, 2 waves, 27% of SM time idle");
  const LaunchFillSummary halved =
      summarize_launch_fill({.ctas = 132, .ctas_at_once = 132, .tiles = 192, .halved_wave_cost = 0.65}, 132);
  EXPECT_DOUBLE_EQ(halved.waves, 1.65);
  EXPECT_DOUBLE_EQ(halved.idle_fraction, 1.0 - 192.0 / (1.65 * 132.0));
  EXPECT_EQ(halved.text,
            "launch: 132 persistent CTAs over 192 tiles for 132 SMs, 1.65 waves (the last of half tiles), 12% of SM "
            "time idle");
}

TEST(LaunchFill, SaysHowFarTheTilesReachPastM) {
  // W2 at M = 520 on m128 G3 unsplit: 5 x 48 tiles, 640 rows for 520.
  const LaunchFillSummary s = summarize_launch_fill(
      {.ctas = 240, .ctas_at_once = 132, .tiles = 240, .m = 520, .tile_rows = 128, .row_tiles = 5}, 132);
  EXPECT_DOUBLE_EQ(s.rows_past_m, 1.0 - 520.0 / 640.0);
  EXPECT_EQ(s.text,
            "launch: 240 CTAs, 132 at once, for 132 SMs, 2 waves, 9% of SM time idle, tiles of 128 rows cover 640 "
            "for M = 520 (19% past M)");
  // Under 5% past M (1 row of 32 tiles' 4096): counted, not said.
  const LaunchFillSummary few = summarize_launch_fill(
      {.ctas = 128, .ctas_at_once = 132, .tiles = 128, .m = 4095, .tile_rows = 256, .row_tiles = 16}, 132);
  EXPECT_DOUBLE_EQ(few.rows_past_m, 1.0 / 4096.0);
  EXPECT_EQ(few.text.find("past M"), std::string::npos) << few.text;
  // Whole tiles, or M not said: nothing.
  EXPECT_EQ(summarize_launch_fill({.ctas = 96, .ctas_at_once = 132, .tiles = 96, .m = 512, .tile_rows = 256,
                                   .row_tiles = 2},
                                  132)
                .rows_past_m,
            0.0);
  EXPECT_EQ(summarize_launch_fill({.ctas = 96, .ctas_at_once = 132, .tiles = 96, .tile_rows = 128, .row_tiles = 5}, 132)
                .text.find("past M"),
            std::string::npos);
  // Tiles that do not cover M, or more of them than M needs: refused with the numbers.
  for (const LaunchFill bad : {LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96, .m = 520, .tile_rows = 128,
                                          .row_tiles = 4},
                               LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96, .m = 520, .tile_rows = 128,
                                          .row_tiles = 6},
                               LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96, .m = 520, .tile_rows = 0,
                                          .row_tiles = 5}}) {
    try {
      summarize_launch_fill(bad, 132);
      ADD_FAILURE() << "accepted row_tiles = " << bad.row_tiles << ", tile_rows = " << bad.tile_rows;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("row_tiles = ceil(m / tile_rows)"), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchFill, RefusesWhatNoLaunchLooksLike) {
  for (const LaunchFill bad : {LaunchFill{.ctas = 0, .ctas_at_once = 132, .tiles = 0},
                               LaunchFill{.ctas = 96, .ctas_at_once = 0, .tiles = 96},
                               LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 95},
                               LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96, .halved_wave_cost = 0.65},
                               LaunchFill{.ctas = 132, .ctas_at_once = 132, .tiles = 264, .halved_wave_cost = 0.65},
                               LaunchFill{.ctas = 132, .ctas_at_once = 132, .tiles = 192, .halved_wave_cost = 1.5}}) {
    EXPECT_THROW(summarize_launch_fill(bad, 132), InvalidArgument) << bad.ctas << " " << bad.tiles;
  }
  EXPECT_THROW(summarize_launch_fill({.ctas = 96, .ctas_at_once = 132, .tiles = 96}, 0), InvalidArgument);
}

}  // namespace
}  // namespace fp4gap
