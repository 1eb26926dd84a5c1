// fp4gap shuffle: an NVFP4 weight as `fp4gap quantize` writes it (P.json, P.codes.npy,
// P.scales.npy) -> the decode kernels' pre-shuffled layout (include/fp4gap/decode.hpp,
// docs/KERNELS-decode.md), done once offline as a serving stack does at model load. Writes
// Q.codes.npy, Q.scales.npy (flat uint8, the bytes the decode launch takes as w_codes / w_scales)
// and Q.json.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/decode.hpp"
#include "fp4gap/npy.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap::cli {
namespace {

struct ShuffleArgs {
  std::string input;   // prefix P of quantize's output
  std::string prefix;  // prefix Q of the shuffled files
  std::string math = "w4a16";
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InvalidArgument("cannot open " + path + " (shuffle --input P reads P.json, P.codes.npy, P.scales.npy)");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path + " is not JSON: " + e.what());
  }
}

// The matrix `fp4gap quantize` described in P.json, with every file checked against it.
Nvfp4Matrix read_quantized(const std::string& prefix) {
  const std::string json_path = prefix + ".json";
  const nlohmann::json j = read_json(json_path);
  if (j.value("format", "") != "nvfp4" || !j.contains("shape") || !j.contains("layout") || !j.contains("global_scale")) {
    throw InvalidArgument(json_path + " is not an fp4gap quantize sidecar (needs format nvfp4, shape, layout, global_scale)");
  }
  Nvfp4Matrix m;
  m.rows = j["shape"].at(0).get<std::int64_t>();
  m.cols = j["shape"].at(1).get<std::int64_t>();
  const std::string layout = j["layout"].get<std::string>();
  if (layout == "linear") {
    m.layout = ScaleLayout::linear;
  } else if (layout == "swizzled") {
    m.layout = ScaleLayout::swizzled_128x4;
  } else {
    throw InvalidArgument(json_path + ": layout must be linear or swizzled: got \"" + layout + "\"");
  }
  m.global_scale = static_cast<float>(j["global_scale"].get<double>());

  const NpyArray codes = read_npy(prefix + ".codes.npy");
  const NpyArray scales = read_npy(prefix + ".scales.npy");
  const ScaleShape ss = scale_shape(m.layout, m.rows, m.cols);
  const std::vector<std::int64_t> want_codes{m.rows, m.cols / 2}, want_scales{ss.rows, ss.cols};
  if (codes.dtype != "u1" || codes.shape != want_codes) {
    throw InvalidArgument(prefix + ".codes.npy must be uint8 " + shape_text(want_codes) + " for shape [" +
                          std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]: got " + codes.dtype + " " +
                          shape_text(codes.shape));
  }
  if (scales.dtype != "u1" || scales.shape != want_scales) {
    throw InvalidArgument(prefix + ".scales.npy must be uint8 " + shape_text(want_scales) + " (" + layout +
                          " scales): got " + scales.dtype + " " + shape_text(scales.shape));
  }
  m.codes.assign(codes.data.begin(), codes.data.end());
  m.scales.assign(scales.data.begin(), scales.data.end());
  return m;
}

void run_shuffle(const ShuffleArgs& args) {
  const decode::Math math = args.math == "w4a4" ? decode::Math::w4a4 : decode::Math::w4a16;
  const Nvfp4Matrix w = read_quantized(args.input);
  const decode::ShuffledWeight s = decode::shuffle_weight_for_decode(w, math);

  const std::string codes_path = args.prefix + ".codes.npy";
  const std::string scales_path = args.prefix + ".scales.npy";
  write_npy(codes_path, NpyArray{"u1", {static_cast<std::int64_t>(s.codes.size())}, s.codes});
  write_npy(scales_path, NpyArray{"u1", {static_cast<std::int64_t>(s.scales.size())}, s.scales});

  nlohmann::ordered_json j;
  j["format"] = "nvfp4-decode-shuffled";
  j["math"] = std::string(decode::to_string(math));
  j["shape"] = {w.rows, w.cols};
  j["global_scale"] = static_cast<double>(w.global_scale);
  j["source"] = basename_of(args.input);
  j["tiles"] = {{"rows", decode::kTileRows}, {"n_tiles", s.n_tiles}, {"window_k", decode::kWindowK},
                {"k_windows", s.k_windows}};
  j["codes"] = {{"file", basename_of(codes_path)}, {"bytes", s.codes.size()},
                {"layout", "tile nt, window i at byte (nt * k_windows + i) * 1024; lane L's 16 bytes of half h at "
                           "h * 512 + 16 L (include/fp4gap/decode.hpp)"}};
  j["scales"] = {{"file", basename_of(scales_path)}, {"bytes", s.scales.size()},
                 {"layout", "tile nt, window i at byte (nt * k_windows + i) * 128; lane L's 4 bytes at 4 L, encoded "
                            "for the math's multiplier"}};
  j["use"] = "decode::launch_gemm with WeightLayout::shuffled: w_codes = codes, w_scales = scales, "
             "alpha = 1 / (gs_a * gs_w)";
  write_output(args.prefix + ".json", j.dump(2) + "\n");
  std::cout << "wrote " << codes_path << " (" << s.codes.size() << " bytes), " << scales_path << " (" << s.scales.size()
            << " bytes), " << args.prefix << ".json: " << w.rows << " x " << w.cols << " weight shuffled for "
            << decode::to_string(math) << " decode\n";
}

}  // namespace

void add_shuffle_command(CLI::App& app) {
  auto args = std::make_shared<ShuffleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shuffle", "Pre-shuffle an NVFP4 weight (quantize's P.json/P.codes.npy/P.scales.npy) for the decode kernels");
  cmd->add_option("--input", args->input, "prefix P written by fp4gap quantize")->required();
  cmd->add_option("--output-prefix", args->prefix, "Q: writes Q.codes.npy, Q.scales.npy, Q.json")->required();
  cmd->add_option("--math", args->math, "w4a16 (bf16 activations) or w4a4 (NVFP4 activations)")
      ->check(CLI::IsMember({"w4a16", "w4a4"}));
  cmd->callback([args] { run_shuffle(*args); });
}

}  // namespace fp4gap::cli
