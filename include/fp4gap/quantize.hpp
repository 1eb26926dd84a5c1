#pragma once
// Host NVFP4 quantization and dequantization (SPEC-nvfp4 sections 3 and 6): the CPU reference
// that the GPU quantizer must match bit for bit.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gap/format.hpp"

namespace fp4gap {

enum class ElementType { f32, f16, bf16 };
std::string_view to_string(ElementType t);

// What a quantization saw that a user must know about. NaN/Inf are never silently turned into
// +-6 codes without being counted here.
struct QuantizeReport {
  std::int64_t nan_count = 0;
  std::int64_t inf_count = 0;
  std::int64_t first_nan_row = -1, first_nan_col = -1;  // row-major first occurrence
  std::int64_t first_inf_row = -1, first_inf_col = -1;
  std::int64_t saturated_scales = 0;   // blocks whose scale was clamped to 448 (above 464)
  std::int64_t zero_scale_blocks = 0;  // blocks whose rounded scale is 0 (all codes zero)
  float amax = 0.0f;                   // max |x| over finite values

  bool clean() const { return nan_count == 0 && inf_count == 0 && saturated_scales == 0; }
  std::string summary() const;  // one line, e.g. "2 NaN (first at [3, 17]), 0 Inf, ..."
};

// A row-major [rows, cols] NVFP4 matrix: codes [rows, cols/2] (SPEC packing), scales in `layout`
// (padding bytes are 0), and the float32 global scale gs used to quantize it.
struct Nvfp4Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  ScaleLayout layout = ScaleLayout::linear;
  float global_scale = 1.0f;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;
};

// global_scale_from_amax (gs = 2688/amax, 1 for amax == 0) lives in format.hpp: the GPU
// quantizer needs the identical function.

struct QuantizeOptions {
  ScaleLayout layout = ScaleLayout::linear;
  std::optional<float> global_scale;  // static gs; when empty, gs comes from the finite amax
};

// Quantizes a row-major [rows, cols] matrix. Throws InvalidArgument when cols % 16 != 0, rows or
// cols < 1, or a given global scale is not finite and > 0 or lies outside
// [kMinGlobalScale, kMaxGlobalScale] (see format.hpp). `data` holds rows*cols elements of
// `type` (f16/bf16 as raw uint16 bits).
Nvfp4Matrix quantize_nvfp4(const void* data, ElementType type, std::int64_t rows, std::int64_t cols,
                           const QuantizeOptions& options, QuantizeReport* report = nullptr);
Nvfp4Matrix quantize_nvfp4(const std::vector<float>& data, std::int64_t rows, std::int64_t cols,
                           const QuantizeOptions& options, QuantizeReport* report = nullptr);

// x = e2m1(code) * f32(scale) / gs, row-major [rows, cols] float32.
std::vector<float> dequantize_nvfp4(const Nvfp4Matrix& m);
// The same without the global scale: e2m1(code) * f32(scale), exact in float32 and in bf16.
std::vector<float> dequantize_nvfp4_unscaled(const Nvfp4Matrix& m);

// Rewrites the scales into another layout (padding written as 0).
std::vector<std::uint8_t> convert_scales(const std::uint8_t* scales, ScaleLayout from, ScaleLayout to,
                                         std::int64_t rows, std::int64_t cols);
Nvfp4Matrix with_layout(const Nvfp4Matrix& m, ScaleLayout layout);

}  // namespace fp4gap
