#include "fp4gap/npy.hpp"

#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>

#include "fp4gap/status.hpp"

// Format reference: numpy/lib/format.py (NEP 1). A file is the magic "\x93NUMPY", a major and
// minor version byte, the header length (uint16 LE for 1.0, uint32 LE for 2.0 and 3.0), then an
// ASCII (3.0: UTF-8) Python dict literal with 'descr', 'fortran_order' and 'shape', padded with
// spaces and ended by '\n' so that the data starts on a 64-byte boundary.

namespace fp4gap {

namespace {

constexpr std::string_view kMagic{"\x93NUMPY", 6};

// Types with one byte order character and their sizes: the ones a tool about FP4 data meets.
struct DtypeInfo {
  std::string_view name;
  std::size_t itemsize;
};
constexpr std::array<DtypeInfo, 12> kDtypes{{{"f2", 2}, {"f4", 4}, {"f8", 8}, {"u1", 1},
                                             {"u2", 2}, {"u4", 4}, {"u8", 8}, {"i1", 1},
                                             {"i2", 2}, {"i4", 4}, {"i8", 8}, {"b1", 1}}};

std::optional<std::size_t> itemsize_of(std::string_view dtype) {
  for (const auto& d : kDtypes) {
    if (d.name == dtype) return d.itemsize;
  }
  return std::nullopt;
}

std::string supported_list() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InvalidArgument(path + ": " + what);
}

// Parser of the header dict: only the Python literal subset numpy writes (strings, True/False,
// tuples of integers).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  void parse(std::string& descr, bool& fortran_order, std::vector<std::int64_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        skip_ws();
        if (peek() != '\'' && peek() != '"') {
          fail(path_, "unsupported dtype: structured dtypes are not supported (descr is not a string)");
        }
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        shape = parse_shape();
        have_shape = true;
      } else {
        fail(path_, "malformed .npy header: unexpected key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_order || !have_shape) {
      fail(path_, "malformed .npy header: 'descr', 'fortran_order' and 'shape' are all required");
    }
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  [[noreturn]] void malformed(const std::string& what) const {
    fail(path_, "malformed .npy header: " + what + " at offset " + std::to_string(pos_) + " in \"" +
                    std::string(s_) + "\"");
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) malformed(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    skip_ws();
    const char quote = peek();
    if (quote != '\'' && quote != '"') malformed("expected a string");
    const std::size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) malformed("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool parse_bool() {
    skip_ws();
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    malformed("expected True or False");
  }
  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> shape;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) malformed("expected a dimension");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::int64_t{1} << 56)) malformed("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') ++pos_;
      else if (peek() != ')') malformed("expected ',' or ')'");
    }
    ++pos_;
    return shape;
  }

  std::string_view s_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    s += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    s += i + 1 < shape.size() ? " " : "";
  }
  return s + ")";
}

std::size_t byte_count(const std::string& path, const std::vector<std::int64_t>& shape,
                       std::size_t itemsize) {
  std::size_t n = itemsize;
  for (const std::int64_t d : shape) {
    const auto ud = static_cast<std::size_t>(d);
    if (ud != 0 && n > SIZE_MAX / ud) fail(path, "shape " + shape_string(shape) + " is too large");
    n *= ud;
  }
  return n;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(path + ": cannot open for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw RuntimeError(path + ": read failed");

  if (bytes.size() < 10 || std::string_view(bytes).substr(0, 6) != kMagic) {
    fail(path, "not a .npy file (no \\x93NUMPY magic string)");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  std::size_t header_len = 0;
  std::size_t header_start = 0;
  auto byte = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(bytes[i])); };
  if (major == 1) {
    header_len = byte(8) | (byte(9) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(path, "truncated .npy file: header length missing");
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
    header_start = 12;
  } else {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  if (bytes.size() < header_start + header_len) {
    fail(path, "truncated .npy file: header says " + std::to_string(header_len) + " bytes, file has " +
                   std::to_string(bytes.size() - header_start));
  }

  std::string descr;
  bool fortran_order = false;
  NpyArray array;
  HeaderParser(std::string_view(bytes).substr(header_start, header_len), path)
      .parse(descr, fortran_order, array.shape);

  if (descr.empty()) fail(path, "unsupported dtype: empty descr");
  const char order = descr[0];
  if (order == '>') {
    fail(path, "big-endian data is not supported (descr '" + descr + "'); save it little-endian, "
               "e.g. numpy's arr.astype(arr.dtype.newbyteorder('<'))");
  }
  if (order != '<' && order != '|') {
    fail(path, "unsupported dtype '" + descr + "': descr must start with '<' or '|'");
  }
  array.dtype = descr.substr(1);
  const auto itemsize = itemsize_of(array.dtype);
  if (!itemsize) fail(path, "unsupported dtype '" + descr + "' (supported: " + supported_list() + ")");
  if (order == '|' && *itemsize != 1) {
    fail(path, "unsupported dtype '" + descr + "': '|' (no byte order) is only valid for 1-byte types");
  }
  if (fortran_order) {
    fail(path, "fortran_order True is not supported: save a C-order array (numpy.ascontiguousarray)");
  }
  if (array.shape.size() > 2) {
    fail(path, "arrays with more than 2 dimensions are not supported: shape " + shape_string(array.shape));
  }

  const std::size_t data_bytes = byte_count(path, array.shape, *itemsize);
  const std::size_t available = bytes.size() - header_start - header_len;
  if (available != data_bytes) {
    fail(path, std::string(available < data_bytes ? "truncated" : "oversized") + " .npy data: shape " +
                   shape_string(array.shape) + " of '" + descr + "' needs " +
                   std::to_string(data_bytes) + " bytes, file has " + std::to_string(available));
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header_start + header_len), bytes.end());
  return array;
}

void write_npy(const std::string& path, const NpyArray& array) {
  const auto itemsize = itemsize_of(array.dtype);
  if (!itemsize) {
    fail(path, "unsupported dtype '" + array.dtype + "' (supported: " + supported_list() + ")");
  }
  if (array.shape.size() > 2) {
    fail(path, "arrays with more than 2 dimensions are not supported: shape " + shape_string(array.shape));
  }
  for (const std::int64_t d : array.shape) {
    if (d < 0) fail(path, "negative dimension in shape " + shape_string(array.shape));
  }
  const std::size_t data_bytes = byte_count(path, array.shape, *itemsize);
  if (array.data.size() != data_bytes) {
    fail(path, "data size does not match shape: shape " + shape_string(array.shape) + " of '" +
                   array.dtype + "' needs " + std::to_string(data_bytes) + " bytes, got " +
                   std::to_string(array.data.size()));
  }

  const std::string descr = std::string(*itemsize == 1 ? "|" : "<") + array.dtype;
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                       shape_string(array.shape) + ", }";
  // Pad with spaces so that magic (6) + version (2) + length (2) + header, ending in '\n', is a
  // multiple of 64, as numpy does.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xFFFF) fail(path, "header too long for .npy version 1.0");

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw RuntimeError(path + ": cannot open for writing");
  out.write(kMagic.data(), static_cast<std::streamsize>(kMagic.size()));
  const char preamble[4] = {1, 0, static_cast<char>(header.size() & 0xFF),
                            static_cast<char>((header.size() >> 8) & 0xFF)};
  out.write(preamble, 4);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()), static_cast<std::streamsize>(array.data.size()));
  if (!out) throw RuntimeError(path + ": write failed");
}

}  // namespace fp4gap
