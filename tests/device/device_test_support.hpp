#pragma once
// Helpers shared by the device tests.
#include <gtest/gtest.h>

#include <string>

#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap::test {

inline const DeviceContext& gpu() {
  static const DeviceContext d = query_device(0);
  return d;
}

// A registered backend by name; throws when it is not registered.
inline GemmBackend& registered_backend(const char* name) {
  register_cuda_backends();
  GemmBackend* b = find_gemm_backend(name);
  if (b == nullptr) throw RuntimeError(std::string("backend not registered: ") + name);
  return *b;
}

}  // namespace fp4gap::test

// Device tests run where a GPU exists: without one they fail with the reason, never skip.
#define REQUIRE_GPU()                                  \
  ASSERT_TRUE(::fp4gap::test::gpu().available)         \
      << "device tests need a CUDA device: " << ::fp4gap::test::gpu().unavailable_reason
