// `fp4lm chat-template`: prints the rendered prompt exactly (the Qwen3 golden prompts, no added
// newline), keeps tool key order, and fails cleanly: bad JSON names the file (exit 1), bad flag
// values exit 2, template errors exit 1 with one line.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace fp4lm::chat_template_cli_test {
namespace {

using ::testing::HasSubstr;
using test::TempDir;

std::filesystem::path qwen3_dir() { return test::shared_dir() / "tokenizers" / "qwen3"; }

test::CommandResult chat_template(const std::string& model, const std::string& messages, const std::string& extra = "") {
  return test::run_command(test::fp4lm_bin() + " chat-template --model '" + model + "' --messages '" + messages + "' " +
                           extra);
}

TEST(ChatTemplateCli, PrintsQwen3GoldenPromptsExactly) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/golden_chat.jsonl");
  TempDir tmp;
  std::ifstream in(qwen3_dir() / "golden_chat.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    std::string name = "m";  // (built in steps: GCC 12 warns falsely on "m" + to_string(n))
    name += std::to_string(n);
    name += ".json";
    auto file = tmp / name;
    test::write_file(file, j["messages"].dump());
    std::string flags;
    if (j.value("add_generation_prompt", false)) flags += " --add-generation-prompt";
    if (j.contains("enable_thinking")) flags += j["enable_thinking"].get<bool>() ? " --enable-thinking true" : " --enable-thinking false";
    auto r = chat_template(qwen3_dir().string(), file.string(), flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, j["rendered"].get<std::string>()) << line;
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(ChatTemplateCli, NeedsOnlyTokenizerConfigAndKeepsToolKeyOrder) {
  TempDir model, tmp;
  test::write_file(model / "tokenizer_config.json",
                   R"({"eos_token": "</s>", "chat_template": "{% for t in tools %}{{ t|tojson }}{% endfor %}|{{ messages[0].content }}{{ eos_token }}"})");
  test::write_file(tmp / "conv.json",
                   R"({"messages": [{"role": "user", "content": "hé"}], "tools": [{"zeta": 1, "alpha": {"y": 2, "x": 3}}]})");
  auto r = chat_template(model.path().string(), (tmp / "conv.json").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, R"({"zeta": 1, "alpha": {"y": 2, "x": 3}}|hé</s>)");
}

TEST(ChatTemplateCli, BadJsonNamesTheFileAndExits1) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  TempDir tmp;
  auto file = tmp / "broken.json";
  test::write_file(file, "[{\"role\": \"user\",");
  auto r = chat_template(qwen3_dir().string(), file.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("broken.json"));
  EXPECT_EQ(r.out, "");

  auto missing = chat_template(qwen3_dir().string(), (tmp / "absent.json").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("absent.json"));

  test::write_file(file, "{\"role\": \"user\"}");
  auto wrong_shape = chat_template(qwen3_dir().string(), file.string());
  EXPECT_EQ(wrong_shape.exit_code, 1);
  EXPECT_THAT(wrong_shape.err, HasSubstr("broken.json"));
}

TEST(ChatTemplateCli, BadFlagValuesExit2) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  TempDir tmp;
  auto file = tmp / "m.json";
  test::write_file(file, R"([{"role": "user", "content": "hi"}])");
  auto r = chat_template(qwen3_dir().string(), file.string(), "--enable-thinking maybe");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--enable-thinking"));
  auto no_messages = test::run_command(test::fp4lm_bin() + " chat-template --model '" + qwen3_dir().string() + "'");
  EXPECT_EQ(no_messages.exit_code, 2);
}

TEST(ChatTemplateCli, TemplateErrorsExit1WithOneLine) {
  TempDir model, tmp;
  test::write_file(model / "tokenizer_config.json", R"({"chat_template": "{{ raise_exception('only users') }}"})");
  test::write_file(tmp / "m.json", "[]");
  auto r = chat_template(model.path().string(), (tmp / "m.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("only users"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);

  TempDir no_config;
  auto r2 = chat_template(no_config.path().string(), (tmp / "m.json").string());
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_THAT(r2.err, HasSubstr("tokenizer_config.json"));
}

}  // namespace
}  // namespace fp4lm::chat_template_cli_test
