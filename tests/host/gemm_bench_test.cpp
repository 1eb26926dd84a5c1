// The GEMM pipeline with fake backends: verification decides passed/incorrect, broken backends
// are never timed, device runners get cold input sets and are checked on the first and last
// set, references are shared by backends that multiply the same values, and the roofline and
// speedup columns come out as computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "fp4gap/gemm_bench.hpp"
#include "fp4gap/reference.hpp"

namespace fp4gap {
namespace {

struct Behaviour {
  bool on_device = false;
  bool wrong_first_element = false;   // every set
  bool wrong_on_last_set = false;     // only the last input set (a rotation-copy bug)
  bool leaves_output_unwritten = false;
  bool throws_in_prepare = false;
  bool multiplies_bf16_views = false; // like cuBLAS BF16 on an NVFP4 problem
  bool supported = true;
  std::optional<LaunchFill> fill = std::nullopt;  // what launch_fill() reports
};

class FakeRunner : public GemmRunner {
 public:
  FakeRunner(const GemmInputs& inputs, int sets, Behaviour b)
      : inputs_(inputs), b_(b), outputs_(static_cast<std::size_t>(sets)) {}
  int input_sets() const override { return static_cast<int>(outputs_.size()); }
  void run(int set, void*) override {
    auto& out = outputs_.at(static_cast<std::size_t>(set));
    if (b_.leaves_output_unwritten) return;
    const ReferenceResult r = reference_gemm(a_operand(), b_operand(), alpha(), 1);
    out.resize(r.d.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = round_to_output(r.d[i], inputs_.problem.out_type);
    const bool last = set == input_sets() - 1 && set > 0;
    if (b_.wrong_first_element || (b_.wrong_on_last_set && last)) out[0] += 1.0f + 2.0f * std::fabs(out[0]);
  }
  void poison_output() override {
    const auto n = static_cast<std::size_t>(inputs_.problem.m * inputs_.problem.n);
    for (auto& o : outputs_) o.assign(n, std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<float> read_output(int set) override { return outputs_.at(static_cast<std::size_t>(set)); }
  OperandView a_operand() const override { return view(inputs_.a_view(), inputs_.a_bf16); }
  OperandView b_operand() const override { return view(inputs_.b_view(), inputs_.b_bf16); }
  double alpha() const override { return inputs_.alpha; }
  std::string config() const override { return programmatic_ ? "fake, programmatic launch" : "fake"; }
  bool on_device() const override { return b_.on_device; }
  std::optional<LaunchFill> launch_fill() const override { return b_.fill; }
  bool request_programmatic_launch() override {
    programmatic_ = true;
    return true;
  }

 private:
  OperandView view(OperandView v, const std::vector<std::uint16_t>& bf16) const {
    if (!b_.multiplies_bf16_views) return v;
    OperandView out;
    out.format = OperandFormat::bf16;
    out.rows = v.rows;
    out.k = v.k;
    out.bf16 = bf16.data();
    return out;
  }
  GemmInputs inputs_;
  Behaviour b_;
  std::vector<std::vector<float>> outputs_;
  bool programmatic_ = false;
};

class FakeBackend : public GemmBackend {
 public:
  FakeBackend(std::string name, Behaviour b) : name_(std::move(name)), b_(b) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "test double"; }
  Status supports(const GemmProblem&, const DeviceContext&) const override {
    return b_.supported ? Status::ok() : Status::not_supported("fake: needs sm_100");
  }
  std::unique_ptr<GemmRunner> prepare(const GemmInputs& inputs, int sets) override {
    prepared_sets.push_back(sets);
    if (b_.throws_in_prepare) throw RuntimeError("fake: out of memory");
    return std::make_unique<FakeRunner>(inputs, sets, b_);
  }
  std::vector<int> prepared_sets;

 private:
  std::string name_;
  Behaviour b_;
};

GemmProblem small_w4a4() {
  GemmProblem p;
  p.m = 16;
  p.n = 256;
  p.k = 512;
  return p;
}

const GemmRow& row_of(const std::vector<GemmRow>& rows, std::string_view backend) {
  for (const GemmRow& r : rows) {
    if (r.backend == backend) return r;
  }
  throw std::runtime_error("no row for " + std::string(backend));
}

TEST(GemmBench, HostBackendsPassOrAreReportedBroken) {
  FakeBackend good("good", {});
  FakeBackend wrong("wrong", {.wrong_first_element = true});
  FakeBackend unwritten("unwritten", {.leaves_output_unwritten = true});
  FakeBackend declined("declined", {.supported = false});
  FakeBackend crashing("crashing", {.throws_in_prepare = true});
  GemmBenchOptions o;
  o.seed = 7;
  o.host_timing_runs = 2;
  const std::vector<GemmRow> rows =
      run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&good, &wrong, &unwritten, &declined, &crashing}, o);
  ASSERT_EQ(rows.size(), 5u);

  const GemmRow& g = row_of(rows, "good");
  EXPECT_EQ(g.status, RowStatus::passed) << g.reason;
  EXPECT_EQ(g.reference, "cpu");
  EXPECT_EQ(g.mode, "host");
  EXPECT_EQ(g.samples, 2);
  ASSERT_TRUE(g.median_us.has_value());
  EXPECT_GT(*g.median_us, 0.0);
  EXPECT_TRUE(g.tflops.has_value());
  EXPECT_FALSE(g.pct_of_roof.has_value());  // GPU ceilings do not apply to a host backend
  EXPECT_EQ(g.config, "fake");
  EXPECT_EQ(g.repro,
            "fp4gap gemm --m 16 --n 256 --k 512 --a-format nvfp4 --b-format nvfp4 --out bf16 --backends good "
            "--seed 7 --distribution random");

  const GemmRow& w = row_of(rows, "wrong");
  EXPECT_EQ(w.status, RowStatus::incorrect);
  EXPECT_FALSE(w.reason.empty());
  EXPECT_FALSE(w.median_us.has_value()) << "a broken backend must not be timed";
  EXPECT_TRUE(w.mode.empty());
  ASSERT_TRUE(w.max_abs_error.has_value());
  EXPECT_GE(*w.max_abs_error, 1.0);

  const GemmRow& u = row_of(rows, "unwritten");
  EXPECT_EQ(u.status, RowStatus::incorrect);
  EXPECT_FALSE(u.median_us.has_value());

  const GemmRow& d = row_of(rows, "declined");
  EXPECT_EQ(d.status, RowStatus::not_supported);
  EXPECT_EQ(d.reason, "fake: needs sm_100");

  const GemmRow& c = row_of(rows, "crashing");
  EXPECT_EQ(c.status, RowStatus::error);
  EXPECT_EQ(c.reason, "fake: out of memory");
}

TEST(GemmBench, InvalidProblemGivesOneRowNamingTheRule) {
  FakeBackend good("good", {});
  FakeBackend other("other", {});
  GemmProblem p = small_w4a4();
  p.k = 48;  // NVFP4 GEMM needs K % 32 == 0
  GemmBenchOptions o;
  const std::vector<GemmRow> rows =
      run_gemm_bench({{"", p, Status::ok()}, {"preset", small_w4a4(), Status::invalid_problem("tp breaks it")}},
                     {&good, &other}, o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].backend, "-");
  // The repro reruns what was asked for, not every backend.
  EXPECT_NE(rows[0].repro.find("--backends good,other "), std::string::npos) << rows[0].repro;
  EXPECT_EQ(rows[0].status, RowStatus::invalid_problem);
  EXPECT_NE(rows[0].reason.find("K % 32"), std::string::npos) << rows[0].reason;
  EXPECT_EQ(rows[1].status, RowStatus::invalid_problem);
  EXPECT_EQ(rows[1].reason, "tp breaks it");
  EXPECT_EQ(rows[1].shape_name, "preset");
  EXPECT_TRUE(good.prepared_sets.empty());
  EXPECT_TRUE(other.prepared_sets.empty());
}

struct DeviceFixture {
  GemmBenchOptions o;
  int device_reference_calls = 0;
  DeviceFixture() {
    o.device.available = true;
    o.device.name = "test GPU";
    o.device.sm_count = 132;
    o.device.l2_bytes = 1 << 20;
    Ceilings c;
    c.memory_bytes_per_s = 4e12;
    c.bf16_flops_per_s = 800e12;
    c.fp8_flops_per_s = 1600e12;
    c.source = "test";
    o.ceilings = c;
    o.gpu_reference_min_macs = 0;  // every problem goes to the "device" reference
    o.device_reference = [this](const OperandView& a, const OperandView& b, double alpha) {
      ++device_reference_calls;
      return reference_gemm(a, b, alpha, 1);
    };
    o.time_device_runner = [this](GemmRunner& r, const GemmProblem&, Predecessor before, const DeviceContext&,
                                  const TimingOptions&) {
      predecessors.push_back(before);
      Timing t;
      // The bf16-view fake plays cuBLAS BF16 at 10 us; the NVFP4 one takes 5 us.
      const bool bf16 = r.a_operand().format == OperandFormat::bf16;
      t.graph = {bf16 ? 10.0 : 5.0, bf16 ? 9.5 : 4.5, bf16 ? 11.0 : 5.5, 20};
      t.event = {17.0, 16.0, 18.0, 30};
      t.graph_floor_us = 0.97;
      t.event_floor_us = 4.8;
      t.sm_clock_mhz = 1980;
      t.warnings = {"clock throttled"};
      return t;
    };
    // The read floor: twice the bytes' time at the memory ceiling, plus the launch floor.
    o.time_device_read = [this](double bytes, const DeviceContext&, const TimingOptions&) {
      read_bytes.push_back(bytes);
      Timing t;
      t.graph = {bytes / 2e12 * 1e6 + 1.0, 0.0, 0.0, 20};
      return t;
    };
  }
  std::vector<double> read_bytes;
  std::vector<Predecessor> predecessors;  // what each device timing was asked to run before the GEMM
};

TEST(GemmBench, DeviceRowsAreTimedOnColdSetsWithRooflineAndSpeedup) {
  DeviceFixture f;
  FakeBackend own("own", {.on_device = true});
  FakeBackend cublas(std::string(kCublasBf16Backend), {.on_device = true, .multiplies_bf16_views = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"glm5.test", small_w4a4(), Status::ok()}}, {&own, &cublas}, f.o);
  ASSERT_EQ(rows.size(), 2u);

  // NVFP4 bytes moved: A 16*256 + 16*32, B 256*256 + 256*32, D 16*256*2.
  const double nvfp4_bytes = 16.0 * 256 + 16.0 * 32 + 256.0 * 256 + 256.0 * 32 + 16.0 * 256 * 2;
  const double bf16_bytes = 16.0 * 512 * 2 + 256.0 * 512 * 2 + 16.0 * 256 * 2;
  const int sets = static_cast<int>(std::floor(2.0 * (1 << 20) / nvfp4_bytes)) + 1;
  EXPECT_EQ(own.prepared_sets, (std::vector<int>{1, sets}));  // one set to look, then the cold rotation

  const GemmRow& r = row_of(rows, "own");
  ASSERT_EQ(r.status, RowStatus::passed) << r.reason;
  EXPECT_EQ(r.reference, "gpu-reference");
  EXPECT_EQ(r.operands, "nvfp4 x nvfp4");
  EXPECT_FALSE(r.rounds_operands);
  // cuBLAS BF16 multiplies the NVFP4 values as bf16: another format, the same product.
  EXPECT_EQ(row_of(rows, std::string(kCublasBf16Backend)).operands, "bf16 x bf16");
  EXPECT_FALSE(row_of(rows, std::string(kCublasBf16Backend)).rounds_operands);
  EXPECT_EQ(r.mode, "graph");
  EXPECT_EQ(r.median_us, 5.0);
  EXPECT_EQ(r.p20_us, 4.5);
  EXPECT_EQ(r.samples, 20);
  EXPECT_EQ(r.event_median_us, 17.0);
  EXPECT_EQ(r.floor_us, 0.97);
  EXPECT_EQ(r.event_floor_us, 4.8);
  EXPECT_EQ(r.sm_clock_mhz, 1980);
  EXPECT_NE(r.warnings.find("clock throttled"), std::string::npos);
  ASSERT_TRUE(r.roof_us && r.pct_of_roof && r.pct_memory_roof && r.pct_compute_roof && r.gbps && r.tflops);
  EXPECT_DOUBLE_EQ(*r.roof_us, nvfp4_bytes / 4e12 * 1e6);
  EXPECT_DOUBLE_EQ(*r.pct_of_roof, nvfp4_bytes / 4e12 / 5e-6 * 100.0);
  EXPECT_DOUBLE_EQ(*r.pct_memory_roof, nvfp4_bytes / 4e12 / 5e-6 * 100.0);
  EXPECT_DOUBLE_EQ(*r.pct_compute_roof, 2.0 * 16 * 256 * 512 / 800e12 / 5e-6 * 100.0);
  EXPECT_DOUBLE_EQ(*r.gbps, nvfp4_bytes / 5e-6 / 1e9);
  EXPECT_DOUBLE_EQ(*r.tflops, 2.0 * 16 * 256 * 512 / 5e-6 / 1e12);
  EXPECT_EQ(r.bound, "launch_latency");
  EXPECT_NE(r.bound_reason.find("2 output tiles of 128x128 for 132 SMs"), std::string::npos) << r.bound_reason;
  EXPECT_DOUBLE_EQ(*r.speedup_vs_cublas_bf16, 2.0);

  const GemmRow& b = row_of(rows, kCublasBf16Backend);
  ASSERT_EQ(b.status, RowStatus::passed) << b.reason;
  EXPECT_DOUBLE_EQ(*b.roof_us, bf16_bytes / 4e12 * 1e6);  // its own (BF16) bytes
  EXPECT_DOUBLE_EQ(*b.pct_of_problem_roof, nvfp4_bytes / 4e12 / 10e-6 * 100.0);  // vs the NVFP4 limit

  // The read floor of each row's own bytes, timed like the row.
  EXPECT_EQ(f.read_bytes, (std::vector<double>{nvfp4_bytes, bf16_bytes}));
  ASSERT_TRUE(r.read_us && r.pct_of_read && b.read_us && b.pct_of_read);
  EXPECT_DOUBLE_EQ(*r.read_us, nvfp4_bytes / 2e12 * 1e6 + 1.0);
  EXPECT_DOUBLE_EQ(*r.pct_of_read, (nvfp4_bytes / 2e12 * 1e6 + 1.0) / 5.0 * 100.0);
  EXPECT_DOUBLE_EQ(*b.read_us, bf16_bytes / 2e12 * 1e6 + 1.0);
  EXPECT_DOUBLE_EQ(*b.pct_of_read, (bf16_bytes / 2e12 * 1e6 + 1.0) / 10.0 * 100.0);
  EXPECT_DOUBLE_EQ(*b.speedup_vs_cublas_bf16, 1.0);

  // The BF16 views hold the same values as the NVFP4 operands: one reference for both.
  EXPECT_EQ(f.device_reference_calls, 1);
}

// A runner that says how its launch fills the SMs gets that in its "why" instead of the 128 x 128
// tile count; one whose report makes no sense gets a warning, and the row stands.
TEST(GemmBench, RunnersLaunchFillReplacesTheTileCount) {
  DeviceFixture f;
  FakeBackend own("own", {.on_device = true, .fill = LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96}});
  FakeBackend nonsense("nonsense", {.on_device = true, .fill = LaunchFill{.ctas = 96, .ctas_at_once = 0, .tiles = 96}});
  // M = 16 on tiles of 64 rows: the report says how far they reach past M.
  FakeBackend padded("padded", {.on_device = true,
                                .fill = LaunchFill{.ctas = 96, .ctas_at_once = 132, .tiles = 96, .m = 16,
                                                   .tile_rows = 64, .row_tiles = 1}});
  const std::vector<GemmRow> rows =
      run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own, &nonsense, &padded}, f.o);
  const GemmRow& r = row_of(rows, "own");
  ASSERT_EQ(r.status, RowStatus::passed) << r.reason;
  EXPECT_NE(r.bound_reason.find("; launch: 96 CTAs for 132 SMs, 1 wave, 27% of SM time idle"), std::string::npos)
      << r.bound_reason;
  EXPECT_EQ(r.bound_reason.find("output tiles of"), std::string::npos) << r.bound_reason;
  const GemmRow& n = row_of(rows, "nonsense");
  ASSERT_EQ(n.status, RowStatus::passed) << n.reason;
  EXPECT_EQ(n.bound_reason.find("launch:"), std::string::npos) << n.bound_reason;
  EXPECT_NE(n.warnings.find("launch fill not shown: summarize_launch_fill needs"), std::string::npos) << n.warnings;
  const GemmRow& p = row_of(rows, "padded");
  EXPECT_NE(p.bound_reason.find("27% of SM time idle, tiles of 64 rows cover 64 for M = 16 (75% past M)"),
            std::string::npos)
      << p.bound_reason;
}

TEST(GemmBench, LastInputSetIsVerifiedToo) {
  DeviceFixture f;
  FakeBackend rotating("rotating", {.on_device = true, .wrong_on_last_set = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&rotating}, f.o);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, RowStatus::incorrect);
  EXPECT_EQ(rows[0].reason.rfind("input set ", 0), 0u) << rows[0].reason;
  EXPECT_FALSE(rows[0].median_us.has_value());
}

TEST(GemmBench, GpuReferenceBackendIsCheckedOnTheCpu) {
  DeviceFixture f;
  FakeBackend gpu_ref(std::string(kGpuReferenceBackend), {.on_device = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&gpu_ref}, f.o);
  ASSERT_EQ(rows[0].status, RowStatus::passed) << rows[0].reason;
  EXPECT_EQ(rows[0].reference, "cpu");
  EXPECT_EQ(f.device_reference_calls, 0);
}

TEST(GemmBench, FailingGpuReferenceFallsBackToTheCpuWithAWarning) {
  DeviceFixture f;
  f.o.device_reference = [](const OperandView&, const OperandView&, double) -> ReferenceResult {
    throw RuntimeError("cudaMalloc: out of memory");
  };
  FakeBackend own("own", {.on_device = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own}, f.o);
  ASSERT_EQ(rows[0].status, RowStatus::passed) << rows[0].reason;
  EXPECT_EQ(rows[0].reference, "cpu");
  EXPECT_NE(rows[0].warnings.find("GPU reference failed (cudaMalloc: out of memory)"), std::string::npos);
}

TEST(GemmBench, APredecessorNamesTheModeAndDropsTheBackToBackReadFloor) {
  DeviceFixture f;
  f.o.predecessor = Predecessor::norm_pdl;
  FakeBackend own("own", {.on_device = true});
  FakeBackend cublas(std::string(kCublasBf16Backend), {.on_device = true, .multiplies_bf16_views = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own, &cublas}, f.o);
  EXPECT_EQ(f.predecessors, (std::vector<Predecessor>{Predecessor::norm_pdl, Predecessor::norm_pdl}));
  const GemmRow& r = row_of(rows, "own");
  ASSERT_EQ(r.status, RowStatus::passed) << r.reason;
  EXPECT_EQ(r.mode, "graph-after-norm-pdl");
  EXPECT_EQ(r.median_us, 5.0);
  EXPECT_FALSE(r.read_us.has_value());  // the read floor is timed back to back: not comparable
  EXPECT_TRUE(f.read_bytes.empty());
  EXPECT_TRUE(r.pct_of_roof.has_value());
  // Speed-ups pair rows of the same mode.
  ASSERT_TRUE(r.speedup_vs_cublas_bf16.has_value());
  EXPECT_DOUBLE_EQ(*r.speedup_vs_cublas_bf16, 2.0);
}

// Behind a predecessor that lets the next kernel launch early the runner is asked to launch
// programmatically before its row is verified and timed, and its config says so; not otherwise.
TEST(GemmBench, RunnersLaunchProgrammaticallyOnlyBehindAnEarlyLaunchingPredecessor) {
  for (const Predecessor before : {Predecessor::itself, Predecessor::norm, Predecessor::norm_pdl, Predecessor::quantize}) {
    SCOPED_TRACE(std::string(to_string(before)));
    DeviceFixture f;
    f.o.predecessor = before;
    FakeBackend own("own", {.on_device = true});
    const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own}, f.o);
    const GemmRow& r = row_of(rows, "own");
    ASSERT_EQ(r.status, RowStatus::passed) << r.reason;
    const bool early = before == Predecessor::norm_pdl || before == Predecessor::quantize;
    EXPECT_EQ(predecessor_allows_early_launch(before), early);
    EXPECT_EQ(r.config, early ? "fake, programmatic launch" : "fake");
  }
}

TEST(Timing, PredecessorNamesRoundTrip) {
  for (const Predecessor p : {Predecessor::itself, Predecessor::norm, Predecessor::norm_pdl, Predecessor::quantize}) {
    EXPECT_EQ(parse_predecessor(to_string(p)), p) << to_string(p);
  }
  EXPECT_EQ(to_string(Predecessor::norm_pdl), "norm-pdl");
  EXPECT_EQ(predecessor_names(), (std::vector<std::string_view>{"itself", "norm", "norm-pdl", "quantize"}));
  try {
    parse_predecessor("gelu");
    FAIL() << "an unknown predecessor was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown predecessor 'gelu' (one of: itself, norm, norm-pdl, quantize)"),
              std::string::npos)
        << e.what();
  }
}

TEST(GemmBench, TimingFailureIsAnErrorNotAPass) {
  DeviceFixture f;
  f.o.time_device_runner = [](GemmRunner&, const GemmProblem&, Predecessor, const DeviceContext&,
                             const TimingOptions&) -> Timing {
    throw RuntimeError("cudaGraphLaunch: an illegal memory access was encountered");
  };
  FakeBackend own("own", {.on_device = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own}, f.o);
  EXPECT_EQ(rows[0].status, RowStatus::error);
  EXPECT_EQ(rows[0].reason.rfind("timing failed after the output verified: cudaGraphLaunch", 0), 0u) << rows[0].reason;
}

// The read floor is a yardstick: when it cannot be timed the row still passes, with a warning.
TEST(GemmBench, ReadFloorFailureLeavesAWarning) {
  DeviceFixture f;
  f.o.time_device_read = [](double, const DeviceContext&, const TimingOptions&) -> Timing {
    throw RuntimeError("cudaMalloc: out of memory");
  };
  FakeBackend own("own", {.on_device = true});
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&own}, f.o);
  EXPECT_EQ(rows[0].status, RowStatus::passed) << rows[0].reason;
  EXPECT_FALSE(rows[0].read_us.has_value());
  EXPECT_FALSE(rows[0].pct_of_read.has_value());
  EXPECT_NE(rows[0].warnings.find("read floor not measured: cudaMalloc: out of memory"), std::string::npos)
      << rows[0].warnings;
}

TEST(GemmBench, HostBackendsAboveTheLimitAreSkipped) {
  FakeBackend good("good", {});
  GemmBenchOptions o;
  o.host_backend_max_macs = 1000;
  const std::vector<GemmRow> rows = run_gemm_bench({{"", small_w4a4(), Status::ok()}}, {&good}, o);
  EXPECT_EQ(rows[0].status, RowStatus::not_supported);
  EXPECT_NE(rows[0].reason.find("host backend skipped"), std::string::npos);
}

TEST(GemmBench, SpeedupsNeedTheSameProblemAndMode) {
  GemmRow base;
  base.backend = std::string(kCublasBf16Backend);
  base.problem = "p";
  base.mode = "graph";
  base.median_us = 12.0;
  GemmRow other = base;
  other.backend = "own";
  other.median_us = 4.0;
  GemmRow host = other;
  host.mode = "host";
  GemmRow elsewhere = other;
  elsewhere.problem = "q";
  std::vector<GemmRow> rows = {base, other, host, elsewhere};
  fill_speedups(rows);
  EXPECT_DOUBLE_EQ(*rows[0].speedup_vs_cublas_bf16, 1.0);
  EXPECT_DOUBLE_EQ(*rows[1].speedup_vs_cublas_bf16, 3.0);
  EXPECT_FALSE(rows[2].speedup_vs_cublas_bf16.has_value());
  EXPECT_FALSE(rows[3].speedup_vs_cublas_bf16.has_value());
  EXPECT_FALSE(rows[1].sustained_vs_cublas_bf16.has_value()) << "no sustained figures, no sustained ratio";
  // The sustained ratio needs both rows' sustained figures.
  rows[0].sustained_us = 13.0;
  rows[1].sustained_us = 5.2;
  rows[3].sustained_us = 5.2;
  fill_speedups(rows);
  EXPECT_DOUBLE_EQ(*rows[1].sustained_vs_cublas_bf16, 2.5);
  EXPECT_FALSE(rows[3].sustained_vs_cublas_bf16.has_value());
  rows[0].sustained_us.reset();
  fill_speedups(rows);
  EXPECT_FALSE(rows[1].sustained_vs_cublas_bf16.has_value());
}

TEST(GemmBench, BackendSelectionAndNames) {
  register_host_backends();
  const std::vector<GemmBackend*> cpu = select_backends("cpu-reference,cpu-reference");
  ASSERT_EQ(cpu.size(), 1u);
  EXPECT_EQ(cpu[0]->name(), "cpu-reference");
  EXPECT_FALSE(select_backends("all").empty());
  try {
    select_backends("cpu-reference,nope");
    ADD_FAILURE() << "no error for an unknown backend";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend \"nope\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu-reference"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_input_distribution("exact-grid"), InputDistribution::exact_grid);
  EXPECT_EQ(input_distribution_name(InputDistribution::random), "random");
  EXPECT_THROW(parse_input_distribution("zeros"), InvalidArgument);
}

}  // namespace
}  // namespace fp4gap
