// gpt-oss's "harmony" chat template (tests/tokenizer/fixtures/gpt_oss/chat_template.jinja, the
// published template) renders byte for byte as transformers' own renderer does: the golden prompts
// in golden_chat.jsonl were written by make_golden.py next to it (transformers 5.24) — system
// message with reasoning effort, model identity and built-in tools, a developer message with
// function tools rendered as TypeScript (enums, defaults, arrays, nested objects, nullable, type
// lists, oneOf), tool calls and tool results, the analysis channel kept before a tool call and
// dropped once a final answer follows, the training form ending in <|return|>. The date the
// template prints (strftime_now) is compared as DATE.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "tokenizer/chat_template.h"

namespace fp4lm::tokenizer::gpt_oss_chat_template_test {
namespace {

const std::string kDir = std::string(FP4LM_SOURCE_DIR) + "/tests/tokenizer/fixtures/gpt_oss/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every "Current date: YYYY-MM-DD" as "Current date: DATE" (no std::regex: GCC 12 warns inside
// <regex> under the sanitizer build's -O1, and the build is -Werror).
std::string without_date(std::string s) {
  const std::string key = "Current date: ";
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + 1)) {
    const size_t d = p + key.size();
    const bool date = d + 10 <= s.size() && s[d + 4] == '-' && s[d + 7] == '-' &&
                      std::all_of(s.begin() + static_cast<std::ptrdiff_t>(d), s.begin() + static_cast<std::ptrdiff_t>(d + 10),
                                  [](char c) { return c == '-' || (c >= '0' && c <= '9'); });
    if (date) s.replace(d, 10, "DATE");
  }
  return s;
}

TEST(GptOssChatTemplate, MatchesTransformersGoldenPrompts) {
  const ChatTemplate tmpl(read_file(kDir + "chat_template.jinja"), "<|startoftext|>", "<|return|>");
  std::ifstream in(kDir + "golden_chat.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::ordered_json::parse(line);
    ChatOptions opts;
    opts.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    for (const auto& [k, v] : j["kwargs"].items()) opts.extra[k] = nlohmann::json(v);
    const std::string got = without_date(tmpl.render_ordered(j["messages"], j["tools"], opts));
    EXPECT_EQ(got, j["prompt"].get<std::string>()) << j["name"].get<std::string>();
    ++n;
  }
  EXPECT_EQ(n, 9);
}

// The template's own checks surface as errors with its message.
TEST(GptOssChatTemplate, RaiseExceptionMessagesReachTheCaller) {
  const ChatTemplate tmpl(read_file(kDir + "chat_template.jinja"), "", "");
  ChatOptions opts;
  const auto channel_in_content = nlohmann::json::parse(
      R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "<|channel|>final<|message|>hi"}])");
  EXPECT_NE(test::error_of([&] { tmpl.render(channel_in_content, opts); }).find("containing <|channel|> tags"),
            std::string::npos);
  const auto orphan_tool = nlohmann::json::parse(R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}])");
  EXPECT_NE(test::error_of([&] { tmpl.render(orphan_tool, opts); }).find("no previous assistant message with a tool call"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::tokenizer::gpt_oss_chat_template_test
