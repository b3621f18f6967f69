// gpt-oss's harmony output through `--reasoning-parser openai_gptoss` / `--tool-call-parser openai`
// (server/harmony_parser.h): analysis -> reasoning_content, final -> content, commentary
// to=functions.NAME -> tool calls (recipient in the channel part or in the role part, with or
// without <|constrain|>json), several calls, preambles, text that is not harmony left as content,
// and every streaming split of the text assembled as a client does equal to the whole text at once.
#include <gtest/gtest.h>

#include "server/chat_output_parser.h"
#include "server/tool_call_parser.h"

namespace fp4lm::server::harmony_parser_test {
namespace {

struct Out {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  size_t parser_calls = 0;
};

Out run(const std::string& text, size_t piece, bool tools, ReasoningKind r = ReasoningKind::openai_gptoss) {
  const nlohmann::json no_tools;
  std::unique_ptr<ToolCallParser> tp = tools ? make_tool_call_parser("openai") : nullptr;
  ChatOutputParser p(r, tp.get(), &no_tools);
  Out o;
  auto take = [&](const ChatDelta& d) {
    o.reasoning += d.reasoning;
    o.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!t.name.empty()) {  // an opening: id and name, as the openai client starts a call
        EXPECT_EQ(t.index, o.calls.size());
        EXPECT_TRUE(t.id.starts_with("chatcmpl-tool-")) << t.id;
        o.calls.push_back({t.name, ""});
      } else {
        ASSERT_EQ(t.index + 1, o.calls.size());  // chunks of the open call only
      }
      o.calls.back().second += t.arguments;
    }
  };
  if (piece == 0) take(p.feed(text));
  else
    for (size_t i = 0; i < text.size(); i += piece) take(p.feed(text.substr(i, piece)));
  take(p.finish());
  o.parser_calls = p.tool_calls();
  return o;
}

// Every split gives what the whole text gives.
Out run_all(const std::string& text, bool tools, ReasoningKind r = ReasoningKind::openai_gptoss) {
  const Out whole = run(text, 0, tools, r);
  for (size_t piece = 1; piece <= 9; ++piece) {
    const Out s = run(text, piece, tools, r);
    EXPECT_EQ(s.reasoning, whole.reasoning) << "piece " << piece;
    EXPECT_EQ(s.content, whole.content) << "piece " << piece;
    EXPECT_EQ(s.calls, whole.calls) << "piece " << piece;
  }
  return whole;
}

TEST(HarmonyParser, AnalysisIsReasoningAndFinalIsContent) {
  const Out o = run_all(
      "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>"
      "2 + 2 = 4.",
      false);
  EXPECT_EQ(o.reasoning, "User asks 2+2. Answer 4.");
  EXPECT_EQ(o.content, "2 + 2 = 4.");
  EXPECT_TRUE(o.calls.empty());
  // <|return|> (when the stop token is kept in the text) ends the message, nothing more.
  EXPECT_EQ(run_all("<|channel|>final<|message|>Hi<|return|>", false).content, "Hi");
}

TEST(HarmonyParser, CommentaryToFunctionsIsAToolCall) {
  const Out o = run_all(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Oslo\"}<|call|>",
      true);
  EXPECT_EQ(o.reasoning, "Need weather.");
  EXPECT_EQ(o.content, "");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].first, "get_weather");
  EXPECT_EQ(o.calls[0].second, "{\"location\": \"Oslo\"}");
  EXPECT_EQ(o.parser_calls, 1u);
}

TEST(HarmonyParser, RecipientInTheRoleHeaderAndSeveralCallsAndAPreamble) {
  const Out o = run_all(
      "<|channel|>commentary<|message|>Checking two cities.<|end|>"
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": \"Oslo\"}<|call|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_time<|message|>{}<|call|>",
      true);
  EXPECT_EQ(o.content, "Checking two cities.");  // a preamble: commentary without a recipient
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[0], (std::pair<std::string, std::string>{"get_weather", "{\"location\": \"Oslo\"}"}));
  EXPECT_EQ(o.calls[1], (std::pair<std::string, std::string>{"get_time", "{}"}));
}

TEST(HarmonyParser, WithoutTheToolParserCallsStayContent) {
  const Out o = run_all("<|channel|>commentary to=functions.f json<|message|>{\"a\": 1}<|call|>", false);
  EXPECT_TRUE(o.calls.empty());
  EXPECT_EQ(o.content, "{\"a\": 1}");
  // The tool parser alone (no reasoning parser) parses harmony too.
  const Out t = run_all("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
                        "to=functions.f<|message|>{}<|call|>",
                        true, ReasoningKind::none);
  EXPECT_EQ(t.reasoning, "x");
  ASSERT_EQ(t.calls.size(), 1u);
}

TEST(HarmonyParser, TextThatIsNotHarmonyIsContent) {
  EXPECT_EQ(run_all("just words, no channels", false).content, "just words, no channels");
  // Cut off inside the analysis: what came is reasoning.
  const Out cut = run_all("<|channel|>analysis<|message|>thinking about <|en", false);
  EXPECT_EQ(cut.reasoning, "thinking about <|en");
  // A marker-like text inside a body is body text.
  EXPECT_EQ(run_all("<|channel|>final<|message|>a <| b <|endx c", false).content, "a <| b <|endx c");
  // A header that never reaches <|message|> within 512 bytes is plain text.
  const std::string noise = "<|channel|>" + std::string(600, 'z');
  EXPECT_EQ(run(noise, 0, false).content, noise);
}

TEST(HarmonyParser, NamesAreKnown) {
  EXPECT_EQ(reasoning_kind("openai_gptoss"), ReasoningKind::openai_gptoss);
  EXPECT_EQ(make_tool_call_parser("openai")->name(), "openai");
}

}  // namespace
}  // namespace fp4lm::server::harmony_parser_test
