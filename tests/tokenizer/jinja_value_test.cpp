// Values: Python's str/repr of numbers and containers, json.dumps formatting as HF's tojson
// uses it, equality and truthiness, and conversion from JSON keeping key order.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/value.h"

namespace fp4lm::tokenizer::jinja::jinja_value_test {
namespace {

TEST(JinjaValue, FloatReprMatchesPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(123.456), "123.456");
  EXPECT_EQ(float_repr(1e300), "1e+300");
  EXPECT_EQ(float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(float_repr(std::nan("")), "nan");
}

TEST(JinjaValue, StrAndRepr) {
  EXPECT_EQ(Value().str(), "");
  EXPECT_EQ(Value(None{}).str(), "None");
  EXPECT_EQ(Value(true).str(), "True");
  EXPECT_EQ(Value(int64_t{-3}).str(), "-3");
  EXPECT_EQ(Value(2.0).str(), "2.0");
  EXPECT_EQ(Value("it's").repr(), "\"it's\"");
  EXPECT_EQ(Value("a'\"\n").repr(), "'a\\'\"\\n'");
  EXPECT_EQ(Value::list({Value(1), Value("x"), Value(None{})}).str(), "[1, 'x', None]");
  EXPECT_EQ(Value::tuple({Value(1)}).str(), "(1,)");
  EXPECT_EQ(Value::dict({{"b", Value(1)}, {"a", Value::list({})}}).str(), "{'b': 1, 'a': []}");
}

TEST(JinjaValue, ToJsonLikePythonJsonDumps) {
  Value v = Value::dict({{"b", Value(1)},
                         {"a", Value::list({Value(2.5), Value(true), Value(None{})})},
                         {"s", Value("\xc3\xa9\"\\\n\x01")},
                         {"e", Value::dict({})}});
  EXPECT_EQ(v.to_json(), R"({"b": 1, "a": [2.5, true, null], "s": "é\"\\\n\u0001", "e": {}})");
  EXPECT_EQ(v.to_json(2),
            "{\n  \"b\": 1,\n  \"a\": [\n    2.5,\n    true,\n    null\n  ],\n  \"s\": \"é\\\"\\\\\\n\\u0001\",\n"
            "  \"e\": {}\n}");
  EXPECT_EQ(Value(std::numeric_limits<double>::infinity()).to_json(), "Infinity");
  EXPECT_THROW(Value().to_json(), ValueError);
  EXPECT_THROW(Value::list({Value()}).to_json(), ValueError);
}

TEST(JinjaValue, FromJsonKeepsOrderedKeysAndNumberKinds) {
  auto j = nlohmann::ordered_json::parse(R"({"z": 1, "a": 2.0, "m": [true, null, "s"], "big": 18446744073709551615})");
  Value v = Value::from_json(j);
  ASSERT_TRUE(v.is_dict());
  const auto& items = v.as_dict().items;
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].first, "z");
  EXPECT_TRUE(items[0].second.is_int());
  EXPECT_TRUE(items[1].second.is_float());
  EXPECT_TRUE(items[3].second.is_float());  // beyond int64: a float, as close as we get
  EXPECT_EQ(v.to_json(), R"({"z": 1, "a": 2.0, "m": [true, null, "s"], "big": 1.8446744073709552e+19})");
}

TEST(JinjaValue, EqualityFollowsPython) {
  EXPECT_TRUE(Value(1) == Value(1.0));
  EXPECT_TRUE(Value(true) == Value(1));
  EXPECT_FALSE(Value("1") == Value(1));
  EXPECT_TRUE(Value::dict({{"a", Value(1)}, {"b", Value(2)}}) == Value::dict({{"b", Value(2)}, {"a", Value(1)}}));
  EXPECT_FALSE(Value::list({Value(1)}) == Value::tuple({Value(1)}));
  EXPECT_TRUE(Value() == Value());
  EXPECT_FALSE(Value() == Value(None{}));
}

TEST(JinjaValue, Truthiness) {
  EXPECT_FALSE(Value().truthy());
  EXPECT_FALSE(Value(None{}).truthy());
  EXPECT_FALSE(Value("").truthy());
  EXPECT_FALSE(Value(0.0).truthy());
  EXPECT_FALSE(Value::list({}).truthy());
  EXPECT_FALSE(Value::dict({}).truthy());
  EXPECT_TRUE(Value(" ").truthy());
  EXPECT_TRUE(Value::list({Value()}).truthy());
  EXPECT_TRUE(Value::make_namespace({}).truthy());
}

TEST(JinjaValue, Utf8Helpers) {
  EXPECT_EQ(utf8_length("h\xc3\xa9llo"), 5u);
  EXPECT_EQ(utf8_chars("a\xe2\x82\xac"), (std::vector<std::string>{"a", "\xe2\x82\xac"}));
  // a stray continuation byte counts as one character rather than being dropped
  EXPECT_EQ(utf8_length("a\x80"), 2u);
}

}  // namespace
}  // namespace fp4lm::tokenizer::jinja::jinja_value_test
