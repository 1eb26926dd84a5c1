// fp4gap quantize: a 2-D float32/float16 .npy -> NVFP4 codes, block scales and a JSON sidecar
// (SPEC-nvfp4 sections 1-4). Writes exactly P.codes.npy, P.scales.npy and P.json.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_support.hpp"
#include "commands.hpp"
#include "fp4gap/npy.hpp"
#include "fp4gap/quantize.hpp"

namespace fp4gap::cli {
namespace {

struct QuantizeArgs {
  std::string input;
  std::string prefix;
  std::string layout = "linear";
  std::string global_scale;  // empty: from the tensor's amax
};

float parse_global_scale(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    throw InvalidArgument("--global-scale must be a float32 number: got \"" + text + "\"");
  }
  if (!std::isfinite(v) || !(v > 0)) {
    throw InvalidArgument("--global-scale must be finite and > 0: got " + text);
  }
  return v;
}

std::string shape_text(std::int64_t a, std::int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

nlohmann::ordered_json report_json(const QuantizeReport& r) {
  nlohmann::ordered_json j;
  j["clean"] = r.clean();
  j["summary"] = r.summary();
  j["amax"] = r.amax;
  j["nan_count"] = r.nan_count;
  j["first_nan"] = r.nan_count ? nlohmann::ordered_json::array({r.first_nan_row, r.first_nan_col})
                               : nlohmann::ordered_json(nullptr);
  j["inf_count"] = r.inf_count;
  j["first_inf"] = r.inf_count ? nlohmann::ordered_json::array({r.first_inf_row, r.first_inf_col})
                               : nlohmann::ordered_json(nullptr);
  j["saturated_scales"] = r.saturated_scales;
  j["zero_scale_blocks"] = r.zero_scale_blocks;
  return j;
}

void run_quantize(const QuantizeArgs& args) {
  const NpyArray in = read_npy(args.input);
  ElementType type;
  if (in.dtype == "f4") {
    type = ElementType::f32;
  } else if (in.dtype == "f2") {
    type = ElementType::f16;
  } else {
    throw InvalidArgument("input dtype '" + in.dtype + "' is not supported: quantize reads float32 ('<f4') or "
                          "float16 ('<f2') (" + args.input + ")");
  }
  if (in.shape.size() != 2) {
    std::string s;
    for (std::int64_t d : in.shape) {
      if (!s.empty()) s += ", ";
      s += std::to_string(d);
    }
    throw InvalidArgument("input must be 2-D [M, K]: got shape (" + s + ") (" + args.input + ")");
  }
  const std::int64_t rows = in.shape[0], cols = in.shape[1];

  QuantizeOptions options;
  if (args.layout == "linear") {
    options.layout = ScaleLayout::linear;
  } else if (args.layout == "swizzled") {
    options.layout = ScaleLayout::swizzled_128x4;
  } else {
    throw InvalidArgument("--layout must be linear or swizzled: got \"" + args.layout + "\"");
  }
  if (!args.global_scale.empty()) options.global_scale = parse_global_scale(args.global_scale);

  QuantizeReport report;
  const Nvfp4Matrix q = quantize_nvfp4(in.data.data(), type, rows, cols, options, &report);
  const ScaleShape ss = scale_shape(q.layout, q.rows, q.cols);

  const std::string codes_path = args.prefix + ".codes.npy";
  const std::string scales_path = args.prefix + ".scales.npy";
  const std::string json_path = args.prefix + ".json";
  write_npy(codes_path, NpyArray{"u1", {q.rows, q.cols / 2}, q.codes});
  write_npy(scales_path, NpyArray{"u1", {ss.rows, ss.cols}, q.scales});

  nlohmann::ordered_json j;
  j["format"] = "nvfp4";
  // A float32 widened to double prints with enough digits to read back as the same float32;
  // the bits make it unambiguous.
  j["global_scale"] = static_cast<double>(q.global_scale);
  char bits[16];
  std::snprintf(bits, sizeof bits, "0x%08x", static_cast<unsigned>(float_bits(q.global_scale)));
  j["global_scale_bits"] = bits;
  j["global_scale_source"] = options.global_scale ? "--global-scale" : "amax (2688 / amax; 1 when amax = 0)";
  j["shape"] = {rows, cols};
  j["input_dtype"] = type == ElementType::f32 ? "float32" : "float16";
  j["element_type"] = "e2m1";
  j["scale_type"] = "e4m3";
  j["block_size"] = kBlockSize;
  j["layout"] = std::string(to_string(q.layout));
  j["codes"] = {{"file", basename_of(codes_path)}, {"dtype", "uint8"}, {"shape", {q.rows, q.cols / 2}},
                {"packing", "element 2j in the low nibble, 2j+1 in the high nibble"}};
  j["scales"] = {{"file", basename_of(scales_path)}, {"dtype", "uint8"}, {"shape", {ss.rows, ss.cols}}};
  j["dequantize"] = "x = e2m1(code) * e4m3(scale) / global_scale";
  j["report"] = report_json(report);
  write_output(json_path, j.dump(2) + "\n");

  std::cout << "wrote " << codes_path << " (uint8 " << shape_text(q.rows, q.cols / 2) << "), " << scales_path
            << " (uint8 " << shape_text(ss.rows, ss.cols) << ", " << to_string(q.layout) << "), " << json_path
            << " (global_scale " << j["global_scale"].dump() << ")\n";
  if (!report.clean()) std::cerr << "warning: the input is not clean: " << report.summary() << "\n";
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantize a 2-D float32/float16 .npy to NVFP4: writes P.codes.npy, P.scales.npy and P.json");
  cmd->add_option("--input", args->input, "2-D .npy of float32 or float16 (little-endian, C order), K % 16 == 0")
      ->required();
  cmd->add_option("--output-prefix", args->prefix, "P: writes P.codes.npy, P.scales.npy, P.json")->required();
  cmd->add_option("--layout", args->layout, "scale layout: linear [M, K/16] or swizzled (128x4 tiles)")
      ->check(CLI::IsMember({"linear", "swizzled"}));
  cmd->add_option("--global-scale", args->global_scale,
                  "static global scale gs (float32 > 0); default 2688 / amax of the tensor");
  cmd->callback([args] { run_quantize(*args); });
}

}  // namespace fp4gap::cli
