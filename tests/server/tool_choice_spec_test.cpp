// tool_choice "required" / named as structured-output specs: what the compiled grammar accepts.
#include <gtest/gtest.h>

#include "engine/structured/automaton.h"
#include "engine/structured/byte_grammar.h"
#include "server/api_error.h"
#include "server/tool_choice_spec.h"

namespace fp4lm::server::tool_choice_spec_test {
namespace {

using nlohmann::json;
namespace st = engine::structured;

bool accepts(const st::StructuredSpec& spec, const std::string& text) {
  st::Automaton a(st::lower(st::to_grammar(spec)));
  int32_t s = a.initial();
  for (unsigned char c : text) {
    s = a.next(s, c);
    if (s == st::Automaton::kDead) return false;
  }
  return a.accepting(s);
}

const json kTools = json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])");

TEST(ToolChoiceSpec, NamedFunctionConstrainsToItsArguments) {
  const auto s = tool_choice_spec({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  ASSERT_EQ(s.kind, st::StructuredSpec::Kind::JsonSchema);
  EXPECT_EQ(s.param, "tool_choice");
  EXPECT_TRUE(accepts(s, R"({"city":"Oslo","unit":"c"})"));
  EXPECT_FALSE(accepts(s, R"({"unit":"c"})"));
  const auto none = tool_choice_spec({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}}});
  EXPECT_TRUE(accepts(none, "{}"));
  try {
    tool_choice_spec({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}});
    ADD_FAILURE() << "an unknown function was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tool_choice.function.name");
  }
}

TEST(ToolChoiceSpec, RequiredIsAListOfCallsToTheGivenTools) {
  const auto s = tool_choice_spec({{"tools", kTools}, {"tool_choice", "required"}});
  EXPECT_TRUE(accepts(s, R"([{"name":"get_weather","parameters":{"city":"Rome"}}])"));
  EXPECT_TRUE(accepts(s, R"([{"name":"now","parameters":{}}, {"name":"get_weather","parameters":{"city":"a","unit":"f"}}])"));
  EXPECT_FALSE(accepts(s, R"([])"));
  EXPECT_FALSE(accepts(s, R"([{"name":"other","parameters":{}}])"));
  EXPECT_FALSE(accepts(s, R"([{"name":"get_weather","parameters":{}}])"));  // city is required
  EXPECT_FALSE(tool_choice_spec({{"tools", kTools}, {"tool_choice", "auto"}}).active());
  EXPECT_FALSE(tool_choice_spec({{"tools", kTools}}).active());
}

}  // namespace
}  // namespace fp4lm::server::tool_choice_spec_test
