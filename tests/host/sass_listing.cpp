#include "sass_listing.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

namespace fp4gap::sass {

int KernelListing::count(const std::string& opcode) const {
  return static_cast<int>(std::count_if(code.begin(), code.end(), [&](const Instruction& c) { return c.opcode == opcode; }));
}

bool KernelListing::is_prefill_gemm() const {
  return mangled.find("prefill_gemm_kernel") != std::string::npos ||
         mangled.find("prefill_wide_kernel") != std::string::npos;
}

bool KernelListing::is_decode_gemm() const {
  return mangled.find("decode_gemm_kernel") != std::string::npos ||
         mangled.find("decode_stream_kernel") != std::string::npos;
}

std::string KernelListing::name() const {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                 std::free);
  return status == 0 && d ? std::string(d.get()) : mangled;
}

Loop KernelListing::main_loop(const std::string& mma) const {
  struct Span {
    std::size_t first, last;  // instruction indices, inclusive
    int mma;
  };
  std::vector<Span> loops;
  for (std::size_t i = 0; i < code.size(); ++i) {
    const std::int64_t target = code[i].branch_target;
    if (target < 0 || target > static_cast<std::int64_t>(code[i].address)) continue;
    const auto first = std::find_if(code.begin(), code.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                    [&](const Instruction& c) { return c.address == target; });
    const int n = static_cast<int>(std::count_if(first, code.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                 [&](const Instruction& c) { return c.opcode == mma; }));
    if (n > 0) loops.push_back({static_cast<std::size_t>(first - code.begin()), i, n});
  }
  Loop best;
  for (const Span& l : loops) {
    const int size = static_cast<int>(l.last - l.first + 1);
    // Densest first (mma / size, compared as cross products), then the most MMAs.
    const long lhs = static_cast<long>(l.mma) * best.instructions, rhs = static_cast<long>(best.mma) * size;
    if (best.mma == 0 || lhs > rhs || (lhs == rhs && l.mma > best.mma)) best = {size, l.mma};
  }
  return best;
}

namespace {

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// An instruction line "/*0a40*/  @!P0 HGMMA.64x128x16.F32.BF16 R24, ... ;", its opcode without
// modifiers and, for a branch, the target; false for any other line.
bool parse_instruction(std::string_view line, Instruction& out) {
  const std::string_view t = trim(line);
  if (!starts_with(t, "/*")) return false;
  const auto close = t.find("*/");
  if (close == std::string_view::npos || close < 3 ||
      t.substr(2, close - 2).find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return false;  // an encoding comment, not an address
  }
  out.address = static_cast<std::uint32_t>(std::stoul(std::string(t.substr(2, close - 2)), nullptr, 16));
  std::string_view rest = trim(t.substr(close + 2));
  if (!rest.empty() && rest.front() == '@') {  // a predicate guard
    const auto space = rest.find(' ');
    if (space == std::string_view::npos) return false;
    rest = trim(rest.substr(space));
  }
  const auto end = rest.find_first_of(" .;");
  out.opcode = std::string(rest.substr(0, end));
  out.branch_target = -1;
  if (out.opcode == "BRA") {
    const std::string_view operands = rest.substr(0, rest.find(';'));
    const auto hex = operands.rfind("0x");
    if (hex != std::string_view::npos) out.branch_target = std::stoll(std::string(operands.substr(hex + 2)), nullptr, 16);
  }
  return !out.opcode.empty();
}

}  // namespace

std::vector<KernelListing> parse_cuobjdump(std::string_view listing) {
  std::vector<KernelListing> kernels;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  auto kernel = [&](const std::string& arch, const std::string& symbol) -> KernelListing& {
    const auto [it, inserted] = index.try_emplace({arch, symbol}, kernels.size());
    if (inserted) {
      KernelListing k;
      k.arch = arch;
      k.mangled = symbol;
      kernels.push_back(std::move(k));
    }
    return kernels[it->second];
  };
  static const std::regex resources(R"(REG:(\d+)\s+STACK:(\d+)\s+SHARED:\d+\s+LOCAL:(\d+))");

  std::string arch;           // of the ELF section being read
  bool elf = false;           // inside an ELF (not PTX) section
  KernelListing* resource_of = nullptr;  // the kernel whose resource line comes next
  KernelListing* code_of = nullptr;      // the kernel whose SASS is being read
  std::size_t pos = 0;
  while (pos <= listing.size()) {
    const auto nl = listing.find('\n', pos);
    const std::string_view line = listing.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? listing.size() + 1 : nl + 1;
    const std::string_view t = trim(line);
    if (starts_with(t, "Fatbin ")) {
      elf = starts_with(t, "Fatbin elf");
      resource_of = code_of = nullptr;
    } else if (starts_with(t, "member ")) {
      elf = false;
      resource_of = code_of = nullptr;
    } else if (!elf) {
      continue;
    } else if (starts_with(t, "arch = ")) {
      arch = std::string(trim(t.substr(7)));
    } else if (starts_with(t, "code for ")) {
      arch = std::string(trim(t.substr(9)));
      code_of = nullptr;
    } else if (starts_with(t, "Function : ")) {
      code_of = &kernel(arch, std::string(trim(t.substr(11))));
    } else if (starts_with(t, "Function ") && !t.empty() && t.back() == ':') {
      resource_of = &kernel(arch, std::string(trim(t.substr(9, t.size() - 10))));
    } else if (resource_of != nullptr && starts_with(t, "REG:")) {
      std::match_results<std::string_view::const_iterator> m;
      if (!std::regex_search(t.begin(), t.end(), m, resources)) {
        throw std::runtime_error("cuobjdump resource line not understood: '" + std::string(t) + "'");
      }
      resource_of->registers = std::stoi(m[1].str());
      resource_of->stack_bytes = std::stoi(m[2].str());
      resource_of->local_bytes = std::stoi(m[3].str());
      resource_of = nullptr;
    } else if (code_of != nullptr) {
      Instruction ins;
      if (parse_instruction(line, ins)) code_of->code.push_back(std::move(ins));
    }
  }
  return kernels;
}

std::vector<std::string> audit_gemm_kernels(const std::vector<KernelListing>& kernels,
                                            const std::vector<std::string>& archs) {
  std::vector<std::string> broken;
  std::set<std::string> archs_with_decode;
  bool sm90a_prefill = false;
  for (const KernelListing& k : kernels) {
    const bool prefill = k.is_prefill_gemm() && k.arch == "sm_90a";
    const bool decode = k.is_decode_gemm();
    if (!prefill && !decode) continue;
    const std::string who = k.arch + " " + k.name() + ": ";
    if (k.local_bytes < 0) broken.push_back(who + "no resource-usage line in the listing");
    if (k.local_bytes > 0 || k.stack_bytes > 0) {
      broken.push_back(who + "uses local memory (" + std::to_string(k.local_bytes) + " local, " +
                       std::to_string(k.stack_bytes) + " stack bytes); a GEMM kernel must not");
    }
    if (k.count("LDL") + k.count("STL") > 0) {
      broken.push_back(who + std::to_string(k.count("LDL")) + " LDL and " + std::to_string(k.count("STL")) +
                       " STL instructions; a GEMM kernel must not touch local memory");
    }
    if (prefill) {
      sm90a_prefill = true;
      if (k.count("HGMMA") == 0) broken.push_back(who + "no HGMMA instruction: the prefill GEMM must multiply with wgmma");
    } else {
      if (k.mangled.find("decode_gemm_kernel") != std::string::npos) archs_with_decode.insert(k.arch);
      if (k.count("HMMA") == 0) broken.push_back(who + "no HMMA instruction: the decode GEMM must multiply with mma.sync");
    }
  }
  if (std::find(archs.begin(), archs.end(), "sm_90a") != archs.end() && !sm90a_prefill) {
    broken.push_back("sm_90a: no prefill_gemm_kernel in the listing");
  }
  for (const std::string& a : archs) {
    if (archs_with_decode.count(a) == 0) broken.push_back(a + ": no decode_gemm_kernel in the listing");
  }
  return broken;
}

}  // namespace fp4gap::sass
