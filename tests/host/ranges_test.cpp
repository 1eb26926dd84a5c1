#include <gtest/gtest.h>

#include "fp4gap/ranges.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap {
namespace {

using V = std::vector<std::int64_t>;

TEST(Ranges, Values) {
  EXPECT_EQ(parse_range_list("1,16,64,512"), (V{1, 16, 64, 512}));
  EXPECT_EQ(parse_range_list("7"), (V{7}));
  EXPECT_EQ(parse_range_list(" 3 , 5 "), (V{3, 5}));
}

TEST(Ranges, Geometric) {
  EXPECT_EQ(parse_range_list("16:4096:x2"), (V{16, 32, 64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(parse_range_list("16:100:x2"), (V{16, 32, 64}));  // END need not be on the grid
  EXPECT_EQ(parse_range_list("1:100:x10"), (V{1, 10, 100}));
  EXPECT_EQ(parse_range_list("5:5:x2"), (V{5}));
}

TEST(Ranges, Arithmetic) {
  EXPECT_EQ(parse_range_list("128:1024:+128"), (V{128, 256, 384, 512, 640, 768, 896, 1024}));
  EXPECT_EQ(parse_range_list("1:10:+4"), (V{1, 5, 9}));
}

TEST(Ranges, MixedListsDropDuplicates) {
  EXPECT_EQ(parse_range_list("1,16:64:x2,100,32"), (V{1, 16, 32, 64, 100}));
  EXPECT_EQ(parse_range_list("64:256:+64,128:512:x2"), (V{64, 128, 192, 256, 512}));
}

TEST(Ranges, HugeGeometricEndDoesNotOverflow) {
  const V v = parse_range_list("1:9223372036854775807:x2");
  ASSERT_EQ(v.size(), 63u);
  EXPECT_EQ(v.back(), std::int64_t{1} << 62);
}

void expect_error(const char* text, const char* needle) {
  try {
    parse_range_list(text);
    ADD_FAILURE() << "no error for \"" << text << "\"";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "input \"" << text << "\": " << msg;
    EXPECT_NE(msg.find("START:END:xFACTOR"), std::string::npos) << "the syntax is named: " << msg;
  }
}

TEST(Ranges, ErrorsNameTheRuleAndTheSyntax) {
  expect_error("", "empty list");
  expect_error("1,,2", "empty item");
  expect_error("abc", "not an integer");
  expect_error("12x", "not an integer");
  expect_error("0", "must be >= 1");
  expect_error("-4", "must be >= 1");
  expect_error("16:8:x2", "START > END");
  expect_error("16:64", "three parts");
  expect_error("1:2:3:4", "three parts");
  expect_error("16:64:2", "STEP must start with 'x'");
  expect_error("16:64:x1", "FACTOR must be >= 2");
  expect_error("16:64:+0", "must be >= 1");
  expect_error("16:64:x", "not an integer");
  expect_error("1:100000:+1", "more than");
}

}  // namespace
}  // namespace fp4gap
