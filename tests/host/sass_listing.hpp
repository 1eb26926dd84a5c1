#pragma once
// What the built GPU code is, read from `cuobjdump -res-usage -sass` of the CUDA library: per
// architecture and kernel, its resource usage and its SASS instructions. The audit rules
// (sass_audit_test.cpp) check what the kernel docs claim about the machine code: the prefill GEMM
// multiplies with HGMMA (wgmma), the decode GEMM with HMMA (mma.sync), and no GEMM kernel touches
// local memory (no spills, no local arrays).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4gap::sass {

struct Instruction {
  std::uint32_t address = 0;
  std::string opcode;             // without modifiers: "HGMMA", "BRA"
  std::int64_t branch_target = -1;  // a BRA's target address
};

// A loop: the instructions from a backward branch's target to the branch.
struct Loop {
  int instructions = 0;
  int mma = 0;  // instructions of the given MMA opcode in it
};

struct KernelListing {
  std::string arch;     // "sm_90a"
  std::string mangled;  // the symbol
  int registers = -1;   // -1: no resource line seen
  int stack_bytes = -1;
  int local_bytes = -1;
  std::vector<Instruction> code;  // SASS, NOPs included

  int count(const std::string& opcode) const;  // instructions of that opcode
  // A prefill GEMM kernel (prefill_gemm_kernel or prefill_wide_kernel), any architecture.
  bool is_prefill_gemm() const;
  // A decode GEMM kernel (decode_gemm_kernel or decode_stream_kernel).
  bool is_decode_gemm() const;
  std::string name() const;  // demangled (the symbol if it does not demangle)
  // The steady-state main loop: of the loops (backward branches) that hold `mma` instructions, the
  // one with the most per instruction, then the most of them (a kernel's unrolled K loop, not its
  // tail or the tile loop around it; loops that the compiler rotated may overlap without nesting,
  // so nesting alone does not tell); {0, 0} if none.
  Loop main_loop(const std::string& mma) const;
};

// Every kernel of every ELF (cubin) section of the listing: one entry per (arch, symbol), in the
// order the resource-usage or SASS section first names it. Throws std::runtime_error quoting the
// line when a resource line cannot be read.
std::vector<KernelListing> parse_cuobjdump(std::string_view listing);

// The rules. Each broken rule is one line naming the architecture, the kernel and the rule:
//  - every GEMM kernel (the prefill ones on sm_90a, decode_gemm_kernel and decode_stream_kernel
//    on every architecture) has no local memory: 0 local and 0 stack bytes, no LDL / STL;
//  - every prefill GEMM kernel on sm_90a issues HGMMA; every decode kernel issues HMMA;
//  - the listing holds prefill_gemm_kernel for sm_90a when `archs` names sm_90a, and
//    decode_gemm_kernel for every architecture in `archs` (so that a listing of nothing fails).
std::vector<std::string> audit_gemm_kernels(const std::vector<KernelListing>& kernels,
                                            const std::vector<std::string>& archs);

}  // namespace fp4gap::sass
