#pragma once
// NVFP4 quantization on the GPU (CUDA library). Bit-identical to the CPU quantizer
// quantize_nvfp4() of quantize.hpp: the GPU runs format.hpp's quantize_block16, or for ordinary
// blocks format.hpp's cheaper equivalents of its steps (tested equal on every input they take),
// with the same IEEE float32 operations, and the global scale is computed on the device by the
// same division.
// This header needs no CUDA headers: streams are passed as void* (a cudaStream_t).
#include <cstdint>
#include <optional>

#include "fp4gap/format.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap {

// Device memory the quantizer needs besides its outputs: the global scale it used and the
// counters of the report. The constructor allocates (on the current device), so that
// quantize_nvfp4_device itself never allocates and can be captured into a CUDA graph. One
// workspace per quantization in flight: concurrent launches must not share one.
class DeviceQuantizeWorkspace {
 public:
  DeviceQuantizeWorkspace();  // throws RuntimeError when no device is usable
  ~DeviceQuantizeWorkspace();
  DeviceQuantizeWorkspace(const DeviceQuantizeWorkspace&) = delete;
  DeviceQuantizeWorkspace& operator=(const DeviceQuantizeWorkspace&) = delete;
  DeviceQuantizeWorkspace(DeviceQuantizeWorkspace&& other) noexcept;
  DeviceQuantizeWorkspace& operator=(DeviceQuantizeWorkspace&& other) noexcept;

  // Device address of the float32 global scale the latest quantization on this workspace used
  // (given or computed): a GEMM can read its alpha from there without a host round trip.
  const float* device_global_scale() const;
  // The same value copied to the host; synchronizes `stream`.
  float read_global_scale(void* stream) const;

  void* device_state() const { return state_; }  // the launcher's counters (opaque)
  int sm_count() const { return sm_count_; }

 private:
  void* state_ = nullptr;
  int sm_count_ = 0;
};

// Quantizes a row-major [rows, cols] device matrix of `type` (bf16, f16 or f32) into NVFP4:
// d_codes receives rows*cols/2 bytes, d_scales scale_shape(layout, rows, cols).bytes() bytes
// (swizzled padding written as 0 by the kernel). The global scale is `global_scale` when given,
// else 2688/amax over the finite values (1 when amax == 0), found by a reduction pass and
// computed on the device. Asynchronous on `stream` and capturable into a CUDA graph when
// report_or_null is nullptr; with a report, the counters are copied back and the stream is
// synchronized.
// Throws InvalidArgument when cols % 16 != 0, rows or cols < 1, rows*cols/16 >= 2^31 blocks,
// a pointer is null or misaligned (d_input 16 bytes, d_codes 8 bytes), or a given global scale
// is not finite and > 0.
void quantize_nvfp4_device(const void* d_input, ElementType type, std::int64_t rows, std::int64_t cols,
                           ScaleLayout layout, std::optional<float> global_scale, std::uint8_t* d_codes,
                           std::uint8_t* d_scales, DeviceQuantizeWorkspace& workspace, void* stream,
                           QuantizeReport* report_or_null = nullptr);

}  // namespace fp4gap
