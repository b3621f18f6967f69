// Kimi K2.5's wrapper (Kimi_K25ForConditionalGeneration) against transformers itself: a tiny random
// checkpoint transformers 5.24 built and saved (scripts/make_kimi_k25_goldens.py, fixture in
// tests/model/fixtures/kimi_k25: a DeepSeek-V3 text model with MLA, YaRN, grouped sigmoid routing and
// a shared expert, beside a MoonViT tower), fed text: float32 logits within 1e-4 of the range of
// transformers' float64 logits at every position, argmax equal; the tower is skipped with its log
// line. Then decoding, prefill chunks and batches against one forward, and the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"

namespace fp4lm::model::kimi_k25_test {
namespace {

using nlohmann::json;

std::string fixture() { return (test::source_dir() / "tests" / "model" / "fixtures" / "kimi_k25").string(); }

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::vector<int32_t> tokens() {
  return io::read_json_file(fixture() + "/golden.json")["text_tokens"].get<std::vector<int32_t>>();
}

TEST(KimiK25, Float32MatchesTransformersFloat64) {
  const json g = io::read_json_file(fixture() + "/golden.json");
  const std::vector<int32_t> toks = tokens();
  const auto vocab = g["logits_cols"].get<size_t>();
  const std::string raw = test::read_file(fixture() + "/text_logits.f64");
  ASSERT_EQ(raw.size(), toks.size() * vocab * sizeof(double));
  std::vector<std::vector<double>> want(toks.size(), std::vector<double>(vocab));
  for (size_t r = 0; r < toks.size(); ++r) std::memcpy(want[r].data(), raw.data() + r * vocab * sizeof(double), vocab * sizeof(double));

  test::LogCapture log;
  auto lm = CausalLM::load(fixture(), f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.architecture, "Kimi_K25ForConditionalGeneration");
  EXPECT_EQ(c.wrapper_prefix, "language_model.");
  EXPECT_EQ(c.mla.q_lora_rank, 24);
  EXPECT_EQ(c.mla.kv_lora_rank, 16);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.layer_is_moe(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.layer_is_moe(1) && c.layer_is_moe(2));
  EXPECT_EQ(log.count("the vision tower (vision_tower.*) and its projector (mm_projector.*) are skipped (text input "
                      "only)"),
            1)
      << log.text();
  // The tower's tensors are another component's (ignored with that reason), none left unread.
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  size_t other = 0;
  for (const auto& [why, names] : u.ignored)
    if (std::find(names.begin(), names.end(), "vision_tower.encoder.blocks.0.wqkv.weight") != names.end())
      other = names.size();
  EXPECT_GE(other, 15u);  // the MoonViT block, patch embedding, position table and projector

  const std::vector<float> got = all_logits(*lm, toks);
  double lo = want[0][0], hi = lo, diff = 0;
  for (size_t r = 0; r < toks.size(); ++r)
    for (size_t v = 0; v < vocab; ++v) {
      lo = std::min(lo, want[r][v]);
      hi = std::max(hi, want[r][v]);
      diff = std::max(diff, std::abs(static_cast<double>(got[r * vocab + v]) - want[r][v]));
    }
  const double rel = diff / (hi - lo);  // relative to the range of transformers' logits
  EXPECT_LT(rel, 1e-4);
  RecordProperty("rel_diff", fmt::format("{:.2e}", rel));
  for (size_t r = 0; r < toks.size(); ++r) {
    const auto gr = got.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    EXPECT_EQ(std::max_element(gr, gr + static_cast<std::ptrdiff_t>(vocab)) - gr,
              std::max_element(want[r].begin(), want[r].end()) - want[r].begin())
        << "argmax at position " << r;
  }
}

TEST(KimiK25, StepsChunksAndBatchesMatchOneForward) {
  expect_steps_chunks_and_batches_match_one_forward(fixture(), f32(), tokens());
}

// The wrapper's lm_head is tied by the top level's tie_word_embeddings, true when absent as
// Kimi_K25Config's default, whatever text_config says; Moonshot's class name reads the same.
TEST(KimiK25, TopLevelTieAndNames) {
  json c = io::read_json_file(fixture() + "/config.json");
  EXPECT_FALSE(parse_model_config(c, "config.json").tie_word_embeddings);
  c.erase("tie_word_embeddings");
  {
    test::LogCapture log(spdlog::level::warn);
    EXPECT_TRUE(parse_model_config(c, "config.json").tie_word_embeddings);
    EXPECT_EQ(log.count("tie_word_embeddings is true at the top level (its default) and false in the language "
                        "model's config; the top level's value is used"),
              1)
        << log.text();
  }
  c["tie_word_embeddings"] = true;
  c["text_config"].erase("tie_word_embeddings");
  EXPECT_TRUE(parse_model_config(c, "config.json").tie_word_embeddings);
  c["architectures"] = {"KimiK25ForConditionalGeneration"};
  c["text_config"]["model_type"] = "kimi_k2";
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(m.wrapper_prefix, "language_model.");
  EXPECT_EQ(m.moe.num_experts, 4);
  c.erase("text_config");
  try {
    parse_model_config(c, "config.json");
    ADD_FAILURE() << "parsed without text_config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KimiK25ForConditionalGeneration needs an object 'text_config'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::model::kimi_k25_test
