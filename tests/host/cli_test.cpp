// Runs the built fp4gap binary (FP4GAP_CLI_PATH) the way a user does and checks exit codes,
// files and output. Scratch files go under FP4GAP_TEST_TMPDIR.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp4gap/decode.hpp"
#include "fp4gap/prefill.hpp"
#include "fp4gap/npy.hpp"
#include "fp4gap/quantize.hpp"
#include "fp4gap/report.hpp"
#include "fp4gap/tune_cache.hpp"

namespace fp4gap {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string out, err;
};

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(FP4GAP_TEST_TMPDIR) / "cli" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// `env`: variable assignments placed before the command, e.g. "FP4GAP_TUNE_CACHE='x.json'".
CliResult run_cli(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  // ctest -j runs each test in its own process: the pid keeps their capture files apart.
  const fs::path dir = fs::path(FP4GAP_TEST_TMPDIR) / "cli" / ("runs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / ("out" + std::to_string(counter) + ".txt");
  const fs::path err = dir / ("err" + std::to_string(counter) + ".txt");
  ++counter;
  const std::string cmd = env + (env.empty() ? "'" : " '") + FP4GAP_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" +
                          err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(out);
  r.err = read_all(err);
  return r;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

bool device_present() {
  static const bool present = !has(run_cli("info").out, "no CUDA device");
  return present;
}

// A little-endian C-order float32 .npy, version 1.0.
void write_f32_npy(const fs::path& path, std::int64_t rows, std::int64_t cols, const std::vector<float>& v) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  f.write(len_bytes, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// The shape and payload of a .npy written by the tool (read independently of the library).
struct Npy {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::string payload;
};
Npy read_npy_file(const fs::path& path) {
  const std::string all = read_all(path);
  EXPECT_GE(all.size(), 10u);
  EXPECT_EQ(all.substr(0, 6), "\x93NUMPY");
  std::size_t header_len, offset;
  if (all[6] == 1) {
    header_len = static_cast<unsigned char>(all[8]) | (static_cast<unsigned char>(all[9]) << 8);
    offset = 10;
  } else {
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(all[8 + i]);
    offset = 12;
  }
  const std::string header = all.substr(offset, header_len);
  Npy n;
  const std::size_t d = header.find("'descr': '");
  n.descr = header.substr(d + 10, header.find('\'', d + 10) - (d + 10));
  const std::size_t s = header.find("'shape': (");
  std::istringstream dims(header.substr(s + 10, header.find(')', s) - (s + 10)));
  for (std::string item; std::getline(dims, item, ',');) {
    if (item.find_first_not_of(' ') != std::string::npos) n.shape.push_back(std::stoll(item));
  }
  n.payload = all.substr(offset + header_len);
  return n;
}

std::vector<float> test_matrix(std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) {
    // Deterministic, signed, spread over a few octaves; one large value sets amax.
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * std::ldexp(1.0, static_cast<int>(i % 5) - 2));
  }
  v[5] = -13.25f;
  return v;
}

TEST(Cli, VersionAndUsageErrors) {
  const CliResult v = run_cli("--version");
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_TRUE(has(v.out, "fp4gap 0.")) << v.out;
  const CliResult none = run_cli("");
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(has(none.err, "error:")) << none.err;
  const CliResult bad = run_cli("gemm --no-such-option");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.err, "error:")) << bad.err;
}

TEST(Cli, InfoReportsTheDeviceOrItsAbsenceConsistently) {
  const CliResult r = run_cli("info");
  ASSERT_EQ(r.code, 0) << r.err;
  const bool absent = has(r.out, "no CUDA device");
  const bool listed = has(r.out, "CUDA devices:");
  EXPECT_NE(absent, listed) << "exactly one of the two must be printed:\n" << r.out;
  EXPECT_TRUE(has(r.out, "CUDA architectures compiled:")) << r.out;
  EXPECT_TRUE(has(r.out, "H200 SXM")) << r.out;
  EXPECT_TRUE(has(r.out, "sources:")) << r.out;
  // Every registered backend by name with what it is, the dispatching ones with their boundary.
  for (const char* name : {"cpu-reference: ", "cublas-bf16: ", "fp4gap-decode-w4a16: ", "fp4gap-prefill-w4a4: "}) {
    EXPECT_TRUE(has(r.out, std::string("\n  ") + name)) << name << "\n" << r.out;
  }
  EXPECT_TRUE(has(r.out, "\n  fp4gap-w4a16: fp4gap's pick for bf16 x NVFP4: the decode kernel up to M = 14")) << r.out;
}

TEST(Cli, QuantizeWritesThreeFilesBitIdenticallyAcrossRuns) {
  const std::int64_t rows = 4, cols = 64;
  const fs::path dir = scratch("quantize");
  const std::vector<float> x = test_matrix(rows, cols);
  write_f32_npy(dir / "x.npy", rows, cols, x);
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  for (const char* sub : {"a", "b"}) {
    const CliResult r = run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" +
                                (dir / sub / "P").string() + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << "a clean input gives no warning: " << r.err;
  }
  for (const char* file : {"P.codes.npy", "P.scales.npy", "P.json"}) {
    ASSERT_TRUE(fs::exists(dir / "a" / file)) << file;
    EXPECT_EQ(read_all(dir / "a" / file), read_all(dir / "b" / file)) << file << " differs between two runs";
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "a"), fs::directory_iterator()), 3);

  const Npy codes = read_npy_file(dir / "a" / "P.codes.npy");
  const Npy scales = read_npy_file(dir / "a" / "P.scales.npy");
  EXPECT_EQ(codes.descr, "|u1");
  EXPECT_EQ(codes.shape, (std::vector<std::int64_t>{rows, cols / 2}));
  EXPECT_EQ(scales.shape, (std::vector<std::int64_t>{rows, cols / 16}));

  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float gs = 2688.0f / amax;
  const nlohmann::json j = nlohmann::json::parse(read_all(dir / "a" / "P.json"));
  EXPECT_EQ(static_cast<float>(j["global_scale"].get<double>()), gs);
  EXPECT_EQ(j["shape"], (std::vector<std::int64_t>{rows, cols}));
  EXPECT_EQ(j["layout"], "linear");
  EXPECT_EQ(j["report"]["clean"], true);
  EXPECT_EQ(j["report"]["nan_count"], 0);

  // The files hold what the library's quantizer produces for the same data.
  const Nvfp4Matrix expected = quantize_nvfp4(x, rows, cols, QuantizeOptions{});
  EXPECT_EQ(codes.payload, std::string(expected.codes.begin(), expected.codes.end()));
  EXPECT_EQ(scales.payload, std::string(expected.scales.begin(), expected.scales.end()));
}

TEST(Cli, QuantizeSwizzledWithStaticGlobalScaleAndDirtyInput) {
  const std::int64_t rows = 3, cols = 32;
  const fs::path dir = scratch("quantize_swizzled");
  std::vector<float> x = test_matrix(rows, cols);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  write_f32_npy(dir / "x.npy", rows, cols, x);
  const CliResult r = run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" +
                              (dir / "Q").string() + "' --layout swizzled --global-scale 3.5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "warning:")) << "NaN must be reported: " << r.err;
  const Npy scales = read_npy_file(dir / "Q.scales.npy");
  EXPECT_EQ(scales.shape, (std::vector<std::int64_t>{128, 4}));  // round_up(3,128), round_up(32/16,4)
  const nlohmann::json j = nlohmann::json::parse(read_all(dir / "Q.json"));
  EXPECT_EQ(static_cast<float>(j["global_scale"].get<double>()), 3.5f);
  EXPECT_EQ(j["layout"], "swizzled");
  EXPECT_EQ(j["report"]["nan_count"], 1);
  EXPECT_EQ(j["report"]["first_nan"], (std::vector<std::int64_t>{1, 8}));
}

TEST(Cli, QuantizeRejectsKNotAMultipleOf16) {
  const fs::path dir = scratch("quantize_bad_k");
  write_f32_npy(dir / "x.npy", 2, 100, test_matrix(2, 100));
  const CliResult r =
      run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" + (dir / "P").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "error:")) << r.err;
  EXPECT_TRUE(has(r.err, "% 16")) << "the message names the rule: " << r.err;
  EXPECT_TRUE(has(r.err, "100")) << "and quotes the value: " << r.err;
  EXPECT_FALSE(fs::exists(dir / "P.codes.npy"));
  const CliResult gs = run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" +
                               (dir / "P").string() + "' --global-scale 0");
  EXPECT_EQ(gs.code, 2);
  EXPECT_TRUE(has(gs.err, "--global-scale")) << gs.err;
  const CliResult missing = run_cli("quantize --input '" + (dir / "nope.npy").string() + "' --output-prefix P");
  EXPECT_EQ(missing.code, 2);
}

// shuffle: quantize's files in, the decode kernels' layout out, byte for byte what the library's
// shuffle_weight_for_decode gives; a NaN scale byte is refused naming its row and block.
TEST(Cli, ShuffleWritesTheDecodeLayoutOfQuantizesFiles) {
  const std::int64_t rows = 20, cols = 96;  // N not a multiple of 16, K not a multiple of 128
  const fs::path dir = scratch("shuffle");
  const std::vector<float> x = test_matrix(rows, cols);
  write_f32_npy(dir / "x.npy", rows, cols, x);
  ASSERT_EQ(run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" + (dir / "P").string() +
                    "' --layout swizzled").code, 0);
  QuantizeOptions swizzled;
  swizzled.layout = ScaleLayout::swizzled_128x4;
  const Nvfp4Matrix q = quantize_nvfp4(x, rows, cols, swizzled);
  for (decode::Math math : {decode::Math::w4a16, decode::Math::w4a4}) {
    const std::string m(decode::to_string(math));
    const CliResult r = run_cli("shuffle --input '" + (dir / "P").string() + "' --output-prefix '" +
                                (dir / ("S" + m)).string() + "' --math " + m);
    ASSERT_EQ(r.code, 0) << r.err;
    const decode::ShuffledWeight want = decode::shuffle_weight_for_decode(q, math);
    const Npy codes = read_npy_file(dir / ("S" + m + ".codes.npy"));
    const Npy scales = read_npy_file(dir / ("S" + m + ".scales.npy"));
    EXPECT_EQ(codes.shape, (std::vector<std::int64_t>{2 * 1 * 1024}));  // 2 tiles of 16 rows x 1 window
    EXPECT_EQ(codes.payload, std::string(want.codes.begin(), want.codes.end())) << m;
    EXPECT_EQ(scales.payload, std::string(want.scales.begin(), want.scales.end())) << m;
    const nlohmann::json j = nlohmann::json::parse(read_all(dir / ("S" + m + ".json")));
    EXPECT_EQ(j["math"], m);
    EXPECT_EQ(j["shape"], (std::vector<std::int64_t>{rows, cols}));
    EXPECT_EQ(j["tiles"]["n_tiles"], 2);
    EXPECT_EQ(j["tiles"]["k_windows"], 1);
  }

  // A NaN scale byte (0x7F) in row 3, block 2 of a linear-layout weight.
  std::vector<std::uint8_t> bad_scales(static_cast<std::size_t>(rows * cols / 16), 0x38);
  bad_scales[3 * (cols / 16) + 2] = 0x7F;
  ASSERT_EQ(run_cli("quantize --input '" + (dir / "x.npy").string() + "' --output-prefix '" + (dir / "L").string() +
                    "'").code, 0);
  write_npy((dir / "L.scales.npy").string(), NpyArray{"u1", {rows, cols / 16}, bad_scales});
  const CliResult nan = run_cli("shuffle --input '" + (dir / "L").string() + "' --output-prefix '" + (dir / "T").string() + "'");
  EXPECT_EQ(nan.code, 2) << nan.err;
  EXPECT_TRUE(has(nan.err, "row 3")) << nan.err;
  EXPECT_FALSE(fs::exists(dir / "T.codes.npy"));

  // Files that disagree with the sidecar are refused with both shapes.
  write_npy((dir / "L.scales.npy").string(), NpyArray{"u1", {rows, 1}, std::vector<std::uint8_t>(rows, 0x38)});
  const CliResult shape = run_cli("shuffle --input '" + (dir / "L").string() + "' --output-prefix '" + (dir / "T").string() + "'");
  EXPECT_EQ(shape.code, 2);
  EXPECT_TRUE(has(shape.err, "(20, 6)") && has(shape.err, "(20, 1)")) << shape.err;
  const CliResult missing = run_cli("shuffle --input '" + (dir / "nope").string() + "' --output-prefix '" + (dir / "T").string() + "'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "nope.json")) << missing.err;
}

TEST(Cli, GemmOnTheCpuReferencePasses) {
  const CliResult r = run_cli("gemm --backends cpu-reference --m 1,16 --n 64 --k 64,128 --ceilings datasheet");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "passed")) << r.out;
  EXPECT_FALSE(has(r.out, "BROKEN")) << r.out;
  EXPECT_TRUE(has(r.err, "4 rows: 4 passed")) << r.err;
  EXPECT_TRUE(has(r.out, "[4] fp4gap gemm --m 16 --n 64 --k 128")) << "one repro line per row:\n" << r.out;
  EXPECT_FALSE(has(r.err, "row: ")) << "row lines only with --progress:\n" << r.err;

  // --progress: each finished row on stderr, in order, also when stderr is a file.
  const CliResult progress = run_cli("gemm --backends cpu-reference --m 1,16 --n 64 --k 64 --ceilings datasheet --progress");
  ASSERT_EQ(progress.code, 0) << progress.err;
  const std::size_t first = progress.err.find("row: m1 n64 k64");
  const std::size_t second = progress.err.find("row: m16 n64 k64");
  ASSERT_NE(first, std::string::npos) << progress.err;
  ASSERT_NE(second, std::string::npos) << progress.err;
  EXPECT_LT(first, second) << progress.err;
  EXPECT_TRUE(has(progress.err.substr(first), "cpu-reference passed ")) << progress.err;
  EXPECT_TRUE(has(progress.err, " us host")) << progress.err;

  const fs::path dir = scratch("gemm");
  const CliResult csv = run_cli("gemm --backends cpu-reference --m 16 --n 64 --k 64 --a-format bf16 --format csv "
                                "--ceilings datasheet --output '" + (dir / "r.csv").string() + "'");
  ASSERT_EQ(csv.code, 0) << csv.err;
  const std::string text = read_all(dir / "r.csv");
  EXPECT_EQ(text.substr(0, text.find('\n')), csv_header());
  EXPECT_TRUE(has(text, ",passed,")) << text;

  const CliResult json = run_cli("gemm --backends cpu-reference --m 16 --n 64 --k 64 --format json --seed 3 "
                                 "--distribution exact-grid --ceilings datasheet");
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["status"], "passed");
  EXPECT_EQ(j["rows"][0]["mode"], "host");
  EXPECT_TRUE(has(j["rows"][0]["repro"].get<std::string>(), "--seed 3 --distribution exact-grid"));
}

TEST(Cli, GemmReportsInvalidShapesAndRejectsBadArguments) {
  const CliResult r = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 48 --ceilings datasheet");
  EXPECT_EQ(r.code, 0) << "an invalid shape is reported, not a wrong result: " << r.err;
  EXPECT_TRUE(has(r.out, "invalid_problem")) << r.out;
  EXPECT_TRUE(has(r.out, "K % 32")) << r.out;
  const CliResult unknown = run_cli("gemm --backends nope --m 1 --n 64 --k 64 --ceilings datasheet");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(has(unknown.err, "unknown backend \"nope\"")) << unknown.err;
  const CliResult range = run_cli("gemm --backends cpu-reference --m 16:1:x2 --n 64 --k 64");
  EXPECT_EQ(range.code, 2);
  EXPECT_TRUE(has(range.err, "START > END")) << range.err;
  const CliResult no_k = run_cli("gemm --m 16 --n 64");
  EXPECT_EQ(no_k.code, 2);
  const CliResult tp = run_cli("gemm --m 16 --n 64 --k 64 --tp 2");
  EXPECT_EQ(tp.code, 2);
  EXPECT_TRUE(has(tp.err, "--tp")) << tp.err;
  const CliResult after = run_cli("gemm --backends cpu-reference --m 1 --n 64 --k 64 --after gelu");
  EXPECT_EQ(after.code, 2);
  EXPECT_TRUE(has(after.err, "--after: gelu not in {itself,norm,norm-pdl,quantize}")) << after.err;
}

TEST(Cli, GemmAfterAKernelSaysSoAndKeepsItInTheRepro) {
  const CliResult r = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet --after norm-pdl");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "timed after norm-pdl (--after): each GPU launch follows an elementwise kernel")) << r.out;
  EXPECT_TRUE(has(r.out, "mode graph-after-norm-pdl")) << r.out;
  EXPECT_TRUE(has(r.out, "--ceilings datasheet --after norm-pdl\n")) << r.out;
  const CliResult plain = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(has(plain.out, "--after")) << plain.out;
}

TEST(Cli, GemmSustainIsCheckedAndKeptInTheRepro) {
  const CliResult negative = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --sustain -5");
  EXPECT_EQ(negative.code, 2) << negative.out << negative.err;
  EXPECT_TRUE(has(negative.err, "0 (off) to 60000 ms: sustain_ms = -5")) << negative.err;
  EXPECT_EQ(negative.out, "");
  const CliResult after = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --sustain 500 --after norm");
  EXPECT_EQ(after.code, 2) << after.out << after.err;
  EXPECT_TRUE(has(after.err, "--sustain times back-to-back launches only: it cannot be combined with --after norm"))
      << after.err;
  // A host row is not replayed: no sustained figures, but the repro keeps the option.
  const CliResult host = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet --sustain 500");
  ASSERT_EQ(host.code, 0) << host.err;
  EXPECT_TRUE(has(host.out, "--ceilings datasheet --sustain 500\n")) << host.out;
  EXPECT_FALSE(has(host.out, "sustained")) << host.out;
}

TEST(Cli, GemmTuneCacheIsLoadedOrRefusedWithTheRuleBroken) {
  const fs::path dir = scratch("tune-cache");
  std::ofstream(dir / "broken.json") << "{\"version\": 1";
  const CliResult broken = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet --tune-cache '" +
                                   (dir / "broken.json").string() + "'");
  EXPECT_EQ(broken.code, 2) << broken.out << broken.err;
  EXPECT_TRUE(has(broken.err, "broken.json: not a JSON tune cache")) << broken.err;
  std::ofstream(dir / "old.json") << "{\"version\": 0, \"entries\": []}";
  const CliResult old = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet --tune-cache '" +
                                (dir / "old.json").string() + "'");
  EXPECT_EQ(old.code, 2) << old.out << old.err;
  EXPECT_TRUE(has(old.err, "format version 0, this build reads version 1")) << old.err;
  std::ofstream(dir / "empty.json") << "{\"version\": 1, \"entries\": []}";
  const CliResult empty = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet --tune-cache '" +
                                  (dir / "empty.json").string() + "'");
  ASSERT_EQ(empty.code, 0) << empty.err;
  EXPECT_TRUE(has(empty.out, "tuned plans: " + (dir / "empty.json").string() + " (0 entries;")) << empty.out;
  // From the environment too; a file there that cannot be loaded is reported and not used.
  const CliResult env = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet",
                                "FP4GAP_TUNE_CACHE=");
  EXPECT_FALSE(has(env.out, "tuned plans")) << env.out;
  const CliResult env_broken = run_cli("gemm --backends cpu-reference --m 4 --n 64 --k 64 --ceilings datasheet",
                                       "FP4GAP_TUNE_CACHE='" + (dir / "broken.json").string() + "'");
  ASSERT_EQ(env_broken.code, 0) << env_broken.err;
  EXPECT_TRUE(has(env_broken.out, "tuned plans: none used, FP4GAP_TUNE_CACHE could not be loaded")) << env_broken.out;
}

TEST(Cli, PlanShowsTheMeasuredTimesOfATuneCache) {
  const fs::path dir = scratch("plan-tuned");
  const auto& configs = prefill::tile_configs();
  tune::Entry e;
  // What `fp4gap plan --device 'H200 SXM'` plans for; fp4gap tune records the real device's name.
  e.device = tune::DeviceKey{"H200 SXM (datasheet)", 132, 9, 0};
  e.problem = tune::ProblemKey{"fp4gap-prefill-w4a16", 128, 6144, 2048, OutputType::bf16};
  e.policy_config = configs[15].name();
  e.policy_split_k = 2;
  tune::MeasuredPlan policy, faster;
  policy.config = configs[15].name();
  policy.split_k = 2;
  policy.passed = true;
  policy.graph_us = 11.70;
  faster.config = configs[9].name();
  faster.split_k = 1;
  faster.passed = true;
  faster.graph_us = 10.79;
  e.measured = {policy, faster};
  tune::Cache cache;
  cache.put(e);
  cache.save((dir / "t.json").string());
  const CliResult r = run_cli("plan --preset glm5 --m 128 --device 'H200 SXM' --tune-cache '" + (dir / "t.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "tuned plans: " + (dir / "t.json").string() + " (1 entries")) << r.out;
  EXPECT_TRUE(has(r.out, "predicted us   measured us  split-K reduction")) << r.out;
  EXPECT_TRUE(has(r.out, "tune cache: fp4gap-prefill-w4a16 runs " + configs[9].name() +
                             ", split-k 1 (tuned on this device: 10.79 us against the policy's pick's 11.70)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "tune cache: no entry for this device and shape")) << r.out;  // W13 and seed
  EXPECT_TRUE(has(r.out, "          10.8  -")) << r.out;
  EXPECT_TRUE(has(r.out, "          11.7  cluster")) << r.out;
  // M = 100 cuts W2 into the same row tiles for both measured plans (m128: 1, m64: 2): the entry
  // of 128 serves it and says so. M = 64 is not served (m64 would run 1 row tile, not 2, and the
  // policy's pick there was not measured).
  const std::string cache_arg = " --device 'H200 SXM' --tune-cache '" + (dir / "t.json").string() + "'";
  const CliResult near = run_cli("plan --n 6144 --k 2048 --m 100" + cache_arg);
  ASSERT_EQ(near.code, 0) << near.err;
  EXPECT_TRUE(has(near.out, "tune cache: fp4gap-prefill-w4a16 runs " + configs[9].name() +
                                ", split-k 1 (tuned on this device at M = 128 (the same tiles as at M = 100): 10.79 us "
                                "against the policy's pick's 11.70)"))
      << near.out;
  EXPECT_TRUE(has(near.out, "          10.8  -")) << near.out;
  const CliResult far = run_cli("plan --n 6144 --k 2048 --m 64" + cache_arg);
  ASSERT_EQ(far.code, 0) << far.err;
  EXPECT_TRUE(has(far.out, "tune cache: no entry for this device and shape")) << far.out;
  // Both kernel families timed for W2 at M = 20 (fp4gap tune, after a norm): plan says which one the
  // dispatching backend takes.
  tune::Entry small = e;
  small.problem.m = 20;
  small.families = tune::FamilyTiming{"norm", "decode tile", "prefill tile", 9.02, 8.10};
  cache.put(small);
  cache.save((dir / "t.json").string());
  const CliResult families = run_cli("plan --n 6144 --k 2048 --m 20" + cache_arg);
  ASSERT_EQ(families.code, 0) << families.err;
  EXPECT_TRUE(has(families.out, "tune cache: fp4gap-w4a16 takes the prefill kernel (measured after norm: decode 9.02 "
                                "us, prefill 8.10 us)"))
      << families.out;
  EXPECT_FALSE(has(families.out, "fp4gap-w4a4 takes the")) << families.out;
  const CliResult plain = run_cli("plan --preset glm5 --m 128 --device 'H200 SXM'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(has(plain.out, "measured us")) << plain.out;
}

TEST(Cli, TuneNeedsADeviceAndRejectsBadArguments) {
  const fs::path dir = scratch("tune");
  const CliResult bad = run_cli("tune --m 128 --n 256 --k 256 --formats w8a8 --cache '" + (dir / "t.json").string() + "'");
  EXPECT_EQ(bad.code, 2) << bad.out << bad.err;
  EXPECT_TRUE(has(bad.err, "--formats takes w4a16 and/or w4a4, comma-separated: 'w8a8' is neither")) << bad.err;
  const CliResult plans = run_cli("tune --m 128 --n 256 --k 256 --plans 0 --cache '" + (dir / "t.json").string() + "'");
  EXPECT_EQ(plans.code, 2) << plans.err;
  EXPECT_TRUE(has(plans.err, "--plans must be at least 1: --plans 0")) << plans.err;
  const CliResult after = run_cli("tune --m 128 --n 256 --k 256 --after silu --cache '" + (dir / "t.json").string() + "'");
  EXPECT_EQ(after.code, 2) << after.err;
  EXPECT_TRUE(has(after.err, "--after: silu not in {itself,norm,norm-pdl,quantize}")) << after.err;
  // A cache that cannot be read is left as it is, not overwritten.
  std::ofstream(dir / "corrupt.json") << "[1, 2";
  const CliResult corrupt = run_cli("tune --m 128 --n 256 --k 256 --cache '" + (dir / "corrupt.json").string() + "'");
  EXPECT_EQ(corrupt.code, 2) << corrupt.err;
  EXPECT_TRUE(has(corrupt.err, "corrupt.json: not a JSON tune cache")) << corrupt.err;
  EXPECT_EQ(read_all(dir / "corrupt.json"), "[1, 2");
  if (device_present()) GTEST_SKIP() << "the device path is covered on the GPU (tests/device)";
  const CliResult none = run_cli("tune --m 128 --n 256 --k 256 --cache '" + (dir / "t.json").string() + "'");
  EXPECT_EQ(none.code, 3) << none.out << none.err;
  EXPECT_TRUE(has(none.err, "fp4gap tune verifies and times plans on a GPU: no CUDA device")) << none.err;
  EXPECT_FALSE(fs::exists(dir / "t.json"));
}

TEST(Cli, GemmPresetKeepsShapesThatTpBreaks) {
  const CliResult r = run_cli("gemm --preset glm5 --tp 3 --m 1 --backends cpu-reference --format csv --ceilings datasheet");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "glm5.W13/tp3")) << r.out;
  EXPECT_TRUE(has(r.out, "not divisible by tp = 3")) << r.out;
  EXPECT_TRUE(has(r.out, "glm5.seed")) << r.out;
}

TEST(Cli, DiagnoseRejectsUnknownFormatsOnAnyMachine) {
  const CliResult r = run_cli("diagnose --formats w4a4,w4a8");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "--formats takes w4a4 and/or w4a16")) << r.err;
  EXPECT_TRUE(has(r.err, "w4a8")) << "the message quotes the value: " << r.err;
}

TEST(Cli, DiagnoseRejectsABadMListOnAnyMachine) {
  const CliResult r = run_cli("diagnose --m 16,0");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "bad dimension list item \"0\": value must be >= 1")) << r.err;
  EXPECT_EQ(r.out, "") << "nothing runs before the arguments are checked";
}

TEST(Cli, DiagnoseChecksSustainOnAnyMachine) {
  const CliResult too_long = run_cli("diagnose --sustain 70000");
  EXPECT_EQ(too_long.code, 2) << too_long.out << too_long.err;
  EXPECT_TRUE(has(too_long.err, "0 (off) to 60000 ms: sustain_ms = 70000")) << too_long.err;
  EXPECT_EQ(too_long.out, "") << "nothing runs before the arguments are checked";
  const CliResult after = run_cli("diagnose --sustain 500 --after quantize");
  EXPECT_EQ(after.code, 2) << after.out << after.err;
  EXPECT_TRUE(has(after.err, "--sustain times back-to-back launches only: it cannot be combined with --after quantize"))
      << after.err;
  EXPECT_EQ(after.out, "");
}

TEST(Cli, DiagnoseTakesAPresetAndRejectsAnUnknownOne) {
  const CliResult bad = run_cli("diagnose --preset glm6");
  EXPECT_EQ(bad.code, 2) << bad.out << bad.err;
  EXPECT_TRUE(has(bad.err, "--preset: glm6 not in {glm5,deepseek-v3}")) << bad.err;
  if (device_present()) return;  // with a device, diagnose runs the full GPU benchmark (device batch)
  const CliResult r = run_cli("diagnose --preset deepseek-v3");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "4 rows: 4 passed, 0 BROKEN")) << r.out;
}

TEST(Cli, DiagnoseWithoutADeviceChecksTheCpuPipeline) {
  if (device_present()) GTEST_SKIP() << "with a device, diagnose runs the full GPU benchmark (device batch)";
  const CliResult r = run_cli("diagnose");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "no CUDA device")) << r.out;
  EXPECT_TRUE(has(r.out, "measurement needs a CUDA device")) << r.out;
  EXPECT_TRUE(has(r.out, "4 rows: 4 passed, 0 BROKEN")) << r.out;
  EXPECT_TRUE(has(r.out, "cpu-reference  W4A16")) << r.out;
}

// The start of a marked `fp4gap plan` row: the config column (62 wide), then the split (6 wide).
std::string plan_row(const std::string& config, int split) {
  std::ostringstream os;
  os << "  * " << std::left << std::setw(62) << config << std::right << std::setw(6) << split << " ";
  return os.str();
}

TEST(Cli, PlanRanksThePrefillPlansForADatasheetGpu) {
  CliResult r = run_cli("plan --m 256 --n 6144 --k 2048 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  const CliResult second = run_cli("plan --m 1024 --n 4096 --k 6144 --device 'H200 SXM'");
  ASSERT_EQ(second.code, 0) << second.err;
  r.out += second.out;
  EXPECT_TRUE(has(r.out, "device: H200 SXM (datasheet), 132 SMs, 232448 bytes")) << r.out;
  EXPECT_TRUE(has(r.out, "not a measurement")) << r.out;
  // The policy's pick at each shape (run 14's fastest plan; at 256 x 6144 x 2048 now on the
  // 10-stage ring with 2 K blocks per copy, which run 161 measured faster than 3 per copy (run 44's
  // pick) at the same 32 K blocks per CTA; at 1024 x 4096 x 6144 the non-persistent m256, as its 128
  // tiles fit one wave: run 48), ranked first and marked.
  for (const auto& [shape, want] :
       {std::pair{"m256 n6144 k2048", plan_row("sm90a bf16 x nvfp4 m128n128k64 10 stages, 2 K blocks per copy", 1)},
        std::pair{"m1024 n4096 k6144", plan_row("sm90a bf16 x nvfp4 m256n128k64 6 stages", 1)}}) {
    const std::size_t at = r.out.find(shape);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::size_t header = r.out.find("split-K reduction\n", at);
    ASSERT_NE(header, std::string::npos) << r.out;
    const std::string first_row = r.out.substr(header + 18, r.out.find('\n', header + 18) - header - 18);
    EXPECT_TRUE(has(first_row, want)) << first_row;  // split 1
  }
  std::size_t marked = 0;
  for (std::size_t at = r.out.find("\n  * "); at != std::string::npos; at = r.out.find("\n  * ", at + 1)) ++marked;
  EXPECT_EQ(marked, 2u) << r.out;
}

TEST(Cli, PlanForTheH200DatasheetUsesItsMeasuredClusterOccupancy) {
  // M = 512, N = 2048, K = 6144: with floor(132 / 4) x 4 = 132 CTAs at once the m256 tile split 4
  // (128 CTAs) would look best; the H200 runs only 120 in clusters of 4, so it picks m128 split 2
  // (with 3 K blocks per copy since run 45), as the GPU's own occupancy API makes it do (PERF-LOG
  // runs 26-32).
  const CliResult r = run_cli("plan --m 512 --n 2048 --k 6144 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "CTAs at once: the occupancy API's answer on an H200 SXM, kept in its datasheet entry")) << r.out;
  const std::size_t header = r.out.find("split-K reduction\n");
  ASSERT_NE(header, std::string::npos) << r.out;
  const std::string first_row = r.out.substr(header + 18, r.out.find('\n', header + 18) - header - 18);
  EXPECT_TRUE(has(first_row, plan_row("sm90a bf16 x nvfp4 m128n128k64 9 stages, 3 K blocks per copy", 2))) << first_row;
}

// The idle column: W2 at M = 512 on the 6-stage m256 is 96 CTAs in one wave on 132 SMs (36 idle:
// 27%), on the wide m128 (192 weight rows) 128 (3%); the m128 split 2 plans are 384 CTAs in three
// waves of 132 (3%).
TEST(Cli, PlanSaysWhatShareOfSmTimeEachPlanLeavesIdle) {
  const CliResult r = run_cli("plan --m 512 --n 6144 --k 2048 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "  waves   idle  past M  predicted us")) << r.out;
  for (const auto& [config, fill] :
       {std::pair{"sm90a bf16 x nvfp4 m256n128k64 6 stages", "     96      132      1    27%      0%"},
        std::pair{"sm90a bf16 x nvfp4 m128n192k64 8 stages, 2 K blocks per copy", "    128      132      1     3%      0%"}}) {
    const std::size_t at = r.out.find(plan_row(config, 1).substr(4));  // marked or not
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string row = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_TRUE(has(row, fill)) << row;
  }
  EXPECT_TRUE(has(r.out, plan_row("sm90a bf16 x nvfp4 m128n192k64 8 stages, 2 K blocks per copy", 1))) << r.out;
  const std::size_t split = r.out.find("m128n128k64 9 stages                            2    384");
  ASSERT_NE(split, std::string::npos) << r.out;
  EXPECT_TRUE(has(r.out.substr(split, r.out.find('\n', split) - split), "    384      132      3     3%")) << r.out;
}

// The past-M column: W13 at M = 520 on m144 tiles covers 576 rows (10% past M), on m128 tiles
// 640 (19%), which is why the policy takes m144 there.
TEST(Cli, PlanSaysWhatShareOfTheTilesRowsLiesPastM) {
  const CliResult r = run_cli("plan --m 520 --n 4096 --k 6144 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  // A row, picked or not: plan_row without its "  * " mark.
  const auto row_of = [&](const std::string& config, int split) {
    const std::size_t at = r.out.find(plan_row(config, split).substr(4));
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string m144 = row_of("sm90a bf16 x nvfp4 m144n128k64 9 stages, 3 K blocks per copy", 1);
  const std::string m128 = row_of("sm90a bf16 x nvfp4 m128n128k64 9 stages, 3 K blocks per copy", 1);
  EXPECT_TRUE(has(r.out, plan_row("sm90a bf16 x nvfp4 m144n128k64 9 stages, 3 K blocks per copy", 1))) << r.out;
  EXPECT_TRUE(has(m144, "    128      132      1     3%     10%")) << m144;
  EXPECT_TRUE(has(m128, "    160      132      2    39%     19%")) << m128;
}

TEST(Cli, PlanSaysWhenAPersistentPlanHalvesItsLastWave) {
  // N = 6144, K = 2048, M = 1024: 192 tiles of 256 x 128 on 132 CTAs, the last 60 as 120 halves;
  // M = 1280: 240 tiles, 108 left after a wave: too many to halve.
  const CliResult r = run_cli("plan --m 1024 --n 6144 --k 2048 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::size_t row = r.out.find("4 stages persistent");
  ASSERT_NE(row, std::string::npos) << r.out;
  const std::size_t next = r.out.find('\n', row) + 1;
  EXPECT_EQ(r.out.substr(next, r.out.find('\n', next) - next), "        its last wave: 60 tiles as 120 half tiles of 128 rows")
      << r.out;
  const CliResult whole = run_cli("plan --m 1280 --n 6144 --k 2048 --device 'H200 SXM'");
  ASSERT_EQ(whole.code, 0) << whole.err;
  EXPECT_FALSE(has(whole.out, "half tiles")) << whole.out;
  // K = 4096 (64 K blocks): the same last wave split along K instead (last_wave_splits_k).
  const CliResult by_k = run_cli("plan --m 1024 --n 6144 --k 4096 --device 'H200 SXM'");
  ASSERT_EQ(by_k.code, 0) << by_k.err;
  EXPECT_TRUE(has(by_k.out, "        its last wave: 60 tiles as 120 units over half of K each, in pairs that exchange "
                            "partial tiles\n"))
      << by_k.out;
  EXPECT_FALSE(has(by_k.out, "half tiles")) << by_k.out;
}

TEST(Cli, PlanMarksTheW4a4PlanBehindTheActivationPass) {
  // W13 at M = 16: the policy's pick is a workspace split (4); the W4A4 GEMM behind its activation
  // pass takes the best plan without one, marked `+` (PERF-LOG runs 66, 84). The seed shape at
  // M = 16 dequantizes the activations in the kernel: there W4A4 takes `*` too, and nothing is `+`.
  const CliResult r = run_cli("plan --preset glm5 --m 16 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "glm5.W13 m16 n4096 k6144: fp4gap-w4a16 takes *, fp4gap-w4a4 takes +; fp4gap-prefill-w4a16 "
                         "takes *, fp4gap-prefill-w4a4 takes + (behind its activation pass: no workspace split)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "glm5.seed m16 n2048 k6144: fp4gap-w4a16 takes *, fp4gap-w4a4 takes *; fp4gap-prefill-w4a16 "
                         "takes *, fp4gap-prefill-w4a4 takes * (activations dequantized in the kernel)\n"))
      << r.out;
  const std::size_t w13 = r.out.find("glm5.W13 m16");
  ASSERT_NE(w13, std::string::npos) << r.out;
  const std::string table = r.out.substr(w13, r.out.find("\nglm5.", w13 + 1) - w13);
  const std::size_t star = table.find("\n  * "), plus = table.find("\n  + ");
  ASSERT_NE(star, std::string::npos) << table;
  ASSERT_NE(plus, std::string::npos) << table;
  const auto row = [&](std::size_t at) { return table.substr(at + 1, table.find('\n', at + 1) - at - 1); };
  EXPECT_TRUE(has(row(star), "workspace")) << row(star);
  EXPECT_FALSE(has(row(plus), "workspace")) << row(plus);
  EXPECT_EQ(table.find("\n  + ", plus + 1), std::string::npos) << table;  // one `+` row
  std::size_t plus_rows = 0;
  for (std::size_t at = r.out.find("\n  + "); at != std::string::npos; at = r.out.find("\n  + ", at + 1)) ++plus_rows;
  EXPECT_EQ(plus_rows, 1u) << r.out;  // W2 and seed at M = 16 take no workspace split behind a pass
}

TEST(Cli, PlanGivesTheDecodePlanAtSmallM) {
  const CliResult r = run_cli("plan --m 1,64,65 --n 2048 --k 6144 --device 'H200 SXM'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string line : {"decode kernel (fp4gap-decode-w4a16): ", "decode kernel (fp4gap-decode-w4a4): "}) {
    std::size_t lines = 0;
    for (std::size_t at = r.out.find(line); at != std::string::npos; at = r.out.find(line, at + 1)) ++lines;
    EXPECT_EQ(lines, 2u) << line << "\n" << r.out;  // M = 1 and 64; the decode kernels stop at M = 64
  }
  EXPECT_TRUE(has(r.out, "cp.async ring per warp")) << r.out;  // M = 1, W4A16: the streaming kernel
  // M = 1: both fitted (streaming; register prefetch with W4A4); M = 64: register prefetch, unfitted.
  std::size_t predictions = 0;
  for (std::size_t at = r.out.find("its model predicts"); at != std::string::npos;
       at = r.out.find("its model predicts", at + 1)) {
    ++predictions;
  }
  EXPECT_EQ(predictions, 2u) << r.out;
  EXPECT_TRUE(has(r.out, "never fitted to measurements")) << r.out;
}

TEST(Cli, PlanSaysWhatItCannotPlan) {
  const CliResult blackwell = run_cli("plan --m 64 --n 256 --k 64 --device 'RTX 5090'");
  EXPECT_EQ(blackwell.code, 0) << blackwell.err;
  EXPECT_TRUE(has(blackwell.out, "prefill kernels: not supported on RTX 5090")) << blackwell.out;
  const CliResult unknown = run_cli("plan --m 64 --n 256 --k 64 --device 'no such gpu'");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(has(unknown.err, "--device names no datasheet entry")) << unknown.err;
  const CliResult missing = run_cli("plan --m 64 --device 'H200 SXM'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "--m, --n and --k are all required")) << missing.err;
  if (!device_present()) {
    const CliResult none = run_cli("plan --m 64 --n 256 --k 64");
    EXPECT_EQ(none.code, 3);
    EXPECT_TRUE(has(none.err, "--device 'H200 SXM'")) << none.err;
  }
}

TEST(Cli, PeakWithoutADeviceExits3) {
  if (device_present()) GTEST_SKIP() << "peak measures the device (device batch)";
  const CliResult r = run_cli("peak");
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(has(r.err, "no CUDA device")) << r.err;
}

}  // namespace
}  // namespace fp4gap
