// engine/runtime.h: what every front end opens (serve, generate, eval, fp4lm.LLM) — the tokenizer
// and chat template of a directory, and the model with the step model the engine drives.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/paths.h"
#include "engine/engine_args.h"
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

// One EngineConfig from one EngineArgs: what serve, generate, eval and fp4lm.LLM all load with.
TEST(EngineConfig, DefaultsAreAppliedOnce) {
  EngineArgs a;
  const EngineConfig c = create_engine_config(a);
  EXPECT_EQ(c.scheduler.max_num_seqs, 8);
  EXPECT_EQ(c.scheduler.max_num_batched_tokens, 512);
  EXPECT_EQ(c.scheduler.kv_cache_bytes, default_kv_cache_bytes());  // a quarter of RAM
  EXPECT_GT(c.scheduler.kv_cache_bytes, 0u);
  EXPECT_TRUE(c.scheduler.enable_prefix_caching);
  EXPECT_EQ(c.scheduler.block_size, 16);
  EXPECT_EQ(c.scheduler.max_logprobs, kMaxLogprobs);
  EXPECT_FALSE(c.scheduler.speculative.enabled());
  EXPECT_FALSE(c.load.mtp);
  EXPECT_EQ(c.pipeline_parallel_size, 1);
  a.kv_cache_memory_bytes = 12345;
  a.speculative_config = R"({"method": "mtp", "num_speculative_tokens": 2})";
  a.max_model_len = 64;
  const EngineConfig m = create_engine_config(a);
  EXPECT_EQ(m.scheduler.kv_cache_bytes, 12345u);
  EXPECT_EQ(m.scheduler.speculative.method, "mtp");
  EXPECT_TRUE(m.load.mtp);  // the MTP head is loaded because the method needs it
  EXPECT_EQ(m.load.max_model_len, 64);
}

// Every inconsistent setting is a RequestError naming the parameter, before anything loads.
TEST(EngineConfig, BadSettingsNameTheirParameter) {
  struct Case {
    const char* param;
    void (*set)(EngineArgs&);
    const char* says;
  };
  const Case cases[] = {
      {"max_num_seqs", [](EngineArgs& a) { a.max_num_seqs = 0; }, "max_num_seqs must be >= 1"},
      {"max_num_batched_tokens", [](EngineArgs& a) { a.max_num_batched_tokens = 4; }, "must be >= max_num_seqs (8)"},
      {"block_size", [](EngineArgs& a) { a.block_size = 5000; }, "block_size must be in [1, 4096]"},
      {"max_logprobs", [](EngineArgs& a) { a.max_logprobs = -2; }, "-1 (no cap) or at least 0, got -2"},
      {"speculative_config", [](EngineArgs& a) { a.speculative_config = "{"; }, "speculative_config"},
      {"pipeline_parallel_size", [](EngineArgs& a) { a.pipeline_parallel_size = 0; }, "must be >= 1, got 0"},
      {"speculative_config",
       [](EngineArgs& a) {
         a.speculative_config = R"({"method": "mtp", "num_speculative_tokens": 1})";
         a.pipeline_parallel_size = 2;
       },
       "does not run over pipeline stages (pipeline_parallel_size 2)"},
      {"max_model_len", [](EngineArgs& a) { a.max_model_len = -1; }, "max_model_len must be positive"},
      {"linear_backend", [](EngineArgs& a) { a.linear_backend = "nope"; }, "unknown backend 'nope'"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.says);
    EngineArgs a;
    k.set(a);
    try {
      create_engine_config(a);
      ADD_FAILURE() << "accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param, k.param);
      EXPECT_NE(std::string(e.what()).find(k.says), std::string::npos) << e.what();
    }
  }
}

// Runtime::open: a pipeline needs its stages, and a DiffusionGemma refuses speculation whichever
// front end asked (the message names the parameter).
TEST(Runtime, OpenRefusesWhatTheModelCannotRun) {
  const std::string diffusion = (fp4lm::test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny").string();
  EngineArgs a;
  a.dtype = "float32";
  const Runtime plain = Runtime::open(diffusion, create_engine_config(a));
  ASSERT_NE(plain.diffusion(), nullptr);
  a.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 2})";
  try {
    Runtime::open(diffusion, create_engine_config(a));
    ADD_FAILURE() << "a DiffusionGemma accepted speculative decoding";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "speculative_config");
    EXPECT_NE(std::string(e.what()).find("does not speculate"), std::string::npos) << e.what();
  }
  EngineArgs p;
  p.pipeline_parallel_size = 2;
  try {
    Runtime::open(diffusion, create_engine_config(p));
    ADD_FAILURE() << "a pipeline size without stages was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "pipeline_parallel_size");
  }
}

}  // namespace
}  // namespace fp4lm::engine
