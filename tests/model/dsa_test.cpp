// DeepSeek Sparse Attention against transformers itself: tiny random DeepSeek-V3.2
// (DeepseekV32ForCausalLM) and GLM-5 (GlmMoeDsaForCausalLM) checkpoints transformers 5.24 built
// and saved (scripts/make_dsa_goldens.py, fixtures in tests/model/fixtures/dsa), index_topk 5 / 6
// and a 24-token prompt, so most positions attend to a strict subset of their past; GLM-5's odd
// layers reuse the previous layer's selection. float32 logits within 1e-4 of the range of
// transformers' float64 logits at every position, argmax equal: in one forward, decoding one token
// at a time through the caches, in both MLA forms, and for a prompt below the budget. Then the
// selection is shown to matter, the MTP layer to be skipped, and the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/state/state_bytes.h"

namespace fp4lm::model::dsa_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "dsa" / name).string();
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

double check_rows(const std::vector<float>& got, const std::vector<std::vector<double>>& want, const std::string& what) {
  return range_rel_diff(got, want, "dsa", what);
}

// Sets FP4LM_MLA_FORM while alive.
struct FormScope {
  explicit FormScope(const char* form) { ::setenv("FP4LM_MLA_FORM", form, 1); }
  ~FormScope() { ::unsetenv("FP4LM_MLA_FORM"); }
};

class DsaGolden : public ::testing::TestWithParam<const char*> {
 protected:
  std::string dir() const { return fixture(GetParam()); }
  json golden() const { return io::read_json_file(dir() + "/golden.json"); }
  std::vector<int32_t> tokens() const { return golden()["tokens"].get<std::vector<int32_t>>(); }
  std::vector<std::vector<double>> want() const {
    const json g = golden();
    return read_f64_rows(dir() + "/logits.f64", g["tokens"].size(), g["logits_cols"].get<size_t>());
  }
};

TEST_P(DsaGolden, OneForwardMatchesTransformersFloat64) {
  const json g = golden();
  // The goldens exercise the budget: rows past it select index_topk of their positions.
  const int64_t k = g["index_topk"].get<int64_t>();
  ASSERT_GT(static_cast<int64_t>(tokens().size()), 3 * k);
  for (const char* form : {"absorbed", "expanded"}) {
    FormScope scope(form);
    auto lm = CausalLM::load(dir(), f32());
    EXPECT_EQ(lm->config().architecture, g["architecture"].get<std::string>());
    EXPECT_EQ(lm->config().dsa.index_topk, k);
    EXPECT_LT(check_rows(all_logits(*lm, tokens()), want(), fmt::format("{} one forward, {}", GetParam(), form)), 1e-4);
  }
}

// The engine's decode path: one token per forward call, the latent and indexer-key caches
// carrying every earlier position.
TEST_P(DsaGolden, DecodeStepsMatchTransformersFloat64) {
  auto lm = CausalLM::load(dir(), f32());
  const std::vector<int32_t> toks = tokens();
  EXPECT_LT(check_rows(prefill_then_decode_logits(*lm, toks, 0), want(), fmt::format("{} decode steps", GetParam())),
            1e-4);
  // A prompt then decode steps: the prefill's caches feed the steps.
  const size_t half = toks.size() / 2;
  EXPECT_LT(check_rows(prefill_then_decode_logits(*lm, toks, half), want(),
                       fmt::format("{} prefill {} + decode", GetParam(), half)),
            1e-4);
}

TEST_P(DsaGolden, BelowTheBudgetMatchesTransformersFloat64) {
  const json g = golden();
  const auto shorts = g["short_tokens"].get<std::vector<int32_t>>();
  ASSERT_LE(static_cast<int64_t>(shorts.size()), g["index_topk"].get<int64_t>());
  const auto w = read_f64_rows(dir() + "/short_logits.f64", shorts.size(), g["logits_cols"].get<size_t>());
  EXPECT_LT(check_rows(checkpoint_logits(dir(), shorts, f32()), w, fmt::format("{} below the budget", GetParam())), 1e-4);
}

TEST_P(DsaGolden, StepsChunksAndBatchesMatchOneForward) {
  expect_steps_chunks_and_batches_match_one_forward(dir(), f32(), tokens());
}

// Dense attention (index_topk past the prompt) gives other logits past the budget and the same
// below it: the selection is what the goldens check.
TEST_P(DsaGolden, TheSelectionMatters) {
  test::TempDir tmp;
  test::copy_dir(dir(), tmp.path());
  json c = io::read_json_file(dir() + "/config.json");
  const int64_t k = c["index_topk"].get<int64_t>();
  c["index_topk"] = 64;
  test::write_file(tmp / "config.json", c.dump(1));
  const std::vector<int32_t> toks = tokens();
  const std::vector<float> dense = checkpoint_logits(tmp.path().string(), toks, f32());
  const auto w = want();
  const size_t vocab = w[0].size();
  double below = 0, past = 0;
  for (size_t r = 0; r < toks.size(); ++r)
    for (size_t v = 0; v < vocab; ++v) {
      const double d = std::abs(static_cast<double>(dense[r * vocab + v]) - w[r][v]);
      (static_cast<int64_t>(r) < k ? below : past) = std::max(static_cast<int64_t>(r) < k ? below : past, d);
    }
  EXPECT_LT(below, 1e-3);
  EXPECT_GT(past, 0.1);
}

// Every tensor is read or on the ignore list (the MTP layer); the indexer's key cache is
// per-sequence state beside the latent: one key-only slot per indexer layer.
TEST_P(DsaGolden, TensorsAndState) {
  test::LogCapture log;
  auto lm = CausalLM::load(dir(), f32());
  const ModelConfig& c = lm->config();
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  int64_t indexers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) indexers += c.dsa.shares(i) ? 0 : 1;
  const int64_t per_position = c.num_layers * c.mla.latent_dim() + indexers * c.dsa.index_head_dim;
  EXPECT_EQ(state_bytes_per_position(lm->state_layout(), DType::F32),
            static_cast<size_t>(per_position) * sizeof(float));
  EXPECT_EQ(log.count("DeepSeek Sparse Attention: each query attends to its index_topk"), 1) << log.text();
  if (c.num_nextn_predict_layers > 0) {
    EXPECT_EQ(log.count("skipping the 1 multi-token-prediction layer(s) (model.layers.3; not read)"), 1) << log.text();
    size_t mtp = 0;
    for (const auto& [why, names] : u.ignored)
      if (std::find(names.begin(), names.end(), "model.layers.3.eh_proj.weight") != names.end()) mtp = names.size();
    EXPECT_EQ(mtp, 6u);
  }
}

INSTANTIATE_TEST_SUITE_P(Both, DsaGolden, ::testing::Values("deepseek_v32", "glm_moe_dsa"));

TEST(Dsa, GlmIndexerTypesAndDefaults) {
  json c = io::read_json_file(fixture("glm_moe_dsa") + "/config.json");
  ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(m.dsa.shared, (std::vector<bool>{false, true, false, true}));
  EXPECT_TRUE(m.dsa.rope_interleave);
  EXPECT_EQ(m.dsa.index_n_heads, 8);
  // Without indexer_types: index_topk_pattern, else index_topk_freq / index_skip_topk_offset.
  c.erase("indexer_types");
  EXPECT_EQ(parse_model_config(c, "config.json").dsa.shared, (std::vector<bool>{false, true, false, true}));
  c["index_topk_pattern"] = "FFSF";
  EXPECT_EQ(parse_model_config(c, "config.json").dsa.shared, (std::vector<bool>{false, false, true, false}));
  c.erase("index_topk_pattern");
  c["index_topk_freq"] = 4;  // full layers 0-2, then every 4th from layer 6
  c["index_skip_topk_offset"] = 3;
  EXPECT_EQ(parse_model_config(c, "config.json").dsa.shared, (std::vector<bool>{false, false, false, true}));
  c.erase("index_topk_freq");
  c.erase("index_skip_topk_offset");
  EXPECT_EQ(parse_model_config(c, "config.json").dsa.shared, (std::vector<bool>(4, false)));
  // GlmMoeDsaConfig's defaults.
  c.erase("n_group");
  c.erase("topk_group");
  c.erase("rms_norm_eps");
  c.erase("index_n_heads");
  m = parse_model_config(c, "config.json");
  EXPECT_EQ(m.moe.sigmoid.n_group, 1);
  EXPECT_EQ(m.moe.sigmoid.topk_group, 1);
  EXPECT_DOUBLE_EQ(m.rms_norm_eps, 1e-5);
  EXPECT_EQ(m.dsa.index_n_heads, 32);
  c["indexer_rope_interleave"] = true;  // as GLM-5's published config says
  EXPECT_TRUE(parse_model_config(c, "config.json").dsa.rope_interleave);
  c["indexer_rope_interleave"] = false;
  EXPECT_NE(test::error_of([&] { parse_model_config(c, "config.json"); })
                .find("field 'indexer_rope_interleave' is false, but GlmMoeDsaForCausalLM's indexer rotates interleaved "
                      "pairs"),
            std::string::npos);
  c.erase("indexer_rope_interleave");
  c["indexer_types"] = {"shared", "full", "full", "full"};
  EXPECT_NE(test::error_of([&] { parse_model_config(c, "config.json"); })
                .find("layer 0's indexer type is \"shared\", but a shared layer reuses an earlier full layer's selection"),
            std::string::npos);
  c["indexer_types"] = {"full", "sparse", "full", "full"};
  EXPECT_NE(test::error_of([&] { parse_model_config(c, "config.json"); })
                .find("indexer type 'sparse' of layer 1 (expected \"full\" or \"shared\")"),
            std::string::npos);
}

TEST(Dsa, DeepseekV32RefusesWhatItDoesNotRun) {
  const json base = io::read_json_file(fixture("deepseek_v32") + "/config.json");
  const ModelConfig m = parse_model_config(base, "config.json");
  EXPECT_EQ(m.dsa.shared, std::vector<bool>(3, false));
  EXPECT_FALSE(m.dsa.rope_interleave);
  EXPECT_EQ(m.dsa.index_head_dim, 16);
  auto error = [&](const char* key, const json& v) {
    json c = base;
    c[key] = v;
    return test::error_of([&] { parse_model_config(c, "config.json"); });
  };
  EXPECT_NE(error("indexer_types", {"full", "shared", "full"})
                .find("field 'indexer_types' is GLM-5's (GlmMoeDsaForCausalLM); DeepseekV32ForCausalLM runs the indexer "
                      "in every layer"),
            std::string::npos);
  EXPECT_NE(error("layer_types", {"indexed_attention", "full_attention", "indexed_attention"})
                .find("field 'layer_types' holds \"full_attention\"; DeepseekV32ForCausalLM runs only "
                      "\"indexed_attention\" layers"),
            std::string::npos);
  EXPECT_NE(error("q_lora_rank", nullptr).find("DeepseekV32ForCausalLM needs q_lora_rank"), std::string::npos);
  EXPECT_NE(error("rope_interleave", false).find("field 'rope_interleave' is false"), std::string::npos);
  EXPECT_NE(error("index_topk", 0).find("field 'index_topk' must be positive, found 0"), std::string::npos);
  EXPECT_NE(error("index_head_dim", 4).find("index_head_dim (4) is below qk_rope_head_dim (8)"), std::string::npos);
  EXPECT_NE(error("indexer_rope_interleave", true)
                .find("field 'indexer_rope_interleave' is true, but DeepseekV32ForCausalLM's indexer rotates the two "
                      "halves (not interleaved)"),
            std::string::npos);
  EXPECT_EQ(error("indexer_rope_interleave", false), "");
  EXPECT_NE(error("index_kpool", 4).find("field 'index_kpool' (4) asks for an attention variant"), std::string::npos);
  EXPECT_EQ(error("mla_use_nope", false), "");
}

}  // namespace
}  // namespace fp4lm::model::dsa_test
