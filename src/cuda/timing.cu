// time_launch / time_runner (timing.hpp): graph mode and event mode, each with its floor, and the
// SM clock read through NVML.
#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>
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

// Graph mode: `launches` back-to-back launches rotating over the input sets captured into one
// graph; each sample is one replay between events, divided by the launches in it.
std::vector<double> graph_samples(const Launch& launch, int input_sets, int launches, int replays, cuda::Stream& stream) {
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
  t.graph = summarize_samples(graph_samples(launch, input_sets, plan.graph_launches, plan.graph_replays, stream));
  const SmClock graph_clock = read_sm_clock(nvml_dev);
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
