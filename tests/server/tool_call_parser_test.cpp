// Tool-call and reasoning parsers: each format's calls as vLLM returns them (name, arguments as
// Python's json.dumps writes them), malformed calls left as content, and streaming fed in every
// split equal to the whole text at once.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/chat_output_parser.h"
#include "server/tool_call_parser.h"

namespace fp4lm::server::tool_call_parser_test {
namespace {

using nlohmann::json;

struct Split {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

// The text fed in pieces of `piece` bytes (0: all at once), deltas assembled as a client does.
Split run(const std::string& parser, ReasoningKind r, const std::string& text, size_t piece, const json& tools = json()) {
  std::unique_ptr<ToolCallParser> tp = parser.empty() ? nullptr : make_tool_call_parser(parser);
  ChatOutputParser p(r, tp.get(), &tools);
  Split s;
  auto take = [&](const ChatDelta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const auto& t : d.tool_calls) {
      EXPECT_EQ(t.index, s.calls.size());
      EXPECT_FALSE(t.id.empty());
      s.calls.push_back({t.name, t.arguments});
    }
  };
  if (piece == 0) {
    take(p.feed(text));
  } else {
    for (size_t i = 0; i < text.size(); i += piece) take(p.feed(text.substr(i, piece)));
  }
  take(p.finish());
  return s;
}

// Every piece size gives the same split as the whole text.
Split run_all_splits(const std::string& parser, ReasoningKind r, const std::string& text, const json& tools = json()) {
  const Split whole = run(parser, r, text, 0, tools);
  for (size_t piece = 1; piece <= 7; ++piece) {
    const Split s = run(parser, r, text, piece, tools);
    EXPECT_EQ(s.reasoning, whole.reasoning) << "piece " << piece;
    EXPECT_EQ(s.content, whole.content) << "piece " << piece;
    EXPECT_EQ(s.calls.size(), whole.calls.size()) << "piece " << piece;
    for (size_t i = 0; i < std::min(s.calls.size(), whole.calls.size()); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  return whole;
}

TEST(ToolCallParser, HermesCallsAndContentBefore) {
  const Split s = run_all_splits("hermes", ReasoningKind::none,
                                 "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                 "\"Paris\", \"days\": 3, \"ok\": true}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\","
                                 " \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(s.content, "Let me check.\n");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  // Key order kept, Python's separators (vLLM json.dumps the parsed arguments).
  EXPECT_EQ(s.calls[0].arguments, R"({"city": "Paris", "days": 3, "ok": true})");
  EXPECT_EQ(s.calls[1].name, "now");
  EXPECT_EQ(s.calls[1].arguments, "{}");
}

TEST(ToolCallParser, HermesUnclosedLastCallAndMalformedCalls) {
  // An output cut before </tool_call> still yields its call, as vLLM's pattern allows.
  Split s = run_all_splits("hermes", ReasoningKind::none, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\\u00e9\\n\"}}");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, "{\"a\": \"\xC3\xA9\\n\"}");  // ensure_ascii=False
  EXPECT_EQ(s.content, "");
  // Not JSON, or JSON without a name: the whole text is content.
  for (const std::string text : {"hi <tool_call>{\"name\": \"f\", </tool_call>", "<tool_call>[1, 2]</tool_call>",
                                 "a <tool_call>"}) {
    s = run_all_splits("hermes", ReasoningKind::none, text);
    EXPECT_EQ(s.content, text);
    EXPECT_TRUE(s.calls.empty());
  }
  // Text that only starts like the tag is content.
  s = run_all_splits("hermes", ReasoningKind::none, "x <tool_ca");
  EXPECT_EQ(s.content, "x <tool_ca");
}

TEST(ToolCallParser, Qwen3CoderTypesParametersBySchema) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "book", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}, "price": {"type": "number"},
                     "pets": {"type": "boolean"}, "rooms": {"type": "array"}, "code": {"type": "string"}}}}}])");
  const Split s = run_all_splits(
      "qwen3_coder", ReasoningKind::none,
      "Sure.\n<tool_call>\n<function=book>\n<parameter=city>\nNew York\n</parameter>\n<parameter=nights>\n3\n"
      "</parameter>\n<parameter=price>\n99.5\n</parameter>\n<parameter=pets>\nfalse\n</parameter>\n<parameter=rooms>\n"
      "[1, 2]\n</parameter>\n<parameter=code>\n007\n</parameter>\n<parameter=extra>\n{\"k\": 1}\n</parameter>\n"
      "</function>\n</tool_call>",
      tools);
  EXPECT_EQ(s.content, "Sure.\n");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "book");
  EXPECT_EQ(s.calls[0].arguments,
            R"({"city": "New York", "nights": 3, "price": 99.5, "pets": false, "rooms": [1, 2], "code": "007", "extra": {"k": 1}})");
}

TEST(ToolCallParser, Llama3JsonOnlyAtTheStart) {
  Split s = run_all_splits("llama3_json", ReasoningKind::none,
                           "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"}\"}}; {\"name\": \"b\", "
                           "\"arguments\": {}}");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "a");
  EXPECT_EQ(s.calls[0].arguments, R"({"x": "}"})");
  EXPECT_EQ(s.calls[1].name, "b");
  EXPECT_EQ(s.content, "");
  s = run_all_splits("llama3_json", ReasoningKind::none, "The answer is {\"name\": \"a\"}");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "The answer is {\"name\": \"a\"}");
  s = run_all_splits("llama3_json", ReasoningKind::none, "{\"name\": \"a\", \"parameters\": {\"x\": 1");  // cut off
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"name\": \"a\", \"parameters\": {\"x\": 1");
}

TEST(ToolCallParser, MistralBothFormsAndNineCharacterIds) {
  Split s = run_all_splits("mistral", ReasoningKind::none,
                           "ok[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": 1}}, {\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(s.content, "ok");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].arguments, R"({"q": 1})");
  s = run_all_splits("mistral", ReasoningKind::none, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]now[ARGS]{}");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(s.calls[1].name, "now");
  const std::string id = make_tool_call_parser("mistral")->make_id();
  EXPECT_EQ(id.size(), 9u);
  const std::string hermes_id = make_tool_call_parser("hermes")->make_id();
  EXPECT_EQ(hermes_id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(hermes_id.size(), 14u + 32u);
}

TEST(ToolCallParser, DeepSeekV3AndV31Forms) {
  Split s = run_all_splits("deepseek_v3", ReasoningKind::none,
                           "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                           "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}"
                           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(s.content, "Sure.");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(s.calls[1].name, "now");
  EXPECT_EQ(s.calls[1].arguments, "{}");
  // With the R1 reasoning parser in front.
  s = run_all_splits("deepseek_v3", ReasoningKind::deepseek_r1,
                     "think</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": [1]}<｜tool▁call▁end｜>");
  EXPECT_EQ(s.reasoning, "think");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"a": [1]})");
}

TEST(ToolCallParser, UnknownNamesAreUsageErrors) {
  EXPECT_THROW(make_tool_call_parser("nope"), UsageError);
  EXPECT_THROW(reasoning_kind("nope"), UsageError);
}

TEST(ReasoningParser, Qwen3AndDeepSeekR1) {
  Split s = run_all_splits("", ReasoningKind::qwen3, "<think>\nLet me think.\n</think>\n\nThe answer.");
  EXPECT_EQ(s.reasoning, "\nLet me think.\n");
  EXPECT_EQ(s.content, "\n\nThe answer.");
  s = run_all_splits("", ReasoningKind::qwen3, "No thinking here </think> x");  // no <think>: all content
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "No thinking here </think> x");
  // DeepSeek-R1's template opens <think> in the prompt: the output starts inside the reasoning.
  s = run_all_splits("", ReasoningKind::deepseek_r1, "step 1, step 2</think>Done.");
  EXPECT_EQ(s.reasoning, "step 1, step 2");
  EXPECT_EQ(s.content, "Done.");
  s = run_all_splits("", ReasoningKind::deepseek_r1, "<think>still thinking");
  EXPECT_EQ(s.reasoning, "still thinking");
  EXPECT_EQ(s.content, "");
  // Reasoning, then a tool call.
  s = run_all_splits("hermes", ReasoningKind::qwen3,
                     "<think>use the tool</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  EXPECT_EQ(s.reasoning, "use the tool");
  EXPECT_EQ(s.content, "\n");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"a": 1})");
}

TEST(ToolCallParser, PythonJsonDumpsAndMarkerSuffix) {
  EXPECT_EQ(python_json_dumps(nlohmann::ordered_json::parse(R"({"b": [1, 2.5, null, "x\ty"], "a": {"c": false}})")),
            R"({"b": [1, 2.5, null, "x\ty"], "a": {"c": false}})");
  EXPECT_EQ(partial_marker_suffix("abc<tool", "<tool_call>"), 5u);
  EXPECT_EQ(partial_marker_suffix("abc", "<tool_call>"), 0u);
  EXPECT_EQ(partial_marker_suffix("<tool_call>", "<tool_call>"), 0u);  // whole markers are found, not held
}

}  // namespace
}  // namespace fp4lm::server::tool_call_parser_test
