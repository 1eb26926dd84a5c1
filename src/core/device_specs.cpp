#include "fp4gap/device_specs.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace fp4gap {
namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * 1024;

// Shared memory per block with the opt-in attribute, per compute capability: CUDA C++
// Programming Guide, "Technical Specifications per Compute Capability": 227 KB on 9.0 and 10.0,
// 99 KB on 12.0.
constexpr std::int64_t kSmemOptinSm90 = 227 * kKiB;
constexpr std::int64_t kSmemOptinSm100 = 227 * kKiB;
constexpr std::int64_t kSmemOptinSm120 = 99 * kKiB;

// cudaOccupancyMaxActiveClusters for every prefill configuration (one CTA per SM) and cluster
// size 1..8: the project's H200 (PERF-LOG run 26, docs/data/prefill-sweep-run26.csv) and an H100
// SXM (run 154, `fp4gap plan` on the card) answered the same, both being 132-SM GH100s.
constexpr std::array<int, 8> kGh100ClusterCtas = {132, 132, 117, 120, 110, 102, 105, 120};

const std::array<DeviceSpec, 5> kSpecs = {{
    {
        .name = "H100 SXM",
        .architecture = "Hopper sm_90",
        .sm_count = 132,               // H100 whitepaper: 132 SMs on H100 SXM5
        .bf16_dense_tflops = 989.5,    // H100 datasheet (SXM): 1,979 BF16 with sparsity
        .fp8_dense_tflops = 1979.0,    // H100 datasheet (SXM): 3,958 FP8 with sparsity
        .fp4_dense_tflops = std::nullopt,  // no FP4 tensor cores on Hopper
        .has_fp4_tensor_cores = false,
        .memory_tb_per_s = 3.35,       // H100 datasheet (SXM): 3.35 TB/s HBM3
        .smem_per_block_optin_bytes = kSmemOptinSm90,
        .l2_bytes = 50 * kMiB,         // H100 whitepaper: 50 MB L2
        .cluster_ctas_at_once = kGh100ClusterCtas,
        .sources = "NVIDIA H100 Tensor Core GPU datasheet (SXM; sparse rates halved), "
                   "H100 architecture whitepaper (SMs, L2), cluster occupancy as CUDA reports it on an H100 SXM, "
                   "CUDA C++ Programming Guide (smem)",
    },
    {
        .name = "H200 SXM",
        .architecture = "Hopper sm_90",
        .sm_count = 132,               // same GH100 configuration as H100 SXM; CUDA reports 132
        .bf16_dense_tflops = 989.5,    // H200 datasheet (SXM): 1,979 BF16 with sparsity
        .fp8_dense_tflops = 1979.0,    // H200 datasheet (SXM): 3,958 FP8 with sparsity
        .fp4_dense_tflops = std::nullopt,
        .has_fp4_tensor_cores = false,
        .memory_tb_per_s = 4.8,        // H200 datasheet (SXM): 4.8 TB/s HBM3e
        .smem_per_block_optin_bytes = kSmemOptinSm90,
        .l2_bytes = 60 * kMiB,         // cudaDeviceProp::l2CacheSize on the project's H200
        .cluster_ctas_at_once = kGh100ClusterCtas,
        .sources = "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse rates halved), "
                   "L2 and cluster occupancy as CUDA reports them on an H200, CUDA C++ Programming Guide (smem)",
    },
    {
        .name = "B200",
        .architecture = "Blackwell sm_100",
        .sm_count = 148,               // as CUDA reports it on a B200 (not in the datasheet)
        .bf16_dense_tflops = 2250.0,   // HGX B200 datasheet, per GPU: 4.5 PFLOPS BF16 with sparsity
        .fp8_dense_tflops = 4500.0,    // HGX B200 datasheet, per GPU: 9 PFLOPS FP8 with sparsity
        .fp4_dense_tflops = 9000.0,    // HGX B200 datasheet, per GPU: 18 PFLOPS FP4 with sparsity
        .has_fp4_tensor_cores = true,
        .memory_tb_per_s = 8.0,        // DGX B200 datasheet: 64 TB/s over 8 GPUs
        .smem_per_block_optin_bytes = kSmemOptinSm100,
        .l2_bytes = std::nullopt,      // not published in a form the project could confirm
        .cluster_ctas_at_once = {},  // not measured
        .sources = "NVIDIA HGX/DGX B200 datasheets (per GPU; sparse rates halved), "
                   "SM count as CUDA reports it, CUDA C++ Programming Guide (smem)",
    },
    {
        .name = "RTX PRO 6000 Blackwell",
        .architecture = "Blackwell sm_120",
        .sm_count = 188,               // RTX Blackwell whitepaper: 188 SMs (24,064 CUDA cores)
        .bf16_dense_tflops = 503.8,    // RTX Blackwell whitepaper: FP16/BF16, FP32 accumulate
        .fp8_dense_tflops = 1007.6,    // RTX Blackwell whitepaper: FP8, FP32 accumulate
        .fp4_dense_tflops = 2015.2,    // whitepaper; datasheet: 4,000 AI TOPS (FP4, sparse)
        .has_fp4_tensor_cores = true,
        .memory_tb_per_s = 1.792,      // datasheet: 1,792 GB/s GDDR7
        .smem_per_block_optin_bytes = kSmemOptinSm120,
        .l2_bytes = 128 * kMiB,        // RTX Blackwell whitepaper: 128 MB L2
        .cluster_ctas_at_once = {},  // not measured
        .sources = "NVIDIA RTX PRO 6000 Blackwell datasheet, NVIDIA RTX Blackwell GPU "
                   "architecture whitepaper (dense rates, FP32 accumulate), CUDA C++ Programming Guide (smem)",
    },
    {
        .name = "RTX 5090",
        .architecture = "Blackwell sm_120",
        .sm_count = 170,               // RTX Blackwell whitepaper: 170 SMs (21,760 CUDA cores)
        .bf16_dense_tflops = 209.5,    // whitepaper: FP16/BF16 with FP32 accumulate (GeForce: half
                                       // the FP16-accumulate rate)
        .fp8_dense_tflops = 419.0,     // whitepaper: FP8 with FP32 accumulate
        .fp4_dense_tflops = 1676.0,    // whitepaper; 3,352 AI TOPS (FP4, sparse) halved
        .has_fp4_tensor_cores = true,
        .memory_tb_per_s = 1.792,      // 1,792 GB/s GDDR7
        .smem_per_block_optin_bytes = kSmemOptinSm120,
        .l2_bytes = 96 * kMiB,         // whitepaper: 96 MB L2
        .cluster_ctas_at_once = {},  // not measured
        .sources = "NVIDIA GeForce RTX 5090 specifications, NVIDIA RTX Blackwell GPU architecture "
                   "whitepaper (dense rates, FP32 accumulate), CUDA C++ Programming Guide (smem)",
    },
}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

std::span<const DeviceSpec> device_specs() { return kSpecs; }

const DeviceSpec* find_device_spec(std::string_view device_name) {
  const std::string n = lower(device_name);
  for (const DeviceSpec& s : kSpecs) {
    if (n == lower(s.name)) return &s;
  }
  auto spec = [](std::string_view name) -> const DeviceSpec* {
    for (const DeviceSpec& s : kSpecs) {
      if (s.name == name) return &s;
    }
    return nullptr;
  };
  // CUDA names: "NVIDIA H100 80GB HBM3" (SXM) vs "NVIDIA H100 PCIe" / "NVIDIA H100 NVL", which
  // have other clocks and memory.
  if (contains(n, "h100") && !contains(n, "pcie") && !contains(n, "nvl")) return spec("H100 SXM");
  if (contains(n, "h200") && !contains(n, "nvl")) return spec("H200 SXM");
  if (contains(n, "b200") && !contains(n, "gb200")) return spec("B200");
  if (contains(n, "rtx pro 6000") && contains(n, "blackwell") && !contains(n, "max-q")) {
    return spec("RTX PRO 6000 Blackwell");
  }
  if (contains(n, "rtx 5090") && !contains(n, "laptop")) return spec("RTX 5090");
  return nullptr;
}

std::optional<Ceilings> datasheet_ceilings(const DeviceSpec& spec) {
  if (!spec.memory_tb_per_s || !spec.bf16_dense_tflops) return std::nullopt;
  Ceilings c;
  c.memory_bytes_per_s = *spec.memory_tb_per_s * 1e12;
  c.bf16_flops_per_s = *spec.bf16_dense_tflops * 1e12;
  c.fp8_flops_per_s = spec.fp8_dense_tflops.value_or(0.0) * 1e12;
  c.fp4_flops_per_s = spec.has_fp4_tensor_cores ? spec.fp4_dense_tflops.value_or(0.0) * 1e12 : 0.0;
  c.source = "datasheet " + std::string(spec.name);
  return c;
}

DeviceContext datasheet_device_context(const DeviceSpec& spec) {
  DeviceContext d;
  d.name = std::string(spec.name) + " (datasheet)";
  d.sm_count = spec.sm_count.value_or(0);
  d.smem_per_block_optin = spec.smem_per_block_optin_bytes.value_or(0);
  d.l2_bytes = spec.l2_bytes.value_or(0);
  const std::size_t at = spec.architecture.find("sm_");
  if (at != std::string_view::npos) {
    int cc = 0;
    for (std::size_t i = at + 3; i < spec.architecture.size() && std::isdigit(static_cast<unsigned char>(spec.architecture[i])); ++i) {
      cc = cc * 10 + (spec.architecture[i] - '0');
    }
    d.cc_major = cc / 10;
    d.cc_minor = cc % 10;
  }
  return d;
}

}  // namespace fp4gap
