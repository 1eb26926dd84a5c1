// The machine code of the built CUDA library, audited without a GPU: cuobjdump lists it, the
// rules of sass_listing.hpp check it. First the parser and the rules on small listings written
// here (each rule shown failing), then the library itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <string>

#include "sass_listing.hpp"

namespace fp4gap::sass {
namespace {

// A listing in cuobjdump -res-usage -sass's format: one object with a PTX section (ignored) and
// ELF sections for sm_90a and sm_120a. Symbols are mangled as nvcc mangles them.
constexpr const char* kPrefill = "_ZN6fp4gap7prefill19prefill_gemm_kernelILi128EEEvv";
constexpr const char* kDecode = "_ZN6fp4gap6decode6device18decode_gemm_kernelILi1EEEvv";

std::string resources(const std::string& symbol, int regs, int local) {
  return " Function " + symbol + ":\n  REG:" + std::to_string(regs) + " STACK:0 SHARED:1104 LOCAL:" +
         std::to_string(local) + " CONSTANT[0]:1440 TEXTURE:0 SURFACE:0 SAMPLER:0\n";
}

std::string elf_section(const std::string& arch, const std::string& resource_lines, const std::string& code) {
  return "\nFatbin elf code:\n================\narch = " + arch +
         "\ncode version = [1,8]\nhost = linux\ncompile_size = 64bit\n\nResource usage:\n Common:\n  GLOBAL:0\n" +
         resource_lines + "\n\tcode for " + arch + "\n\t.target\t" + arch + "\n" + code;
}

// Instructions from byte `addr` on: past 0xfff0 the address has five digits.
std::string function(const std::string& symbol, const std::vector<std::string>& instructions, int addr = 0) {
  std::string s = "\t\tFunction : " + symbol + "\n\t.headerflags\t@\"EF_CUDA_SM90\"\n";
  for (const std::string& i : instructions) {
    char a[16];
    std::snprintf(a, sizeof a, "%04x", addr);
    s += "        /*" + std::string(a) + "*/                   " + i +
         " ;                    /* 0x000fe20000000800 */\n"
         "                                                                  /* 0x000fe20000000800 */\n";
    addr += 16;
  }
  return s + "        ..........\n\n";
}

std::string clean_listing() {
  const std::string ptx =
      "\nmember lib.a:prefill_gemm.cu.o:\n\nFatbin ptx code:\n================\narch = sm_90a\ncode version = "
      "[9,0]\nhost = linux\ncompile_size = 64bit\ncompressed\n";
  const std::string sm90 = elf_section(
      "sm_90a", resources(kPrefill, 168, 0) + resources(kDecode, 96, 0),
      function(kPrefill, {"LDC R1, c[0x0][0x28]", "@!P0 HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0",
                          "HGMMA.64x128x16.F32.BF16 R24, R92, gdesc[UR8], R24", "EXIT"},
               0xffe0) +
          function(kDecode, {"@P1 HMMA.16816.F32.BF16 R4, R8, R12, R4", "EXIT"}));
  const std::string sm120 = elf_section("sm_120a", resources(kDecode, 90, 0),
                                        function(kDecode, {"HMMA.16816.F32.BF16 R4, R8, R12, R4", "NOP", "EXIT"}));
  return ptx + sm90 + sm120;
}

const std::vector<std::string> kArchs = {"sm_90a", "sm_120a"};

const KernelListing& find(const std::vector<KernelListing>& ks, const std::string& arch, const std::string& symbol) {
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const KernelListing& k) {
    return k.arch == arch && k.mangled == symbol;
  });
  if (it == ks.end()) throw std::runtime_error("no " + arch + " " + symbol + " in the parsed listing");
  return *it;
}

bool mentions(const std::vector<std::string>& broken, const std::string& what) {
  return std::any_of(broken.begin(), broken.end(), [&](const std::string& b) { return b.find(what) != std::string::npos; });
}

TEST(SassListing, ReadsResourcesAndOpcodesPerArchitecture) {
  const std::vector<KernelListing> ks = parse_cuobjdump(clean_listing());
  ASSERT_EQ(ks.size(), 3u);
  const KernelListing& prefill = find(ks, "sm_90a", kPrefill);
  EXPECT_EQ(prefill.registers, 168);
  EXPECT_EQ(prefill.local_bytes, 0);
  EXPECT_EQ(prefill.stack_bytes, 0);
  EXPECT_EQ(prefill.code.size(), 4u);
  EXPECT_EQ(prefill.code[2].address, 0x10000u);
  EXPECT_EQ(prefill.count("HGMMA"), 2);  // one of them predicated
  EXPECT_EQ(prefill.count("LDC"), 1);
  EXPECT_EQ(prefill.count("HMMA"), 0);
  EXPECT_EQ(prefill.name(), "void fp4gap::prefill::prefill_gemm_kernel<128>()");
  EXPECT_EQ(find(ks, "sm_90a", kDecode).registers, 96);
  const KernelListing& decode120 = find(ks, "sm_120a", kDecode);
  EXPECT_EQ(decode120.registers, 90);
  EXPECT_EQ(decode120.code.size(), 3u);
  EXPECT_EQ(decode120.count("HMMA"), 1);
}

TEST(SassListing, FindsTheMainLoop) {
  // An outer loop (0x00-0xb0) around a 2-MMA loop (0x10-0x30 and, by a second branch, 0x10-0x40)
  // and a 1-MMA tail loop (0x60-0x80): the main loop is the densest, 0x10-0x30.
  const std::string listing =
      elf_section("sm_90a", resources(kDecode, 96, 0),
                  function(kDecode, {"NOP", "HMMA.16816.F32.BF16 R4, R8, R12, R4", "HMMA.16816.F32.BF16 R4, R8, R12, R4",
                                     "@P0 BRA 0x10", "BRA.U !UP0, 0x10", "IADD3 R1, R1, 1, RZ",
                                     "HMMA.16816.F32.BF16 R4, R8, R12, R4", "ISETP.NE.AND P0, PT, R1, RZ, PT",
                                     "@P0 BRA 0x60", "NOP", "NOP", "@P1 BRA 0x0", "EXIT"}));
  const KernelListing& k = find(parse_cuobjdump(listing), "sm_90a", kDecode);
  EXPECT_EQ(k.code[3].branch_target, 0x10);
  EXPECT_EQ(k.code[4].branch_target, 0x10);
  EXPECT_EQ(k.code[5].branch_target, -1);
  const Loop main = k.main_loop("HMMA");
  EXPECT_EQ(main.instructions, 3);
  EXPECT_EQ(main.mma, 2);
  EXPECT_EQ(k.main_loop("HGMMA").mma, 0);
}

TEST(SassListing, RejectsAResourceLineItCannotRead) {
  std::string listing = clean_listing();
  listing.replace(listing.find("REG:168"), 7, "REG:abc");
  EXPECT_THROW(parse_cuobjdump(listing), std::runtime_error);
}

TEST(SassAudit, PassesTheCleanListing) {
  const std::vector<std::string> broken = audit_gemm_kernels(parse_cuobjdump(clean_listing()), kArchs);
  EXPECT_TRUE(broken.empty()) << broken.front();
}

TEST(SassAudit, EachRuleFails) {
  {
    std::string listing = clean_listing();
    listing.replace(listing.find("LOCAL:0"), 7, "LOCAL:16");  // the sm_90a prefill kernel's
    EXPECT_TRUE(mentions(audit_gemm_kernels(parse_cuobjdump(listing), kArchs), "uses local memory (16 local"));
  }
  {
    std::string listing = clean_listing();
    listing.replace(listing.find("NOP"), 3, "STL [R1+0x8], R4");
    EXPECT_TRUE(mentions(audit_gemm_kernels(parse_cuobjdump(listing), kArchs), "0 LDL and 1 STL"));
  }
  {
    std::string listing = clean_listing();
    for (auto at = listing.find("HGMMA"); at != std::string::npos; at = listing.find("HGMMA")) {
      listing.replace(at, 5, "NOP");
    }
    EXPECT_TRUE(mentions(audit_gemm_kernels(parse_cuobjdump(listing), kArchs), "no HGMMA instruction"));
  }
  {
    std::string listing = clean_listing();
    listing.replace(listing.rfind("HMMA"), 4, "FFMA");  // the sm_120a decode kernel's
    EXPECT_TRUE(mentions(audit_gemm_kernels(parse_cuobjdump(listing), kArchs),
                         "sm_120a void fp4gap::decode::device::decode_gemm_kernel<1>(): no HMMA"));
  }
  EXPECT_TRUE(mentions(audit_gemm_kernels(parse_cuobjdump(clean_listing()), {"sm_90a", "sm_100a"}),
                       "sm_100a: no decode_gemm_kernel"));
  const std::vector<std::string> empty = audit_gemm_kernels(parse_cuobjdump(""), kArchs);
  EXPECT_TRUE(mentions(empty, "sm_90a: no prefill_gemm_kernel"));
  EXPECT_TRUE(mentions(empty, "sm_120a: no decode_gemm_kernel"));
}

// ---- the built library ----

// CMAKE_CUDA_ARCHITECTURES "90a,100a-real" -> {"sm_90a", "sm_100a"}; entries that name no
// architecture ("native", "all") are left out, so only the decode kernels found are audited.
std::vector<std::string> built_archs() {
  std::vector<std::string> archs;
  std::stringstream ss(FP4GAP_CUDA_ARCHS);
  for (std::string a; std::getline(ss, a, ',');) {
    if (!a.empty() && std::isdigit(static_cast<unsigned char>(a.front()))) archs.push_back("sm_" + a.substr(0, a.find('-')));
  }
  return archs;
}

// The standard output of `command`; a test failure when it does not exit with 0.
std::string run(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  std::string out;
  std::array<char, 1 << 16> buffer;
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << "failed: " << command;
  return out;
}

TEST(SassAudit, BuiltGemmKernels) {
  const std::string cuobjdump = FP4GAP_CUOBJDUMP;
  ASSERT_TRUE(std::filesystem::exists(cuobjdump))
      << "cuobjdump was not found when the build was configured (" << cuobjdump
      << "): scripts/install-deps.sh stages it into .deps/cuda-tools/bin; then reconfigure";
  const std::string library = FP4GAP_CUDA_LIBRARY;
  // cuobjdump disassembles with the nvdisasm beside it (both staged together).
  const std::string dir = std::filesystem::path(cuobjdump).parent_path().string();
  const std::vector<KernelListing> kernels =
      parse_cuobjdump(run("PATH='" + dir + "':\"$PATH\" '" + cuobjdump + "' -res-usage -sass '" + library + "'"));
  const std::vector<std::string> broken = audit_gemm_kernels(kernels, built_archs());
  for (const std::string& b : broken) ADD_FAILURE() << b << "\nrepro: " << cuobjdump << " -res-usage -sass " << library;

  // The GEMM kernels' figures, for the record (docs/KERNELS-*.md quote them): registers, local
  // bytes, instructions, MMA instructions, and the steady-state main loop's instructions and
  // MMAs (the prefill kernels' stubs for other architectures are left out).
  std::ostringstream table;
  table << std::left << std::setw(9) << "arch" << std::right << std::setw(5) << "regs" << std::setw(7) << "local"
        << std::setw(8) << "instrs" << std::setw(7) << "MMA" << std::setw(11) << "loop" << std::setw(9)
        << "loop MMA" << "  kernel\n";
  for (const KernelListing& k : kernels) {
    const bool prefill = k.is_prefill_gemm();
    const bool decode = k.is_decode_gemm();
    if (!(prefill && k.arch == "sm_90a") && !decode) continue;
    const std::string mma = prefill ? "HGMMA" : "HMMA";
    const Loop loop = k.main_loop(mma);
    std::string name = k.name();
    // Without the parameter list: the parenthesis that closes the name, matched backwards.
    int depth = 0;
    for (std::size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.resize(i);
        break;
      }
    }
    table << std::left << std::setw(9) << k.arch << std::right << std::setw(5) << k.registers << std::setw(7)
          << k.local_bytes << std::setw(8) << k.code.size() << std::setw(7) << k.count(mma) << std::setw(11)
          << loop.instructions << std::setw(9) << loop.mma << "  " << name << "\n";
  }
  std::cout << table.str();
}

}  // namespace
}  // namespace fp4gap::sass
