// GCC 12 at -O1 with the sanitizers (CI's ASan build) reports a false maybe-uninitialized inside
// <regex>'s own std::function code, which -Werror would turn into a failed build.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Structured outputs through the scheduler: a fake model whose unconstrained output is never
// JSON produces schema-valid JSON once the grammar masks its logits, with the real Qwen3
// tokenizer (its vocabulary trie built on first use or in the background from construction on);
// a bad schema is a RequestError naming the request field.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/paths.h"
#include "engine/scheduler.h"
#include "fake_step_model.h"

namespace fp4lm::engine::structured_scheduler_test {
namespace {

std::unique_ptr<tokenizer::Tokenizer> qwen3() {
  for (const auto& dir : {fp4lm::test::shared_dir() / "tokenizers/qwen3", std::filesystem::path("/work/shared/tokenizers/qwen3")})
    if (std::filesystem::exists(dir / "tokenizer.json")) return tokenizer::Tokenizer::from_dir(dir.string());
  return nullptr;
}

std::string run_one(Scheduler& s, RequestParams p, std::string* finish = nullptr) {
  s.add(1, std::move(p));
  std::string text;
  for (int steps = 0; s.has_work() && steps < 200; ++steps)
    for (auto& [id, out] : s.step()) {
      if (id != 1) continue;
      text += out.text;
      if (out.finished && finish) *finish = out.finish_reason;
    }
  EXPECT_FALSE(s.has_work());
  return text;
}

TEST(StructuredScheduler, JsonSchemaOutputParsesAndValidates) {
  auto tok = qwen3();
  if (!tok) GTEST_SKIP() << "no Qwen3 tokenizer at ../shared/tokenizers/qwen3";
  test::FakeStepModel model;
  model.vocab = 151936;
  model.max_len = 256;
  model.eos = {*tok->token_to_id("<|im_end|>")};
  Scheduler s(model, tok.get(), {});
  RequestParams p;
  p.prompt = {100, 200};
  p.max_tokens = 100;
  p.structured = {structured::StructuredSpec::Kind::JsonSchema,
                  R"({"type":"object","properties":{"answer":{"enum":["yes","no"]},"count":{"type":"integer"},
                      "note":{"type":"string","maxLength":5}},"required":["answer","count","note"]})",
                  {},
                  "response_format"};
  // Unconstrained, the fake model's greedy chain is not JSON.
  RequestParams plain = p;
  plain.structured = {};
  const std::string free_text = run_one(s, plain);
  EXPECT_FALSE(nlohmann::json::accept(free_text)) << free_text;

  std::string finish;
  const std::string text = run_one(s, p, &finish);
  EXPECT_EQ(finish, "stop") << text;
  const auto j = nlohmann::json::parse(text);  // throws (fails the test) when not JSON
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 3u) << text;
  EXPECT_TRUE(j.at("answer") == "yes" || j.at("answer") == "no") << text;
  EXPECT_TRUE(j.at("count").is_number_integer()) << text;
  EXPECT_LE(j.at("note").get<std::string>().size(), 5u) << text;

  // The same request in a batch with an unconstrained one: the same output (masks are per state).
  s.add(2, plain);
  const std::string again = run_one(s, p);
  EXPECT_EQ(again, text);

  // The vocabulary trie built in the background from construction on (fp4lm serve): the same output.
  SchedulerConfig pre;
  pre.prebuild_structured_vocabulary = true;
  Scheduler prebuilt(model, tok.get(), pre);
  EXPECT_EQ(run_one(prebuilt, p), text);
}

TEST(StructuredScheduler, ChoiceAndRegexAndErrors) {
  auto tok = qwen3();
  if (!tok) GTEST_SKIP() << "no Qwen3 tokenizer at ../shared/tokenizers/qwen3";
  test::FakeStepModel model;
  model.vocab = 151936;
  model.max_len = 256;
  model.eos = {*tok->token_to_id("<|im_end|>")};
  Scheduler s(model, tok.get(), {});
  RequestParams p;
  p.prompt = {100};
  p.max_tokens = 40;
  p.structured = {structured::StructuredSpec::Kind::Choice, "", {"positive", "negative"}, "structured_outputs.choice"};
  const std::string c = run_one(s, p);
  EXPECT_TRUE(c == "positive" || c == "negative") << c;
  p.structured = {structured::StructuredSpec::Kind::Regex, "[A-Z][a-z]{2,4}-[0-9]{3}", {}, "structured_outputs.regex"};
  const std::string r = run_one(s, p);
  EXPECT_TRUE(std::regex_match(r, std::regex("[A-Z][a-z]{2,4}-[0-9]{3}"))) << r;
  p.structured = {structured::StructuredSpec::Kind::Regex, "a(?=b)", {}, "structured_outputs.regex"};
  try {
    s.check(p);
    ADD_FAILURE() << "a lookahead was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "structured_outputs.regex");
    EXPECT_NE(std::string(e.what()).find("lookaround"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::engine::structured_scheduler_test
