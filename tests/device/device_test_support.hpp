#pragma once
// Helpers shared by the device tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/problem.hpp"
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

// Raw output bytes of type t (f32, bf16 or f16) as floats.
inline std::vector<float> output_as_float(const std::vector<std::uint8_t>& raw, OutputType t) {
  const std::size_t size = static_cast<std::size_t>(output_type_bytes(t));
  std::vector<float> out(raw.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t == OutputType::f32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = t == OutputType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return out;
}

}  // namespace fp4gap::test

// Device tests run where a GPU exists: without one they fail with the reason, never skip.
#define REQUIRE_GPU()                                  \
  ASSERT_TRUE(::fp4gap::test::gpu().available)         \
      << "device tests need a CUDA device: " << ::fp4gap::test::gpu().unavailable_reason
