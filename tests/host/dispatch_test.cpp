// The kernel-family dispatch (include/fp4gap/dispatch.hpp): plain C++, no GPU.
#include <gtest/gtest.h>

#include <string>

#include "fp4gap/dispatch.hpp"

namespace fp4gap {
namespace {

const Status kOk = Status::ok();

TEST(Dispatch, DecodeUpToItsLimitThenPrefill) {
  for (const std::int64_t m : {1, 2, 15, 16}) {
    const FamilyChoice c = choose_kernel_family(m, kOk, kOk);
    EXPECT_TRUE(c.status.is_ok()) << m;
    EXPECT_EQ(c.family, KernelFamily::decode) << "M = " << m;
  }
  for (const std::int64_t m : {17, 32, 64, 65, 4096}) {
    const FamilyChoice c = choose_kernel_family(m, kOk, kOk);
    EXPECT_TRUE(c.status.is_ok()) << m;
    EXPECT_EQ(c.family, KernelFamily::prefill) << "M = " << m;
  }
}

TEST(Dispatch, FallsBackToWhicheverFamilyServesTheShape) {
  const Status no_wgmma = Status::not_supported("needs wgmma (sm_90a): RTX PRO 6000 is compute capability 12.0");
  const Status m_too_large = Status::not_supported("decode kernel serves M <= 64: M = 65");
  EXPECT_EQ(choose_kernel_family(48, kOk, no_wgmma).family, KernelFamily::decode);
  EXPECT_TRUE(choose_kernel_family(48, kOk, no_wgmma).status.is_ok());
  EXPECT_EQ(choose_kernel_family(8, m_too_large, kOk).family, KernelFamily::prefill);
  const FamilyChoice neither = choose_kernel_family(65, m_too_large, no_wgmma);
  EXPECT_EQ(neither.status.code, StatusCode::not_supported);
  EXPECT_NE(neither.status.reason.find("decode: decode kernel serves M <= 64"), std::string::npos) << neither.status.reason;
  EXPECT_NE(neither.status.reason.find("prefill: needs wgmma"), std::string::npos) << neither.status.reason;
}

TEST(Dispatch, AnInvalidProblemStaysInvalid) {
  const Status bad_k = Status::invalid_problem("K % 32 != 0: M = 4, N = 64, K = 48");
  const FamilyChoice c = choose_kernel_family(4, bad_k, bad_k);
  EXPECT_EQ(c.status.code, StatusCode::invalid_problem);
  EXPECT_EQ(c.status.reason, bad_k.reason);
  EXPECT_EQ(choose_kernel_family(4, kOk, bad_k).status.code, StatusCode::invalid_problem);
}

}  // namespace
}  // namespace fp4gap
