// query_device() and register_cuda_backends(): the CUDA library's entry points that must work,
// and report, on a machine without a driver or a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>
#include <sstream>
#include <string>

#include "backends/registration.hpp"
#include "cuda/common.cuh"
#include "fp4gap/cuda_api.hpp"

namespace fp4gap {
namespace {

// 13000 -> "13.0", 12080 -> "12.8" (the encoding of cudaDriverGetVersion/cudaRuntimeGetVersion).
std::string cuda_version_string(int v) {
  std::ostringstream os;
  os << v / 1000 << "." << (v % 1000) / 10;
  return os.str();
}

std::string unavailable_reason(const char* call, cudaError_t err) {
  std::ostringstream os;
  os << "no CUDA device: " << call << ": " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  return os.str();
}

std::string cublas_version_string() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return "unknown";
  }
  std::ostringstream os;
  os << major << "." << minor << "." << patch;
  return os.str();
}

}  // namespace

DeviceContext query_device(int ordinal) {
  DeviceContext dc;
  dc.ordinal = ordinal;
  // Versions are filled even when no device is usable: they explain why.
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) dc.runtime_version = cuda_version_string(runtime);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) {
    dc.driver_version = driver == 0 ? "none" : cuda_version_string(driver);
  }
  dc.cublas_version = cublas_version_string();

  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess) {
    dc.unavailable_reason = unavailable_reason("cudaGetDeviceCount", count_err);
    static_cast<void>(cudaGetLastError());  // not a sticky error: clear it so later calls start clean
    return dc;
  }
  if (count == 0) {
    dc.unavailable_reason = "no CUDA device: cudaGetDeviceCount returned 0 devices";
    return dc;
  }
  if (ordinal < 0 || ordinal >= count) {
    std::ostringstream os;
    os << "no CUDA device " << ordinal << ": " << count << " device(s) present (ordinals 0.." << count - 1 << ")";
    dc.unavailable_reason = os.str();
    return dc;
  }
  cudaDeviceProp prop{};
  const cudaError_t prop_err = cudaGetDeviceProperties(&prop, ordinal);
  if (prop_err != cudaSuccess) {
    dc.unavailable_reason = unavailable_reason("cudaGetDeviceProperties", prop_err);
    static_cast<void>(cudaGetLastError());
    return dc;
  }
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, ordinal) != cudaSuccess) {
    clock_khz = 0;
    static_cast<void>(cudaGetLastError());
  }
  dc.available = true;
  dc.name = prop.name;
  dc.cc_major = prop.major;
  dc.cc_minor = prop.minor;
  dc.sm_count = prop.multiProcessorCount;
  dc.smem_per_block_optin = static_cast<std::int64_t>(prop.sharedMemPerBlockOptin);
  dc.l2_bytes = prop.l2CacheSize;
  dc.global_mem_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  dc.sm_clock_mhz = clock_khz / 1000;
  return dc;
}

void register_cuda_backends() {
  // Registration must happen once per process: the registry rejects duplicate names.
  static std::once_flag once;
  std::call_once(once, [] { register_all_gpu_backends(); });
}

}  // namespace fp4gap
