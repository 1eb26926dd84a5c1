// The GemmRow writers: text table, CSV with its documented stable header, JSON parsed back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "fp4gap/report.hpp"

namespace fp4gap {
namespace {

GemmRow passed_row() {
  GemmRow r;
  r.backend = "cublas-bf16";
  r.shape_name = "glm5.W13";
  r.problem = "m16 n4096 k6144 nvfp4 x nvfp4 -> bf16";
  r.m = 16;
  r.n = 4096;
  r.k = 6144;
  r.a_format = "nvfp4";
  r.b_format = "nvfp4";
  r.out_type = "bf16";
  r.status = RowStatus::passed;
  r.config = "algo 6, tile 128x64";
  r.reference = "cpu";
  r.mode = "graph";
  r.median_us = 11.8;
  r.p20_us = 11.5;
  r.p80_us = 12.25;
  r.samples = 20;
  r.event_median_us = 17.0;
  r.floor_us = 0.97;
  r.tflops = 68.2;
  r.gbps = 4012.0;
  r.pct_of_roof = 93.5;
  r.read_us = 9.4;
  r.pct_of_read = 79.66;
  r.bound = "memory";
  r.bound_reason = "moves 50.5 MB: 11.8 us at 4.27 TB/s";
  r.speedup_vs_cublas_bf16 = 1.0;
  r.max_abs_error = 0.001;
  r.max_rel_error = 0.0039;
  r.repro = "fp4gap gemm --m 16 --n 4096 --k 6144 --backends cublas-bf16";
  return r;
}

GemmRow broken_row() {
  GemmRow r = passed_row();
  r.backend = "own-kernel";
  r.status = RowStatus::incorrect;
  r.reason = "element [3, 17]: got 1.5, expected 2, tolerance 0.01, \"quoted\"";
  r.mode.clear();
  r.median_us.reset();
  r.p20_us.reset();
  r.p80_us.reset();
  r.samples = 0;
  r.event_median_us.reset();
  r.floor_us.reset();
  r.tflops.reset();
  r.gbps.reset();
  r.pct_of_roof.reset();
  r.read_us.reset();
  r.pct_of_read.reset();
  r.bound.clear();
  r.bound_reason.clear();
  r.speedup_vs_cublas_bf16.reset();
  r.repro = "fp4gap gemm --backends own-kernel";
  return r;
}

// RFC 4180 fields of one line (no embedded newlines in these tests).
std::vector<std::string> parse_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Report, CsvHeaderIsStable) {
  // Documented in docs/CLI.md; changing it breaks users' scripts, so this test pins it.
  EXPECT_EQ(csv_header(),
            "index,backend,shape_name,problem,m,n,k,a_format,b_format,out_type,status,reason,config,reference,"
            "mode,median_us,p20_us,p80_us,samples,event_median_us,event_p20_us,event_p80_us,floor_us,"
            "event_floor_us,sm_clock_mhz,sustained_us,sustained_ms,sustained_sm_clock_mhz,sustained_power_w,"
            "sustained_clock_reasons,sustained_vs_cublas_bf16,tflops,gbps,roof_us,pct_of_roof,pct_compute_roof,pct_memory_roof,"
            "pct_of_problem_roof,read_us,pct_of_read,bound,bound_reason,speedup_vs_cublas_bf16,max_abs_error,max_rel_error,warnings,"
            "repro,operands,rounds_operands");
}

TEST(Report, CsvRowsQuoteAndLeaveMissingValuesEmpty) {
  std::ostringstream out;
  write_csv(out, {passed_row(), broken_row()});
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], csv_header());
  const std::vector<std::string> header = parse_csv_line(lines[0]);
  auto column = [&](const std::vector<std::string>& fields, const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return fields.at(static_cast<std::size_t>(it - header.begin()));
  };
  const std::vector<std::string> a = parse_csv_line(lines[1]);
  const std::vector<std::string> b = parse_csv_line(lines[2]);
  ASSERT_EQ(a.size(), header.size());
  ASSERT_EQ(b.size(), header.size());
  EXPECT_EQ(column(a, "index"), "1");
  EXPECT_EQ(column(a, "backend"), "cublas-bf16");
  EXPECT_EQ(column(a, "status"), "passed");
  EXPECT_EQ(std::stod(column(a, "median_us")), 11.8);
  EXPECT_EQ(std::stod(column(a, "p80_us")), 12.25);
  EXPECT_EQ(column(a, "samples"), "20");
  EXPECT_EQ(column(a, "config"), "algo 6, tile 128x64");  // quoted because of the comma
  EXPECT_EQ(column(b, "index"), "2");
  EXPECT_EQ(column(b, "status"), "incorrect");
  EXPECT_EQ(column(b, "reason"), broken_row().reason);  // commas and quotes survive
  EXPECT_EQ(column(b, "median_us"), "");
  EXPECT_EQ(column(b, "speedup_vs_cublas_bf16"), "");
}

TEST(Report, JsonParsesBackWithNullsForMissingValues) {
  RunContext ctx;
  ctx.device.available = false;
  ctx.device.unavailable_reason = "no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected";
  Ceilings c;
  c.memory_bytes_per_s = 4.27e12;
  c.bf16_flops_per_s = 745e12;
  c.source = "test";
  ctx.ceilings = c;
  ctx.notes = {"ceilings: test"};
  const nlohmann::json j = nlohmann::json::parse(to_json(ctx, {passed_row(), broken_row()}));
  EXPECT_EQ(j["tool"], "fp4gap");
  EXPECT_EQ(j["device"]["available"], false);
  EXPECT_EQ(j["device"]["unavailable_reason"], ctx.device.unavailable_reason);
  EXPECT_EQ(j["ceilings"]["memory_bytes_per_s"].get<double>(), 4.27e12);
  EXPECT_EQ(j["notes"][0], "ceilings: test");
  ASSERT_EQ(j["rows"].size(), 2u);
  const auto& r0 = j["rows"][0];
  EXPECT_EQ(r0["backend"], "cublas-bf16");
  EXPECT_EQ(r0["m"].get<std::int64_t>(), 16);
  EXPECT_EQ(r0["median_us"].get<double>(), 11.8);
  EXPECT_EQ(r0["max_rel_error"].get<double>(), 0.0039);
  EXPECT_TRUE(r0["pct_compute_roof"].is_null());
  EXPECT_EQ(r0["bound"], "memory");
  const auto& r1 = j["rows"][1];
  EXPECT_EQ(r1["status"], "incorrect");
  EXPECT_TRUE(r1["median_us"].is_null());
  EXPECT_EQ(r1["reason"], broken_row().reason);
  // JSON rows carry exactly the CSV columns.
  std::size_t n = 0;
  for (auto it = r0.begin(); it != r0.end(); ++it) ++n;
  EXPECT_EQ(n, parse_csv_line(csv_header()).size());
}

TEST(Report, TableShowsBrokenRowsNotesAndOneReproPerRow) {
  std::ostringstream out;
  write_table(out, {passed_row(), broken_row()});
  const std::string s = out.str();
  const std::vector<std::string> lines = lines_of(s);
  ASSERT_GE(lines.size(), 3u);
  // Columns line up: "status" starts at the same offset in the header and in each row.
  const std::size_t col = lines[0].find("status");
  ASSERT_NE(col, std::string::npos);
  EXPECT_EQ(lines[1].find("passed"), col) << s;
  EXPECT_EQ(lines[2].find("BROKEN"), col) << s;
  EXPECT_NE(lines[1].find("11.8"), std::string::npos);
  EXPECT_NE(lines[1].find("1.00x"), std::string::npos);
  // %read follows %prob, right-aligned: the passed row's read floor takes 79.7% of its time.
  const std::size_t read_col = lines[0].find("%read");
  ASSERT_NE(read_col, std::string::npos) << s;
  EXPECT_GT(read_col, lines[0].find("%prob"));
  EXPECT_EQ(lines[1].find("79.7") + std::string("79.7").size(), read_col + std::string("%read").size()) << s;
  EXPECT_NE(s.find("[2] incorrect: element [3, 17]"), std::string::npos) << s;
  EXPECT_NE(s.find("[1] memory-bound: moves 50.5 MB"), std::string::npos) << s;
  EXPECT_NE(s.find("[1] fp4gap gemm --m 16 --n 4096 --k 6144 --backends cublas-bf16"), std::string::npos) << s;
  EXPECT_NE(s.find("[2] fp4gap gemm --backends own-kernel"), std::string::npos) << s;
}

TEST(Report, SustainedFiguresGoToTheNotesAndTheColumns) {
  GemmRow r = passed_row();
  r.sustained_us = 12.61;
  r.sustained_ms = 1003.4;
  r.sustained_sm_clock_mhz = 1605;
  r.sustained_power_w = 698.4;
  r.sustained_clock_reasons = "SW power cap";
  r.sustained_vs_cublas_bf16 = 0.94;
  GemmRow without_nvml = passed_row();
  without_nvml.sustained_us = 11.0;
  without_nvml.sustained_ms = 500.0;
  std::ostringstream table;
  write_table(table, {r, without_nvml, passed_row()});
  const std::string s = table.str();
  EXPECT_NE(s.find("[1] memory-bound: moves 50.5 MB: 11.8 us at 4.27 TB/s; sustained 12.6 us per launch (0.94x "
                   "cublas-bf16) over its last 1003 ms, SM 1605 MHz, 698 W, clock events: SW power cap\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("[2] memory-bound: moves 50.5 MB: 11.8 us at 4.27 TB/s; sustained 11.0 us per launch over its "
                   "last 500 ms, no NVML readings\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("[3] memory-bound: moves 50.5 MB: 11.8 us at 4.27 TB/s;"), std::string::npos) << s;
  const nlohmann::json j = nlohmann::json::parse(to_json(RunContext{}, {r, passed_row()}));
  EXPECT_EQ(j["rows"][0]["sustained_us"].get<double>(), 12.61);
  EXPECT_EQ(j["rows"][0]["sustained_sm_clock_mhz"].get<int>(), 1605);
  EXPECT_EQ(j["rows"][0]["sustained_clock_reasons"], "SW power cap");
  EXPECT_TRUE(j["rows"][1]["sustained_us"].is_null());
  EXPECT_EQ(j["rows"][1]["sustained_clock_reasons"], "");
}

TEST(Report, VerdictPerShapeNamesTheBestTheGapAndTheBroken) {
  GemmRow cublas = passed_row();
  cublas.median_us = 10.0;
  GemmRow own = passed_row();
  own.backend = "own";
  own.median_us = 5.0;
  own.pct_of_roof = 40.0;
  own.pct_of_problem_roof = 40.0;
  own.read_us = 4.1;
  own.pct_of_read = 82.0;
  GemmRow host = passed_row();
  host.backend = "cpu-reference";
  host.mode = "host";
  host.median_us = 1.0;  // faster on paper, but not a GPU measurement
  GemmRow bad = broken_row();
  bad.backend = "bad";
  GemmRow invalid;
  invalid.backend = "-";
  invalid.shape_name = "glm5.W2/tp3";
  invalid.problem = "m16 n6144 k682 nvfp4 x nvfp4 -> bf16";
  invalid.status = RowStatus::invalid_problem;
  invalid.reason = "W2 K (intermediate) = 2048 is not divisible by tp = 3";
  GemmRow untimed = host;
  untimed.shape_name = "other";
  const std::vector<std::string> v = shape_verdicts({cublas, own, host, bad, invalid, untimed});
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].rfind("glm5.W13 m16 n4096 k6144 nvfp4 x nvfp4 -> bf16: best own at 5.00 us, 40.0% of its roof, "
                       "memory-bound: moves 50.5 MB",
                       0),
            0u)
      << v[0];
  EXPECT_NE(v[0].find("; reading its bytes alone takes 4.10 us here (82.0% of its time). "), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("2.00x faster than cublas-bf16 (10.0 us)."), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("BROKEN (wrong results, not timed): bad."), std::string::npos) << v[0];
  EXPECT_EQ(v[1], "glm5.W2/tp3 m16 n6144 k682 nvfp4 x nvfp4 -> bf16: invalid problem: " + invalid.reason + ".");
  EXPECT_NE(v[2].find("no backend was verified and timed on the GPU"), std::string::npos) << v[2];
  cublas.median_us = 4.0;
  const std::vector<std::string> w = shape_verdicts({cublas, own});
  EXPECT_NE(w[0].find("best cublas-bf16 at 4.00 us"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("cublas-bf16 is the fastest here"), std::string::npos) << w[0];
  // Timed after a predecessor (fp4gap diagnose --after): the same verdict from those rows.
  cublas.mode = own.mode = "graph-after-norm";
  cublas.median_us = 10.0;
  const std::vector<std::string> after = shape_verdicts({cublas, own, host});
  EXPECT_NE(after[0].find("best own at 5.00 us"), std::string::npos) << after[0];
  EXPECT_NE(after[0].find("2.00x faster than cublas-bf16 (10.0 us)."), std::string::npos) << after[0];
}

// Where cuBLAS wins, the verdict says what holds the fastest fp4gap backend, e.g. W2 at M = 512
// on the H100 (PERF-LOG run 120: 24.33 against 20.08 us, 96 CTAs on 132 SMs).
TEST(Report, VerdictSaysWhatHoldsOurFastestBackendWhereCublasWins) {
  GemmRow cublas = passed_row();
  cublas.median_us = 20.08;
  GemmRow ours = passed_row();
  ours.backend = "fp4gap-w4a16";
  ours.median_us = 24.33;
  ours.bound = "compute";
  ours.bound_reason = "12.9 GFLOP: 13.0 us at BF16 990 TFLOP/s (memory 4.6 us); launch: 96 CTAs for 132 SMs, 1 wave, "
                      "27% of SM time idle";
  GemmRow slower = ours;
  slower.backend = "fp4gap-prefill-w4a16";
  slower.median_us = 25.0;
  slower.bound_reason = "other";
  const std::vector<std::string> v = shape_verdicts({cublas, slower, ours});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("cublas-bf16 is the fastest here: no other backend beats it. The fastest fp4gap backend, "
                      "fp4gap-w4a16 at 24.3 us (0.83x cublas-bf16), is compute-bound: 12.9 GFLOP: 13.0 us at BF16 990 "
                      "TFLOP/s (memory 4.6 us); launch: 96 CTAs for 132 SMs, 1 wave, 27% of SM time idle."),
            std::string::npos)
      << v[0];
  // Where ours is the fastest, the verdict is about it already: no second sentence.
  ours.median_us = 18.0;
  EXPECT_EQ(shape_verdicts({cublas, slower, ours})[0].find("The fastest fp4gap backend"), std::string::npos);
}

TEST(Report, VerdictGivesTheSustainedFiguresBesideTheBurst) {
  GemmRow cublas = passed_row();
  cublas.median_us = 130.0;
  cublas.sustained_us = 149.5;
  cublas.sustained_sm_clock_mhz = 1560;
  GemmRow own = passed_row();
  own.backend = "own";
  own.median_us = 128.0;
  own.sustained_us = 153.6;
  own.sustained_sm_clock_mhz = 1545;
  own.sustained_vs_cublas_bf16 = 149.5 / 153.6;
  const std::vector<std::string> v = shape_verdicts({cublas, own});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("1.02x faster than cublas-bf16 (130.0 us). Sustained: 153.6 us per launch, 0.97x cublas-bf16 at SM "
                      "1545 MHz (cublas-bf16 1560 MHz)."),
            std::string::npos)
      << v[0];
  // Without NVML: the time alone; cuBLAS the best: no ratio against itself.
  own.sustained_sm_clock_mhz.reset();
  own.median_us = 140.0;
  const std::vector<std::string> w = shape_verdicts({cublas, own});
  EXPECT_NE(w[0].find("cublas-bf16 is the fastest here: no other backend beats it. Sustained: 149.5 us per launch at SM "
                      "1560 MHz."),
            std::string::npos)
      << w[0];
  own.sustained_us.reset();
  cublas.sustained_us.reset();
  EXPECT_EQ(shape_verdicts({cublas, own})[0].find("Sustained"), std::string::npos);
}

TEST(Report, VerdictNamesTheFastestExactBackendWhenTheBestRoundsTheOperands) {
  GemmRow cublas = passed_row();
  cublas.problem = "m4096 n6144 k2048 bf16 x nvfp4 -> bf16";
  cublas.median_us = 134.6;
  cublas.operands = "bf16 x bf16";
  GemmRow fp8 = cublas;
  fp8.backend = "cublaslt-fp8";
  fp8.median_us = 83.7;
  fp8.operands = "e4m3 x e4m3";
  fp8.rounds_operands = true;
  GemmRow own = cublas;
  own.backend = "fp4gap-w4a16";
  own.median_us = 141.8;
  own.operands = "bf16 x nvfp4";
  std::vector<std::string> v = shape_verdicts({cublas, fp8, own});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("best cublaslt-fp8 at 83.7 us"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("1.61x faster than cublas-bf16 (134.6 us). It multiplies e4m3 x e4m3 roundings of the operands, "
                      "a different product; the fastest exact backend is cublas-bf16 at 134.6 us."),
            std::string::npos)
      << v[0];
  own.median_us = 130.0;
  v = shape_verdicts({cublas, fp8, own});
  EXPECT_NE(v[0].find("the fastest exact backend is fp4gap-w4a16 at 130.0 us, 1.04x cublas-bf16."), std::string::npos)
      << v[0];
  // Only rounding backends timed; an exact best: no such sentence.
  EXPECT_NE(shape_verdicts({fp8})[0].find("no backend computing the problem's own product was timed."),
            std::string::npos);
  EXPECT_EQ(shape_verdicts({cublas, own})[0].find("roundings"), std::string::npos);
  // The text table's note for the row says it too (the CSV and JSON carry the columns).
  std::ostringstream table;
  write_table(table, {cublas, fp8});
  EXPECT_NE(table.str().find("[2] memory-bound: moves 50.5 MB: 11.8 us at 4.27 TB/s; multiplies e4m3 x e4m3 roundings "
                             "of the operands, checked against their own product\n"),
            std::string::npos)
      << table.str();
  EXPECT_EQ(table.str().find("[1] memory-bound: moves 50.5 MB: 11.8 us at 4.27 TB/s; multiplies"), std::string::npos)
      << table.str();
}

TEST(Report, NumberFormatting) {
  EXPECT_EQ(format_fixed(3.14159, 2), "3.14");
  EXPECT_EQ(format_bytes(7.1e6), "7.1 MB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_us(0.8e-6), "0.8 us");
  EXPECT_EQ(format_us(23.64e-6), "23.6 us");
  EXPECT_EQ(format_us(2.5e-3), "2.50 ms");
  EXPECT_EQ(format_rate(4.27e12, "B/s"), "4.27 TB/s");
  EXPECT_EQ(format_rate(745e12, "FLOP/s"), "745 TFLOP/s");
  EXPECT_EQ(format_rate(1.287e15, "FLOP/s"), "1.29 PFLOP/s");
  EXPECT_EQ(to_string(RowStatus::not_supported), "not_supported");
}

TEST(Report, DeviceDescriptions) {
  DeviceContext none;
  none.unavailable_reason = "no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected";
  EXPECT_EQ(describe_unavailable(none), "no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected");
  none.unavailable_reason = "driver too old";
  EXPECT_EQ(describe_unavailable(none), "no CUDA device: driver too old");
  EXPECT_EQ(describe_device(none), std::vector<std::string>{"no CUDA device: driver too old"});
  DeviceContext h200;
  h200.available = true;
  h200.ordinal = 0;
  h200.name = "NVIDIA H200";
  h200.cc_major = 9;
  h200.sm_count = 132;
  h200.l2_bytes = 60LL << 20;
  const std::vector<std::string> lines = describe_device(h200);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("NVIDIA H200, sm_90, 132 SMs"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("L2 60.0 MiB"), std::string::npos) << lines[0];
}

TEST(Report, CeilingsJsonRoundTripAndErrors) {
  Ceilings c;
  c.memory_bytes_per_s = 4.27e12;
  c.bf16_flops_per_s = 745.5e12;
  c.fp8_flops_per_s = 1287e12;
  c.fp4_flops_per_s = 0;
  c.source = "measured on NVIDIA H200 2026-12-02";
  const Ceilings back = ceilings_from_json(ceilings_to_json(c, "NVIDIA H200"));
  EXPECT_EQ(back.memory_bytes_per_s, c.memory_bytes_per_s);
  EXPECT_EQ(back.bf16_flops_per_s, c.bf16_flops_per_s);
  EXPECT_EQ(back.fp8_flops_per_s, c.fp8_flops_per_s);
  EXPECT_EQ(back.fp4_flops_per_s, 0.0);
  EXPECT_EQ(back.source, c.source);
  auto error_of = [](const std::string& text) {
    try {
      ceilings_from_json(text);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("object"), std::string::npos);
  EXPECT_NE(error_of(R"({"bf16_flops_per_s": 1, "fp8_flops_per_s": 0, "fp4_flops_per_s": 0})")
                .find("\"memory_bytes_per_s\" is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"memory_bytes_per_s": 0, "bf16_flops_per_s": 1, "fp8_flops_per_s": 0, "fp4_flops_per_s": 0})")
                .find("\"memory_bytes_per_s\" must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"memory_bytes_per_s": 1, "bf16_flops_per_s": "x", "fp8_flops_per_s": 0, "fp4_flops_per_s": 0})")
                .find("\"bf16_flops_per_s\" is not a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"memory_bytes_per_s": 1, "bf16_flops_per_s": 1, "fp8_flops_per_s": -1, "fp4_flops_per_s": 0})")
                .find("\"fp8_flops_per_s\" must be >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4gap
