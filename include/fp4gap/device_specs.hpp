#pragma once
// Datasheet figures of the GPUs fp4gap targets, printed beside measured ceilings and used as the
// ceilings when nothing was measured. Dense rates (the vendors' headline figures with sparsity
// are halved). A figure the project is not sure of is absent (printed "n/a").
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fp4gap/backend.hpp"
#include "fp4gap/roofline.hpp"

namespace fp4gap {

struct DeviceSpec {
  std::string_view name;          // e.g. "H200 SXM"
  std::string_view architecture;  // e.g. "Hopper sm_90"
  std::optional<int> sm_count;
  std::optional<double> bf16_dense_tflops;  // tensor cores, FP32 accumulate
  std::optional<double> fp8_dense_tflops;
  std::optional<double> fp4_dense_tflops;   // absent: no FP4 tensor cores (Hopper) or unknown
  bool has_fp4_tensor_cores = false;
  std::optional<double> memory_tb_per_s;
  std::optional<std::int64_t> smem_per_block_optin_bytes;
  std::optional<std::int64_t> l2_bytes;
  // SMs that run kernels of one CTA per SM launched in clusters of c CTAs at once, c = 1, 2, ...
  // (index c - 1): a cluster must fit inside one GPC, so this can be below the SM count. Measured
  // with the occupancy API on that GPU; empty where nobody has.
  std::span<const int> cluster_ctas_at_once;
  std::string_view sources;       // where the figures come from, one line
};

std::span<const DeviceSpec> device_specs();

// Finds the spec of a device by the name CUDA reports ("NVIDIA H200", "NVIDIA GeForce RTX 5090",
// ...) or by a spec name ("H200 SXM"); case-insensitive. Variants with other figures (H100 PCIe,
// H100/H200 NVL, GB200, RTX PRO 6000 Max-Q, laptop parts) do not match. nullptr when unknown.
const DeviceSpec* find_device_spec(std::string_view device_name);

// The datasheet figures as roofline ceilings (fp4 rate 0 without FP4 tensor cores). Empty when
// the spec lacks the memory bandwidth or the BF16 rate.
std::optional<Ceilings> datasheet_ceilings(const DeviceSpec& spec);

// The device as its datasheet describes it, for planning without one: name "<spec> (datasheet)",
// SM count, shared memory per block, L2, and the compute capability of its architecture ("sm_90"
// -> 9.0). `available` stays false: nothing can run on it.
DeviceContext datasheet_device_context(const DeviceSpec& spec);

}  // namespace fp4gap
