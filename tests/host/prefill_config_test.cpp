// Tile configurations, shared-memory feasibility and the dispatch policy of the Hopper prefill
// kernels: plain C++, no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "fp4gap/device_specs.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/roofline.hpp"
#include "test_support.hpp"

namespace fp4gap::prefill {
namespace {

using test::h200_context;

TEST(PrefillConfig, NamesAndSharedMemoryBytes) {
  const std::vector<TileConfig>& configs = tile_configs();
  ASSERT_EQ(configs.size(), 23u);
  EXPECT_EQ(configs[0].name(), "sm90a bf16 x nvfp4 m256n128k64 6 stages");
  EXPECT_EQ(configs[1].name(), "sm90a bf16 x nvfp4 m128n128k64 9 stages");
  EXPECT_EQ(configs[2].name(), "sm90a bf16 x nvfp4 m64n128k64 12 stages");
  EXPECT_EQ(configs[3].name(), "sm90a bf16 x nvfp4 m256n128k64 4 stages persistent");
  EXPECT_EQ(configs[4].name(), "sm90a bf16 x nvfp4 m192n128k64 6 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[5].name(), "sm90a bf16 x nvfp4 m192n128k64 6 stages persistent, 2 K blocks per copy");
  EXPECT_EQ(configs[6].name(), "sm90a bf16 x nvfp4 m128n128k64 9 stages, 3 K blocks per copy");
  EXPECT_EQ(configs[7].name(), "sm90a bf16 x nvfp4 m32n128k64 12 stages, 4 K blocks per copy");
  EXPECT_EQ(configs[8].name(), "sm90a bf16 x nvfp4 m16n128k64 12 stages, 4 K blocks per copy");
  EXPECT_EQ(configs[9].name(), "sm90a bf16 x nvfp4 m64n128k64 12 stages, 4 K blocks per copy");
  EXPECT_EQ(configs[10].name(), "sm90a bf16 x nvfp4 m144n128k64 9 stages, 3 K blocks per copy");
  EXPECT_EQ(configs[11].name(), "sm90a bf16 x nvfp4 m80n128k64 12 stages, 4 K blocks per copy");
  EXPECT_EQ(configs[11].smem_bytes(), 12 * (80 * 128 + 4608) + 192 + 1024);
  EXPECT_EQ(configs[12].name(), "sm90a bf16 x nvfp4 m96n128k64 12 stages, 4 K blocks per copy");
  EXPECT_EQ(configs[12].smem_bytes(), 12 * (96 * 128 + 4608) + 192 + 1024);
  EXPECT_EQ(configs[13].name(), "sm90a bf16 x nvfp4 m208n128k64 6 stages");
  EXPECT_EQ(configs[13].smem_bytes(), 6 * (208 * 128 + 4608) + 96 + 1024);
  EXPECT_EQ(configs[14].name(), "sm90a bf16 x nvfp4 m160n128k64 8 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[14].smem_bytes(), 8 * (160 * 128 + 4608) + 128 + 1024);
  EXPECT_EQ(configs[15].name(), "sm90a bf16 x nvfp4 m128n128k64 10 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[15].smem_bytes(), 10 * (128 * 128 + 4608) + 160 + 1024);
  // The wide tiles: 192 weight rows, so a stage holds two packed chunks.
  EXPECT_EQ(configs[16].name(), "sm90a bf16 x nvfp4 m128n192k64 8 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[16].smem_bytes(), 8 * (128 * 128 + 2 * 4608) + 128 + 1024);
  EXPECT_EQ(configs[17].name(), "sm90a bf16 x nvfp4 m112n192k64 8 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[17].smem_bytes(), 8 * (112 * 128 + 2 * 4608) + 128 + 1024);
  EXPECT_EQ(configs[18].name(), "sm90a bf16 x nvfp4 m96n192k64 8 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[18].smem_bytes(), 8 * (96 * 128 + 2 * 4608) + 128 + 1024);
  // A persistent config's output staging comes first.
  EXPECT_EQ(configs[19].name(), "sm90a bf16 x nvfp4 m128n128k64 8 stages persistent, 2 K blocks per copy");
  EXPECT_EQ(configs[19].smem_bytes(), 128 * 128 * 2 + 8 * (128 * 128 + 4608) + 128 + 1024);
  // The wide tiles that hand the producer's registers to the consumers: 6 stages (8 do not fit).
  EXPECT_EQ(configs[20].name(), "sm90a bf16 x nvfp4 m192n192k64 6 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[20].smem_bytes(), 6 * (192 * 128 + 2 * 4608) + 96 + 1024);
  EXPECT_EQ(configs[21].name(), "sm90a bf16 x nvfp4 m160n192k64 6 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[21].smem_bytes(), 6 * (160 * 128 + 2 * 4608) + 96 + 1024);
  EXPECT_EQ(configs[22].name(), "sm90a bf16 x nvfp4 m176n192k64 6 stages, 2 K blocks per copy");
  EXPECT_EQ(configs[22].smem_bytes(), 6 * (176 * 128 + 2 * 4608) + 96 + 1024);
  // Two consumer warpgroups (three for the wide tiles) and one producer warpgroup.
  for (const TileConfig& c : configs) {
    EXPECT_EQ(c.threads(), c.weight_rows == kWideWeightRows ? 512 : 384) << c.name();
    EXPECT_EQ(c.splits(), !c.persistent && c.weight_rows == kBlockN) << c.name();
  }
  EXPECT_EQ(configs[7].smem_bytes(), 12 * (32 * 128 + 4608) + 192 + 1024);
  EXPECT_EQ(configs[8].smem_bytes(), 12 * (16 * 128 + 4608) + 192 + 1024);
  // Copy groups change how stages are filled, not what they hold.
  EXPECT_EQ(configs[6].smem_bytes(), configs[1].smem_bytes());
  EXPECT_EQ(configs[9].smem_bytes(), configs[2].smem_bytes());
  // 256 threads x 8 floats.
  EXPECT_EQ(configs[8].partial_tile_bytes(), 256 * 8 * 4);
  // stages x (activation tile block_m x 64 x 2 B + weight chunk 4096 + 512 B) + 2 x stages
  // mbarriers of 8 B + 1 KB alignment slack.
  EXPECT_EQ(configs[0].smem_bytes(), 6 * (256 * 128 + 4608) + 96 + 1024);
  EXPECT_EQ(configs[1].smem_bytes(), 9 * (128 * 128 + 4608) + 144 + 1024);
  EXPECT_EQ(configs[2].smem_bytes(), 12 * (64 * 128 + 4608) + 192 + 1024);
  EXPECT_EQ(configs[10].smem_bytes(), 9 * (144 * 128 + 4608) + 144 + 1024);
  // A persistent config adds its own bf16 output tile, 256 x 128 x 2 B, in front of the ring.
  EXPECT_EQ(configs[3].persistent_staging_bytes(), 256 * 128 * 2);
  EXPECT_EQ(configs[3].smem_bytes(), 256 * 128 * 2 + 4 * (256 * 128 + 4608) + 64 + 1024);
  EXPECT_EQ(configs[4].smem_bytes(), 6 * (192 * 128 + 4608) + 96 + 1024);
  EXPECT_EQ(configs[5].smem_bytes(), 192 * 128 * 2 + 6 * (192 * 128 + 4608) + 96 + 1024);
  EXPECT_EQ(configs[0].persistent_staging_bytes(), 0);
  EXPECT_EQ(configs[0].partial_tile_bytes(), 256 * 128 * 4);
  EXPECT_EQ(configs[0].staged_tile_bytes(), 256 * 132 * 4);
  // The partial tile, then half the rows staged: 131,072 + 67,584 of the m256 ring's 224,256.
  EXPECT_EQ(configs[0].split_epilogue_bytes(), 256 * 128 * 4 + 128 * 132 * 4);
  for (const TileConfig& c : configs) {
    if (!c.splits()) continue;  // never splits, never stages fp32 in the ring
    EXPECT_LE(c.staged_tile_bytes(), c.stages * c.stage_bytes()) << c.name();
    EXPECT_LE(c.split_epilogue_bytes(), c.stages * c.stage_bytes()) << c.name();
  }
}

TEST(PrefillConfig, FeasibilityAgainstTheDeviceLimit) {
  for (const TileConfig& c : tile_configs()) {
    const Status s = check_tile_config(c, h200_context());
    EXPECT_TRUE(s.is_ok()) << c.name() << ": " << s.reason;
  }
  DeviceContext small = h200_context();
  small.name = "RTX PRO 6000";
  small.smem_per_block_optin = 101376;
  const Status s = check_tile_config(tile_configs()[0], small);
  EXPECT_EQ(s.code, StatusCode::not_supported);
  EXPECT_NE(s.reason.find(std::to_string(tile_configs()[0].smem_bytes() + kKernelStaticSmemBytes) + " bytes"),
            std::string::npos)
      << s.reason;
  EXPECT_NE(s.reason.find("101376"), std::string::npos) << s.reason;
  // The block holds the kernel's own shared memory beside the dynamic request: a limit that fits
  // the request alone is not enough.
  for (const TileConfig& c : tile_configs()) {
    DeviceContext exact = h200_context();
    exact.smem_per_block_optin = c.smem_bytes() + kKernelStaticSmemBytes;
    EXPECT_TRUE(check_tile_config(c, exact).is_ok()) << c.name();
    exact.smem_per_block_optin -= 1;
    const Status short_by_one = check_tile_config(c, exact);
    EXPECT_EQ(short_by_one.code, StatusCode::not_supported) << c.name();
    EXPECT_NE(short_by_one.reason.find("of the kernel's own"), std::string::npos) << short_by_one.reason;
  }
}

TEST(PrefillConfig, CopyGroupsFillWholeRings) {
  // 2 K blocks per copy do not divide 9 stages, nor 3 a persistent config's 4.
  for (const TileConfig& c : {TileConfig{128, 9, false, 2}, TileConfig{256, 4, true, 3}, TileConfig{64, 12, false, 0}}) {
    const Status s = check_tile_config(c, h200_context());
    EXPECT_EQ(s.code, StatusCode::not_supported) << c.name();
    EXPECT_NE(s.reason.find("K blocks per copy must divide the " + std::to_string(c.stages) + " stages"),
              std::string::npos)
        << s.reason;
  }
  EXPECT_TRUE(check_tile_config(TileConfig{64, 12, false, 4}, h200_context()).is_ok());
  EXPECT_TRUE(check_tile_config(TileConfig{128, 8, true, 2}, h200_context()).is_ok());
}

// W4A4 activations dequantized in the kernel: tiles of at most 64 rows, not persistent, whole K
// blocks, and the CTA's resident activation tiles within the device's shared memory; every
// refusal names its rule.
TEST(PrefillConfig, ActivationDequantInTheKernelNeedsANarrowTileWholeKBlocksAndSharedMemory) {
  const std::int64_t h200_smem = h200_context().smem_per_block_optin;
  int narrow = 0;
  for (const TileConfig& c : tile_configs()) {
    const Plan plan = make_plan(16, 2048, 6144, c, c.splits() ? 8 : 1);  // split 8: 12 K blocks per CTA
    const Status s = check_activation_dequant_in_kernel(plan, 6144, h200_smem);
    EXPECT_EQ(s.is_ok(), c.dequantizes_activations()) << c.name() << ": " << s.reason;
    EXPECT_EQ(c.dequantizes_activations(), !c.persistent && c.block_m <= 64) << c.name();
    narrow += s.is_ok() ? 1 : 0;
    if (c.persistent) {
      EXPECT_NE(s.reason.find("persistent"), std::string::npos) << s.reason;
    } else if (c.block_m > 64) {
      EXPECT_NE(s.reason.find("at most 64 activation rows"), std::string::npos) << s.reason;
    } else {
      // 12 K blocks per CTA, as many as the ring's stages: no more shared memory than the tile.
      EXPECT_EQ(activation_dequant_smem_bytes(plan), c.smem_bytes()) << c.name();
    }
  }
  EXPECT_EQ(narrow, 4) << "m16, m32 and m64 with 4 K blocks per copy, and the plain m64";
  const TileConfig m16{16, 12, false, 4};
  for (const std::int64_t k : {16, 48, 6144 + 32, 100}) {
    const Status s = check_activation_dequant_in_kernel(make_plan(16, 256, k, m16, 1), k, h200_smem);
    EXPECT_EQ(s.code, StatusCode::not_supported) << "K = " << k;
    EXPECT_NE(s.reason.find("K = " + std::to_string(k) + " is not a multiple of 64"), std::string::npos) << s.reason;
  }
  // Longer ranges than the ring grow the resident tiles: m32 at split 4 of 96 K blocks holds 24
  // tiles of 32 x 64 bf16 (4 KB), 12 beyond its ring's.
  const TileConfig m32{32, 12, false, 4};
  const Plan w13 = make_plan(32, 4096, 6144, m32, 4);
  EXPECT_EQ(activation_dequant_smem_bytes(w13), m32.smem_bytes() + 12 * 32 * 64 * 2);
  EXPECT_TRUE(check_activation_dequant_in_kernel(w13, 6144, h200_smem).is_ok());
  // m64 unsplit at K = 6144: 96 tiles of 8 KB, far beyond 227 KB; the reason names the bytes.
  const Plan unsplit = make_plan(64, 4096, 6144, TileConfig{64, 12, false, 4}, 1);
  const Status too_big = check_activation_dequant_in_kernel(unsplit, 6144, h200_smem);
  EXPECT_EQ(too_big.code, StatusCode::not_supported);
  EXPECT_NE(too_big.reason.find(std::to_string(activation_dequant_smem_bytes(unsplit))), std::string::npos)
      << too_big.reason;
  EXPECT_NE(too_big.reason.find("96 K blocks of resident activations"), std::string::npos) << too_big.reason;
  EXPECT_NE(too_big.reason.find(std::to_string(h200_smem)), std::string::npos) << too_big.reason;
  EXPECT_TRUE(check_activation_dequant_in_kernel(make_plan(64, 128, 64, TileConfig{64, 12}, 1), 64, h200_smem).is_ok());
}

// The backends take the in-kernel dequantization only where run 65 measured it faster: m16 with 12
// K blocks per CTA (the seed shape's split 8), not 16 (W2's split 2) or m32 with 12.
TEST(PrefillConfig, ActivationDequantInTheKernelIsPreferredForFewValuesPerCta) {
  const TileConfig m16{16, 12, false, 4}, m32{32, 12, false, 4};
  EXPECT_TRUE(prefers_activation_dequant_in_kernel(make_plan(16, 2048, 6144, m16, 8)));
  EXPECT_FALSE(prefers_activation_dequant_in_kernel(make_plan(16, 6144, 2048, m16, 2)));
  EXPECT_FALSE(prefers_activation_dequant_in_kernel(make_plan(32, 2048, 6144, m32, 8)));
  EXPECT_TRUE(prefers_activation_dequant_in_kernel(make_plan(16, 128, 64 * 11 + 1, m16, 1)));  // 12 K blocks
  // W4A4 takes it where it is both preferred and possible.
  const std::int64_t h200_smem = h200_context().smem_per_block_optin;
  const Plan seed16 = make_plan(16, 2048, 6144, m16, 8);
  EXPECT_TRUE(w4a4_dequantizes_in_kernel(seed16, 6144, h200_smem));
  EXPECT_FALSE(w4a4_dequantizes_in_kernel(seed16, 6144, activation_dequant_smem_bytes(seed16) - 1));
  EXPECT_FALSE(w4a4_dequantizes_in_kernel(make_plan(16, 6144, 2048, m16, 2), 2048, h200_smem));
  EXPECT_FALSE(w4a4_dequantizes_in_kernel(make_plan(16, 128, 64 * 11 + 32, m16, 1), 64 * 11 + 32, h200_smem));
}

TEST(PrefillConfig, SplitRangesPartitionTheKBlocks) {
  for (std::int64_t kb = 1; kb <= 50; ++kb) {
    for (int split = 1; split <= kMaxSplitK; ++split) {
      std::int64_t next = 0, smallest = kb, largest = 0;
      for (int s = 0; s < split; ++s) {
        const KRange r = split_k_range(kb, split, s);
        ASSERT_EQ(r.begin, next) << "k_blocks " << kb << ", split " << split << ", part " << s;
        ASSERT_GE(r.end, r.begin);
        next = r.end;
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
      }
      ASSERT_EQ(next, kb) << "k_blocks " << kb << ", split " << split;
      ASSERT_LE(largest - smallest, 1) << "k_blocks " << kb << ", split " << split;
      if (kb >= split) {
        ASSERT_GE(smallest, 1) << "k_blocks " << kb << ", split " << split;
      }
    }
  }
}

TEST(PrefillConfig, MakePlanCountsTilesAndRejectsBadSplits) {
  const Plan p = make_plan(129, 200, 96, tile_configs()[1], 2);
  EXPECT_EQ(p.m_tiles, 2);
  EXPECT_EQ(p.n_tiles, 2);
  EXPECT_EQ(p.k_blocks, 2);
  EXPECT_EQ(p.ctas(), 8);
  EXPECT_EQ(p.describe(), tile_configs()[1].name() + ", split-k 2");
  EXPECT_THROW(make_plan(128, 128, 64, tile_configs()[0], 0), InvalidArgument);
  EXPECT_THROW(make_plan(128, 128, 64, tile_configs()[0], kMaxSplitK + 1), InvalidArgument);
  EXPECT_THROW(make_plan(0, 128, 64, tile_configs()[0], 1), InvalidArgument);
  // A persistent config runs unsplit; the refusal names it.
  try {
    make_plan(4096, 4096, 4096, tile_configs()[3], 2);
    FAIL() << "a persistent config accepted split-k 2";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("persistent runs unsplit"), std::string::npos) << e.what();
  }
}

TEST(PrefillConfig, ClusterBandRowsArePairsOfQuads) {
  // block_m / 8 accumulator quads per tile, shared by the split CTAs two at a time (stored two per
  // stmatrix); the largest band's rows, 0 where some CTA would get no pair.
  struct Case {
    int block_m, split, rows;
  };
  for (const Case c : {Case{128, 2, 64}, Case{128, 3, 48}, Case{128, 4, 32}, Case{128, 8, 16}, Case{64, 2, 32},
                       Case{64, 4, 16}, Case{64, 8, 0}, Case{32, 2, 16}, Case{32, 4, 0}, Case{16, 2, 0},
                       Case{192, 2, 96}, Case{192, 3, 64}, Case{192, 5, 48}, Case{192, 8, 32}, Case{256, 2, 128},
                       Case{256, 8, 32}, Case{208, 2, 112}, Case{208, 4, 64}, Case{144, 2, 80}, Case{80, 2, 48},
                       Case{80, 4, 32}, Case{80, 6, 0}}) {
    const TileConfig config{c.block_m, c.block_m >= 192 ? 6 : 12};
    EXPECT_EQ(make_plan(512, 2048, 6144, config, c.split).cluster_band_rows(), c.rows)
        << "block_m " << c.block_m << ", split " << c.split;
  }
  EXPECT_EQ(make_plan(512, 2048, 6144, TileConfig{128, 9}, 1).cluster_band_rows(), 0);
  EXPECT_EQ(make_plan(512, 2048, 6144, TileConfig{64, 12}, 2, SplitReduction::workspace).cluster_band_rows(), 0);
}

TEST(PrefillConfig, ClusterBandsCoverTheTileInWholeStoreBoxes) {
  // For every tile and cluster split the copy engine stores: the CTAs' bands are contiguous,
  // none empty, cover all block_m rows, and each is a whole number of the tensor map's boxes.
  for (const TileConfig& c : tile_configs()) {
    if (!c.splits()) continue;  // runs unsplit
    for (int split = 2; split <= kMaxSplitK; ++split) {
      const int rows = make_plan(512, 2048, 6144, c, split).cluster_band_rows();
      if (rows == 0) continue;
      const int box = cluster_band_box_rows(c.block_m, split);
      std::int64_t next = 0;
      for (int rank = 0; rank < split; ++rank) {
        const ItemRange pairs = cluster_band_pairs(c.block_m, split, rank);
        const std::int64_t band = 16 * (pairs.end - pairs.begin);
        EXPECT_EQ(pairs.begin, next) << c.name() << ", split " << split << ", rank " << rank;
        EXPECT_GT(band, 0) << c.name() << ", split " << split << ", rank " << rank;
        EXPECT_LE(band, rows) << c.name() << ", split " << split << ", rank " << rank;
        EXPECT_EQ(band % box, 0) << c.name() << ", split " << split << ", rank " << rank;
        next = pairs.end;
      }
      EXPECT_EQ(16 * next, c.block_m) << c.name() << ", split " << split;
    }
  }
}

TEST(PersistentSchedule, HalvesOnlyALastWaveThatHalvesFit) {
  struct Case {
    std::int64_t tiles, ctas, whole, halved;
  };
  for (const Case c : {Case{192, 132, 132, 60},   // N = 6144, M = 1024: 60 tiles after a full wave
                       Case{198, 132, 132, 66},   // 132 halves: still one wave
                       Case{199, 132, 199, 0},    // 134 halves would need a second round
                       Case{216, 132, 216, 0},    // 84 left: whole tiles
                       Case{264, 132, 264, 0},    // two full waves
                       Case{128, 132, 128, 0},    // under one wave: nothing to even out
                       Case{133, 132, 132, 1},
                       Case{400, 132, 396, 4}}) {
    const PersistentSchedule s = persistent_schedule(c.tiles, c.ctas);
    EXPECT_EQ(s.whole_tiles, c.whole) << c.tiles << " tiles on " << c.ctas << " CTAs";
    EXPECT_EQ(s.halved_tiles, c.halved) << c.tiles << " tiles on " << c.ctas << " CTAs";
  }
  // Every tile is run once, whole or as two halves, and the halves take at most one more round
  // after whole waves of whole tiles.
  // A last wave split along K has no more pairs than its workspace holds (persistent_pairs_bound),
  // up to the kMaxPersistentCtas that launch_gemm allows.
  for (std::int64_t ctas = 1; ctas <= kMaxPersistentCtas; ++ctas) {
    for (std::int64_t tiles = 1; tiles <= 600; ++tiles) {
      const PersistentSchedule s = persistent_schedule(tiles, ctas);
      ASSERT_EQ(s.whole_tiles + s.halved_tiles, tiles) << tiles << " tiles on " << ctas << " CTAs";
      ASSERT_EQ(s.units(), tiles + s.halved_tiles);
      ASSERT_LE(s.halved_tiles, persistent_pairs_bound(tiles)) << tiles << " tiles on " << ctas << " CTAs";
      if (s.halved_tiles > 0) {
        ASSERT_GE(s.whole_tiles, ctas) << tiles << " tiles on " << ctas << " CTAs";
        ASSERT_EQ(s.whole_tiles % ctas, 0) << tiles << " tiles on " << ctas << " CTAs";
        ASSERT_LE(2 * s.halved_tiles, ctas) << tiles << " tiles on " << ctas << " CTAs";
      }
    }
  }
}

TEST(PrefillPolicy, APersistentPlanPaysLessForAHalvedLastWave) {
  // N = 6144, K = 2048 on 132 CTAs: M = 1024 is a wave and 60 tiles run as 120 halves, M = 1280
  // two waves (240 tiles, 108 left: whole), M = 1536 two waves and 24 tiles as 48 halves.
  auto persistent_us = [](std::int64_t m) {
    for (const PlanCandidate& c : plan_candidates(m, 6144, 2048, h200_context())) {
      if (c.config.persistent && c.config.block_m == 256 && c.status.is_ok()) return c.predicted_us;
    }
    ADD_FAILURE() << "no persistent m256 candidate at M = " << m;
    return 0.0;
  };
  const double wave_and_halves = persistent_us(1024), two_waves = persistent_us(1280);
  const double half_wave = persistent_us(1536) - two_waves;
  EXPECT_NEAR(wave_and_halves - two_waves / 2, half_wave, 1e-9);
  EXPECT_GT(half_wave, 0.0);
  EXPECT_LT(half_wave, 0.8 * two_waves / 2) << "a wave of half tiles should cost well under a whole one";
}

// What the report says of a plan's launch: W2 at M = 512 on the 6-stage m256 (96 CTAs), a split
// plan's CTAs counted once each, and the persistent m256 at M = 1024 (132 CTAs over 192 tiles, the
// last 60 as halves, charged the cost model's half-tile K block against a whole one's).
TEST(PrefillPlan, LaunchFillCountsTheCtasItLaunches) {
  auto config = [](int block_m, bool persistent) {
    for (const TileConfig& c : tile_configs()) {
      if (c.block_m == block_m && c.persistent == persistent && c.copy_group == 1) return c;
    }
    throw InvalidArgument("no such config");
  };
  const LaunchFill plain = launch_fill(make_plan(512, 6144, 2048, config(256, false), 1), 132);
  EXPECT_EQ(plain.ctas, 96);
  EXPECT_EQ(plain.tiles, 96);
  EXPECT_EQ(plain.ctas_at_once, 132);
  EXPECT_EQ(plain.halved_wave_cost, 0.0);
  // How the tiles cover M (the runner adds M itself): 2 rows of 256-row tiles.
  EXPECT_EQ(plain.tile_rows, 256);
  EXPECT_EQ(plain.row_tiles, 2);
  EXPECT_EQ(plain.m, 0);
  const LaunchFill split = launch_fill(make_plan(256, 2048, 6144, config(128, false), 4), 120);
  EXPECT_EQ(split.ctas, 128);
  EXPECT_EQ(split.tiles, 128);
  EXPECT_EQ(split.ctas_at_once, 120);
  const Plan persistent = make_plan(1024, 6144, 2048, config(256, true), 1);
  const LaunchFill halved = launch_fill(persistent, 132);
  EXPECT_EQ(halved.ctas, 132);
  EXPECT_EQ(halved.tiles, 192);
  EXPECT_GT(halved.halved_wave_cost, 0.5);
  EXPECT_LT(halved.halved_wave_cost, 1.0);
  const LaunchFillSummary s = summarize_launch_fill(halved, 132);
  EXPECT_NE(s.text.find("132 persistent CTAs over 192 tiles"), std::string::npos) << s.text;
  EXPECT_EQ(launch_fill(make_plan(1280, 6144, 2048, config(256, true), 1), 132).halved_wave_cost, 0.0)
      << "240 tiles end in a partial wave of 108, more than half the CTAs: whole tiles";
  EXPECT_EQ(launch_fill(make_plan(64, 6144, 2048, config(256, true), 1), 132).ctas, 48) << "fewer tiles than SMs";
  EXPECT_THROW(launch_fill(persistent, 0), InvalidArgument);
}

TEST(PrefillPolicy, APersistentConfigIsNotOfferedForOneWave) {
  // N = 6144, K = 2048, M = 384: 96 m192, m208 or m256 tiles on 132 CTAs. A persistent CTA would run one
  // tile, which the non-persistent kernel of the same tile runs faster (PERF-LOG runs 45, 48). The
  // 144 m128 tiles are two waves: the persistent m128 is offered.
  int persistent = 0, plain = 0, persistent_m128 = 0;
  for (const PlanCandidate& c : plan_candidates(384, 6144, 2048, h200_context())) {
    if (c.config.persistent && c.config.block_m == 128) {
      ++persistent_m128;
      EXPECT_TRUE(c.status.is_ok()) << c.config.name() << ": " << c.status.reason;
      EXPECT_EQ(c.waves, 2);
    } else if (c.config.persistent) {
      ++persistent;
      EXPECT_EQ(c.status.code, StatusCode::not_supported) << c.config.name();
      EXPECT_TRUE(c.status.reason.find("96 tiles fit one wave of 132 CTAs") != std::string::npos) << c.status.reason;
    } else if (c.config.block_m >= 192 && c.split_k == 1 && c.config.weight_rows == kBlockN) {
      ++plain;
      EXPECT_TRUE(c.status.is_ok()) << c.config.name() << ": " << c.status.reason;
    }
  }
  EXPECT_EQ(persistent, 2);
  EXPECT_EQ(persistent_m128, 1);
  EXPECT_EQ(plain, 3);
  // Two waves of tiles: offered again.
  const Plan p = choose_plan(4096, 6144, 2048, h200_context());
  bool offered = false;
  for (const PlanCandidate& c : plan_candidates(4096, 6144, 2048, h200_context())) offered |= c.config.persistent && c.status.is_ok();
  EXPECT_TRUE(offered) << p.describe();
}

TEST(PrefillPolicy, LargeShapesUseTheWideTileWithoutSplit) {
  for (const auto& [m, n, k] : {std::tuple{4096, 4096, 6144}, std::tuple{4096, 6144, 2048}, std::tuple{8192, 8192, 8192}}) {
    const Plan p = choose_plan(m, n, k, h200_context());
    EXPECT_EQ(p.config.block_m, 256) << m << "x" << n << "x" << k << ": " << p.describe();
    EXPECT_EQ(p.split_k, 1) << m << "x" << n << "x" << k << ": " << p.describe();
  }
}

TEST(PrefillPolicy, FewTilesAreSplitAlongKIntoOneWave) {
  // M=512, N=2048: 32 tiles of 256x128 for 132 SMs.
  const Plan p = choose_plan(512, 2048, 6144, h200_context());
  EXPECT_GT(p.split_k, 1) << p.describe();
  EXPECT_LE(p.ctas(), 132) << p.describe();
  EXPECT_GE(p.ctas(), 100) << p.describe();
}

TEST(PrefillPolicy, SmallMUsesTheNarrowTiles) {
  for (const auto& [m, block_m] : {std::tuple{1, 16}, std::tuple{16, 16}, std::tuple{32, 32}, std::tuple{64, 64}}) {
    const Plan p = choose_plan(m, 4096, 6144, h200_context());
    EXPECT_EQ(p.config.block_m, block_m) << "M = " << m << ": " << p.describe();
    EXPECT_TRUE(launches_programmatically(p.config)) << p.describe();
  }
  const Plan q = choose_plan(128, 4096, 4096, h200_context());
  EXPECT_EQ(q.config.block_m, 128) << q.describe();
  EXPECT_TRUE(launches_programmatically(q.config)) << q.describe();
  EXPECT_FALSE(launches_programmatically(tile_configs()[0])) << tile_configs()[0].name();
  // make_plan launches each configuration as launches_programmatically says; launch_override
  // names only a plan launched the other way.
  for (const TileConfig& c : tile_configs()) {
    Plan plan = make_plan(512, 2048, 6144, c, 1);
    EXPECT_EQ(plan.programmatic, launches_programmatically(c)) << c.name();
    EXPECT_EQ(launch_override(plan), "") << c.name();
    plan.programmatic = !plan.programmatic;
    EXPECT_EQ(launch_override(plan), plan.programmatic ? ", launched programmatically" : ", launched plainly")
        << c.name();
  }
}

TEST(PrefillPolicy, PicksTheSweepsBestPlanOnTheH200) {
  // CTAs the occupancy API let run at once on the H200 in clusters of `split`, as the datasheet
  // entry keeps them.
  const DeviceSpec* spec = find_device_spec("H200 SXM");
  ASSERT_NE(spec, nullptr);
  const ConcurrentCtas h200 = datasheet_concurrent_ctas(*spec);
  ASSERT_TRUE(h200);
  const TileConfig& m128 = tile_configs()[1];
  EXPECT_EQ(h200(m128, 1), 132);
  EXPECT_EQ(h200(m128, 3), 117);  // clusters of 3 leave SMs of each GPC idle
  EXPECT_EQ(h200(m128, 8), 120);
  struct Case {
    std::int64_t m, n, k;
    int block_m, split;
    bool persistent;
    SplitReduction reduction = SplitReduction::cluster;
    int copy_group = 1;
    int weight_rows = kBlockN;
  };
  constexpr SplitReduction kCluster = SplitReduction::cluster;
  // The sweep's fastest plan at each point (run 14, graph us, cold inputs; M <= 64: run 16, the
  // narrow tiles launched programmatically as the backends do; M = 384-1536: runs 33-34, the
  // persistent kernels halving their last waves, the m192 tiles; the workspace reductions: run 38,
  // where at 16 x 2048 x 6144 the policy's split 8 took 8.83 us and split 7 8.48, and run 64 after
  // they became bulk copies; m128 with 3 K blocks per copy: runs 44-45, marked "within 1%" where
  // it ties the plan before it).
  for (const Case c : {// 16.62 us before copy groups; run 44 at M = 128, the same 32 K blocks per CTA:
                       // 15.03 against 15.70 (G3); run 161 (an H100): the 10-stage G2 14.31 against G3's
                       // 14.84
                       Case{256, 6144, 2048, 128, 1, false, kCluster, 2},
                       Case{256, 4096, 6144, 128, 2, false, kCluster, 3},  // 25.30 before copy groups
                       // 12.46 (copy groups: 12.95); run 161 (an H100): G2 12.89, the plain m128 12.84
                       Case{128, 2048, 6144, 128, 6, false, kCluster, 2},
                       // Run 119 through `fp4gap gemm` (H200): m64 G4 split 2 16.28 us against m128 G3
                       // split 3 17.35 (run 113, an H100: 16.36 / 17.39; runs 44-54 predate the band's
                       // TMA store, run 105)
                       // (run 150, an H100: 16.84 against m128 G3 split 3's 17.75 with its bands through TMA)
                       Case{128, 4096, 6144, 64, 2, false, kCluster, 4},
                       Case{512, 2048, 6144, 128, 2, false, kCluster, 3},  // 23.80 (plain: 24.81)
                       // Run 119 through `fp4gap gemm` (H200, two rounds): m128 G3 unsplit 37.0 / 37.2
                       // against m256 split 2's 38.6 / 38.7 (run 111's sweep had m256 split 2 ahead)
                       Case{512, 4096, 6144, 128, 1, false, kCluster, 3},
                       Case{1024, 2048, 6144, 128, 1, false, kCluster, 3},
                       // Run 48: 65.66 (persistent, one tile per CTA: 67.10; run 45: 66.20 / 68.35); run
                       // 204 (an H100): 65.90 against the wide m176's 68.25 (132 tiles, 32 rows idle)
                       Case{1024, 4096, 6144, 256, 1, false},
                       // run 48: m192 20.40 (persistent: 21.48); run 167 the wide m112, 128 tiles; since
                       // run 178 (an H100) the wide m96, the same 128 tiles without idle rows: 17.93 /
                       // 17.90 us against m112's 19.42 / 19.40 and m192's 19.57 / 19.69
                       Case{384, 6144, 2048, 96, 1, false, kCluster, 2, kWideWeightRows},
                       Case{768, 4096, 6144, 192, 1, false, kCluster, 2},  // run 48: 54.51 (persistent: 56.60)
                       Case{4096, 4096, 6144, 256, 1, true},    // 301.61
                       // Run 112, replayed for 1 s at the power cap: 155.94 (6-stage: 167.96), 80.56
                       // (83.70); in the graph burst 150.97 (141.77), 72.05 (72.29)
                       Case{4096, 6144, 2048, 256, 1, true},
                       Case{2048, 6144, 2048, 256, 1, true},
                       Case{384, 4096, 6144, 192, 2, false, kCluster, 2},  // 32.77
                       Case{768, 2048, 6144, 192, 2, false, kCluster, 2},  // 32.63
                       // Run 202 (an H100): the wide m192 in one wave (128 tiles), padded to 36 K
                       // blocks, 31.03 against the persistent m192's 33.12 (192 tiles, 60 halved);
                       // run 203 (an H200) at a runtime stage, 32 blocks: 28.12 (cuBLAS BF16 27.0)
                       Case{768, 6144, 2048, 192, 1, false, kCluster, 2, kWideWeightRows},
                       Case{1024, 6144, 2048, 256, 1, true},    // 37.81 (60 of 192 tiles halved)
                       // Run 34: the persistent m256 112.17 (60 of 192 tiles halved); since run 188 (an
                       // H100) m192 G2, the same 256 tiles as at M = 1400, where it took 99.77 / 101.10
                       // against the persistent m256's 112.76 / 107.43
                       Case{1536, 4096, 6144, 192, 1, false, kCluster, 2},
                       Case{1536, 6144, 2048, 192, 1, true, kCluster, 2},  // 56.07 (one K block per copy)
                       // M = 48-128: runs 53-54, m64 with 4 K blocks per copy beside the others
                       // (the best plan of the runner-up family in brackets).
                       // Run 64 (the workspace reduction through bulk copies): 12.46 (cluster
                       // split 3: 13.74; plain m64, workspace split 4: 13.56); M = 48 through
                       // `fp4gap gemm` in the same run: 12.45 against 13.95 for cluster split 3.
                       Case{64, 4096, 6144, 64, 4, false, SplitReduction::workspace, 4},
                       Case{48, 4096, 6144, 64, 4, false, SplitReduction::workspace, 4},
                       Case{64, 2048, 6144, 64, 6, false},               // 9.90 (m64 G4: 10.11)
                       // Runs 53-54: plain m64 9.14 (G4 9.17); run 174 (an H100, bands through L2,
                       // which the plain m64's entry is not charged for) at M = 48: G4 8.44, plain 8.77
                       Case{64, 6144, 2048, 64, 2, false, kCluster, 4},
                       // M = 96: runs 145-146's `fp4gap tune` (an H100), m96 G4 (the runner-up in brackets);
                       // before it, run 119 (H200) ran m64 G4 split 2 at 16.61 and m128 split 2 at 11.97
                       Case{96, 4096, 6144, 96, 3, false, kCluster, 4},  // 15.77 (m64 G4 split 2: 16.58)
                       Case{96, 6144, 2048, 96, 2, false, kCluster, 4},  // 10.87 (m64 G4: 11.18)
                       Case{96, 2048, 6144, 96, 6, false, kCluster, 4},  // 11.64 (m128 split 6: 12.73)
                       // 11.91 (12.18); run 161 (an H100): G2 11.91 against the plain m128's 12.04
                       Case{128, 6144, 2048, 128, 2, false, kCluster, 2},
                       // Just past a multiple of 128 rows: run 138's `fp4gap tune` (an H100), m144 G3
                       // against the runner-up in brackets; the m128 G3 row of tiles that M = 520
                       // adds is a second wave at N = 4096
                       Case{520, 4096, 6144, 144, 1, false, kCluster, 3},   // 41.99 (m192: 49.59)
                       Case{264, 4096, 6144, 144, 2, false, kCluster, 3},   // 26.02 (m192 split 2: 30.77)
                       // 83.48 (m192 split 2: 93.18); since run 202 the wide m192 in one wave (6 rows of
                       // 22 tiles; at M = 1152, an H100: 73.83 against m144's 81.09); since run 204 (an
                       // H100) the wide m176, the same 132 tiles with fewer idle rows: 68.49 against
                       // m192's 72.86
                       Case{1040, 4096, 6144, 176, 1, false, kCluster, 2, kWideWeightRows},
                       // Run 204 (an H100): m176n192 25.85 against m192n192's 27.77 (4 rows of 32 tiles);
                       // seed M = 2112 (12 rows of 11) 69.64 against 72.83
                       Case{672, 6144, 2048, 176, 1, false, kCluster, 2, kWideWeightRows},
                       Case{2112, 2048, 6144, 176, 1, false, kCluster, 2, kWideWeightRows},
                       Case{264, 6144, 2048, 144, 1, false, kCluster, 3},   // 16.39 (m192: 19.65)
                       Case{520, 2048, 6144, 144, 2, false, kCluster, 3},   // 25.93 (m192 split 2: 30.47)
                       // Run 138: m144 split 3 18.92 (m128 G3 split 2: 22.07); run 150 (an H100): 18.56
                       // against m80 split 2's 19.34 with its bands through TMA; since split 2 exchanges
                       // through L2, run 174 (an H100) at M = 272: m80 split 2 18.44, m144 split 3 18.74
                       Case{264, 2048, 6144, 80, 2, false, kCluster, 4},
                       // 29.30 (m144: 31.60); run 162 at M = 576: G2 29.12 against G3's 29.44. Since run
                       // 189 (an H100) the persistent m128 G2 at M = 520-640: M = 640 26.05 / 25.82 us
                       // against the 10-stage G2's 28.43 / 28.32. Since runs 202-203 the wide m160 in
                       // one wave (4 rows of 32): at M = 576 25.74 against the persistent m128's 26.57
                       // (an H100, padded to 36 K blocks); 24.00 at a runtime stage (an H200)
                       Case{520, 6144, 2048, 160, 1, false, kCluster, 2, kWideWeightRows},
                       // Run 189: four waves of m128 tiles, persistent 50.86 / 50.66 against the
                       // persistent m192's 55.75 / 55.57
                       Case{1344, 6144, 2048, 128, 1, true, kCluster, 2},
                       // Just past a multiple of 192: runs 145-146's `fp4gap tune` (an H100), m208
                       Case{400, 4096, 6144, 208, 2, false},  // 36.61 (m128 G3: 36.94)
                       Case{800, 4096, 6144, 208, 1, false},  // 60.95 (m256: 62.90)
                       // 22.43 (m256: 23.93); run 167 (an H100): the wide m112 19.62 against m208's 22.59
                       Case{400, 6144, 2048, 112, 1, false, kCluster, 2, kWideWeightRows},
                       // Run 167: the wide m128 19.99 against m256's 24.52 (cuBLAS BF16: 19.7)
                       Case{512, 6144, 2048, 128, 1, false, kCluster, 2, kWideWeightRows},
                       // Just past a multiple of 64: run 139's `fp4gap tune` (an H100), m80 G4 (the
                       // runner-up in brackets); seed M = 72 is the point that set m80's workspace term
                       Case{72, 4096, 6144, 80, 4, false, SplitReduction::workspace, 4},  // 14.42 (split 3: 15.37)
                       Case{72, 6144, 2048, 80, 2, false, kCluster, 4},   // 10.64 (workspace: 11.51)
                       Case{72, 2048, 6144, 80, 6, false, kCluster, 4},   // 11.09 (split 5: 11.63; workspace split 8: 12.05)
                       // run 148: 29.31 (m80: 30.32); run 185 (an H100), 2 K blocks per copy: 26.12 / 26.00
                       // against the one-block m160's 27.56 / 27.58
                       Case{300, 4096, 6144, 160, 2, false, kCluster, 2},
                       Case{300, 2048, 6144, 80, 2, false, kCluster, 4},  // 19.64 (workspace: 20.43)
                       // run 148: m160 19.04 (m192: 19.52); run 178 (an H100): the wide m96 17.76 / 17.51
                       // against m160's 19.02 / 18.95; run 186 (an H100, M = 304): m160 with 2 K blocks
                       // per copy 17.35 against the wide m96's 17.62
                       Case{300, 6144, 2048, 160, 1, false, kCluster, 2},
                       // Run 148's `fp4gap tune` (an H100), m160 (the runner-up in brackets); 2 K
                       // blocks per copy since run 185, 5-9% faster than the one-block m160 at M = 640
                       // and 1280
                       Case{600, 4096, 6144, 160, 1, false, kCluster, 2},   // 49.13 (m192: 50.73)
                       Case{1200, 4096, 6144, 160, 1, false, kCluster, 2},  // 97.37 (m256 persistent: 108.12)
                       Case{600, 2048, 6144, 160, 2, false, kCluster, 2},   // 29.57 (m80: 30.39)
                       Case{1200, 2048, 6144, 160, 1, false, kCluster, 2},  // 49.23 (m192: 49.91)
                       // M = 16, 32: run 52, the one-k-group tiles with 4 K blocks per copy (the
                       // two-k-group tiles' best in the same sweep in brackets).
                       Case{32, 4096, 6144, 32, 4, false, SplitReduction::workspace, 4},  // 11.51 (12.92)
                       Case{32, 6144, 2048, 32, 2, false, kCluster, 4},  // 8.06 (8.96)
                       // Run 64: 8.32, split 7 8.31 (cluster split 6: 8.63)
                       Case{32, 2048, 6144, 32, 8, false, SplitReduction::workspace, 4},
                       Case{16, 4096, 6144, 16, 4, false, SplitReduction::workspace, 4},  // 10.25 (11.43)
                       Case{16, 6144, 2048, 16, 2, false, kCluster, 4},  // 7.56 (8.64)
                       // Run 64: 7.62 (cluster split 6: 8.00)
                       Case{16, 2048, 6144, 16, 8, false, SplitReduction::workspace, 4}}) {
    const Plan p = choose_plan(c.m, c.n, c.k, h200_context(), h200);
    EXPECT_EQ(p.config.block_m, c.block_m) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
    EXPECT_EQ(p.split_k, c.split) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
    EXPECT_EQ(p.reduction, c.reduction) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
    EXPECT_EQ(p.config.persistent, c.persistent) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
    EXPECT_EQ(p.config.copy_group, c.copy_group) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
    EXPECT_EQ(p.config.weight_rows, c.weight_rows) << c.m << "x" << c.n << "x" << c.k << ": " << p.describe();
  }
}

TEST(PrefillPolicy, BehindTheActivationPassNoWorkspaceSplit) {
  const DeviceSpec* spec = find_device_spec("H200 SXM");
  ASSERT_NE(spec, nullptr);
  const DeviceContext device = datasheet_device_context(*spec);
  const ConcurrentCtas h200 = datasheet_concurrent_ctas(*spec);
  const auto is_workspace_split = [](const PlanCandidate& c) {
    return c.split_k > 1 && c.reduction == SplitReduction::workspace;
  };
  // W13 at M = 16 and 32: the policy takes a workspace split; behind the pass, the fastest other.
  for (const std::int64_t m : {16, 32}) {
    const std::vector<PlanCandidate> c = plan_candidates(m, 4096, 6144, device, h200);
    const PlanCandidate* best = best_candidate(c);
    const PlanCandidate* behind = best_candidate_behind_activation_pass(c);
    ASSERT_NE(best, nullptr);
    ASSERT_NE(behind, nullptr);
    EXPECT_TRUE(is_workspace_split(*best)) << best->plan.describe();
    EXPECT_FALSE(is_workspace_split(*behind)) << behind->plan.describe();
    // What W4A4 runs: the pick where its kernel dequantizes the activations, else the one behind.
    EXPECT_EQ(w4a4_plan(best->plan, true, c).describe(), best->plan.describe());
    EXPECT_EQ(w4a4_plan(best->plan, false, c).describe(), behind->plan.describe());
    for (const PlanCandidate& other : c) {
      if (other.status.is_ok() && !is_workspace_split(other)) {
        EXPECT_GE(other.predicted_us, behind->predicted_us) << other.plan.describe() << " at M = " << m;
      }
    }
  }
  // Where the pick is no workspace split, the same candidate.
  const std::vector<PlanCandidate> wide = plan_candidates(512, 2048, 6144, device, h200);
  EXPECT_EQ(best_candidate_behind_activation_pass(wide), best_candidate(wide));
  EXPECT_EQ(best_candidate_behind_activation_pass({}), nullptr);
  const Plan seed = best_candidate(wide)->plan;
  EXPECT_EQ(w4a4_plan(seed, false, wide).describe(), seed.describe());
  EXPECT_EQ(w4a4_plan(seed, false, {}).describe(), seed.describe());  // nothing else ok: the pick
}

TEST(PrefillPolicy, PolicyPlanIsWhatEachFormatRunsWithoutATuneCache) {
  const DeviceSpec* spec = find_device_spec("H200 SXM");
  ASSERT_NE(spec, nullptr);
  const DeviceContext device = datasheet_device_context(*spec);
  const ConcurrentCtas h200 = datasheet_concurrent_ctas(*spec);
  const std::int64_t smem = dynamic_smem_limit(device.smem_per_block_optin);
  // W13 at M = 16: a workspace split whose CTAs would dequantize 16 x 24 row-blocks (more than
  // kActivationDequantMaxRowBlocks): W4A4 runs behind the pass, without the workspace split.
  const std::vector<PlanCandidate> w13 = plan_candidates(16, 4096, 6144, device, h200);
  const PolicyPlan w13_w4a16 = policy_plan(w13, false, 6144, smem, device);
  const PolicyPlan w13_w4a4 = policy_plan(w13, true, 6144, smem, device);
  EXPECT_EQ(w13_w4a16.plan.describe(), best_candidate(w13)->plan.describe());
  EXPECT_FALSE(w13_w4a16.w4a4_in_kernel);
  EXPECT_EQ(w13_w4a4.plan.describe(), best_candidate_behind_activation_pass(w13)->plan.describe());
  EXPECT_FALSE(w13_w4a4.w4a4_in_kernel);
  // The seed shape at M = 16: m16 split 8, 16 x 12 row-blocks per CTA, dequantized in the kernel
  // where its shared memory allows, else behind the pass.
  const std::vector<PlanCandidate> seed = plan_candidates(16, 2048, 6144, device, h200);
  const PolicyPlan in_kernel = policy_plan(seed, true, 6144, smem, device);
  EXPECT_TRUE(in_kernel.w4a4_in_kernel) << in_kernel.plan.describe();
  EXPECT_EQ(in_kernel.plan.describe(), best_candidate(seed)->plan.describe());
  const PolicyPlan no_room = policy_plan(seed, true, 6144, 0, device);
  EXPECT_FALSE(no_room.w4a4_in_kernel);
  EXPECT_EQ(no_room.plan.describe(), best_candidate_behind_activation_pass(seed)->plan.describe());
  EXPECT_THROW(policy_plan({}, false, 6144, smem, device), InvalidArgument);
}

TEST(PrefillPolicy, DatasheetOccupancyOnlyWhereMeasured) {
  const DeviceSpec* b200 = find_device_spec("B200");
  ASSERT_NE(b200, nullptr);
  EXPECT_FALSE(datasheet_concurrent_ctas(*b200));  // nobody measured it: plan_candidates uses the bound
  // Measured on an H200 (run 26) and an H100 SXM (run 154).
  for (const char* name : {"H200 SXM", "H100 SXM"}) {
    const DeviceSpec* hopper = find_device_spec(name);
    ASSERT_NE(hopper, nullptr) << name;
    ASSERT_EQ(hopper->cluster_ctas_at_once.size(), static_cast<std::size_t>(kMaxSplitK)) << name;
    const ConcurrentCtas measured = datasheet_concurrent_ctas(*hopper);
    ASSERT_TRUE(measured) << name;
    for (int split = 1; split <= kMaxSplitK; ++split) {
      const int ctas = hopper->cluster_ctas_at_once[static_cast<std::size_t>(split - 1)];
      EXPECT_EQ(ctas % split, 0) << name << " split " << split;  // whole clusters
      EXPECT_LE(ctas, default_concurrent_ctas(datasheet_device_context(*hopper), split)) << name << " split " << split;
      EXPECT_EQ(measured(tile_configs()[0], split), ctas) << name << " split " << split;
    }
  }
}

TEST(PrefillPolicy, CandidatesCoverEveryPlanAndSayWhyOthersCannotRun) {
  // 145,000 bytes per block: only the m32 (105,664) and m16 (81,088) tiles fit; clusters of 3
  // cannot run at all.
  DeviceContext small = h200_context();
  small.smem_per_block_optin = 145000;
  const ConcurrentCtas no_threes = [](const TileConfig&, int split) { return split == 3 ? 0 : 132 / split * split; };
  const std::vector<PlanCandidate> c = plan_candidates(512, 2048, 6144, small, no_threes);
  // In tile_configs() order: m256, m128, m64, the persistent m256, the two m192 configs and m128
  // with copy groups unfit, then m32 and m16 x split 1, and splits 2..8 each with a cluster and
  // then a workspace reduction, then m64 with copy groups, m144, m80, m96, m208, m160, the
  // 10-stage m128, the three 8-stage wide tiles, the persistent m128 and the three 6-stage wide
  // tiles unfit.
  constexpr std::size_t kPerConfig = 1 + 2 * (kMaxSplitK - 1);
  constexpr std::size_t kUnfit[] = {0, 1, 2, 3, 4, 5, 6, 7 + 2 * kPerConfig, 8 + 2 * kPerConfig, 9 + 2 * kPerConfig,
                                    10 + 2 * kPerConfig, 11 + 2 * kPerConfig, 12 + 2 * kPerConfig,
                                    13 + 2 * kPerConfig, 14 + 2 * kPerConfig, 15 + 2 * kPerConfig,
                                    16 + 2 * kPerConfig, 17 + 2 * kPerConfig, 18 + 2 * kPerConfig,
                                    19 + 2 * kPerConfig, 20 + 2 * kPerConfig};
  ASSERT_EQ(c.size(), 21u + 2 * kPerConfig);
  for (const std::size_t i : kUnfit) {
    EXPECT_EQ(c[i].status.code, StatusCode::not_supported) << c[i].config.name();
    EXPECT_NE(c[i].status.reason.find(std::to_string(c[i].config.smem_bytes())), std::string::npos) << c[i].status.reason;
    EXPECT_NE(c[i].status.reason.find("145000"), std::string::npos) << c[i].status.reason;
  }
  const PlanCandidate* best = nullptr;
  for (std::size_t i = 7; i < 7 + 2 * kPerConfig; ++i) {
    const std::size_t j = (i - 7) % kPerConfig;  // 0: split 1; then (split 2, cluster), (split 2, workspace), ...
    EXPECT_EQ(c[i].config.block_m, i < 7 + kPerConfig ? 32 : 16);
    EXPECT_EQ(c[i].config.copy_group, 4);
    EXPECT_EQ(c[i].split_k, j == 0 ? 1 : static_cast<int>((j + 1) / 2) + 1);
    const SplitReduction reduction = j > 0 && j % 2 == 0 ? SplitReduction::workspace : SplitReduction::cluster;
    EXPECT_EQ(c[i].reduction, reduction);
    if (c[i].split_k == 3 && reduction == SplitReduction::cluster) {
      EXPECT_EQ(c[i].status.code, StatusCode::not_supported);
      EXPECT_NE(c[i].status.reason.find("a cluster of 3 CTAs"), std::string::npos) << c[i].status.reason;
      continue;
    }
    ASSERT_TRUE(c[i].status.is_ok()) << c[i].status.reason;
    EXPECT_EQ(c[i].plan.reduction, reduction);
    EXPECT_EQ(c[i].plan.ctas(), 512 / c[i].config.block_m * 16 * c[i].split_k);  // m-tiles x 16 n-tiles of 128
    // A workspace split forms no cluster: every SM can hold one of its CTAs.
    if (reduction == SplitReduction::workspace) {
      EXPECT_EQ(c[i].concurrent_ctas, 132);
    }
    EXPECT_EQ(c[i].waves, (c[i].plan.ctas() + c[i].concurrent_ctas - 1) / c[i].concurrent_ctas);
    EXPECT_GT(c[i].predicted_us, 0.0);
    if (best == nullptr || c[i].predicted_us < best->predicted_us) best = &c[i];
  }
  ASSERT_NE(best, nullptr);
  const Plan chosen = choose_plan(512, 2048, 6144, small, no_threes);
  EXPECT_EQ(chosen.describe(), best->plan.describe());
}

// A wide tile covers 192 weight rows (three consumer warpgroups) and runs unsplit: its plans count
// weight tiles of 192, make_plan refuses a split naming the rule, and the policy weighs split 1 only.
TEST(PrefillPlan, WideTilesCover192WeightRowsAndRunUnsplit) {
  const TileConfig& wide = tile_configs()[16];
  ASSERT_EQ(wide.weight_rows, kWideWeightRows) << wide.name();
  EXPECT_EQ(wide.consumer_warpgroups(), 3);
  EXPECT_EQ(wide.stage_bytes(), 128 * 128 + 2 * kChunkBytes);
  const Plan p = make_plan(500, 6144 + 100, 2048, wide, 1);
  EXPECT_EQ(p.n_tiles, 33);  // 32 whole tiles and one of 100 rows
  EXPECT_EQ(p.m_tiles, 4);
  EXPECT_EQ(p.ctas(), 132);
  EXPECT_FALSE(wide.workspace_split());
  EXPECT_FALSE(wide.dequantizes_activations());
  try {
    static_cast<void>(make_plan(500, 6144, 2048, wide, 2));
    ADD_FAILURE() << wide.name() << " accepted split 2";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("runs unsplit: split_k = 2"), std::string::npos) << e.what();
  }
  int wide_candidates = 0;
  for (const PlanCandidate& c : plan_candidates(512, 6144, 2048, h200_context())) {
    if (c.config.weight_rows != kWideWeightRows) continue;
    ++wide_candidates;
    EXPECT_EQ(c.split_k, 1) << c.config.name();
  }
  EXPECT_EQ(wide_candidates, 6);
  // Offered in one wave only: at M = 1536 the m192 wide tiles are 8 rows of 32.
  int refused = 0;
  for (const PlanCandidate& c : plan_candidates(1536, 6144, 2048, h200_context())) {
    if (c.config.weight_rows != kWideWeightRows) continue;
    ++refused;
    EXPECT_EQ(c.status.code, StatusCode::not_supported) << c.config.name();
    if (c.config.block_m == 192) {
      EXPECT_NE(c.status.reason.find("wide: its 256 tiles need 2 waves of 132 CTAs; the wide tiles run one"),
                std::string::npos)
          << c.status.reason;
    }
  }
  EXPECT_EQ(refused, 6);
}

// Every weight row below N that a wide tile covers is read from a chunk it copies, at the row the
// packed layout puts it (chunk nt holds rows 128 nt .. 128 nt + 127, warpgroup half h of it rows
// 64 h ..), exactly once; the chunks it skips hold no row below N.
TEST(PrefillWeights, WideTilesReadEveryRowBelowNFromAChunkTheyCopy) {
  for (int n = 1; n <= 1200; ++n) {
    std::vector<int> reads(static_cast<std::size_t>(n), 0);
    const int tiles = (n + kWideWeightRows - 1) / kWideWeightRows;
    for (int tile = 0; tile < tiles; ++tile) {
      const WideTileChunks chunks = wide_tile_chunks(tile, n);
      ASSERT_GE(chunks.count, 1) << "N = " << n << ", tile " << tile;
      ASSERT_LE(chunks.count, 2) << "N = " << n << ", tile " << tile;
      ASSERT_LT(chunks.first + chunks.count - 1, (n + kBlockN - 1) / kBlockN) << "N = " << n << ", tile " << tile;
      for (int w = 0; w < 3; ++w) {
        const int chunk = wide_slice_chunk(tile, w), half = wide_slice_half(tile, w);
        const std::int64_t row0 = kBlockN * static_cast<std::int64_t>(chunks.first + chunk) + 64 * half;
        ASSERT_EQ(row0, static_cast<std::int64_t>(kWideWeightRows) * tile + 64 * w) << "N = " << n << ", tile " << tile;
        if (row0 >= n) continue;  // past N: never stored
        ASSERT_LT(chunk, chunks.count) << "N = " << n << ", tile " << tile << ", warpgroup " << w;
        for (std::int64_t r = row0; r < std::min<std::int64_t>(row0 + 64, n); ++r) ++reads[static_cast<std::size_t>(r)];
      }
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(reads[static_cast<std::size_t>(r)], 1) << "N = " << n << ", row " << r;
  }
}

TEST(PrefillPlan, WorkspaceReductionNeedsANarrowTileAndSaysHowManyBytes) {
  const TileConfig m16 = tile_configs()[8];
  ASSERT_EQ(m16.block_m, 16);
  // 300 x 200: 19 x 2 tiles, split 3: 38 x 3 partial tiles of 16 x 128 floats, then 38 counters.
  const Plan p = make_plan(300, 200, 576, m16, 3, SplitReduction::workspace);
  EXPECT_EQ(p.workspace_bytes(), 38 * 3 * 16 * kBlockN * 4 + 38 * 4);
  EXPECT_EQ(p.cluster_size(), 1);
  EXPECT_EQ(p.describe(), m16.name() + ", split-k 3 (partials in global memory)");
  const Plan clustered = make_plan(300, 200, 576, m16, 3);
  EXPECT_EQ(clustered.workspace_bytes(), 0);
  EXPECT_EQ(clustered.cluster_size(), 3);
  // A persistent plan needs one only from 64 K blocks, where a last wave splits along K: a partial
  // tile and a counter per pair, for as many pairs as the tiles allow (persistent_pairs_bound).
  const TileConfig m256p = tile_configs()[3];
  ASSERT_TRUE(m256p.persistent);
  EXPECT_EQ(make_plan(1024, 6144, 4032, m256p, 1).workspace_bytes(), 0);  // 63 K blocks
  EXPECT_EQ(make_plan(1024, 6144, 4096, m256p, 1).workspace_bytes(), 64 * (256 * kBlockN * 4 + 4));  // 192 tiles
  EXPECT_EQ(make_plan(4096, 6144, 4096, m256p, 1).workspace_bytes(), 128 * (256 * kBlockN * 4 + 4));  // 768 tiles
  // A cluster split of 2 exchanges its bands through one fp32 tile per output tile.
  const Plan pair = make_plan(300, 200, 576, m16, 2);
  EXPECT_EQ(pair.workspace_bytes(), 38 * 16 * kBlockN * 4);
  EXPECT_EQ(pair.cluster_size(), 2);
  EXPECT_EQ(make_plan(300, 200, 576, m16, 1, SplitReduction::workspace).reduction, SplitReduction::cluster);
  for (const TileConfig& c : tile_configs()) {
    if (c.workspace_split()) continue;
    try {
      static_cast<void>(make_plan(300, 200, 576, c, 2, SplitReduction::workspace));
      ADD_FAILURE() << c.name() << " accepted a workspace reduction";
    } catch (const InvalidArgument& e) {
      // A persistent config or a wide tile refuses any split.
      const std::string rule = c.splits() ? "at most 64 rows" : "runs unsplit: split_k = 2";
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    }
  }
}

TEST(PrefillPolicy, RespectsClusterOccupancy) {
  // Pretend clusters of more than 2 CTAs cannot run at all, and pairs only 64 at a time.
  const ConcurrentCtas limited = [](const TileConfig&, int split) { return split == 1 ? 132 : split == 2 ? 64 : 0; };
  const Plan p = choose_plan(512, 2048, 6144, h200_context(), limited);
  EXPECT_LE(p.split_k, 2) << p.describe();
  EXPECT_LE(p.ctas(), p.split_k == 1 ? 132 : 64) << p.describe();
}

TEST(PrefillPolicy, NeverSplitsBeyondTheKBlocks) {
  const Plan p = choose_plan(128, 128, 128, h200_context());  // 2 K blocks
  EXPECT_LE(p.split_k, 2) << p.describe();
}

TEST(PrefillPolicy, NoFeasibleConfigurationIsAnError) {
  DeviceContext tiny = h200_context();
  tiny.smem_per_block_optin = 49152;
  try {
    choose_plan(512, 512, 512, tiny);
    FAIL() << "a 48 KB device got a plan";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("49152"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4gap::prefill
