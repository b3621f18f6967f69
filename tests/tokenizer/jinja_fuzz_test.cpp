// Robustness: truncated and mutated real templates, and odd message contents, must either render
// or fail with fp4lm::Error; never crash, hang, or throw anything else (run under ASan in CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace fp4lm::tokenizer::jinja_fuzz_test {
namespace {

// A compact template touching most constructs, so the test has material without ../shared.
const char* kRichTemplate = R"__({%- set ns = namespace(n=0, last=-1) %}
{%- for m in messages[::-1] if m.role is defined %}
  {%- set ns.n = ns.n + 1 %}{%- if m.role == 'user' and ns.last < 0 %}{%- set ns.last = loop.index0 %}{%- endif %}
{%- endfor %}
{%- macro show(m, sep='\n') -%}
  {{ m.role | upper }}{{ sep }}{{ m.content | string | trim }}
{%- endmacro %}
{# a comment #}
{%- for m in messages %}
  {%- if m.content is string and '</think>' in m.content %}
    {{- m.content.split('</think>')[-1].lstrip('\n') }}
  {%- elif m.tool_calls %}{% for k, v in m.tool_calls[0].items() %}{{ k ~ '=' ~ v|tojson(indent=2) }}{% endfor %}
  {%- else %}{{ show(m) ~ (', ' if not loop.last else '') }}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ 'A:' if ns.n % 2 == 0 else 'B:' }}{{ [1, 2, 3][1:] | join('-') }}{% endif %})__";

const char* kMessages = R"([
  {"role": "system", "content": "sys"},
  {"role": "user", "content": "hi \u00e9"},
  {"role": "assistant", "content": "<think>\nr\n</think>\n\nok", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
  {"role": "tool", "content": "{\"x\": 1}"},
  {"role": "user", "content": "again"}
])";

// Renders; returns false when it failed the allowed way.
bool try_render(const std::string& source, const nlohmann::json& messages) {
  try {
    ChatTemplate t(source, "<s>", "</s>");
    ChatOptions opts;
    opts.add_generation_prompt = true;
    opts.enable_thinking = false;
    t.render(messages, opts);
    return true;
  } catch (const fp4lm::Error&) {
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what() << "\ntemplate:\n" << source;
    return false;
  }
}

std::vector<std::string> sources() {
  std::vector<std::string> out = {kRichTemplate};
  auto config = test::shared_dir() / "tokenizers" / "qwen3" / "tokenizer_config.json";
  if (std::filesystem::exists(config))
    out.push_back(ChatTemplate::from_dir(config.parent_path().string()).source());
  return out;
}

TEST(JinjaFuzz, FullTemplatesRender) {
  auto messages = nlohmann::json::parse(kMessages);
  for (const auto& s : sources()) EXPECT_TRUE(try_render(s, messages));
}

TEST(JinjaFuzz, EveryTruncationRendersOrFailsCleanly) {
  auto messages = nlohmann::json::parse(kMessages);
  for (const auto& s : sources()) {
    int ok = 0;
    for (size_t n = 0; n <= s.size(); ++n) ok += try_render(s.substr(0, n), messages);
    EXPECT_GT(ok, 0);
  }
}

TEST(JinjaFuzz, RandomMutationsRenderOrFailCleanly) {
  auto messages = nlohmann::json::parse(kMessages);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~ \n=<>!*/0a_\\";
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&]() {  // xorshift64: deterministic
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (const auto& base : sources()) {
    for (int iter = 0; iter < 1500; ++iter) {
      std::string s = base;
      int edits = 1 + static_cast<int>(next() % 3);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        size_t pos = next() % s.size();
        char c = alphabet[next() % alphabet.size()];
        switch (next() % 3) {
          case 0: s[pos] = c; break;
          case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos), c); break;
          default: s.erase(pos, 1 + next() % 8); break;
        }
      }
      try_render(s, messages);
    }
  }
}

TEST(JinjaFuzz, OddMessageContentsRenderOrFailCleanly) {
  const char* contents[] = {"null", "5", "2.5", "true", "[]", "{}", R"([{"type": "text", "text": "hi"}])",
                            R"("\u0000\u001f\"\\")", R"("")"};
  for (const auto& s : sources())
    for (const char* c : contents)
      for (const char* role : {"user", "assistant", "system", "tool", "weird"}) {
        auto messages = nlohmann::json::parse(std::string(R"([{"role": ")") + role + R"(", "content": )" + c + "}]");
        try_render(s, messages);
      }
  // Messages that are not objects at all.
  for (const auto& s : sources()) {
    try_render(s, nlohmann::json::parse("[1, \"x\", null, [1]]"));
    try_render(s, nlohmann::json::array());
  }
}

}  // namespace
}  // namespace fp4lm::tokenizer::jinja_fuzz_test
