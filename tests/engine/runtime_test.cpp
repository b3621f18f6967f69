// engine/runtime.h: what every front end opens (serve, generate, eval, fp4lm.LLM) — the tokenizer
// and chat template of a directory, and the model with the step model the engine drives.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/paths.h"
#include "engine/generator.h"
#include "engine/id_file.h"
#include "engine/runtime.h"

namespace fp4lm::engine {
namespace {

TEST(TextFront, NoTokenizerJsonOpensNothing) {
  fp4lm::test::TempDir dir;
  const TextFront t = TextFront::open(dir.path().string());
  EXPECT_EQ(t.tokenizer, nullptr);
  EXPECT_FALSE(t.chat.has_value());
  EXPECT_TRUE(t.chat_error.empty());
}

TEST(TextFront, TheTokenizerAndItsTemplateOrWhyThereIsNone) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer_config.json");
  const std::filesystem::path qwen3 = fp4lm::test::shared_dir() / "tokenizers" / "qwen3";
  const TextFront t = TextFront::open(qwen3.string());
  ASSERT_NE(t.tokenizer, nullptr);
  ASSERT_TRUE(t.chat.has_value()) << t.chat_error;
  EXPECT_EQ(t.tokenizer->decode(t.tokenizer->encode("Hello, world", false), false), "Hello, world");
  // The tokenizer alone: text still encodes, the template's absence is said, not thrown.
  fp4lm::test::TempDir dir;
  std::filesystem::copy_file(qwen3 / "tokenizer.json", dir / "tokenizer.json");
  const TextFront bare = TextFront::open(dir.path().string());
  ASSERT_NE(bare.tokenizer, nullptr);
  EXPECT_FALSE(bare.chat.has_value());
  EXPECT_NE(bare.chat_error.find("tokenizer_config.json"), std::string::npos) << bare.chat_error;
}

// The whole model in this process: the step model is over the loaded model, and generates what
// llama2.c generated (stories260k's reference).
TEST(Runtime, LoadsTheWholeModelAndItsStepModel) {
  FP4LM_REQUIRE_SHARED("models/stories260k/reference_greedy.jsonl");
  const std::filesystem::path dir = fp4lm::test::shared_dir() / "models" / "stories260k";
  model::EngineOptions o;
  o.dtype = "float32";
  const Runtime rt = Runtime::load(dir.string(), o, {});
  EXPECT_EQ(rt.step_model().vocab_size(), rt.model().vocab_size());
  EXPECT_EQ(rt.step_model().max_model_len(), rt.model().max_model_len());
  const auto records = read_id_records((dir / "reference_greedy.jsonl").string());
  ASSERT_FALSE(records.empty());
  RequestParams p;
  p.prompt = records[0].prompt;
  p.max_tokens = static_cast<int64_t>(records[0].continuation.size());
  EXPECT_EQ(generate(rt.step_model(), nullptr, p).output_ids, records[0].continuation);
}

}  // namespace
}  // namespace fp4lm::engine
