// time_launch / time_runner (timing.hpp): graph mode and event mode, each with its floor, and the
// SM clock read through NVML.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common.cuh"
#include "fp4gap/timing.hpp"

namespace fp4gap {
namespace {

__global__ void empty_kernel() {}

// ---- NVML through dlopen: the library ships with the driver, not the toolkit, and fp4gap must run
// (without clock readings) where it is missing. Only the few entry points used are declared. ----

using NvmlReturn = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct Nvml {
  bool loaded = false;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*max_clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  // Optional: the sustained mode reads them where the driver has them.
  NvmlReturn (*power_usage_mw)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*clock_event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
};

const Nvml& nvml() {
  static Nvml lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return;
    lib.init = reinterpret_cast<NvmlReturn (*)()>(dlsym(h, "nvmlInit_v2"));
    lib.handle_by_pci_bus_id =
        reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    lib.clock_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(dlsym(h, "nvmlDeviceGetClockInfo"));
    lib.max_clock_info =
        reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(dlsym(h, "nvmlDeviceGetMaxClockInfo"));
    lib.power_usage_mw = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*)>(dlsym(h, "nvmlDeviceGetPowerUsage"));
    // Renamed in CUDA 12.2's NVML; older drivers export only the first name, newer ones both.
    void* reasons = dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr) reasons = dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons");
    lib.clock_event_reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(reasons);
    if (lib.init == nullptr || lib.handle_by_pci_bus_id == nullptr || lib.clock_info == nullptr ||
        lib.max_clock_info == nullptr) {
      return;
    }
    lib.loaded = lib.init() == 0;
  });
  return lib;
}

// The NVML handle of a CUDA ordinal, matched by PCI bus id (NVML and CUDA may number devices
// differently). nullptr when NVML is unavailable.
NvmlDevice nvml_device(int ordinal) {
  const Nvml& lib = nvml();
  if (!lib.loaded) return nullptr;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return nullptr;
  }
  NvmlDevice dev = nullptr;
  if (lib.handle_by_pci_bus_id(bus_id, &dev) != 0) return nullptr;
  return dev;
}

// Current and maximum SM clock in MHz; 0 when unknown.
struct SmClock {
  int current_mhz = 0;
  int max_mhz = 0;
};
SmClock read_sm_clock(NvmlDevice dev) {
  SmClock c;
  if (dev == nullptr) return c;
  unsigned int mhz = 0;
  if (nvml().clock_info(dev, kNvmlClockSm, &mhz) == 0) c.current_mhz = static_cast<int>(mhz);
  if (nvml().max_clock_info(dev, kNvmlClockSm, &mhz) == 0) c.max_mhz = static_cast<int>(mhz);
  return c;
}

DeviceSample read_device_sample(NvmlDevice dev, double t_ms) {
  DeviceSample s;
  s.t_ms = t_ms;
  const Nvml& lib = nvml();
  unsigned int value = 0;
  if (lib.clock_info(dev, kNvmlClockSm, &value) == 0) s.sm_clock_mhz = static_cast<int>(value);
  if (lib.power_usage_mw != nullptr && lib.power_usage_mw(dev, &value) == 0) s.power_w = value / 1000.0;
  unsigned long long reasons = 0;
  if (lib.clock_event_reasons != nullptr && lib.clock_event_reasons(dev, &reasons) == 0) s.clock_event_reasons = reasons;
  return s;
}

// Reads NVML every period_ms on a thread of its own from construction until stop(); without an
// NVML device it reads nothing. Times are milliseconds since construction (start()).
class DeviceSampler {
 public:
  using Clock = std::chrono::steady_clock;
  DeviceSampler(NvmlDevice dev, double period_ms) : dev_(dev), period_(period_ms), start_(Clock::now()) {
    if (dev_ != nullptr) thread_ = std::thread([this] { run(); });
  }
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;
  ~DeviceSampler() { stop(); }

  Clock::time_point start() const { return start_; }
  std::vector<DeviceSample> stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    return std::move(samples_);
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      const double t = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
      DeviceSample s = read_device_sample(dev_, t);
      lock.lock();
      samples_.push_back(s);
      wake_.wait_for(lock, std::chrono::duration<double, std::milli>(period_), [this] { return stopping_; });
    }
  }

  NvmlDevice dev_;
  double period_;
  Clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<DeviceSample> samples_;
  std::thread thread_;
};

void validate(const TimingOptions& o, int input_sets, const DeviceContext& device) {
  std::ostringstream os;
  if (!device.available) {
    throw RuntimeError("timing needs a CUDA device: " + device.unavailable_reason);
  }
  if (input_sets < 1) os << "input_sets >= 1 required: input_sets = " << input_sets;
  else if (o.warmup_launches < 0) os << "warmup_launches >= 0 required: warmup_launches = " << o.warmup_launches;
  else if (o.graph_launches < 1) os << "graph_launches >= 1 required: graph_launches = " << o.graph_launches;
  else if (o.graph_replays < 1) os << "graph_replays >= 1 required: graph_replays = " << o.graph_replays;
  else if (o.event_samples < 1) os << "event_samples >= 1 required: event_samples = " << o.event_samples;
  if (!os.str().empty()) throw InvalidArgument(os.str());
  validate_sustain_options(o);
}

using Launch = std::function<void(int, void*)>;

struct GraphExec {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec != nullptr) static_cast<void>(cudaGraphExecDestroy(exec));
    if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
  }
};

// The sustained mode (TimingOptions::sustain_ms): the graph replayed back to back for sustain_ms,
// at most kAhead replays queued beyond the one the host waits for, so that the host's clock and
// the device's stay within a few replays of each other (the samples' window is host time). The
// replays enqueued after the host passes half the time are the counted half.
SustainedTiming sustained_replays(cudaGraphExec_t exec, int launches, double sustain_ms, double sample_ms,
                                  NvmlDevice dev, cuda::Stream& stream) {
  constexpr int kAhead = 4;
  cuda::Event ring[kAhead];
  cuda::Event mid, end;
  DeviceSampler sampler(dev, sample_ms);
  const auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(DeviceSampler::Clock::now() - sampler.start()).count();
  };
  double mid_ms = -1.0;
  int counted = 0;
  for (int i = 0;; ++i) {
    const double now = elapsed_ms();
    if (mid_ms < 0.0 && now >= 0.5 * sustain_ms) {
      mid.record(stream.get());
      mid_ms = now;
    }
    if (now >= sustain_ms && counted > 0) break;  // a replay longer than the window still counts once
    if (i >= kAhead) CUDA_CHECK(cudaEventSynchronize(ring[i % kAhead].get()));
    CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    ring[i % kAhead].record(stream.get());
    if (mid_ms >= 0.0) ++counted;
  }
  end.record(stream.get());
  CUDA_CHECK(cudaEventSynchronize(end.get()));
  const double end_ms = elapsed_ms();
  const std::vector<DeviceSample> samples = sampler.stop();
  SustainedTiming t;
  t.replays = counted;
  t.window_ms = static_cast<double>(end.ms_since(mid));
  t.per_launch_us = 1000.0 * t.window_ms / (static_cast<double>(counted) * launches);
  t.device = summarize_device_samples(samples, mid_ms, end_ms);
  return t;
}

// Graph mode: `launches` back-to-back launches rotating over the input sets captured into one
// graph; each sample is one replay between events, divided by the launches in it. `then` runs
// after the timed replays, with the graph still instantiated (the sustained mode replays it).
std::vector<double> graph_samples(const Launch& launch, int input_sets, int launches, int replays, cuda::Stream& stream,
                                  const std::function<void(cudaGraphExec_t)>& then = {}) {
  GraphExec g;
  // Thread-local capture: other threads' CUDA calls neither join nor break this capture.
  CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < launches; ++i) launch(i % input_sets, stream.as_void());
  } catch (...) {
    cudaGraph_t broken = nullptr;
    static_cast<void>(cudaStreamEndCapture(stream.get(), &broken));
    if (broken != nullptr) static_cast<void>(cudaGraphDestroy(broken));
    static_cast<void>(cudaGetLastError());
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream.get(), &g.graph));
  CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  // Two untimed replays: the first uploads the graph to the device.
  for (int i = 0; i < 2; ++i) CUDA_CHECK(cudaGraphLaunch(g.exec, stream.get()));
  stream.synchronize();

  cuda::Event start, stop;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(replays));
  for (int r = 0; r < replays; ++r) {
    start.record(stream.get());
    CUDA_CHECK(cudaGraphLaunch(g.exec, stream.get()));
    stop.record(stream.get());
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    us.push_back(1000.0 * static_cast<double>(stop.ms_since(start)) / launches);
  }
  if (then) then(g.exec);
  return us;
}

// Event mode: L2 flushed by writing a buffer larger than it, then one launch between events.
std::vector<double> event_samples(const Launch& launch, int input_sets, int samples, cuda::DeviceBuffer<unsigned char>& flush,
                                  cuda::Stream& stream) {
  cuda::Event start, stop;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(samples));
  for (int s = 0; s < samples; ++s) {
    CUDA_CHECK(cudaMemsetAsync(flush.get(), s & 0xFF, flush.bytes(), stream.get()));
    start.record(stream.get());
    launch(s % input_sets, stream.as_void());
    stop.record(stream.get());
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    us.push_back(1000.0 * static_cast<double>(stop.ms_since(start)));
  }
  return us;
}

void launch_empty(int /*set*/, void* stream) {
  empty_kernel<<<1, 1, 0, cuda::as_stream(stream)>>>();
  CUDA_CHECK_LAUNCH();
}

}  // namespace

Timing time_launch(const std::function<void(int set, void* stream)>& launch, int input_sets,
                   const DeviceContext& device, const TimingOptions& options) {
  validate(options, input_sets, device);
  CUDA_CHECK(cudaSetDevice(device.ordinal));
  cuda::Stream stream;
  // 2x L2 of writes evicts everything the previous launch left in the cache. 256 MiB when the
  // L2 size is unknown (larger than any current L2).
  const std::int64_t flush_bytes = device.l2_bytes > 0 ? 2 * device.l2_bytes : (std::int64_t{256} << 20);
  cuda::DeviceBuffer<unsigned char> flush(static_cast<std::size_t>(flush_bytes));
  const NvmlDevice nvml_dev = nvml_device(device.ordinal);

  // The first warm-up launch takes the one-time costs (lazy loading); the launch after it sizes the
  // sample counts and the rest of the warm-up.
  if (options.warmup_launches > 0) {
    launch(0, stream.as_void());
    stream.synchronize();
  }
  double launch_us = 0.0;
  {
    cuda::Event start, stop;
    start.record(stream.get());
    launch(0, stream.as_void());
    stop.record(stream.get());
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    launch_us = std::max(1e-3, 1000.0 * static_cast<double>(stop.ms_since(start)));
  }
  const SamplePlan plan = plan_samples(options, input_sets, launch_us);
  for (int i = 1; i <= plan.more_warmup_launches; ++i) launch(i % input_sets, stream.as_void());
  stream.synchronize();

  Timing t;
  SmClock graph_clock;
  t.graph = summarize_samples(
      graph_samples(launch, input_sets, plan.graph_launches, plan.graph_replays, stream, [&](cudaGraphExec_t exec) {
        graph_clock = read_sm_clock(nvml_dev);  // the graph mode's, before the sustained load
        if (options.sustain_ms > 0.0) {
          t.sustained = sustained_replays(exec, plan.graph_launches, options.sustain_ms, options.clock_sample_ms,
                                          nvml_dev, stream);
        }
      }));
  t.event = summarize_samples(event_samples(launch, input_sets, plan.event_samples, flush, stream));
  const SmClock event_clock = read_sm_clock(nvml_dev);

  // Floors: an empty kernel through exactly the same machinery.
  const Launch empty = launch_empty;
  // At least one launch outside the capture: a lazily loaded module must not load during capture.
  for (int i = 0; i < std::max(1, options.warmup_launches); ++i) launch_empty(0, stream.as_void());
  stream.synchronize();
  t.graph_floor_us =
      summarize_samples(graph_samples(empty, 1, options.graph_launches, options.graph_replays, stream)).median_us;
  t.event_floor_us = summarize_samples(event_samples(empty, 1, options.event_samples, flush, stream)).median_us;

  // The clock during the timed work: the lower of the readings taken right after each mode.
  if (graph_clock.current_mhz > 0 || event_clock.current_mhz > 0) {
    const int lowest = graph_clock.current_mhz > 0 && event_clock.current_mhz > 0
                           ? std::min(graph_clock.current_mhz, event_clock.current_mhz)
                           : std::max(graph_clock.current_mhz, event_clock.current_mhz);
    t.sm_clock_mhz = lowest;
    const int max_mhz = graph_clock.max_mhz > 0 ? graph_clock.max_mhz : device.sm_clock_mhz;
    if (max_mhz > 0 && lowest < 0.9 * max_mhz) {
      std::ostringstream os;
      os << "SM clock " << lowest << " MHz during timing is below 90% of its maximum " << max_mhz
         << " MHz (graph mode " << graph_clock.current_mhz << " MHz, event mode " << event_clock.current_mhz
         << " MHz): throttled or power-capped, times are pessimistic";
      t.warnings.push_back(os.str());
    }
  }
  return t;
}

Timing time_runner(GemmRunner& runner, const DeviceContext& device, const TimingOptions& options) {
  if (!runner.on_device()) {
    throw InvalidArgument("time_runner: the runner is not on the device (on_device() == false); GPU timing needs a GPU runner");
  }
  return time_launch([&runner](int set, void* stream) { runner.run(set, stream); }, runner.input_sets(), device,
                     options);
}

}  // namespace fp4gap
