#pragma once
// Dimension lists for the command line: comma-separated items, each a value or a range.
//   "1,16,64,512"     values
//   "16:4096:x2"      geometric: 16, 32, ..., 4096 (every value <= END)
//   "128:1024:+128"   arithmetic: 128, 256, ..., 1024
//   "1,16:64:x2,100"  any mix; duplicates are dropped, first occurrence kept
#include <cstdint>
#include <string_view>
#include <vector>

namespace fp4gap {

inline constexpr std::size_t kMaxRangeValues = 4096;

// Throws InvalidArgument quoting the offending item and the syntax (START:END:xFACTOR or
// START:END:+STEP) for malformed items, values < 1, START > END, FACTOR < 2, STEP < 1, or more
// than kMaxRangeValues values.
std::vector<std::int64_t> parse_range_list(std::string_view text);

}  // namespace fp4gap
