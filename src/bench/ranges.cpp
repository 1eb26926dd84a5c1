#include "fp4gap/ranges.hpp"

#include <algorithm>
#include <charconv>
#include <string>

#include "fp4gap/status.hpp"

namespace fp4gap {
namespace {

constexpr std::string_view kSyntax =
    "syntax: comma-separated VALUE, START:END:xFACTOR (geometric) or START:END:+STEP (arithmetic), "
    "e.g. \"1,16,64\", \"16:4096:x2\", \"128:1024:+128\"";

[[noreturn]] void fail(std::string_view item, const std::string& rule) {
  throw InvalidArgument("bad dimension list item \"" + std::string(item) + "\": " + rule + " (" +
                        std::string(kSyntax) + ")");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::int64_t parse_positive(std::string_view item, std::string_view text, std::string_view what) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    fail(item, std::string(what) + " \"" + std::string(text) + "\" is not an integer");
  }
  if (v < 1) fail(item, std::string(what) + " must be >= 1, got " + std::to_string(v));
  return v;
}

void append(std::vector<std::int64_t>& out, std::int64_t v, std::string_view item) {
  if (std::find(out.begin(), out.end(), v) != out.end()) return;
  if (out.size() >= kMaxRangeValues) {
    fail(item, "more than " + std::to_string(kMaxRangeValues) + " values");
  }
  out.push_back(v);
}

void parse_item(std::string_view item, std::vector<std::int64_t>& out) {
  const std::size_t c1 = item.find(':');
  if (c1 == std::string_view::npos) {
    append(out, parse_positive(item, item, "value"), item);
    return;
  }
  const std::size_t c2 = item.find(':', c1 + 1);
  if (c2 == std::string_view::npos || item.find(':', c2 + 1) != std::string_view::npos) {
    fail(item, "a range has exactly three parts START:END:STEP");
  }
  const std::int64_t start = parse_positive(item, trim(item.substr(0, c1)), "START");
  const std::int64_t end = parse_positive(item, trim(item.substr(c1 + 1, c2 - c1 - 1)), "END");
  const std::string_view step = trim(item.substr(c2 + 1));
  if (start > end) {
    fail(item, "START > END: " + std::to_string(start) + " > " + std::to_string(end));
  }
  if (step.empty() || (step.front() != 'x' && step.front() != '+')) {
    fail(item, "STEP must start with 'x' (geometric) or '+' (arithmetic)");
  }
  const std::int64_t s = parse_positive(item, step.substr(1), step.front() == 'x' ? "FACTOR" : "STEP");
  if (step.front() == 'x') {
    if (s < 2) fail(item, "FACTOR must be >= 2, got " + std::to_string(s));
    for (std::int64_t v = start;; v *= s) {
      append(out, v, item);
      if (v > end / s) break;  // the next value exceeds END (checked without overflow)
    }
  } else {
    for (std::int64_t v = start;; v += s) {
      append(out, v, item);
      if (v > end - s) break;
    }
  }
}

}  // namespace

std::vector<std::int64_t> parse_range_list(std::string_view text) {
  std::vector<std::int64_t> out;
  if (trim(text).empty()) fail(text, "empty list");
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view item =
        trim(text.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (item.empty()) fail(text, "empty item between commas");
    parse_item(item, out);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace fp4gap
