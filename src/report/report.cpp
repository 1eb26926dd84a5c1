#include "fp4gap/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fp4gap {
namespace {

std::string printf_double(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Three significant digits for rates and sizes: "4.27", "74.5", "745".
std::string three_digits(double v) {
  const double a = std::fabs(v);
  return format_fixed(v, a < 10 ? 2 : a < 100 ? 1 : 0);
}

std::string opt_fixed(const std::optional<double>& v, int decimals) {
  return v ? format_fixed(*v, decimals) : "-";
}

// Rates in the table: three significant digits down to 0.001, so host rows do not read "0.0".
std::string opt_rate(const std::optional<double>& v) {
  if (!v) return "-";
  const double a = std::fabs(*v);
  return format_fixed(*v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

std::string opt_us(const std::optional<double>& v) {
  if (!v) return "-";
  return format_fixed(*v, *v < 10 ? 2 : 1);
}

// ---- one description of the columns, shared by CSV and JSON so their names cannot drift ----

struct Field {
  const char* name;
  std::function<nlohmann::ordered_json(const GemmRow&, std::size_t index)> value;
};

nlohmann::ordered_json opt_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

const std::vector<Field>& fields() {
  using J = nlohmann::ordered_json;
  static const std::vector<Field> f = {
      {"index", [](const GemmRow&, std::size_t i) { return J(i); }},
      {"backend", [](const GemmRow& r, std::size_t) { return J(r.backend); }},
      {"shape_name", [](const GemmRow& r, std::size_t) { return J(r.shape_name); }},
      {"problem", [](const GemmRow& r, std::size_t) { return J(r.problem); }},
      {"m", [](const GemmRow& r, std::size_t) { return J(r.m); }},
      {"n", [](const GemmRow& r, std::size_t) { return J(r.n); }},
      {"k", [](const GemmRow& r, std::size_t) { return J(r.k); }},
      {"a_format", [](const GemmRow& r, std::size_t) { return J(r.a_format); }},
      {"b_format", [](const GemmRow& r, std::size_t) { return J(r.b_format); }},
      {"out_type", [](const GemmRow& r, std::size_t) { return J(r.out_type); }},
      {"status", [](const GemmRow& r, std::size_t) { return J(std::string(to_string(r.status))); }},
      {"reason", [](const GemmRow& r, std::size_t) { return J(r.reason); }},
      {"config", [](const GemmRow& r, std::size_t) { return J(r.config); }},
      {"reference", [](const GemmRow& r, std::size_t) { return J(r.reference); }},
      {"mode", [](const GemmRow& r, std::size_t) { return J(r.mode); }},
      {"median_us", [](const GemmRow& r, std::size_t) { return opt_json(r.median_us); }},
      {"p20_us", [](const GemmRow& r, std::size_t) { return opt_json(r.p20_us); }},
      {"p80_us", [](const GemmRow& r, std::size_t) { return opt_json(r.p80_us); }},
      {"samples", [](const GemmRow& r, std::size_t) { return J(r.samples); }},
      {"event_median_us", [](const GemmRow& r, std::size_t) { return opt_json(r.event_median_us); }},
      {"event_p20_us", [](const GemmRow& r, std::size_t) { return opt_json(r.event_p20_us); }},
      {"event_p80_us", [](const GemmRow& r, std::size_t) { return opt_json(r.event_p80_us); }},
      {"floor_us", [](const GemmRow& r, std::size_t) { return opt_json(r.floor_us); }},
      {"event_floor_us", [](const GemmRow& r, std::size_t) { return opt_json(r.event_floor_us); }},
      {"sm_clock_mhz",
       [](const GemmRow& r, std::size_t) { return r.sm_clock_mhz ? J(*r.sm_clock_mhz) : J(nullptr); }},
      {"sustained_us", [](const GemmRow& r, std::size_t) { return opt_json(r.sustained_us); }},
      {"sustained_ms", [](const GemmRow& r, std::size_t) { return opt_json(r.sustained_ms); }},
      {"sustained_sm_clock_mhz",
       [](const GemmRow& r, std::size_t) {
         return r.sustained_sm_clock_mhz ? J(*r.sustained_sm_clock_mhz) : J(nullptr);
       }},
      {"sustained_power_w", [](const GemmRow& r, std::size_t) { return opt_json(r.sustained_power_w); }},
      {"sustained_clock_reasons", [](const GemmRow& r, std::size_t) { return J(r.sustained_clock_reasons); }},
      {"sustained_vs_cublas_bf16",
       [](const GemmRow& r, std::size_t) { return opt_json(r.sustained_vs_cublas_bf16); }},
      {"tflops", [](const GemmRow& r, std::size_t) { return opt_json(r.tflops); }},
      {"gbps", [](const GemmRow& r, std::size_t) { return opt_json(r.gbps); }},
      {"roof_us", [](const GemmRow& r, std::size_t) { return opt_json(r.roof_us); }},
      {"pct_of_roof", [](const GemmRow& r, std::size_t) { return opt_json(r.pct_of_roof); }},
      {"pct_compute_roof", [](const GemmRow& r, std::size_t) { return opt_json(r.pct_compute_roof); }},
      {"pct_memory_roof", [](const GemmRow& r, std::size_t) { return opt_json(r.pct_memory_roof); }},
      {"pct_of_problem_roof", [](const GemmRow& r, std::size_t) { return opt_json(r.pct_of_problem_roof); }},
      {"read_us", [](const GemmRow& r, std::size_t) { return opt_json(r.read_us); }},
      {"pct_of_read", [](const GemmRow& r, std::size_t) { return opt_json(r.pct_of_read); }},
      {"bound", [](const GemmRow& r, std::size_t) { return J(r.bound); }},
      {"bound_reason", [](const GemmRow& r, std::size_t) { return J(r.bound_reason); }},
      {"speedup_vs_cublas_bf16",
       [](const GemmRow& r, std::size_t) { return opt_json(r.speedup_vs_cublas_bf16); }},
      {"max_abs_error", [](const GemmRow& r, std::size_t) { return opt_json(r.max_abs_error); }},
      {"max_rel_error", [](const GemmRow& r, std::size_t) { return opt_json(r.max_rel_error); }},
      {"warnings", [](const GemmRow& r, std::size_t) { return J(r.warnings); }},
      {"repro", [](const GemmRow& r, std::size_t) { return J(r.repro); }},
      // Last, so that the columns before keep their places.
      {"operands", [](const GemmRow& r, std::size_t) { return J(r.operands); }},
      {"rounds_operands", [](const GemmRow& r, std::size_t) { return J(r.rounds_operands); }},
  };
  return f;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_value(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_escape(v.get<std::string>());
  if (v.is_number_float()) return printf_double("%.9g", v.get<double>());
  return v.dump();
}

std::string us_text(double us) { return format_fixed(us, us < 10 ? 2 : 1) + " us"; }

std::string table_status(RowStatus s) { return s == RowStatus::incorrect ? "BROKEN" : std::string(to_string(s)); }

// The sustained mode's figures of a row, for the table's notes; empty when it did not run.
std::string sustained_note(const GemmRow& r) {
  if (!r.sustained_us) return "";
  std::string s = "sustained " + us_text(*r.sustained_us) + " per launch";
  if (r.sustained_vs_cublas_bf16) s += " (" + format_fixed(*r.sustained_vs_cublas_bf16, 2) + "x cublas-bf16)";
  if (r.sustained_ms) s += " over its last " + format_fixed(*r.sustained_ms, 0) + " ms";
  if (r.sustained_sm_clock_mhz) s += ", SM " + std::to_string(*r.sustained_sm_clock_mhz) + " MHz";
  if (r.sustained_power_w) s += ", " + format_fixed(*r.sustained_power_w, 0) + " W";
  s += r.sustained_clock_reasons.empty() ? ", no NVML readings" : ", clock events: " + r.sustained_clock_reasons;
  return s;
}

}  // namespace

std::string_view to_string(RowStatus s) {
  switch (s) {
    case RowStatus::passed: return "passed";
    case RowStatus::incorrect: return "incorrect";
    case RowStatus::not_supported: return "not_supported";
    case RowStatus::invalid_problem: return "invalid_problem";
    case RowStatus::error: return "error";
  }
  return "?";
}

std::string format_fixed(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (std::fabs(bytes) >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return format_fixed(bytes, u == 0 ? 0 : 1) + " " + units[u];
}

std::string format_us(double seconds) {
  const double us = seconds * 1e6;
  if (std::fabs(us) >= 1e6) return format_fixed(us / 1e6, 2) + " s";
  if (std::fabs(us) >= 1e3) return format_fixed(us / 1e3, 2) + " ms";
  return format_fixed(us, std::fabs(us) < 0.1 && us != 0 ? 3 : 1) + " us";
}

std::string format_rate(double per_s, std::string_view unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int p = 0;
  while (std::fabs(per_s) >= 1000.0 && p < 5) {
    per_s /= 1000.0;
    ++p;
  }
  return three_digits(per_s) + " " + prefixes[p] + std::string(unit);
}

std::string describe_unavailable(const DeviceContext& device) {
  constexpr std::string_view prefix = "no CUDA device: ";
  std::string reason = device.unavailable_reason.empty() ? "unknown reason" : device.unavailable_reason;
  if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
  return std::string(prefix) + reason;
}

std::vector<std::string> describe_device(const DeviceContext& d) {
  if (!d.available) return {describe_unavailable(d)};
  std::vector<std::string> lines;
  lines.push_back("device " + std::to_string(d.ordinal) + ": " + d.name + ", sm_" + std::to_string(d.cc_major) +
                  std::to_string(d.cc_minor) + ", " + std::to_string(d.sm_count) + " SMs, " +
                  format_bytes(static_cast<double>(d.global_mem_bytes)) + " memory, L2 " +
                  format_fixed(static_cast<double>(d.l2_bytes) / (1024.0 * 1024.0), 1) + " MiB, smem/block " +
                  std::to_string(d.smem_per_block_optin / 1024) + " KiB, SM clock " +
                  std::to_string(d.sm_clock_mhz) + " MHz");
  lines.push_back("driver " + (d.driver_version.empty() ? "?" : d.driver_version) + ", runtime " +
                  (d.runtime_version.empty() ? "?" : d.runtime_version) + ", cuBLAS " +
                  (d.cublas_version.empty() ? "?" : d.cublas_version));
  return lines;
}

std::string describe_ceilings(const Ceilings& c) {
  auto rate = [](double v) { return v > 0 ? format_rate(v, "FLOP/s") : std::string("n/a"); };
  return "memory " + (c.memory_bytes_per_s > 0 ? format_rate(c.memory_bytes_per_s, "B/s") : "n/a") + ", BF16 " +
         rate(c.bf16_flops_per_s) + ", FP8 " + rate(c.fp8_flops_per_s) + ", FP4 " + rate(c.fp4_flops_per_s) +
         " (" + c.source + ")";
}

void write_table(std::ostream& out, const std::vector<GemmRow>& rows) {
  const std::vector<std::string> header = {"#",      "backend", "shape",  "m",       "n",     "k",
                                           "a",      "b",       "out",    "status",  "mode",  "med_us",
                                           "p20_us", "p80_us",  "evt_us", "floor_us", "TFLOP/s", "GB/s",
                                           "%roof",  "%prob",   "%read",  "bound",  "vs_bf16", "max_rel", "config"};
  // Right-aligned numeric columns; text columns left-aligned.
  const std::vector<bool> numeric = {true,  false, false, true, true, true, false, false,
                                     false, false, false, true, true, true, true,  true,
                                     true,  true,  true,  true, true, false, true, true, false};
  std::vector<std::vector<std::string>> cells;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const GemmRow& r = rows[i];
    cells.push_back({std::to_string(i + 1),
                     r.backend,
                     r.shape_name.empty() ? "-" : r.shape_name,
                     std::to_string(r.m),
                     std::to_string(r.n),
                     std::to_string(r.k),
                     r.a_format,
                     r.b_format,
                     r.out_type,
                     table_status(r.status),
                     r.mode.empty() ? "-" : r.mode,
                     opt_us(r.median_us),
                     opt_us(r.p20_us),
                     opt_us(r.p80_us),
                     opt_us(r.event_median_us),
                     opt_us(r.floor_us),
                     opt_rate(r.tflops),
                     opt_rate(r.gbps),
                     opt_fixed(r.pct_of_roof, 1),
                     opt_fixed(r.pct_of_problem_roof, 1),
                     opt_fixed(r.pct_of_read, 1),
                     r.bound.empty() ? "-" : r.bound,
                     r.speedup_vs_cublas_bf16 ? format_fixed(*r.speedup_vs_cublas_bf16, 2) + "x" : "-",
                     r.max_rel_error ? printf_double("%.1e", *r.max_rel_error) : "-",
                     r.config.empty() ? "-" : r.config});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t c = 0; c < v.size(); ++c) {
      const std::string pad(width[c] - v[c].size(), ' ');
      if (c) s += "  ";
      s += numeric[c] ? pad + v[c] : v[c] + (c + 1 < v.size() ? pad : "");
    }
    out << s << "\n";
  };
  line(header);
  for (const auto& row : cells) line(row);

  bool any_note = false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const GemmRow& r = rows[i];
    std::string note;
    if (r.status != RowStatus::passed) note = std::string(to_string(r.status)) + ": " + r.reason;
    else if (!r.bound.empty()) note = r.bound + "-bound: " + r.bound_reason;
    auto add = [&](const std::string& part) { note += (note.empty() ? "" : "; ") + part; };
    if (const std::string sustained = sustained_note(r); !sustained.empty()) add(sustained);
    if (r.rounds_operands) {
      add("multiplies " + r.operands + " roundings of the operands, checked against their own product");
    }
    if (!r.warnings.empty()) add("warning: " + r.warnings);
    if (note.empty()) continue;
    if (!any_note) out << "\nnotes:\n";
    any_note = true;
    out << "  [" << i + 1 << "] " << note << "\n";
  }
  if (!rows.empty()) out << "\nrepro:\n";
  for (std::size_t i = 0; i < rows.size(); ++i) out << "  [" << i + 1 << "] " << rows[i].repro << "\n";
}

// One line per shape: the fastest verified backend (graph mode, back to back or after a
// predecessor: one run has one of them), how close it gets to the roof, and the gap to cuBLAS
// BF16 measured in the same run; BROKEN and failed backends are named.
std::vector<std::string> shape_verdicts(const std::vector<GemmRow>& rows) {
  std::vector<std::string> lines;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const GemmRow*>> by_shape;
  for (const GemmRow& r : rows) {
    const std::string key = (r.shape_name.empty() ? "" : r.shape_name + " ") + r.problem;
    if (!by_shape.count(key)) order.push_back(key);
    by_shape[key].push_back(&r);
  }
  for (const std::string& key : order) {
    const GemmRow* best = nullptr;
    const GemmRow* best_exact = nullptr;  // the fastest that multiplies the problem's own values
    const GemmRow* cublas = nullptr;
    std::vector<std::string> broken, failed;
    std::string invalid;
    const GemmRow* ours = nullptr;  // the fastest of this project's backends (named fp4gap-*)
    for (const GemmRow* r : by_shape[key]) {
      if (r->status == RowStatus::invalid_problem) invalid = r->reason;
      if (r->status == RowStatus::incorrect) broken.push_back(r->backend);
      if (r->status == RowStatus::error) failed.push_back(r->backend);
      if (r->status != RowStatus::passed || !r->median_us || !r->mode.starts_with("graph")) continue;
      if (r->backend == "cublas-bf16") cublas = r;
      if (!best || *r->median_us < *best->median_us) best = r;
      if (!r->rounds_operands && (!best_exact || *r->median_us < *best_exact->median_us)) best_exact = r;
      if (r->backend.starts_with("fp4gap-") && (!ours || *r->median_us < *ours->median_us)) ours = r;
    }
    std::ostringstream s;
    s << key << ": ";
    if (!best && !invalid.empty()) {
      s << "invalid problem: " << invalid << ".";
    } else if (!best) {
      s << "no backend was verified and timed on the GPU.";
    } else {
      s << "best " << best->backend << " at " << us_text(*best->median_us);
      if (best->pct_of_roof) s << ", " << format_fixed(*best->pct_of_roof, 1) << "% of its roof";
      if (best->pct_of_problem_roof && best->pct_of_roof &&
          std::abs(*best->pct_of_problem_roof - *best->pct_of_roof) > 0.05) {
        s << " (" << format_fixed(*best->pct_of_problem_roof, 1) << "% of the " << best->a_format << " x "
          << best->b_format << " roof)";
      }
      if (!best->bound.empty()) s << ", " << best->bound << "-bound: " << best->bound_reason;
      if (best->read_us && best->pct_of_read) {
        s << "; reading its bytes alone takes " << us_text(*best->read_us) << " here ("
          << format_fixed(*best->pct_of_read, 1) << "% of its time)";
      }
      s << ". ";
      if (!cublas) {
        s << "cublas-bf16 did not run, so there is no baseline.";
      } else if (cublas == best) {
        s << "cublas-bf16 is the fastest here: no other backend beats it.";
        // Where this project's kernels lose, what holds the fastest of them (its launch's fill
        // for the prefill kernels).
        if (ours && !ours->bound.empty()) {
          s << " The fastest fp4gap backend, " << ours->backend << " at " << us_text(*ours->median_us) << " ("
            << format_fixed(*cublas->median_us / *ours->median_us, 2) << "x cublas-bf16), is " << ours->bound
            << "-bound: " << ours->bound_reason << ".";
        }
      } else {
        s << format_fixed(*cublas->median_us / *best->median_us, 2) << "x faster than cublas-bf16 ("
          << us_text(*cublas->median_us) << ").";
      }
      // A backend that rounds the operands (FP8 of bf16 or NVFP4 values) is verified against its
      // own operands' product, so the answer for the problem as given is the fastest exact one.
      if (best->rounds_operands) {
        s << " It multiplies " << best->operands << " roundings of the operands, a different product; ";
        if (!best_exact) {
          s << "no backend computing the problem's own product was timed.";
        } else {
          s << "the fastest exact backend is " << best_exact->backend << " at " << us_text(*best_exact->median_us);
          if (cublas && cublas != best_exact) {
            s << ", " << format_fixed(*cublas->median_us / *best_exact->median_us, 2) << "x cublas-bf16";
          }
          s << ".";
        }
      }
      // Graph replays are bursts; at large M the GPU settles at its power cap and the ratio moves
      // (--sustain, PERF-LOG run 104), so the sustained figures stand beside the burst's.
      if (best->sustained_us) {
        s << " Sustained: " << us_text(*best->sustained_us) << " per launch";
        if (cublas && cublas != best && best->sustained_vs_cublas_bf16) {
          s << ", " << format_fixed(*best->sustained_vs_cublas_bf16, 2) << "x cublas-bf16";
        }
        if (best->sustained_sm_clock_mhz) {
          s << " at SM " << *best->sustained_sm_clock_mhz << " MHz";
          if (cublas && cublas != best && cublas->sustained_sm_clock_mhz) {
            s << " (cublas-bf16 " << *cublas->sustained_sm_clock_mhz << " MHz)";
          }
        }
        s << ".";
      }
    }
    if (!broken.empty()) {
      s << " BROKEN (wrong results, not timed):";
      for (const std::string& b : broken) s << " " << b;
      s << ".";
    }
    if (!failed.empty()) {
      s << " Errors:";
      for (const std::string& b : failed) s << " " << b;
      s << ".";
    }
    lines.push_back(s.str());
  }
  return lines;
}

std::string csv_header() {
  std::string h;
  for (const Field& f : fields()) {
    if (!h.empty()) h += ',';
    h += f.name;
  }
  return h;
}

void write_csv(std::ostream& out, const std::vector<GemmRow>& rows) {
  out << csv_header() << "\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (const Field& f : fields()) {
      if (&f != &fields().front()) line += ",";
      line += csv_value(f.value(rows[i], i + 1));
    }
    out << line << "\n";
  }
}

std::string to_json(const RunContext& context, const std::vector<GemmRow>& rows) {
  using J = nlohmann::ordered_json;
  J doc;
  doc["tool"] = "fp4gap";
  const DeviceContext& d = context.device;
  J device;
  device["available"] = d.available;
  if (d.available) {
    device["ordinal"] = d.ordinal;
    device["name"] = d.name;
    device["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
    device["sm_count"] = d.sm_count;
    device["smem_per_block_optin"] = d.smem_per_block_optin;
    device["l2_bytes"] = d.l2_bytes;
    device["global_mem_bytes"] = d.global_mem_bytes;
    device["sm_clock_mhz"] = d.sm_clock_mhz;
    device["driver_version"] = d.driver_version;
    device["runtime_version"] = d.runtime_version;
    device["cublas_version"] = d.cublas_version;
  } else {
    device["unavailable_reason"] = d.unavailable_reason;
  }
  doc["device"] = device;
  if (context.ceilings) {
    doc["ceilings"] = J::parse(ceilings_to_json(*context.ceilings, d.available ? d.name : ""));
  } else {
    doc["ceilings"] = nullptr;
  }
  doc["notes"] = context.notes;
  J array = J::array();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    J row;
    for (const Field& f : fields()) row[f.name] = f.value(rows[i], i + 1);
    array.push_back(std::move(row));
  }
  doc["rows"] = std::move(array);
  return doc.dump(2) + "\n";
}

std::string ceilings_to_json(const Ceilings& c, const std::string& device_name) {
  nlohmann::ordered_json j;
  j["device"] = device_name;
  j["memory_bytes_per_s"] = c.memory_bytes_per_s;
  j["bf16_flops_per_s"] = c.bf16_flops_per_s;
  j["fp8_flops_per_s"] = c.fp8_flops_per_s;
  j["fp4_flops_per_s"] = c.fp4_flops_per_s;
  j["source"] = c.source;
  return j.dump(2) + "\n";
}

Ceilings ceilings_from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("ceilings file is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw InvalidArgument("ceilings file must hold a JSON object");
  auto rate = [&](const char* key, bool positive) {
    if (!j.contains(key)) throw InvalidArgument(std::string("ceilings file: \"") + key + "\" is missing");
    if (!j[key].is_number()) throw InvalidArgument(std::string("ceilings file: \"") + key + "\" is not a number");
    const double v = j[key].get<double>();
    if (!std::isfinite(v) || v < 0 || (positive && v == 0)) {
      throw InvalidArgument(std::string("ceilings file: \"") + key + "\" must be " +
                            (positive ? "> 0" : ">= 0") + ": got " + printf_double("%g", v));
    }
    return v;
  };
  Ceilings c;
  c.memory_bytes_per_s = rate("memory_bytes_per_s", true);
  c.bf16_flops_per_s = rate("bf16_flops_per_s", true);
  c.fp8_flops_per_s = rate("fp8_flops_per_s", false);
  c.fp4_flops_per_s = rate("fp4_flops_per_s", false);
  c.source = j.contains("source") && j["source"].is_string() ? j["source"].get<std::string>() : "ceilings file";
  return c;
}

}  // namespace fp4gap
