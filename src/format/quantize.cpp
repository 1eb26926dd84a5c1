#include "fp4gap/quantize.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "fp4gap/numeric.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap {

std::string_view to_string(ElementType t) {
  switch (t) {
    case ElementType::f32: return "f32";
    case ElementType::f16: return "f16";
    case ElementType::bf16: return "bf16";
  }
  return "?";
}

namespace {

std::string format_float(float v) {
  std::ostringstream os;
  os.precision(9);  // enough digits to identify any float32
  os << v;
  return os.str();
}

void check_shape(std::int64_t rows, std::int64_t cols) {
  if (rows < 1 || cols < 1) {
    throw InvalidArgument("rows >= 1 and K >= 1 required: rows = " + std::to_string(rows) +
                          ", K = " + std::to_string(cols));
  }
  if (cols % kBlockSize != 0) {
    throw InvalidArgument("K % 16 != 0: K = " + std::to_string(cols) +
                          " (NVFP4 blocks are 16 elements along K)");
  }
}

void check_global_scale(float gs) {
  if (!std::isfinite(gs) || gs <= 0.0f) {
    throw InvalidArgument("global scale must be finite and > 0: gs = " + format_float(gs));
  }
  if (gs < kMinGlobalScale || gs > kMaxGlobalScale) {
    throw InvalidArgument("global scale outside [2^-119, 2^118] (the quantization recipe would "
                          "overflow float32): gs = " + format_float(gs));
  }
}

void check_matrix(const Nvfp4Matrix& m) {
  check_shape(m.rows, m.cols);
  const auto code_bytes = static_cast<std::size_t>(m.rows * m.cols / 2);
  if (m.codes.size() != code_bytes) {
    throw InvalidArgument("NVFP4 codes size != rows * K / 2: " + std::to_string(m.codes.size()) +
                          " bytes for [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                          "]");
  }
  const auto scale_bytes = static_cast<std::size_t>(scale_shape(m.layout, m.rows, m.cols).bytes());
  if (m.scales.size() != scale_bytes) {
    throw InvalidArgument("NVFP4 scales size does not match the " + std::string(to_string(m.layout)) +
                          " layout: " + std::to_string(m.scales.size()) + " bytes, expected " +
                          std::to_string(scale_bytes) + " for [" + std::to_string(m.rows) + ", " +
                          std::to_string(m.cols) + "]");
  }
}

// Converts one row of the input to float32 (exact for every input type).
void load_row(const void* data, ElementType type, std::int64_t row, std::int64_t cols, float* out) {
  const auto offset = static_cast<std::size_t>(row * cols);
  switch (type) {
    case ElementType::f32: {
      const float* src = static_cast<const float*>(data) + offset;
      for (std::int64_t c = 0; c < cols; ++c) out[c] = src[c];
      return;
    }
    case ElementType::f16: {
      const std::uint16_t* src = static_cast<const std::uint16_t*>(data) + offset;
      for (std::int64_t c = 0; c < cols; ++c) out[c] = fp16_to_float(src[c]);
      return;
    }
    case ElementType::bf16: {
      const std::uint16_t* src = static_cast<const std::uint16_t*>(data) + offset;
      for (std::int64_t c = 0; c < cols; ++c) out[c] = bf16_to_float(src[c]);
      return;
    }
  }
}

// Pass 1 over one row: finite amax, NaN/Inf counts and first positions. Rows are visited in
// order, so the first hit recorded is the row-major first occurrence.
void scan_row(const float* x, std::int64_t row, std::int64_t cols, QuantizeReport& r) {
  float amax = r.amax;
  for (std::int64_t c = 0; c < cols; ++c) {
    const float a = std::fabs(x[c]);
    if (a <= std::numeric_limits<float>::max()) {  // finite: false for NaN and Inf
      amax = a > amax ? a : amax;
    } else if (std::isnan(x[c])) {
      if (r.nan_count++ == 0) {
        r.first_nan_row = row;
        r.first_nan_col = c;
      }
    } else {
      if (r.inf_count++ == 0) {
        r.first_inf_row = row;
        r.first_inf_col = c;
      }
    }
  }
  r.amax = amax;
}

}  // namespace

std::string QuantizeReport::summary() const {
  std::ostringstream os;
  os << nan_count << " NaN";
  if (nan_count > 0) os << " (first at [" << first_nan_row << ", " << first_nan_col << "])";
  os << ", " << inf_count << " Inf";
  if (inf_count > 0) os << " (first at [" << first_inf_row << ", " << first_inf_col << "])";
  os << ", " << saturated_scales << " saturated scale" << (saturated_scales == 1 ? "" : "s") << ", "
     << zero_scale_blocks << " zero-scale block" << (zero_scale_blocks == 1 ? "" : "s") << ", amax "
     << format_float(amax);
  return os.str();
}

Nvfp4Matrix quantize_nvfp4(const void* data, ElementType type, std::int64_t rows, std::int64_t cols,
                           const QuantizeOptions& options, QuantizeReport* report) {
  check_shape(rows, cols);
  if (data == nullptr) throw InvalidArgument("quantize_nvfp4: data is null");
  if (options.global_scale) check_global_scale(*options.global_scale);

  // Pass 1: the report (and the dynamic gs from the finite amax). For f32 input rows are read
  // in place; f16/bf16 rows are converted into a one-row buffer, in both passes.
  std::vector<float> row_buffer(static_cast<std::size_t>(cols));
  auto row_values = [&](std::int64_t r) -> const float* {
    if (type == ElementType::f32) return static_cast<const float*>(data) + r * cols;
    load_row(data, type, r, cols, row_buffer.data());
    return row_buffer.data();
  };
  QuantizeReport rep;
  for (std::int64_t r = 0; r < rows; ++r) scan_row(row_values(r), r, cols, rep);

  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.layout = options.layout;
  m.global_scale = options.global_scale ? *options.global_scale : global_scale_from_amax(rep.amax);
  const float gs = m.global_scale;
  const float inv_gs = 1.0f / gs;
  m.codes.assign(static_cast<std::size_t>(rows * cols / 2), 0);
  m.scales.assign(static_cast<std::size_t>(scale_shape(m.layout, rows, cols).bytes()), 0);

  // Pass 2: quantize block by block with the shared recipe.
  const std::int64_t blocks_per_row = cols / kBlockSize;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = row_values(r);
    std::uint8_t* codes = m.codes.data() + r * (cols / 2);
    for (std::int64_t kb = 0; kb < blocks_per_row; ++kb) {
      const BlockQuantResult b =
          quantize_block16(x + kb * kBlockSize, gs, inv_gs, codes + kb * (kBlockSize / 2));
      m.scales[static_cast<std::size_t>(scale_offset(m.layout, r, kb, cols))] = b.scale;
      rep.saturated_scales += b.scale_saturated ? 1 : 0;
      rep.zero_scale_blocks += b.scale == 0 ? 1 : 0;
    }
  }
  if (report) *report = rep;
  return m;
}

Nvfp4Matrix quantize_nvfp4(const std::vector<float>& data, std::int64_t rows, std::int64_t cols,
                           const QuantizeOptions& options, QuantizeReport* report) {
  check_shape(rows, cols);
  if (data.size() != static_cast<std::size_t>(rows * cols)) {
    throw InvalidArgument("data size != rows * K: " + std::to_string(data.size()) + " values for [" +
                          std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  return quantize_nvfp4(data.data(), ElementType::f32, rows, cols, options, report);
}

namespace {

std::vector<float> dequantize(const Nvfp4Matrix& m, bool apply_global_scale) {
  check_matrix(m);
  // Every element is one of 256 scale bytes x 16 codes: compute those values once, with the
  // operations of the definition (e2m1 * e4m3 is exact in float32; the one rounding is the
  // division by gs), and look them up.
  std::vector<float> values(256 * 16);
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 16; ++c) {
      const float v = e2m1_to_float(static_cast<std::uint8_t>(c)) * e4m3_to_float(static_cast<std::uint8_t>(s));
      values[static_cast<std::size_t>(s * 16 + c)] = apply_global_scale ? v / m.global_scale : v;
    }
  }
  std::vector<float> out(static_cast<std::size_t>(m.rows * m.cols));
  const std::int64_t blocks_per_row = m.cols / kBlockSize;
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t kb = 0; kb < blocks_per_row; ++kb) {
      const std::uint8_t s = m.scales[static_cast<std::size_t>(scale_offset(m.layout, r, kb, m.cols))];
      const float* block_values = values.data() + s * 16;
      const std::uint8_t* codes = m.codes.data() + r * (m.cols / 2) + kb * (kBlockSize / 2);
      float* dst = out.data() + r * m.cols + kb * kBlockSize;
      for (int j = 0; j < kBlockSize / 2; ++j) {
        dst[2 * j] = block_values[codes[j] & 0xFu];
        dst[2 * j + 1] = block_values[codes[j] >> 4];
      }
    }
  }
  return out;
}

}  // namespace

std::vector<float> dequantize_nvfp4(const Nvfp4Matrix& m) { return dequantize(m, true); }

std::vector<float> dequantize_nvfp4_unscaled(const Nvfp4Matrix& m) { return dequantize(m, false); }

std::vector<std::uint8_t> convert_scales(const std::uint8_t* scales, ScaleLayout from, ScaleLayout to,
                                         std::int64_t rows, std::int64_t cols) {
  check_shape(rows, cols);
  if (scales == nullptr) throw InvalidArgument("convert_scales: scales is null");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(scale_shape(to, rows, cols).bytes()), 0);
  const std::int64_t blocks_per_row = cols / kBlockSize;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t kb = 0; kb < blocks_per_row; ++kb) {
      out[static_cast<std::size_t>(scale_offset(to, r, kb, cols))] = scales[scale_offset(from, r, kb, cols)];
    }
  }
  return out;
}

Nvfp4Matrix with_layout(const Nvfp4Matrix& m, ScaleLayout layout) {
  check_matrix(m);
  Nvfp4Matrix out = m;
  out.layout = layout;
  out.scales = convert_scales(m.scales.data(), m.layout, layout, m.rows, m.cols);
  return out;
}

}  // namespace fp4gap
