// .npy reading and writing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fp4gap/npy.hpp"
#include "fp4gap/status.hpp"
#include "test_support.hpp"

namespace fp4gap {
namespace {

using test::invalid_argument_message;

std::string temp_path(const std::string& name) { return test::scratch_file("npy_test", name); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// numpy.save("a.npy", numpy.array([[1, 2, 3], [4, 5, 6]], dtype=numpy.float32)) writes this:
// magic, version 1.0, header length 118 (0x76), the dict padded with spaces to 64-byte alignment
// and a newline, then 6 little-endian float32.
const std::string kNumpyHeader2x3F4 =
    std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
const std::string kData2x3F4 = std::string(
    "\x00\x00\x80\x3F"   // 1
    "\x00\x00\x00\x40"   // 2
    "\x00\x00\x40\x40"   // 3
    "\x00\x00\x80\x40"   // 4
    "\x00\x00\xA0\x40"   // 5
    "\x00\x00\xC0\x40",  // 6
    24);

std::vector<float> as_floats(const NpyArray& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

// A file with header `dict` (padded by this helper as numpy does) and `data_bytes` zero bytes.
std::string npy_file(const std::string& dict, std::size_t data_bytes, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

TEST(Npy, ReadsAFileWrittenByNumpy) {
  ASSERT_EQ(kNumpyHeader2x3F4.size(), 128u);
  const std::string path = temp_path("numpy_2x3_f4.npy");
  write_bytes(path, kNumpyHeader2x3F4 + kData2x3F4);
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.dtype, "f4");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(as_floats(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Npy, WritesWhatNumpyWrites) {
  NpyArray a;
  a.dtype = "f4";
  a.shape = {2, 3};
  const float values[6] = {1, 2, 3, 4, 5, 6};
  a.data.resize(sizeof values);
  std::memcpy(a.data.data(), values, sizeof values);
  const std::string path = temp_path("written_2x3_f4.npy");
  write_npy(path, a);
  EXPECT_EQ(read_bytes(path), kNumpyHeader2x3F4 + kData2x3F4);
}

TEST(Npy, RoundTripsSupportedTypesAndShapes) {
  struct Case {
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::size_t itemsize;
  };
  const Case cases[] = {{"f4", {7, 5}, 4}, {"f2", {3, 16}, 2}, {"u1", {10}, 1},
                        {"u1", {0, 4}, 1}, {"f4", {}, 4},      {"i8", {2, 1}, 8}};
  int n = 0;
  for (const Case& c : cases) {
    NpyArray a;
    a.dtype = c.dtype;
    a.shape = c.shape;
    std::size_t count = 1;
    for (const auto d : c.shape) count *= static_cast<std::size_t>(d);
    a.data.resize(count * c.itemsize);
    for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<std::uint8_t>(i * 37 + 11);
    const std::string path = temp_path("roundtrip_" + std::to_string(n++) + ".npy");
    write_npy(path, a);
    const std::string bytes = read_bytes(path);
    const auto header_end = bytes.find('\n');
    ASSERT_NE(header_end, std::string::npos);
    EXPECT_EQ((header_end + 1) % 64, 0u) << c.dtype << ": header is not padded to 64 bytes";
    const NpyArray b = read_npy(path);
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.data, a.data) << c.dtype;
  }
}

TEST(Npy, ReadsVersions2And3AndHeaderVariants) {
  for (const int major : {2, 3}) {
    const std::string path = temp_path("v" + std::to_string(major) + ".npy");
    write_bytes(path, npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", 8, major));
    const NpyArray a = read_npy(path);
    EXPECT_EQ(a.dtype, "f2");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{4}));
    EXPECT_EQ(a.data.size(), 8u);
  }
  // Key order and spacing are not fixed by the format; '|u1' is how numpy spells uint8.
  const std::string path = temp_path("variant.npy");
  write_bytes(path, npy_file("{\"shape\":(3,2),\"fortran_order\":False,\"descr\":\"|u1\"}", 6));
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.dtype, "u1");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3, 2}));
}

TEST(Npy, RejectsWhatItCannotRepresentNamingTheRule) {
  struct Case {
    std::string file;
    std::string rule;
  };
  const Case cases[] = {
      {npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "big-endian"},
      {npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), "fortran_order"},
      {npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 96),
       "more than 2 dimensions"},
      {npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16), "unsupported dtype"},
      {npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8),
       "unsupported dtype"},
      {npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20), "truncated"},
      {npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28), "oversized"},
      {npy_file("{'descr': '<f4', 'shape': (2, 3), }", 24), "required"},
      {npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }", 24), "malformed"},
      {kNumpyHeader2x3F4.substr(0, 60), "truncated"},
      {std::string("PK\x03\x04 not numpy at all"), "not a .npy file"},
      {npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 4), "version 4.0"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string path = temp_path("bad_" + std::to_string(n++) + ".npy");
    write_bytes(path, c.file);
    const std::string msg = invalid_argument_message([&] { read_npy(path); });
    EXPECT_NE(msg.find(c.rule), std::string::npos) << "expected '" << c.rule << "' in: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "the path should be named: " << msg;
  }
}

TEST(Npy, WriteRejectsInconsistentArrays) {
  NpyArray a;
  a.dtype = "f4";
  a.shape = {2, 3};
  a.data.resize(20);
  EXPECT_NE(invalid_argument_message([&] { write_npy(temp_path("w1.npy"), a); }).find("24 bytes"),
            std::string::npos);
  a.data.resize(24);
  a.dtype = "c8";
  EXPECT_NE(invalid_argument_message([&] { write_npy(temp_path("w2.npy"), a); }).find("unsupported dtype"),
            std::string::npos);
  a.dtype = "u1";
  a.shape = {2, 3, 4};
  EXPECT_NE(invalid_argument_message([&] { write_npy(temp_path("w3.npy"), a); }).find("more than 2"),
            std::string::npos);
}

TEST(Npy, MissingFileIsARuntimeError) {
  EXPECT_THROW(read_npy(temp_path("does_not_exist.npy")), RuntimeError);
}

}  // namespace
}  // namespace fp4gap
