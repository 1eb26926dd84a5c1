// The kernel-family dispatch (include/fp4gap/dispatch.hpp): plain C++, no GPU.
#include <gtest/gtest.h>

#include <string>

#include "fp4gap/dispatch.hpp"

namespace fp4gap {
namespace {

const Status kOk = Status::ok();

TEST(Dispatch, DecodeUpToItsLimitThenPrefill) {
  for (const std::int64_t limit : {kW4A16DecodeMaxM, kW4A4DecodeMaxM}) {
    for (const std::int64_t m : {std::int64_t{1}, std::int64_t{2}, limit - 1, limit}) {
      const FamilyChoice c = choose_kernel_family(m, limit, kOk, kOk);
      EXPECT_TRUE(c.status.is_ok()) << m;
      EXPECT_EQ(c.family, KernelFamily::decode) << "M = " << m << ", limit " << limit;
    }
    for (const std::int64_t m : {limit + 1, std::int64_t{32}, std::int64_t{64}, std::int64_t{65}, std::int64_t{4096}}) {
      const FamilyChoice c = choose_kernel_family(m, limit, kOk, kOk);
      EXPECT_TRUE(c.status.is_ok()) << m;
      EXPECT_EQ(c.family, KernelFamily::prefill) << "M = " << m << ", limit " << limit;
    }
  }
}

// The boundary moves down for weights over kDecodeMaxMWeightElements, for both maths.
TEST(Dispatch, LargerWeightsTakeThePrefillKernelFromSmallerM) {
  for (const bool w4a4 : {false, true}) {
    const std::int64_t at_limit = decode_max_m(w4a4, 6144, 7168), above = decode_max_m(w4a4, 6144, 7168 + 64);
    EXPECT_EQ(at_limit, w4a4 ? kW4A4DecodeMaxM : kW4A16DecodeMaxM);
    EXPECT_EQ(above, w4a4 ? kW4A4DecodeMaxMLargeWeight : kW4A16DecodeMaxMLargeWeight);
    EXPECT_LT(above, at_limit);
    EXPECT_EQ(decode_max_m(w4a4, 8192, 8192), above);
    EXPECT_EQ(decode_max_m(w4a4, 1, 1), at_limit);
    EXPECT_EQ(decode_max_m(w4a4, 4096, 7168), at_limit);  // DeepSeek-V3's W13 (run 97)
  }
}

TEST(Dispatch, FallsBackToWhicheverFamilyServesTheShape) {
  const Status no_wgmma = Status::not_supported("needs wgmma (sm_90a): RTX PRO 6000 is compute capability 12.0");
  const Status m_too_large = Status::not_supported("decode kernel serves M <= 64: M = 65");
  EXPECT_EQ(choose_kernel_family(48, kW4A16DecodeMaxM, kOk, no_wgmma).family, KernelFamily::decode);
  EXPECT_TRUE(choose_kernel_family(48, kW4A16DecodeMaxM, kOk, no_wgmma).status.is_ok());
  EXPECT_EQ(choose_kernel_family(8, kW4A16DecodeMaxM, m_too_large, kOk).family, KernelFamily::prefill);
  const FamilyChoice neither = choose_kernel_family(65, kW4A16DecodeMaxM, m_too_large, no_wgmma);
  EXPECT_EQ(neither.status.code, StatusCode::not_supported);
  EXPECT_NE(neither.status.reason.find("decode: decode kernel serves M <= 64"), std::string::npos) << neither.status.reason;
  EXPECT_NE(neither.status.reason.find("prefill: needs wgmma"), std::string::npos) << neither.status.reason;
}

// A family that fp4gap tune measured faster for the problem decides where both serve it, on either
// side of the boundary; it cannot make a family serve a shape it does not.
TEST(Dispatch, AMeasuredFamilyDecidesWhereBothServe) {
  EXPECT_EQ(choose_kernel_family(20, kW4A16DecodeMaxM, kOk, kOk, KernelFamily::decode).family, KernelFamily::decode);
  EXPECT_EQ(choose_kernel_family(9, kW4A16DecodeMaxM, kOk, kOk, KernelFamily::prefill).family, KernelFamily::prefill);
  const Status no_wgmma = Status::not_supported("needs wgmma (sm_90a)");
  const Status m_too_large = Status::not_supported("decode kernel serves M <= 64: M = 65");
  EXPECT_EQ(choose_kernel_family(9, kW4A16DecodeMaxM, kOk, no_wgmma, KernelFamily::prefill).family,
            KernelFamily::decode);
  EXPECT_EQ(choose_kernel_family(65, kW4A16DecodeMaxM, m_too_large, kOk, KernelFamily::decode).family,
            KernelFamily::prefill);
  const Status bad_k = Status::invalid_problem("K % 32 != 0");
  EXPECT_EQ(choose_kernel_family(9, kW4A16DecodeMaxM, bad_k, bad_k, KernelFamily::prefill).status.code,
            StatusCode::invalid_problem);
}

TEST(Dispatch, AnInvalidProblemStaysInvalid) {
  const Status bad_k = Status::invalid_problem("K % 32 != 0: M = 4, N = 64, K = 48");
  const FamilyChoice c = choose_kernel_family(4, kW4A16DecodeMaxM, bad_k, bad_k);
  EXPECT_EQ(c.status.code, StatusCode::invalid_problem);
  EXPECT_EQ(c.status.reason, bad_k.reason);
  EXPECT_EQ(choose_kernel_family(4, kW4A16DecodeMaxM, kOk, bad_k).status.code, StatusCode::invalid_problem);
}

}  // namespace
}  // namespace fp4gap
