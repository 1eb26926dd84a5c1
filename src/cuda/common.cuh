#pragma once
// CUDA plumbing shared by every file of the CUDA library: error checks that throw
// fp4gap::RuntimeError (never abort, so a failing backend is reported, not fatal), an owning
// device buffer, and an owning stream.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fp4gap/status.hpp"

namespace fp4gap::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << call << " failed: " << cudaGetErrorName(err) << " ("
     << cudaGetErrorString(err) << ")";
  throw RuntimeError(os.str());
}

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_<unknown>";
  }
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << call << " failed: " << cublas_status_name(s) << " (status "
     << static_cast<int>(s) << ")";
  throw RuntimeError(os.str());
}

}  // namespace fp4gap::cuda

// Throw fp4gap::RuntimeError with file:line, the call text and the error string.
#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    const cudaError_t fp4gap_cuda_err_ = (call);                                      \
    if (fp4gap_cuda_err_ != cudaSuccess)                                              \
      ::fp4gap::cuda::throw_cuda_error(fp4gap_cuda_err_, #call, __FILE__, __LINE__);  \
  } while (0)

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    const cublasStatus_t fp4gap_cublas_st_ = (call);                                    \
    if (fp4gap_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::fp4gap::cuda::throw_cublas_error(fp4gap_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks the launch configuration of the kernel launched just before (asynchronous errors show
// up at the next synchronizing call).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace fp4gap::cuda {

// Owning device allocation of `count` elements of T. Move-only; frees in the destructor
// (errors there are ignored: destructors must not throw).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, count_ * sizeof(T)));
      ptr_ = static_cast<T*>(p);
    }
  }
  // Allocates and copies `host` to the device (blocking).
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { reset(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }

  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }

  void upload(const T* host, std::size_t count) {
    if (count > count_) {
      std::ostringstream os;
      os << "DeviceBuffer::upload: " << count << " elements into a buffer of " << count_;
      throw InvalidArgument(os.str());
    }
    if (count > 0) CUDA_CHECK(cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }

  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

  void fill_bytes(int value) {
    if (count_ > 0) CUDA_CHECK(cudaMemset(ptr_, value, bytes()));
  }

  void reset() noexcept {
    if (ptr_ != nullptr) static_cast<void>(cudaFree(ptr_));
    ptr_ = nullptr;
    count_ = 0;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// Owning non-blocking stream (non-blocking so that work on the legacy default stream by other
// code never serializes with timed work).
class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }

  cudaStream_t get() const { return stream_; }
  void* as_void() const { return static_cast<void*>(stream_); }
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// The cudaStream_t behind the `void* stream` of the public interfaces.
inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Owning CUDA event.
class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() {
    if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(event_, s)); }
  // Milliseconds from `start` to this event (both must have completed).
  float ms_since(const Event& start) const {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Lets `kernel` request `dynamic_bytes` of dynamic shared memory (above the default 48 KB) and
// asks the driver for the SM split of L1 / shared memory with the most shared memory whenever it
// runs. Kernels that follow each other on a stream (an activation pass, then the GEMM that reads
// its output) otherwise get different splits, and switching an SM's split between them cost 3.5
// us per launch of the W4A4 decode pass and kernel (PERF-LOG run 80). Not a stream operation:
// call it when preparing, outside any graph capture.
template <typename Kernel>
void set_shared_memory_attributes(Kernel* kernel, std::int64_t dynamic_bytes) {
  if (dynamic_bytes > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_bytes)));
  }
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  static_cast<int>(cudaSharedmemCarveoutMaxShared)));
}

// `sets` copies of `bytes` host bytes, back to back on the device: set s starts at s * bytes (the
// rotating input sets of the timing harness). One upload, then device-to-device copies.
inline DeviceBuffer<std::uint8_t> upload_sets(const void* host, std::size_t bytes, int sets) {
  DeviceBuffer<std::uint8_t> d(bytes * static_cast<std::size_t>(sets));
  d.upload(static_cast<const std::uint8_t*>(host), bytes);
  for (int s = 1; s < sets; ++s) {
    CUDA_CHECK(cudaMemcpy(d.get() + bytes * static_cast<std::size_t>(s), d.get(), bytes, cudaMemcpyDeviceToDevice));
  }
  return d;
}

inline unsigned int grid_size_1d(std::int64_t n, unsigned int block) {
  const std::int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

}  // namespace fp4gap::cuda
