// Multi-head latent attention (DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM): the KV cache
// holds kv_lora_rank + qk_rope_head_dim values per position per layer; the absorbed form (what
// runs) and the expanded form (K/V rebuilt with kv_b_proj, as HF computes it) agree with each
// other and with the float64 forward of tiny_models.h; the multi-token-prediction layer is
// skipped with one INFO line; config errors name the field.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "model/layers/latent_attention.h"
#include "reference/logits_check.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::latent_attention_test {
namespace {

using test::TempDir;

const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29};

EngineOptions options(const char* dtype, const char* kv = "auto") {
  EngineOptions o;
  o.dtype = dtype;
  o.kv_cache_dtype = kv;
  return o;
}

// Sets FP4LM_MLA_FORM while alive.
struct FormScope {
  explicit FormScope(const char* form) { ::setenv("FP4LM_MLA_FORM", form, 1); }
  ~FormScope() { ::unsetenv("FP4LM_MLA_FORM"); }
};

TEST(LatentAttention, CacheHoldsKvLoraPlusRopeValuesPerPositionPerLayer) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("DeepseekV3ForCausalLM");
  test::write_tiny_model(m, dir.path());
  const int64_t layers = 3, latent = 16 + 4;  // kv_lora_rank + qk_rope_head_dim of the tiny config
  for (auto [dtype, kv, esize] : {std::tuple{"float32", "auto", 4}, {"bfloat16", "auto", 2}, {"bfloat16", "fp8", 1}}) {
    auto lm = CausalLM::load(dir.path().string(), options(dtype, kv));
    SequenceState s = lm->new_sequence(64);
    EXPECT_EQ(s.bytes_per_position(), static_cast<size_t>(layers * latent * esize)) << dtype << " " << kv;
    EXPECT_EQ(s.reserved_bytes(), static_cast<size_t>(64 * layers * latent * esize));
    EXPECT_EQ(lm->sequence_bytes(64), s.reserved_bytes());
    // An ordinary cache of the expanded K/V would hold 2 × heads × (nope + rope) per position.
    EXPECT_LT(s.bytes_per_position(), static_cast<size_t>(layers * 2 * 4 * (8 + 4) * esize));
  }
}

TEST(LatentAttention, AbsorbedFormRunsAndLogsIt) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("DeepseekV3ForCausalLM"), dir.path());
  test::LogCapture log;
  auto lm = CausalLM::load(dir.path().string(), options("float32"));
  EXPECT_EQ(log.count("Multi-head latent attention: the KV cache holds the latent (kv_lora_rank 16 + "
                      "qk_rope_head_dim 4 = 20 values per position per layer); absorbed form"),
            1)
      << log.text();
  // The multi-token-prediction layer (model.layers.3.*, all NaN in the tiny checkpoint) is skipped.
  EXPECT_EQ(log.count("DeepseekV3ForCausalLM: skipping the 1 multi-token-prediction layer(s) (model.layers.3; "
                      "not read)"),
            1)
      << log.text();
}

class LatentAttentionForms : public ::testing::TestWithParam<std::string> {};

TEST_P(LatentAttentionForms, AbsorbedAndExpandedAgreeWithEachOtherAndTheFloat64Forward) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model(GetParam());
  test::write_tiny_model(m, dir.path());
  const auto want = test::naive::forward(m, kTokens);
  for (const char* dtype : {"float32", "bfloat16"}) {
    auto absorbed = CausalLM::load(dir.path().string(), options(dtype));
    std::vector<float> a = all_logits(*absorbed, kTokens), e;
    {
      FormScope f("expanded");
      test::LogCapture log;
      auto expanded = CausalLM::load(dir.path().string(), options(dtype));
      EXPECT_EQ(log.count("expanded form"), 1);
      e = all_logits(*expanded, kTokens);
    }
    const double tol = std::string(dtype) == "float32" ? 2e-5 : 0.06;
    EXPECT_LT(max_rel_diff(a, want), tol) << dtype;
    EXPECT_LT(max_rel_diff(e, want), tol) << dtype;
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - e[i])));
    EXPECT_LT(d, std::string(dtype) == "float32" ? 1e-4 : 0.1) << dtype;
  }
}

INSTANTIATE_TEST_SUITE_P(Mla, LatentAttentionForms,
                         ::testing::Values("DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM"),
                         [](const auto& info) { return info.param; });

TEST(LatentAttention, Fp8LatentCacheStaysCloseToFloat32) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("DeepseekV3ForCausalLM");
  test::write_tiny_model(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), options("float32", "fp8"));
  std::vector<float> got = all_logits(*lm, kTokens);
  const double d = max_rel_diff(got, test::naive::forward(m, kTokens));
  EXPECT_LT(d, 0.1);
  EXPECT_GT(d, 1e-5);  // the latent really is stored in FP8
}

TEST(LatentAttention, ConfigErrorsNameTheField) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("DeepseekV3ForCausalLM");
  auto err = [&](const char* key, nlohmann::json v) {
    nlohmann::json c = m.config;
    if (v.is_null()) c.erase(key);
    else c[key] = v;
    return test::error_of([&] { parse_model_config(c, "config.json"); });
  };
  EXPECT_EQ(err("v_head_dim", nullptr), "config.json: missing required field 'v_head_dim'");
  EXPECT_EQ(err("qk_rope_head_dim", 5), "config.json: qk_rope_head_dim must be even, found 5");
  EXPECT_EQ(err("kv_lora_rank", 0), "config.json: field 'kv_lora_rank' must be positive, found 0");
  EXPECT_EQ(err("n_group", 4), "config.json: n_group (4) must split the 6 experts into equal groups of at least 2");
  EXPECT_EQ(err("topk_group", 3), "config.json: topk_group (3) exceeds n_group (2)");
  nlohmann::json lite = test::make_tiny_model("Glm4MoeLiteForCausalLM").config;
  lite["mlp_layer_types"] = {"dense", "moe", "sparse"};
  EXPECT_EQ(test::error_of([&] { parse_model_config(lite, "config.json"); }),
            "config.json: field 'mlp_layer_types' holds '\"moe\"' (expected dense or sparse)");
}

TEST(LatentAttention, BadFormIsAnError) {
  FormScope f("fast");
  EXPECT_EQ(test::error_of([] { mla_form_from_env(); }), "FP4LM_MLA_FORM='fast': expected 'absorbed' or 'expanded'");
}

}  // namespace
}  // namespace fp4lm::model::latent_attention_test
