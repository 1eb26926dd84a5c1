#include <gtest/gtest.h>

#include <cmath>

#include "fp4gap/device_specs.hpp"

namespace fp4gap {
namespace {

const DeviceSpec* named(std::string_view n) {
  for (const DeviceSpec& s : device_specs()) {
    if (s.name == n) return &s;
  }
  return nullptr;
}

TEST(DeviceSpecs, LookupByCudaNames) {
  EXPECT_EQ(find_device_spec("NVIDIA H200"), named("H200 SXM"));
  EXPECT_EQ(find_device_spec("NVIDIA H100 80GB HBM3"), named("H100 SXM"));
  EXPECT_EQ(find_device_spec("NVIDIA B200"), named("B200"));
  EXPECT_EQ(find_device_spec("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"), named("RTX PRO 6000 Blackwell"));
  EXPECT_EQ(find_device_spec("NVIDIA GeForce RTX 5090"), named("RTX 5090"));
  EXPECT_EQ(find_device_spec("h200 sxm"), named("H200 SXM"));  // spec names, any case
  EXPECT_NE(named("H200 SXM"), nullptr);
}

TEST(DeviceSpecs, VariantsWithOtherFiguresDoNotMatch) {
  EXPECT_EQ(find_device_spec("NVIDIA H100 PCIe"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA H100 NVL"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA H200 NVL"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA GB200"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA GeForce RTX 5090 Laptop GPU"), nullptr);
  EXPECT_EQ(find_device_spec("NVIDIA A100-SXM4-80GB"), nullptr);
  EXPECT_EQ(find_device_spec(""), nullptr);
}

TEST(DeviceSpecs, HopperHasNoFp4AndBlackwellDoes) {
  for (std::string_view n : {"H100 SXM", "H200 SXM"}) {
    const DeviceSpec* s = named(n);
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(s->has_fp4_tensor_cores);
    EXPECT_FALSE(s->fp4_dense_tflops.has_value()) << n;
    EXPECT_EQ(s->smem_per_block_optin_bytes, 227 * 1024);
    EXPECT_EQ(s->sm_count, 132);
  }
  for (std::string_view n : {"B200", "RTX PRO 6000 Blackwell", "RTX 5090"}) {
    const DeviceSpec* s = named(n);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->has_fp4_tensor_cores);
    ASSERT_TRUE(s->fp4_dense_tflops.has_value()) << n;
    EXPECT_GT(*s->fp4_dense_tflops, *s->fp8_dense_tflops) << n;
  }
  EXPECT_EQ(named("RTX PRO 6000 Blackwell")->smem_per_block_optin_bytes, 101376);  // 99 KB
  EXPECT_EQ(named("RTX PRO 6000 Blackwell")->sm_count, 188);
}

// Internal consistency of the table: every listed GPU runs FP8 at twice its BF16 rate.
TEST(DeviceSpecs, EveryEntryIsCompleteAndConsistent) {
  ASSERT_EQ(device_specs().size(), 5u);
  for (const DeviceSpec& s : device_specs()) {
    EXPECT_FALSE(s.sources.empty()) << s.name;
    ASSERT_TRUE(s.bf16_dense_tflops && s.fp8_dense_tflops && s.memory_tb_per_s && s.sm_count) << s.name;
    EXPECT_NEAR(*s.fp8_dense_tflops / *s.bf16_dense_tflops, 2.0, 0.01) << s.name;
    EXPECT_GT(*s.memory_tb_per_s, 1.0) << s.name;
    EXPECT_LT(*s.memory_tb_per_s, 10.0) << s.name;
  }
}

TEST(DeviceSpecs, DatasheetDeviceContextForPlanningWithoutAGpu) {
  const DeviceContext h200 = datasheet_device_context(*find_device_spec("H200 SXM"));
  EXPECT_EQ(h200.name, "H200 SXM (datasheet)");
  EXPECT_FALSE(h200.available);
  EXPECT_EQ(h200.sm_count, 132);
  EXPECT_EQ(h200.smem_per_block_optin, 232448);
  EXPECT_EQ(h200.cc_major, 9);
  EXPECT_EQ(h200.cc_minor, 0);
  const DeviceContext rtx = datasheet_device_context(*find_device_spec("RTX 5090"));
  EXPECT_EQ(rtx.cc_major, 12);
  EXPECT_EQ(rtx.cc_minor, 0);
  EXPECT_EQ(rtx.smem_per_block_optin, 101376);
  const DeviceContext b200 = datasheet_device_context(*find_device_spec("B200"));
  EXPECT_EQ(b200.cc_major, 10);
  EXPECT_EQ(b200.sm_count, 148);
}

TEST(DeviceSpecs, DatasheetCeilings) {
  const auto h200 = datasheet_ceilings(*named("H200 SXM"));
  ASSERT_TRUE(h200.has_value());
  EXPECT_DOUBLE_EQ(h200->memory_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(h200->bf16_flops_per_s, 989.5e12);
  EXPECT_DOUBLE_EQ(h200->fp8_flops_per_s, 1979e12);
  EXPECT_EQ(h200->fp4_flops_per_s, 0.0);
  EXPECT_EQ(h200->source, "datasheet H200 SXM");
  const auto b200 = datasheet_ceilings(*named("B200"));
  ASSERT_TRUE(b200.has_value());
  EXPECT_DOUBLE_EQ(b200->fp4_flops_per_s, 9000e12);
  DeviceSpec partial = *named("B200");
  partial.memory_tb_per_s.reset();
  EXPECT_FALSE(datasheet_ceilings(partial).has_value());
}

}  // namespace
}  // namespace fp4gap
