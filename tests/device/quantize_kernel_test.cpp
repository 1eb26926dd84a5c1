// The GPU quantizer against the CPU quantizer: codes, scales (padding included) and report must
// be bit-identical, on every element type, layout and kind of data, with outputs poisoned
// before each run. Needs a CUDA device; skips without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/cuda_api.hpp"
#include "fp4gap/cuda_quantize.hpp"
#include "fp4gap/numeric.hpp"
#include "fp4gap/quantize.hpp"
#include "device_test_support.hpp"

namespace fp4gap {
namespace {

using test::gpu;

constexpr std::uint8_t kPoison = 0xAB;

std::string current_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

enum class Data {
  random,          // normal values, row magnitudes over several octaves
  grid_midpoints,  // E2M1 grid values and rounding midpoints at power-of-two block scales (ties)
  specials,        // random with NaN, +-Inf, a NaN at [0, 0]
  zero_denormal,   // blocks of +0, -0, denormals, denormals mixed with tiny normals, random
  huge,            // magnitudes up to the type's range (saturates scales with a large given gs)
  all_zero,
  every_pattern,   // 16-bit types: each of the 65536 bit patterns once per 65536 elements, shuffled
};

std::string_view to_string(Data d) {
  switch (d) {
    case Data::random: return "random";
    case Data::grid_midpoints: return "grid_midpoints";
    case Data::specials: return "specials";
    case Data::zero_denormal: return "zero_denormal";
    case Data::huge: return "huge";
    case Data::all_zero: return "all_zero";
    case Data::every_pattern: return "every_pattern";
  }
  return "?";
}

struct Case {
  std::int64_t rows = 1, cols = 16;
  ElementType type = ElementType::bf16;
  ScaleLayout layout = ScaleLayout::linear;
  std::optional<float> gs;
  Data data = Data::random;
  std::uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream os;
    os << "[" << rows << ", " << cols << "] " << fp4gap::to_string(type) << " " << fp4gap::to_string(layout)
       << " gs=" << (gs ? std::to_string(*gs) : std::string("computed")) << " data=" << to_string(data)
       << " seed=" << seed;
    return os.str();
  }
  std::string repro() const {
    return describe() + "; repro: fp4gap_device_tests --gtest_filter=" + current_test();
  }
};

// Smallest positive subnormal of each element type, as float (exact).
float min_subnormal(ElementType t) {
  switch (t) {
    case ElementType::f32: return std::ldexp(1.0f, -149);
    case ElementType::f16: return std::ldexp(1.0f, -24);
    case ElementType::bf16: return std::ldexp(1.0f, -133);
  }
  return 0.0f;
}

float max_finite(ElementType t) {
  switch (t) {
    case ElementType::f32: return std::numeric_limits<float>::max();
    case ElementType::f16: return 65504.0f;
    case ElementType::bf16: return bits_float(0x7F7F0000u);
  }
  return 0.0f;
}

// Values as float; every value is exactly representable in c.type except where the data kind
// says otherwise (random values are rounded by the conversion, which is fine: the CPU and the
// GPU quantize the same converted input).
std::vector<float> make_values(const Case& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const auto count = static_cast<std::size_t>(c.rows * c.cols);
  std::vector<float> x(count);
  auto random_row_value = [&](std::int64_t row) {
    const float row_scale = std::ldexp(1.0f + 0.5f * static_cast<float>(row % 3), static_cast<int>(row % 7) - 3);
    return normal(rng) * row_scale;
  };
  switch (c.data) {
    case Data::random:
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t k = 0; k < c.cols; ++k) x[static_cast<std::size_t>(r * c.cols + k)] = random_row_value(r);
      break;
    case Data::grid_midpoints: {
      // Block max 6 * 2^-e, so with gs a power of two the scale and its reciprocal are powers of
      // two and x * out lands exactly on the grid or on a midpoint between grid values.
      static constexpr float kLevels[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
                                          2.0f, 2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  6.0f};
      std::uniform_int_distribution<int> level(0, 14), exponent(-6, 6), pos(0, kBlockSize - 1);
      for (std::size_t b = 0; b < count; b += kBlockSize) {
        const int e = exponent(rng);
        for (int i = 0; i < kBlockSize; ++i) {
          const float v = std::ldexp(kLevels[level(rng)], -e);
          x[b + static_cast<std::size_t>(i)] = (rng() & 1) ? -v : v;
        }
        x[b + static_cast<std::size_t>(pos(rng))] = (rng() & 1) ? -std::ldexp(6.0f, -e) : std::ldexp(6.0f, -e);
      }
      break;
    }
    case Data::specials: {
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t k = 0; k < c.cols; ++k) x[static_cast<std::size_t>(r * c.cols + k)] = random_row_value(r);
      std::uniform_int_distribution<std::size_t> where(0, count - 1);
      const std::size_t hits = std::max<std::size_t>(3, count / 500);
      const float kinds[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
      for (std::size_t h = 0; h < hits; ++h) x[where(rng)] = kinds[h % 4];
      if (c.seed % 2 == 0) x[0] = std::numeric_limits<float>::quiet_NaN();  // flat index 0
      break;
    }
    case Data::zero_denormal: {
      const float sub = min_subnormal(c.type);
      std::uniform_int_distribution<int> kind(0, 4), mant(1, c.type == ElementType::bf16 ? 127 : 1023);
      for (std::size_t b = 0; b < count; b += kBlockSize) {
        const int k = kind(rng);
        for (std::size_t i = b; i < b + kBlockSize; ++i) {
          const float s = (rng() & 1) ? -1.0f : 1.0f;
          switch (k) {
            case 0: x[i] = 0.0f; break;
            case 1: x[i] = -0.0f; break;
            case 2: x[i] = s * sub * static_cast<float>(mant(rng)); break;
            case 3: x[i] = (rng() & 1) ? s * sub * static_cast<float>(mant(rng)) : s * sub * 4096.0f * (1.0f + unit(rng)); break;
            default: x[i] = normal(rng); break;
          }
        }
      }
      break;
    }
    case Data::huge: {
      const float top = max_finite(c.type);
      for (std::size_t i = 0; i < count; ++i) {
        const float v = top * unit(rng);
        x[i] = (rng() & 1) ? -v : v;
      }
      break;
    }
    case Data::all_zero:
    case Data::every_pattern:  // raw bits: see make_input
      break;
  }
  return x;
}

// Raw input bytes of c.type.
std::vector<std::uint8_t> to_bytes(const std::vector<float>& x, ElementType t) {
  std::vector<std::uint8_t> out;
  if (t == ElementType::f32) {
    out.resize(x.size() * 4);
    std::memcpy(out.data(), x.data(), out.size());
    return out;
  }
  out.resize(x.size() * 2);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint16_t h = t == ElementType::bf16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

struct DeviceOutputs {
  cuda::DeviceBuffer<std::uint8_t> codes, scales;
  DeviceOutputs(std::int64_t rows, std::int64_t cols, ScaleLayout layout)
      : codes(static_cast<std::size_t>(rows * cols / 2)),
        scales(static_cast<std::size_t>(scale_shape(layout, rows, cols).bytes())) {}
  void poison(cudaStream_t s) {
    CUDA_CHECK(cudaMemsetAsync(codes.get(), kPoison, codes.bytes(), s));
    CUDA_CHECK(cudaMemsetAsync(scales.get(), kPoison, scales.bytes(), s));
  }
};

::testing::AssertionResult same_bytes(const char* what, const std::vector<std::uint8_t>& got,
                                      const std::vector<std::uint8_t>& want, const Case& c) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size() << " for "
                                         << c.repro();
  }
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << bad << " of " << got.size() << " bytes differ; first at byte " << first << ": GPU 0x"
     << std::hex << static_cast<int>(got[first]) << ", CPU 0x" << static_cast<int>(want[first]) << std::dec
     << (got[first] == kPoison ? " (poison: never written)" : "") << " for " << c.repro();
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult same_report(const QuantizeReport& got, const QuantizeReport& want, const Case& c) {
  const bool same = got.nan_count == want.nan_count && got.inf_count == want.inf_count &&
                    got.first_nan_row == want.first_nan_row && got.first_nan_col == want.first_nan_col &&
                    got.first_inf_row == want.first_inf_row && got.first_inf_col == want.first_inf_col &&
                    got.saturated_scales == want.saturated_scales &&
                    got.zero_scale_blocks == want.zero_scale_blocks && float_bits(got.amax) == float_bits(want.amax);
  if (same) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "report differs:\n  GPU: " << got.summary() << "\n  CPU: " << want.summary()
                                       << "\n  for " << c.repro();
}

// Runs the CPU quantizer and the GPU quantizer (report path, then the plain path twice) on the
// raw input bytes of c's shape and type, and checks that everything agrees bit for bit.
void check_input(const std::vector<std::uint8_t>& input, const Case& c) {
  SCOPED_TRACE(c.describe());

  QuantizeReport cpu_report;
  const Nvfp4Matrix cpu = quantize_nvfp4(input.data(), c.type, c.rows, c.cols, QuantizeOptions{c.layout, c.gs}, &cpu_report);

  cuda::Stream stream;
  DeviceQuantizeWorkspace ws;
  cuda::DeviceBuffer<std::uint8_t> d_input(input);
  DeviceOutputs out(c.rows, c.cols, c.layout);

  out.poison(stream.get());
  QuantizeReport gpu_report;
  quantize_nvfp4_device(d_input.get(), c.type, c.rows, c.cols, c.layout, c.gs, out.codes.get(), out.scales.get(), ws,
                        stream.as_void(), &gpu_report);
  ASSERT_TRUE(same_report(gpu_report, cpu_report, c));
  const float gpu_gs = ws.read_global_scale(stream.as_void());
  ASSERT_EQ(float_bits(gpu_gs), float_bits(cpu.global_scale))
      << "global scale: GPU " << gpu_gs << ", CPU " << cpu.global_scale << " for " << c.repro();
  ASSERT_TRUE(same_bytes("codes", out.codes.download(), cpu.codes, c));
  ASSERT_TRUE(same_bytes("scales", out.scales.download(), cpu.scales, c));

  // The plain (capturable) path, twice: the same bytes every time.
  for (int repeat = 0; repeat < 2; ++repeat) {
    out.poison(stream.get());
    quantize_nvfp4_device(d_input.get(), c.type, c.rows, c.cols, c.layout, c.gs, out.codes.get(), out.scales.get(),
                          ws, stream.as_void(), nullptr);
    stream.synchronize();
    ASSERT_TRUE(same_bytes("codes (plain path)", out.codes.download(), cpu.codes, c)) << "repeat " << repeat;
    ASSERT_TRUE(same_bytes("scales (plain path)", out.scales.download(), cpu.scales, c)) << "repeat " << repeat;
    ASSERT_EQ(float_bits(ws.read_global_scale(stream.as_void())), float_bits(cpu.global_scale)) << c.repro();
  }
}

// The input bytes of a case: converted values, or raw bit patterns for every_pattern.
std::vector<std::uint8_t> make_input(const Case& c) {
  if (c.data != Data::every_pattern) return to_bytes(make_values(c), c.type);
  std::vector<std::uint16_t> patterns(static_cast<std::size_t>(c.rows * c.cols));
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<std::uint16_t>(i);
  std::mt19937_64 rng(c.seed);
  std::shuffle(patterns.begin(), patterns.end(), rng);
  std::vector<std::uint8_t> input(patterns.size() * 2);
  std::memcpy(input.data(), patterns.data(), input.size());
  return input;
}

void check_case(const Case& c) { check_input(make_input(c), c); }

constexpr ElementType kTypes[] = {ElementType::bf16, ElementType::f16, ElementType::f32};
constexpr ScaleLayout kLayouts[] = {ScaleLayout::linear, ScaleLayout::swizzled_128x4};

struct Shape {
  std::int64_t rows, cols;
};
// Odd M, K % 64 != 0 (swizzled K-padding), M % 128 != 0 (swizzled row padding), and larger.
constexpr Shape kSmallShapes[] = {{1, 16}, {1, 48}, {3, 80}, {129, 48}, {129, 1040}, {128, 64},
                                  {5, 1040}, {300, 2048}, {1, 4096}};

TEST(QuantizeKernel, RandomDataMatchesCpuOnSmallAndOddShapes) {
  REQUIRE_GPU();
  std::uint64_t seed = 100;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts)
      for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{37.5f}})
        for (const Shape& s : kSmallShapes) {
          check_case({s.rows, s.cols, t, l, gs, Data::random, ++seed});
          if (HasFatalFailure()) return;
        }
}

TEST(QuantizeKernel, GridValuesAndMidpointsMatchCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 200;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts)
      for (std::optional<float> gs : {std::optional<float>{1.0f}, std::optional<float>{2.0f}, std::optional<float>{}}) {
        check_case({257, 1040, t, l, gs, Data::grid_midpoints, ++seed});
        if (HasFatalFailure()) return;
      }
}

TEST(QuantizeKernel, NanAndInfAreCountedLikeTheCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 300;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts)
      for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{100.0f}})
        for (const Shape& s : {Shape{3, 48}, Shape{129, 1040}, Shape{1024, 512}}) {
          check_case({s.rows, s.cols, t, l, gs, Data::specials, ++seed});
          if (HasFatalFailure()) return;
        }
}

TEST(QuantizeKernel, ZeroAndDenormalBlocksMatchCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 400;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts)
      for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{1.0f}}) {
        check_case({131, 80, t, l, gs, Data::zero_denormal, ++seed});
        if (HasFatalFailure()) return;
      }
}

TEST(QuantizeKernel, AllZeroTensorUsesGlobalScaleOne) {
  REQUIRE_GPU();
  std::uint64_t seed = 500;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts) {
      check_case({129, 48, t, l, std::nullopt, Data::all_zero, ++seed});
      if (HasFatalFailure()) return;
    }
}

TEST(QuantizeKernel, HugeValuesAndSaturatedScalesMatchCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 600;
  for (ElementType t : kTypes)
    for (ScaleLayout l : kLayouts)
      for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{1.0e6f}}) {
        check_case({67, 1040, t, l, gs, Data::huge, ++seed});
        if (HasFatalFailure()) return;
      }
}

TEST(QuantizeKernel, Large8192SquareMatchesCpu) {
  REQUIRE_GPU();
  check_case({8192, 8192, ElementType::bf16, ScaleLayout::swizzled_128x4, std::nullopt, Data::random, 700});
  if (HasFatalFailure()) return;
  check_case({8192, 8192, ElementType::bf16, ScaleLayout::linear, std::optional<float>{448.0f}, Data::random, 701});
  if (HasFatalFailure()) return;
  check_case({8192, 8192, ElementType::f16, ScaleLayout::linear, std::nullopt, Data::specials, 702});
  if (HasFatalFailure()) return;
  check_case({4099, 6160, ElementType::f16, ScaleLayout::swizzled_128x4, std::nullopt, Data::random, 703});
}

// Every 16-bit pattern (zeros, subnormals, normals, Inf, NaN of both signs) once, shuffled into
// blocks: the kernel's fast path and its recipe fallback must both agree with the CPU on all of
// them, with the global scale computed and given (one that saturates most scales, one that makes
// most of them subnormal).
TEST(QuantizeKernel, EverySixteenBitPatternMatchesCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 1000;
  for (ElementType t : {ElementType::bf16, ElementType::f16})
    for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{1.0f}, std::optional<float>{3.0e4f},
                                    std::optional<float>{1.0e-3f}}) {
      check_case({256, 256, t, ScaleLayout::swizzled_128x4, gs, Data::every_pattern, ++seed});
      if (HasFatalFailure()) return;
    }
}

// Whole-warp walks with a partial last span (block counts not a multiple of 32 or of a thread
// block), forward (gs given) and backward (gs computed), with a grid too small to cover the
// tensor in one step.
TEST(QuantizeKernel, PartialSpansAndLongWalksMatchCpu) {
  REQUIRE_GPU();
  std::uint64_t seed = 1100;
  for (ElementType t : kTypes)
    for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{5.0f}})
      for (const Shape& s : {Shape{1, 16 * 33}, Shape{7, 16 * 37}, Shape{3001, 16 * 257}, Shape{2, 16 * 31}}) {
        check_case({s.rows, s.cols, t, ScaleLayout::linear, gs, Data::random, ++seed});
        if (HasFatalFailure()) return;
        check_case({s.rows, s.cols, t, ScaleLayout::swizzled_128x4, gs, Data::specials, ++seed});
        if (HasFatalFailure()) return;
      }
}

// The plain path records into a CUDA graph (memset + amax pass + quantize) and replays correctly.
TEST(QuantizeKernel, PlainPathIsGraphCapturable) {
  REQUIRE_GPU();
  for (std::optional<float> gs : {std::optional<float>{}, std::optional<float>{12.0f}}) {
    const Case c{129, 1040, ElementType::bf16, ScaleLayout::swizzled_128x4, gs, Data::random, 800};
    SCOPED_TRACE(c.describe());
    const std::vector<std::uint8_t> input = to_bytes(make_values(c), c.type);
    const Nvfp4Matrix cpu = quantize_nvfp4(input.data(), c.type, c.rows, c.cols, QuantizeOptions{c.layout, c.gs});

    cuda::Stream stream;
    DeviceQuantizeWorkspace ws;
    cuda::DeviceBuffer<std::uint8_t> d_input(input);
    DeviceOutputs out(c.rows, c.cols, c.layout);
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    quantize_nvfp4_device(d_input.get(), c.type, c.rows, c.cols, c.layout, c.gs, out.codes.get(), out.scales.get(), ws,
                          stream.as_void(), nullptr);
    CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      out.poison(stream.get());
      CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
      stream.synchronize();
      EXPECT_TRUE(same_bytes("codes (graph replay)", out.codes.download(), cpu.codes, c)) << "replay " << replay;
      EXPECT_TRUE(same_bytes("scales (graph replay)", out.scales.download(), cpu.scales, c)) << "replay " << replay;
      EXPECT_EQ(float_bits(ws.read_global_scale(stream.as_void())), float_bits(cpu.global_scale));
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

// A non-finite element must never produce the NaN scale byte 0x7F, on any path.
TEST(QuantizeKernel, NoNanScaleByteFromNonFiniteInput) {
  REQUIRE_GPU();
  const Case c{64, 256, ElementType::f32, ScaleLayout::linear, std::nullopt, Data::specials, 900};
  const std::vector<std::uint8_t> input = to_bytes(make_values(c), c.type);
  cuda::Stream stream;
  DeviceQuantizeWorkspace ws;
  cuda::DeviceBuffer<std::uint8_t> d_input(input);
  DeviceOutputs out(c.rows, c.cols, c.layout);
  out.poison(stream.get());
  QuantizeReport report;
  quantize_nvfp4_device(d_input.get(), c.type, c.rows, c.cols, c.layout, c.gs, out.codes.get(), out.scales.get(), ws,
                        stream.as_void(), &report);
  EXPECT_GT(report.nan_count + report.inf_count, 0) << c.repro();
  for (std::uint8_t s : out.scales.download()) ASSERT_NE(s & 0x7F, 0x7F) << c.repro();
}

// Bad arguments: the message names the rule and quotes the value.
TEST(QuantizeKernel, RejectsBadArgumentsWithTheRuleAndTheShape) {
  REQUIRE_GPU();
  DeviceQuantizeWorkspace ws;
  cuda::DeviceBuffer<std::uint8_t> input(4 * 64 * 64 + 16), codes(64 * 64 / 2 + 8), scales(128 * 4 + 8);
  auto expect_invalid = [&](const void* in, std::int64_t rows, std::int64_t cols, std::optional<float> gs,
                            std::uint8_t* c, const std::string& needle) {
    try {
      quantize_nvfp4_device(in, ElementType::bf16, rows, cols, ScaleLayout::linear, gs, c, scales.get(), ws, nullptr);
      ADD_FAILURE() << "no InvalidArgument for rows " << rows << ", cols " << cols << "; expected '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    }
  };
  expect_invalid(input.get(), 4, 100, std::nullopt, codes.get(), "cols % 16 != 0: cols = 100");
  expect_invalid(input.get(), 0, 64, std::nullopt, codes.get(), "rows = 0");
  expect_invalid(input.get() + 2, 4, 64, std::nullopt, codes.get(), "input address % 16 != 0");
  expect_invalid(input.get(), 4, 64, std::nullopt, codes.get() + 4, "codes address % 8 != 0");
  expect_invalid(input.get(), 4, 64, std::numeric_limits<float>::quiet_NaN(), codes.get(), "finite and > 0");
  expect_invalid(input.get(), 4, 64, 0.0f, codes.get(), "finite and > 0");
  expect_invalid(input.get(), 4, 64, 1e38f, codes.get(), "outside [2^-119, 2^118]");
  expect_invalid(nullptr, 4, 64, std::nullopt, codes.get(), "null device pointer");
  expect_invalid(input.get(), std::int64_t{1} << 20, std::int64_t{1} << 15, std::nullopt, codes.get(), ">= 2^31 blocks");
}

}  // namespace
}  // namespace fp4gap
