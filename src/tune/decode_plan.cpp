// Tile configurations of the decode kernels, their feasibility, the split-K policy and the
// launch-argument checks (include/fp4gap/decode.hpp).
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fp4gap/decode.hpp"

namespace fp4gap::decode {

std::int64_t TileConfig::activation_row_bytes() const {
  std::int64_t bytes = static_cast<std::int64_t>(windows_per_block_chunk()) * 4 * 80;
  while (bytes % 128 != 64) bytes += 16;
  return bytes;
}

std::int64_t TileConfig::reduction_scratch_bytes() const {
  return static_cast<std::int64_t>(warps - row_groups()) * mt * nt * 4 * 32 * 4;
}

std::int64_t TileConfig::stream_slot_bytes() const {
  return static_cast<std::int64_t>(mt) * (kWindowCodeBytes + kWindowScaleBytes) + static_cast<std::int64_t>(nt) * 4 * 32 * 16;
}

std::int64_t TileConfig::smem_bytes(Math math) const {
  if (streaming()) {
    return std::max(static_cast<std::int64_t>(warps) * stages * stream_slot_bytes(), reduction_scratch_bytes()) + 16;
  }
  const std::int64_t buffer = static_cast<std::int64_t>(max_m()) * activation_row_bytes();
  const std::int64_t buffers = math == Math::w4a16 ? 2 : 1;
  return std::max(buffers * buffer, reduction_scratch_bytes()) + 16;  // + the split-K "last block" flag
}

std::string TileConfig::tile() const {
  return "n" + std::to_string(rows_per_block()) + " m" + std::to_string(max_m()) + " k" + std::to_string(chunk_k());
}

std::string TileConfig::name(Math math, WeightLayout layout) const {
  std::ostringstream os;
  os << "sm80+ mma.sync " << to_string(math) << " "
     << (math == Math::w4a16 ? "bf16 x nvfp4(" : "nvfp4 x nvfp4(") << to_string(layout) << ") -> "
     << (math == Math::w4a16 ? "bf16 mma" : "fp16 mma") << " tile " << tile() << ", " << warps << " warps";
  if (k_warps > 1) os << " (" << row_groups() << " x " << k_warps << " k-split)";
  os << " x " << mt << " m16, ";
  if (streaming()) {
    os << stages << "-window cp.async ring per warp";
    if (math == Math::w4a4) os << " after an fp16 activation pass";
  } else {
    os << (math == Math::w4a16 ? "2 stages" : "1 stage + register prefetch");
  }
  return os.str();
}

const std::vector<TileConfig>& tile_configs() {
  // Must match the instantiations in src/cuda/decode/decode_gemm.cu (same order). Per activation
  // tile, a narrow (more blocks, finer balance) and a wide variant (fewer activation reads).
  static const std::vector<TileConfig> configs = {
      // mt, nt, warps, k_warps, windows per warp chunk, min blocks per SM
      {1, 1, 8, 8, 2, 2},  // M <= 8:  16 rows x 8 k parts: no global split-K down to N = 2112
      {1, 1, 8, 4, 2, 2},  // M <= 8:  32 rows x 4 k parts
      {1, 1, 4, 1, 2, 4},  // M <= 8:  64 rows, 16 warps per SM (large N)
      {1, 2, 8, 8, 1, 2},  // M <= 16: 16 rows x 8 k parts
      {1, 2, 8, 4, 2, 2},  // M <= 16: 32 rows x 4 k parts
      {1, 2, 4, 1, 2, 4},  // M <= 16: 64 rows
      {1, 4, 8, 2, 2, 2},  // M <= 32: 64 rows x 2 k parts
      {1, 4, 4, 1, 2, 3},  // M <= 32: 64 rows
      {2, 4, 4, 1, 1, 2},  // M <= 32: 2 m16 tiles per warp halve the shared-memory activation reads
      {2, 8, 4, 1, 1, 2},  // M <= 64: 128 rows
      {2, 8, 8, 1, 1, 1},  // M <= 64: 256 rows keep activation L2 reads below the weight bytes
      // Streaming (W4A16, shuffled): mt, nt, warps, k_warps, 1, min blocks, ring windows.
      {1, 1, 8, 8, 1, 2, 4},  // M <= 8:  16 rows x 8 k parts, 2 x 8 warps x 3 windows ahead per SM
      {2, 1, 8, 8, 1, 2, 3},  // M <= 8:  32 rows x 8 k parts
      {1, 1, 4, 4, 1, 4, 4},  // M <= 8:  16 rows x 4 k parts, 4 blocks per SM
      {1, 1, 16, 16, 1, 1, 3},  // M <= 8:  16 rows x 16 k parts: 4 warps per scheduler at N = 2048
      {1, 2, 4, 4, 1, 3, 3},  // M <= 16: 16 rows x 4 k parts
      {2, 2, 4, 4, 1, 2, 3},  // M <= 16: 32 rows: half the activation reads per weight byte
      // (4 m16 tiles per warp and M <= 32 variants were swept in run 5 and never won: removed.)
  };
  return configs;
}

Status check_tile_config(const TileConfig& c, Math math, const DeviceContext& device) {
  if (c.k_warps < 1 || c.warps % c.k_warps != 0) {
    return Status::invalid_problem(c.name(math, WeightLayout::shuffled) + ": warps % k_warps != 0");
  }
  if (device.cc_major < 8) {
    std::ostringstream os;
    os << c.name(math, WeightLayout::shuffled) << " needs mma.sync m16n8k16 (sm_80+); " << device.name
       << " is sm_" << device.cc_major << device.cc_minor;
    return Status::not_supported(os.str());
  }
  const std::int64_t need = c.smem_bytes(math);
  if (need > device.smem_per_block_optin) {
    std::ostringstream os;
    os << c.name(math, WeightLayout::shuffled) << " needs " << need << " bytes of shared memory per block; "
       << device.name << " allows " << device.smem_per_block_optin;
    return Status::not_supported(os.str());
  }
  return Status::ok();
}

Status check_shape(std::int64_t m, std::int64_t n, std::int64_t k, Math math) {
  std::ostringstream os;
  const std::string shape =
      "M = " + std::to_string(m) + ", N = " + std::to_string(n) + ", K = " + std::to_string(k);
  if (m < 1 || n < 1 || k < 1) {
    os << "M, N, K >= 1 required: " << shape;
    return Status::invalid_problem(os.str());
  }
  if (m > kMaxM) {
    os << "M > " << kMaxM << ": " << shape << " (decode kernel serves M <= " << kMaxM << ")";
    return Status::invalid_problem(os.str());
  }
  if (k % 32 != 0) {
    os << "K % 32 != 0: " << shape << " (NVFP4 operands need K % 32 == 0, cutlass_scaled_fp4_mm contract)";
    return Status::invalid_problem(os.str());
  }
  if (math == Math::w4a4 && n % 32 != 0) {
    os << "N % 32 != 0: " << shape << " (W4A4 needs N % 32 == 0, cutlass_scaled_fp4_mm contract)";
    return Status::invalid_problem(os.str());
  }
  return Status::ok();
}

std::int64_t Plan::workspace_partial_floats() const {
  if (split_k <= 1) return 0;
  // Each row group's k part 0 warp stores its mt * nt * 4 accumulators per lane.
  return static_cast<std::int64_t>(split_k) * row_blocks * config.row_groups() * config.mt * config.nt * 4 * 32;
}

std::int64_t Plan::activation_workspace_bytes() const {
  return dequantizes_activations() ? round_up(m * k * 2, 256) : 0;
}

std::int64_t Plan::workspace_bytes() const {
  const std::int64_t partials = split_k > 1 ? workspace_partial_floats() * 4 + round_up(row_blocks * 4, 256) : 0;
  return activation_workspace_bytes() + partials;
}

std::string Plan::describe() const {
  std::ostringstream os;
  const ChunkRange first = split_chunk_range(k_chunks, split_k, 0);
  const std::int64_t most = first.end - first.begin;
  os << config.name(math, layout) << ", split-k " << split_k << " (";
  if (k_chunks % split_k != 0) os << most - 1 << "-";
  os << most << " chunks of " << config.chunk_k() << " per split, " << blocks() << " blocks)";
  return os.str();
}

Plan make_plan(std::int64_t m, std::int64_t n, std::int64_t k, Math math, WeightLayout layout, int config_index,
               int split_k) {
  const Status shape = check_shape(m, n, k, math);
  if (!shape.is_ok()) throw InvalidArgument(shape.reason);
  const auto& configs = tile_configs();
  if (config_index < 0 || config_index >= static_cast<int>(configs.size())) {
    std::ostringstream os;
    os << "decode config_index outside [0, " << configs.size() - 1 << "]: config_index = " << config_index;
    throw InvalidArgument(os.str());
  }
  Plan p;
  p.math = math;
  p.layout = layout;
  p.m = m;
  p.n = n;
  p.k = k;
  p.config_index = config_index;
  p.config = configs[static_cast<std::size_t>(config_index)];
  if (!p.config.serves(layout)) {
    std::ostringstream os;
    os << p.config.name(math, layout) << " streams the shuffled weight only: config_index = " << config_index;
    throw InvalidArgument(os.str());
  }
  if (m > p.config.max_m()) {
    std::ostringstream os;
    os << "M > " << p.config.max_m() << " for " << p.config.name(math, layout) << ": M = " << m;
    throw InvalidArgument(os.str());
  }
  p.row_blocks = ceil_div(n, p.config.rows_per_block());
  p.k_windows = ceil_div(k, kWindowK);
  p.k_chunks = ceil_div(p.k_windows, p.config.windows_per_block_chunk());
  if (split_k < 1 || split_k > p.k_chunks || split_k > 65535) {
    std::ostringstream os;
    os << "split_k outside [1, " << p.k_chunks << "] (chunks of " << p.config.chunk_k() << " in K = " << k
       << "): split_k = " << split_k;
    throw InvalidArgument(os.str());
  }
  p.split_k = split_k;
  return p;
}

namespace {

// Cost model constants: an H200-like device. Relative values decide; docs/KERNELS-decode.md says
// where each comes from and that they are to be refit against measurements.
constexpr double kMemoryBytesPerUs = 4.27e6;   // HBM copy bandwidth
constexpr double kL2BytesPerUs = 8.0e6;        // L2 <-> SMs, all SMs together
constexpr double kL2BytesPerUsOneSm = 1.5e5;   // what one SM pulls from L2 (the last block's reads)
constexpr double kMmaFlopsPerUs = 5.0e8;       // mma.sync BF16/FP16 with dequantization, all SMs
constexpr double kWarpsForFullBandwidth = 8.0; // resident warps an SM needs to draw its share
constexpr double kReductionUs = 0.8;           // fence, counter round trip, last block's latency
constexpr double kWeightBytesPerValue = 0.5 + 1.0 / kBlockSize;
// Streaming kernel: per configuration, fit to the H200 sweep of PERF-LOG run 24 (every config x
// swept split at M = 1, 4, 8, 16 on the four decode shapes, W4A16, graph-timed, cold weights;
// docs/data/decode-streaming-sweep-run24.csv; non-negative least squares on the relative error,
// median error 7-18%; the pick is within 7% of the sweep's best at all 16 points, 0.8% on
// average). The time is launch and first-byte latency, the split-K reduction (a step for any
// split plus a cost per split), and the busiest SM's chunks, each costing more per activation row
// and more when fewer than 8 warps are resident on the SM (too few to hide the dequantize-mma
// latency). The constants are what was measured; they are not derived.
// Constants in the order of fitted_cost_features: fixed, split step, per split, chunk, chunk per
// extra row, chunk when thin.
struct StreamCost {
  int mt, nt, warps;
  FittedCost us;
};
constexpr StreamCost kStreamCosts[] = {
    {1, 1, 8, {1.1057, 1.5084, 1.0513, 0.5159, 0.0433, 0.0000}},
    {2, 1, 8, {1.4554, 2.3047, 0.6160, 0.8524, 0.0300, 0.0000}},
    {1, 1, 4, {1.6934, 1.5956, 0.6385, 0.2041, 0.0164, 0.0598}},
    {1, 1, 16, {0.0000, 0.0000, 3.1421, 1.2464, 0.0768, 0.0000}},
    {1, 2, 4, {0.3398, 2.3199, 0.7737, 0.2987, 0.0197, 0.0969}},
    {2, 2, 4, {1.3897, 2.6377, 1.0106, 0.4462, 0.0143, 0.0000}},
};
// W4A4 on the streaming kernel, behind its FP16 activation pass, and the register-prefetch W4A4
// constants below: fitted together to PERF-LOG run 96's sweep of both families (docs/data/
// decode-sweep-run96-after-quantize.csv: M = 1, 4, 8, 12, 16 on the four decode shapes), timed as
// a serving graph runs a W4A4 layer: behind the NVFP4 activation quantizer, launched
// programmatically, less the quantizer. The fit weighs the plans within 1.3x of their point's
// fastest fully and the others 0.3 (non-negative least squares on the relative error), since the
// picks are made among the near ones: weighing every plan alike, as runs 21 and 25 did, fits
// the far plans (large splits) at the near ones' expense, and those constants picked 12% slow
// plans at 8192 x 8192, M = 12 and 6144 x 2048, M = 1 behind the quantizer. These picks are
// 0.4% above the sweep's fastest on average (the earlier constants 1.6% on the same sweep), and
// 0.9% above the fastest on run 84's back-to-back sweep, which they were not fit to (before: 1.4%).
// tests/host/decode_cost_fit_test.cpp refits them from that file (nonnegative_least_squares).
constexpr StreamCost kStreamCostsW4a4[] = {
    {1, 1, 8, {1.7090, 0.2624, 1.5681, 0.4173, 0.0399, 0.0000}},
    {2, 1, 8, {3.2002, 1.6618, 0.7821, 0.7066, 0.0218, 0.0000}},
    {1, 1, 4, {3.2197, 0.9426, 0.6303, 0.1732, 0.0139, 0.0520}},
    {1, 1, 16, {0.0000, 2.7078, 2.3687, 1.3586, 0.0893, 0.0000}},
    {1, 2, 4, {1.5587, 1.4468, 0.9784, 0.2599, 0.0201, 0.0674}},
    {2, 2, 4, {3.0746, 1.6891, 1.2478, 0.3405, 0.0165, 0.0326}},
};

// Register-prefetch kernel with W4A4, M <= 16: per configuration, fit as the streaming W4A4
// constants above (run 96; first fit to run 21's back-to-back sweep, where the first-principles
// model below had picked plans up to 26% slower than the best). Its blocks run in waves of
// (SMs x resident blocks): a wave costs a block's chunks (each more per activation row), and the
// busiest SM's chunks add the bandwidth its co-resident blocks share. The constants are what was
// measured.
// Constants in the order of fitted_cost_features: fixed, split step, per split, a wave's block
// chunk, the same per extra row, the busiest SM's chunk.
struct RegisterW4a4Cost {
  int mt, nt, warps, k_warps;
  FittedCost us;
};
constexpr RegisterW4a4Cost kRegisterW4a4Costs[] = {
    {1, 1, 8, 8, {1.0220, 0.0000, 1.1982, 0.4826, 0.1037, 0.7962}},
    {1, 1, 8, 4, {1.0235, 1.0333, 0.4130, 0.8248, 0.0435, 0.6025}},
    {1, 1, 4, 1, {2.2073, 0.7301, 0.0827, 0.7776, 0.0080, 0.2878}},
    {1, 2, 8, 8, {0.0000, 1.2907, 0.9525, 0.6557, 0.0579, 0.4501}},
    {1, 2, 8, 4, {1.5063, 1.3853, 0.4211, 0.5866, 0.0622, 0.7917}},
    {1, 2, 4, 1, {2.2751, 1.3977, 0.1200, 0.7183, 0.0130, 0.3603}},
};

// The fitted constants of a config, or null where its model is the first-principles one.
const FittedCost* fitted_cost(const TileConfig& c, Math math) {
  if (c.streaming()) {
    for (const StreamCost& s : math == Math::w4a4 ? kStreamCostsW4a4 : kStreamCosts) {
      if (s.mt == c.mt && s.nt == c.nt && s.warps == c.warps) return &s.us;
    }
    throw std::logic_error("decode: no fitted cost for streaming config " + c.name(math, WeightLayout::shuffled));
  }
  if (math != Math::w4a4) return nullptr;
  for (const RegisterW4a4Cost& r : kRegisterW4a4Costs) {
    if (r.mt == c.mt && r.nt == c.nt && r.warps == c.warps && r.k_warps == c.k_warps) return &r.us;
  }
  return nullptr;
}

// Blocks of the plan resident on an SM at once (its min-blocks bound, its shared memory, and the
// blocks there are), and the slots one wave of blocks fills.
struct Residency {
  double resident, wave_slots;
};
Residency residency(const Plan& p, const DeviceContext& device) {
  const double sms = device.sm_count > 0 ? device.sm_count : 1;
  const TileConfig& c = p.config;
  const double smem_limited = device.smem_per_block_optin > 0
                                  ? std::floor(static_cast<double>(device.smem_per_block_optin) /
                                               static_cast<double>(c.smem_bytes(p.math)))
                                  : c.min_blocks_per_sm;
  const double per_sm = std::max(1.0, std::min(static_cast<double>(c.min_blocks_per_sm), smem_limited));
  return {std::max(1.0, std::min(per_sm, std::ceil(static_cast<double>(p.blocks()) / sms))), sms * per_sm};
}

bool on_swept_ladder(std::int64_t split) {
  int s = 1;
  while (s < split) s = next_swept_split(s);
  return s == split;
}

}  // namespace

bool cost_model_is_fitted(const TileConfig& config, Math math) { return fitted_cost(config, math) != nullptr; }

FittedCost fitted_cost_constants(const TileConfig& config, Math math) {
  const FittedCost* f = fitted_cost(config, math);
  if (f == nullptr) throw InvalidArgument("decode: no fitted cost model for " + config.name(math, WeightLayout::shuffled));
  return *f;
}

FittedCost fitted_cost_features(const Plan& p, const DeviceContext& device) {
  if (!cost_model_is_fitted(p.config, p.math)) {
    throw InvalidArgument("decode: no fitted cost model for " + p.describe());
  }
  const TileConfig& c = p.config;
  const Residency r = residency(p, device);
  const double chunks = busiest_sm_chunks(p, device.sm_count);
  const double extra_rows = std::min<double>(static_cast<double>(p.m), c.max_m()) - 1.0;
  const double split = p.split_k;
  if (c.streaming()) {
    const double thin = std::max(0.0, kWarpsForFullBandwidth / (r.resident * c.warps) - 1.0);
    return {1.0, split > 1 ? 1.0 : 0.0, split, chunks, chunks * extra_rows, chunks * thin};
  }
  const double waves = std::ceil(static_cast<double>(p.blocks()) / r.wave_slots);
  const double block_chunks = std::ceil(static_cast<double>(p.k_chunks) / split);
  return {1.0, split > 1 ? 1.0 : 0.0, split, waves * block_chunks, waves * block_chunks * extra_rows, chunks};
}

double busiest_sm_chunks(const Plan& p, int sm_count) {
  const int sms = std::max(1, sm_count);
  // Blocks start in launch order (all row blocks of split 0, then split 1, ...; the larger splits
  // first) on the SM that has the least work so far: the hardware's greedy dispatch.
  std::priority_queue<double, std::vector<double>, std::greater<>> load;
  for (int i = 0; i < sms; ++i) load.push(0.0);
  for (int s = 0; s < p.split_k; ++s) {
    const ChunkRange r = split_chunk_range(p.k_chunks, p.split_k, s);
    for (std::int64_t b = 0; b < p.row_blocks; ++b) {
      const double least = load.top();
      load.pop();
      load.push(least + static_cast<double>(r.end - r.begin));
    }
  }
  double busiest = 0.0;
  while (!load.empty()) {
    busiest = std::max(busiest, load.top());
    load.pop();
  }
  return busiest;
}

double estimate_plan_us(const Plan& p, const DeviceContext& device) {
  if (const FittedCost* f = fitted_cost(p.config, p.math)) {
    const FittedCost x = fitted_cost_features(p, device);
    double us = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) us += x[i] * (*f)[i];
    return us;
  }
  const double sms = device.sm_count > 0 ? device.sm_count : 1;
  // The register-prefetch kernel elsewhere: the first-principles model (never fit).
  const TileConfig& c = p.config;
  // Per chunk of one block: weight bytes from HBM; activations (re-read by every block) and the
  // fp32 partials (written, read back) from L2: the workspace is rewritten by the next launch
  // before the weight stream evicts it.
  const double rows = c.rows_per_block(), m_pad = c.max_m();
  const double chunk_cols = std::min<double>(c.chunk_k(), static_cast<double>(round_up(p.k, kWindowK)));
  const double chunk_hbm_bytes = rows * chunk_cols * kWeightBytesPerValue;
  const double chunk_l2_bytes = m_pad * chunk_cols * 2;
  const double chunk_flops = 2.0 * rows * chunk_cols * m_pad;
  const double partial_bytes = p.split_k > 1 ? rows * m_pad * 4 : 0.0;

  const double chunks = busiest_sm_chunks(p, static_cast<int>(sms));
  const double blocks_per_sm = static_cast<double>(p.blocks()) / sms;
  const double resident = residency(p, device).resident;
  const double efficiency = std::min(1.0, resident * c.warps / kWarpsForFullBandwidth);
  const double memory_us = chunks * chunk_hbm_bytes / (kMemoryBytesPerUs / sms) / efficiency;
  const double l2_us = (chunks * chunk_l2_bytes + 2 * std::ceil(blocks_per_sm) * partial_bytes) / (kL2BytesPerUs / sms);
  const double mma_us = chunks * chunk_flops / (kMmaFlopsPerUs / sms);
  double us = std::max({memory_us, l2_us, mma_us});
  // The tail: the last block of each row block reads every split's partial tile alone.
  if (p.split_k > 1) us += kReductionUs + p.split_k * partial_bytes / kL2BytesPerUsOneSm;
  return us;
}

Plan choose_plan(std::int64_t m, std::int64_t n, std::int64_t k, Math math, WeightLayout layout,
                 const DeviceContext& device) {
  const Status shape = check_shape(m, n, k, math);
  if (!shape.is_ok()) throw InvalidArgument(shape.reason);
  const auto& configs = tile_configs();
  // At M <= 16 with the shuffled weight the streaming kernel measured faster than the
  // register-prefetch one with W4A16 on every swept shape (PERF-LOG run 5): only it is weighed.
  // With W4A4 both families' models are fitted to measurements, so both are weighed. Elsewhere
  // the register-prefetch kernel, whose model is not comparable to the fitted ones.
  const bool streaming_allowed = layout == WeightLayout::shuffled && m <= kStreamingMaxM;
  const bool register_allowed = !streaming_allowed || math == Math::w4a4;
  auto allowed = [&](const TileConfig& c) { return c.streaming() ? streaming_allowed : register_allowed; };
  // In each family only the smallest activation tile that holds M: larger ones only multiply idle
  // mma columns.
  int tile_m[2] = {0, 0};  // [streaming]
  for (const TileConfig& c : configs) {
    int& t = tile_m[c.streaming() ? 1 : 0];
    if (allowed(c) && c.max_m() >= m && (t == 0 || c.max_m() < t)) t = c.max_m();
  }
  bool found = false;
  Plan best;
  double best_us = std::numeric_limits<double>::infinity();
  std::string infeasible;
  for (int i = 0; i < static_cast<int>(configs.size()); ++i) {
    const TileConfig& c = configs[static_cast<std::size_t>(i)];
    if (!allowed(c) || c.max_m() != tile_m[c.streaming() ? 1 : 0] || !c.serves(layout)) continue;
    const Status fits = check_tile_config(c, math, device);
    if (!fits.is_ok()) {
      infeasible = fits.reason;
      continue;
    }
    const std::int64_t k_chunks = ceil_div(ceil_div(k, kWindowK), c.windows_per_block_chunk());
    // A fitted model is weighed at the sweep's splits only: between them its error is larger
    // than the differences it would decide.
    const bool ladder_only = cost_model_is_fitted(c, math);
    for (std::int64_t split = 1; split <= k_chunks; ++split) {
      if (ladder_only && !on_swept_ladder(split)) continue;
      const Plan p = make_plan(m, n, k, math, layout, i, static_cast<int>(split));
      const double us = estimate_plan_us(p, device);
      // Strictly better only: ties keep the earlier config and the smaller split.
      if (us < best_us * (1.0 - 1e-9)) {
        best_us = us;
        best = p;
        found = true;
      }
    }
  }
  if (!found) throw InvalidArgument("no decode configuration fits: " + infeasible);
  return best;
}

void check_gemm_args(const Plan& plan, const GemmArgs& args) {
  std::ostringstream os;
  const std::string shape = "[M = " + std::to_string(plan.m) + ", N = " + std::to_string(plan.n) +
                            ", K = " + std::to_string(plan.k) + ", " + std::string(to_string(plan.math)) + " " +
                            std::string(to_string(plan.layout)) + "]";
  auto require = [&](const void* p, std::uintptr_t alignment, const char* what) {
    if (p == nullptr) {
      os << "decode: " << what << " is null " << shape;
      throw InvalidArgument(os.str());
    }
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
      os << "decode: " << what << " is not " << alignment << "-byte aligned: " << p << " " << shape;
      throw InvalidArgument(os.str());
    }
  };
  require(args.a, 16, plan.math == Math::w4a16 ? "A (bf16 activations)" : "A codes");
  if (plan.math == Math::w4a4) require(args.a_scales, 2, "A scales");
  require(args.w_codes, 16, "weight codes");
  require(args.w_scales, plan.layout == WeightLayout::shuffled ? 4 : 2, "weight scales");
  require(args.d, output_type_bytes(args.out_type) == 4 ? 4 : 2, "D (output)");
  const Status s = check_shape(plan.m, plan.n, plan.k, plan.math);
  if (!s.is_ok()) throw InvalidArgument(s.reason);
  if (args.workspace_bytes < plan.workspace_bytes()) {
    os << "decode: workspace of " << args.workspace_bytes << " bytes, split-k " << plan.split_k << " needs "
       << plan.workspace_bytes();
    if (plan.dequantizes_activations()) os << " (" << plan.activation_workspace_bytes() << " of them the fp16 activations)";
    os << " " << shape;
    throw InvalidArgument(os.str());
  }
  if (plan.workspace_bytes() > 0) require(args.workspace, 256, "workspace");
}

}  // namespace fp4gap::decode
