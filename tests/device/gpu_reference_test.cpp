// The naive GPU reference GEMM and the gpu-reference backend against the CPU reference
// (reference_gemm + verify_gemm_output), on small and odd shapes, every operand format pair,
// both scale layouts and every output type. Needs a CUDA device; skips without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/backend.hpp"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/cuda_reference.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/reference.hpp"
#include "fp4gap/verify.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::gpu;
using test::repro;
using test::output_as_float;

// A host operand in any format the reference multiplies, with its arrays.
struct HostOperand {
  OperandFormat format = OperandFormat::bf16;
  std::int64_t rows = 0, k = 0;
  ScaleLayout layout = ScaleLayout::linear;
  float global_scale = 1.0f;  // nvfp4 only
  std::vector<std::uint16_t> bf16;
  std::vector<std::uint8_t> codes, scales;

  OperandView view() const {
    OperandView v;
    v.format = format;
    v.rows = rows;
    v.k = k;
    v.layout = layout;
    if (format == OperandFormat::bf16) {
      v.bf16 = bf16.data();
    } else {
      v.codes = codes.data();
      if (format == OperandFormat::nvfp4) v.scales = scales.data();
    }
    return v;
  }
};

HostOperand make_operand(OperandFormat format, std::int64_t rows, std::int64_t k, ScaleLayout layout,
                         std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostOperand op;
  op.format = format;
  op.rows = rows;
  op.k = k;
  op.layout = layout;
  const auto count = static_cast<std::size_t>(rows * k);
  switch (format) {
    case OperandFormat::bf16:
      op.bf16.resize(count);
      for (auto& h : op.bf16) h = float_to_bf16(normal(rng));
      break;
    case OperandFormat::e4m3:
      // Exponent field <= 9 (|v| < 8) keeps f16 outputs finite; never the NaN bytes.
      op.codes.resize(count);
      for (auto& c : op.codes) {
        const auto r = static_cast<std::uint8_t>(rng());
        c = static_cast<std::uint8_t>((r & 0x87u) | ((r >> 3) % 10u) << 3);
      }
      break;
    case OperandFormat::nvfp4: {
      std::vector<float> x(count);
      for (auto& v : x) v = normal(rng);
      const Nvfp4Matrix m = quantize_nvfp4(x, rows, k, QuantizeOptions{layout, std::nullopt});
      op.codes = m.codes;
      op.scales = m.scales;
      op.global_scale = m.global_scale;
      break;
    }
  }
  return op;
}

// The same operand on the device.
struct DeviceOperand {
  cuda::DeviceBuffer<std::uint8_t> payload, scales;
  OperandView view;
  explicit DeviceOperand(const HostOperand& h) : view(h.view()) {
    view.bf16 = nullptr;
    view.codes = nullptr;
    view.scales = nullptr;
    if (h.format == OperandFormat::bf16) {
      payload = cuda::DeviceBuffer<std::uint8_t>(h.bf16.size() * 2);
      payload.upload(reinterpret_cast<const std::uint8_t*>(h.bf16.data()), payload.size());
      view.bf16 = reinterpret_cast<const std::uint16_t*>(payload.get());
    } else {
      payload = cuda::DeviceBuffer<std::uint8_t>(h.codes);
      view.codes = payload.get();
    }
    if (h.format == OperandFormat::nvfp4) {
      scales = cuda::DeviceBuffer<std::uint8_t>(h.scales);
      view.scales = scales.get();
    }
  }
};


// Runs gpu_reference_gemm_device with poisoned (NaN) output and returns it as float.
std::vector<float> run_device(const HostOperand& a, const HostOperand& b, double alpha, OutputType out) {
  const DeviceOperand da(a), db(b);
  cuda::Stream stream;
  cuda::DeviceBuffer<std::uint8_t> d(static_cast<std::size_t>(a.rows * b.rows * output_type_bytes(out)));
  CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, d.bytes(), stream.get()));  // NaN in every output type
  gpu_reference_gemm_device(da.view, db.view, alpha, out, d.get(), stream.as_void());
  stream.synchronize();
  return output_as_float(d.download(), out);
}

constexpr OperandFormat kFormats[] = {OperandFormat::nvfp4, OperandFormat::bf16, OperandFormat::e4m3};
constexpr OutputType kOutputs[] = {OutputType::f32, OutputType::bf16, OutputType::f16};
constexpr ScaleLayout kLayouts[] = {ScaleLayout::linear, ScaleLayout::swizzled_128x4};

struct Mnk {
  std::int64_t m, n, k;
};

TEST(GpuReferenceGemm, MatchesCpuReferenceForEveryFormatPairLayoutAndOutput) {
  REQUIRE_GPU();
  // Odd m and n, m % 128 != 0 (swizzled row padding), k % 64 != 0 (swizzled k padding).
  const Mnk shapes[] = {{1, 1, 16}, {3, 5, 48}, {7, 33, 80}, {129, 65, 1040}, {64, 32, 32}, {1, 257, 160}};
  std::uint64_t seed = 1000;
  for (OperandFormat af : kFormats)
    for (OperandFormat bf : kFormats)
      for (ScaleLayout layout : kLayouts) {
        if (layout == ScaleLayout::swizzled_128x4 && af != OperandFormat::nvfp4 && bf != OperandFormat::nvfp4) continue;
        for (const Mnk& s : shapes) {
          ++seed;
          const HostOperand a = make_operand(af, s.m, s.k, layout, seed);
          const HostOperand b = make_operand(bf, s.n, s.k, layout, seed ^ 0x5555);
          const double alpha = 1.0 / (static_cast<double>(a.global_scale) * static_cast<double>(b.global_scale));
          const ReferenceResult ref = reference_gemm(a.view(), b.view(), alpha);
          for (OutputType out : kOutputs) {
            std::ostringstream what;
            what << "m" << s.m << " n" << s.n << " k" << s.k << " " << to_string(af) << " x " << to_string(bf) << " "
                 << to_string(layout) << " -> " << to_string(out);
            const std::vector<float> got = run_device(a, b, alpha, out);
            const VerifyResult v = verify_gemm_output(got.data(), ref, s.k, out);
            ASSERT_TRUE(v.passed) << v.message << " for " << repro(what.str(), seed);
          }
        }
      }
}

// Exact-grid operands: every float32 partial sum is exact, so the f32 output equals the reference
// exactly, in both layouts.
TEST(GpuReferenceGemm, ExactGridInputsGiveTheExactResult) {
  REQUIRE_GPU();
  const Mnk shapes[] = {{1, 32, 32}, {3, 64, 96}, {129, 32, 1056}};
  const std::pair<OperandFormat, OperandFormat> pairs[] = {{OperandFormat::nvfp4, OperandFormat::nvfp4},
                                                           {OperandFormat::bf16, OperandFormat::nvfp4},
                                                           {OperandFormat::nvfp4, OperandFormat::bf16},
                                                           {OperandFormat::bf16, OperandFormat::bf16}};
  std::uint64_t seed = 2000;
  for (const auto& [af, bf] : pairs)
    for (const Mnk& s : shapes)
      for (ScaleLayout layout : kLayouts) {
        ++seed;
        const GemmProblem p{s.m, s.n, s.k, af, bf, OutputType::f32};
        const GemmInputs in = make_gemm_inputs(p, seed, InputDistribution::exact_grid);
        const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
        // The operands in the requested layout.
        auto host = [&](OperandFormat f, const Nvfp4Matrix& m, const std::vector<std::uint16_t>& bf16, std::int64_t rows) {
          HostOperand h;
          h.format = f;
          h.rows = rows;
          h.k = s.k;
          h.layout = layout;
          if (f == OperandFormat::nvfp4) {
            const Nvfp4Matrix l = with_layout(m, layout);
            h.codes = l.codes;
            h.scales = l.scales;
          } else {
            h.bf16 = bf16;
          }
          return h;
        };
        const HostOperand a = host(af, in.a_fp4, in.a_bf16, s.m);
        const HostOperand b = host(bf, in.b_fp4, in.b_bf16, s.n);
        const std::vector<float> got = run_device(a, b, in.alpha, OutputType::f32);
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], static_cast<float>(ref.d[i]))
              << "element " << i << " of " << p.label() << " " << to_string(layout) << " for "
              << repro("exact grid", seed);
        }
      }
}

// The double-accumulating form agrees with the CPU reference to double precision.
TEST(GpuReferenceGemm, DoubleFormMatchesCpuReference) {
  REQUIRE_GPU();
  std::uint64_t seed = 3000;
  for (OperandFormat af : kFormats)
    for (OperandFormat bf : kFormats) {
      ++seed;
      const std::int64_t m = 37, n = 45, k = 1040;
      const HostOperand a = make_operand(af, m, k, ScaleLayout::swizzled_128x4, seed);
      const HostOperand b = make_operand(bf, n, k, ScaleLayout::linear, seed ^ 0x5555);
      const double alpha = 0.75;
      const ReferenceResult cpu = reference_gemm(a.view(), b.view(), alpha);
      const ReferenceResult gpu = gpu_reference_gemm(a.view(), b.view(), alpha);
      ASSERT_EQ(gpu.m, m);
      ASSERT_EQ(gpu.n, n);
      ASSERT_EQ(gpu.d.size(), cpu.d.size());
      const double bound = 2.0 * static_cast<double>(k) * 0x1p-53;  // two double accumulations, any order
      for (std::size_t i = 0; i < cpu.d.size(); ++i) {
        ASSERT_LE(std::fabs(gpu.d[i] - cpu.d[i]), bound * cpu.abs_sum[i])
            << "d[" << i << "] " << to_string(af) << " x " << to_string(bf) << " for " << repro("double form", seed);
        ASSERT_LE(std::fabs(gpu.abs_sum[i] - cpu.abs_sum[i]), bound * cpu.abs_sum[i])
            << "abs_sum[" << i << "] for " << repro("double form", seed);
      }
    }
}

TEST(GpuReferenceGemm, RejectsMismatchedOperands) {
  REQUIRE_GPU();
  const HostOperand a = make_operand(OperandFormat::bf16, 4, 32, ScaleLayout::linear, 1);
  const HostOperand b = make_operand(OperandFormat::bf16, 4, 48, ScaleLayout::linear, 2);
  try {
    gpu_reference_gemm(a.view(), b.view(), 1.0);
    ADD_FAILURE() << "no InvalidArgument for k 32 vs 48";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("A is [4, 32], B is [4, 48]"), std::string::npos) << e.what();
  }
  HostOperand bad = make_operand(OperandFormat::nvfp4, 4, 32, ScaleLayout::linear, 3);
  bad.k = 40;
  HostOperand other = make_operand(OperandFormat::bf16, 4, 40, ScaleLayout::linear, 4);
  try {
    gpu_reference_gemm(bad.view(), other.view(), 1.0);
    ADD_FAILURE() << "no InvalidArgument for an nvfp4 operand with k = 40";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("k % 16 != 0: k = 40"), std::string::npos) << e.what();
  }
}

// The backend through the registry: supports, prepare, poison, run on two sets, verify.
TEST(GpuReferenceBackend, RunsAndVerifiesThroughTheRegistry) {
  REQUIRE_GPU();
  register_cuda_backends();
  GemmBackend* backend = find_gemm_backend("gpu-reference");
  ASSERT_NE(backend, nullptr) << "gpu-reference is not registered";

  const GemmProblem fp8{16, 32, 64, OperandFormat::e4m3, OperandFormat::nvfp4, OutputType::bf16};
  EXPECT_EQ(backend->supports(fp8, gpu()).code, StatusCode::not_supported);
  const GemmProblem bad_k{16, 32, 48, OperandFormat::nvfp4, OperandFormat::nvfp4, OutputType::bf16};
  EXPECT_EQ(backend->supports(bad_k, gpu()).code, StatusCode::invalid_problem);
  DeviceContext none;
  none.unavailable_reason = "no CUDA device: test";
  const Status no_device = backend->supports(GemmProblem{16, 32, 64}, none);
  EXPECT_EQ(no_device.code, StatusCode::not_supported);
  EXPECT_EQ(no_device.reason, "no CUDA device: test");

  const Mnk shapes[] = {{1, 32, 64}, {3, 64, 96}, {129, 96, 1056}};
  const std::pair<OperandFormat, OperandFormat> pairs[] = {{OperandFormat::nvfp4, OperandFormat::nvfp4},
                                                           {OperandFormat::bf16, OperandFormat::nvfp4},
                                                           {OperandFormat::bf16, OperandFormat::bf16}};
  std::uint64_t seed = 4000;
  cuda::Stream stream;
  for (const auto& [af, bf] : pairs)
    for (const Mnk& s : shapes)
      for (OutputType out : kOutputs) {
        ++seed;
        const GemmProblem p{s.m, s.n, s.k, af, bf, out};
        ASSERT_TRUE(backend->supports(p, gpu()).is_ok()) << p.label();
        const GemmInputs in = make_gemm_inputs(p, seed);
        const ReferenceResult ref = reference_gemm(in.a_view(), in.b_view(), in.alpha);
        auto runner = backend->prepare(in, 2);
        ASSERT_EQ(runner->input_sets(), 2);
        EXPECT_TRUE(runner->on_device());
        EXPECT_EQ(runner->alpha(), in.alpha);
        runner->poison_output();
        for (int set = 0; set < 2; ++set) {
          const std::vector<float> poisoned = runner->read_output(set);
          ASSERT_TRUE(std::isnan(poisoned[0]) && std::isnan(poisoned.back())) << "poison_output left numbers";
          runner->run(set, stream.as_void());
          const std::vector<float> got = runner->read_output(set);
          const VerifyResult v = verify_gemm_output(got.data(), ref, s.k, out);
          ASSERT_TRUE(v.passed) << v.message << " set " << set << " for " << repro(p.label(), seed);
        }
      }
}

}  // namespace
}  // namespace fp4gap
