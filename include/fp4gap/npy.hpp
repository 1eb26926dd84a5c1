#pragma once
// Minimal .npy (NumPy format 1.0/2.0/3.0) reading and writing: little-endian, C order, 1-D or 2-D.
#include <cstdint>
#include <string>
#include <vector>

namespace fp4gap {

struct NpyArray {
  std::string dtype;                 // numpy descr without byte order, e.g. "f4", "f2", "u1"
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;    // raw little-endian bytes, C order
};

// Throws InvalidArgument naming the rule broken (big-endian, Fortran order, unsupported dtype,
// truncated file), RuntimeError on I/O failure.
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace fp4gap
