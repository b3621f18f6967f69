// Whole-model checks on small random checkpoints of every architecture: the engine's logits
// against a plain float64 re-implementation of the HF forward (tiny_models.h), and the engine
// against itself across prefill batching, chunking and decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/error_of.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "reference/logits_check.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::architectures_test {
namespace {

using test::TempDir;

const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29};

EngineOptions f32_options() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

class ArchitectureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchitectureTest, LogitsMatchFloat64ReferenceForward) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model(GetParam());
  test::write_tiny_model(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  EXPECT_EQ(lm->config().architecture, GetParam());
  std::vector<float> got = all_logits(*lm, kTokens);
  auto want = test::naive::forward(m, kTokens);
  // float32 engine vs float64 reference: rounding only.
  EXPECT_LT(max_rel_diff(got, want), 2e-5) << GetParam();
}

TEST_P(ArchitectureTest, PrefillChunksAndDecodeStepsAgreeWithOneBatch) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model(GetParam()), dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  std::vector<float> batch = all_logits(*lm, kTokens);
  const int64_t vocab = lm->vocab_size();

  // Token by token (decode, M = 1), comparing each step's last-token logits.
  SequenceState cache = lm->new_sequence();
  std::vector<float> step(vocab);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    lm->forward(cache, &kTokens[t], 1, LogitsMode::last, step.data());
    for (int64_t v = 0; v < vocab; ++v) ASSERT_NEAR(step[v], batch[t * vocab + v], 1e-4) << "position " << t;
  }
  EXPECT_EQ(cache.length(), static_cast<int64_t>(kTokens.size()));

  // Prefill in chunks of 3 tokens.
  LoadOptions lo;
  lo.prefill_chunk = 3;
  auto chunked = CausalLM::load(dir.path().string(), f32_options(), lo);
  std::vector<float> c = all_logits(*chunked, kTokens);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], batch[i], 1e-4) << "index " << i;
}

TEST_P(ArchitectureTest, Bfloat16ActivationsStayCloseToFloat32) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model(GetParam());
  test::write_tiny_model(m, dir.path());
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = CausalLM::load(dir.path().string(), o);
  EXPECT_EQ(lm->dtype(), DType::BF16);
  std::vector<float> got = all_logits(*lm, kTokens);
  auto want = test::naive::forward(m, kTokens);
  const double d = max_rel_diff(got, want);
  // bf16 keeps 8 significant bits: a few percent after a 3-layer model, but never exact.
  EXPECT_LT(d, 0.06) << GetParam();
  EXPECT_GT(d, 1e-5) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Every, ArchitectureTest,
                         ::testing::Values("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                           "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                                           "MistralForCausalLM", "Glm4MoeForCausalLM", "DeepseekV3ForCausalLM",
                                           "Glm4MoeLiteForCausalLM", "MiniMaxM2ForCausalLM"),
                         [](const auto& info) { return info.param; });

TEST(Architecture, LlamaLinearRopeScalingMatchesReference) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("LlamaForCausalLM", 11, /*linear_rope=*/true);
  test::write_tiny_model(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  EXPECT_EQ(lm->config().rope_scaling.type, "linear");
  std::vector<float> got = all_logits(*lm, kTokens);
  EXPECT_LT(max_rel_diff(got, test::naive::forward(m, kTokens)), 2e-5);
}

TEST(Architecture, ExceedingTheKvCacheIsAClearError) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("Qwen3ForCausalLM"), dir.path());
  LoadOptions lo;
  lo.max_model_len = 8;
  auto lm = CausalLM::load(dir.path().string(), f32_options(), lo);
  EXPECT_EQ(lm->max_model_len(), 8);
  SequenceState cache = lm->new_sequence();
  std::vector<float> logits(lm->vocab_size());
  lm->forward(cache, kTokens.data(), 8, LogitsMode::last, logits.data());
  try {
    lm->forward(cache, kTokens.data(), 1, LogitsMode::last, logits.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the maximum model length 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 8);
}

TEST(Architecture, MaxModelLenAboveMaxPositionEmbeddingsIsRejected) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("LlamaForCausalLM"), dir.path());
  LoadOptions lo;
  lo.max_model_len = 257;
  EXPECT_THROW(CausalLM::load(dir.path().string(), f32_options(), lo), UsageError);
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  EXPECT_EQ(lm->max_model_len(), 256);  // min(max_position_embeddings, 8192)
}

TEST(Architecture, TokenOutsideVocabularyIsAnError) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("LlamaForCausalLM"), dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  SequenceState cache = lm->new_sequence();
  std::vector<float> logits(lm->vocab_size());
  const int32_t bad = 97;
  try {
    lm->forward(cache, &bad, 1, LogitsMode::last, logits.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 97 is outside the vocabulary [0, 97)"), std::string::npos);
  }
}

TEST(Architecture, MissingNormWeightIsNamed) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("Qwen3ForCausalLM");
  m.w.erase("model.layers.2.self_attn.k_norm.weight");
  test::write_tiny_model(m, dir.path());
  try {
    CausalLM::load(dir.path().string(), f32_options());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.self_attn.k_norm.weight"), std::string::npos) << e.what();
  }
}

TEST(Architecture, EosIdsComeFromConfigAndGenerationConfig) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("LlamaForCausalLM");
  test::write_tiny_model(m, dir.path());
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": [2, 5]})");
  auto lm = CausalLM::load(dir.path().string(), f32_options());
  EXPECT_EQ(lm->eos_ids(), (std::vector<int64_t>{2, 5}));
}

}  // namespace
}  // namespace fp4lm::model::architectures_test

namespace fp4lm::model::architectures_test {
namespace {

// Mistral's sliding window (HF: 4096 when the key is absent, off when null): a window below
// max_position_embeddings makes every attention layer a sliding-window layer, whose KV cache is a
// ring of window - 1 + prefill_chunk rows. A sequence runs far past the window (prefill in
// steps, then decode); its logits are the float64 sliding-window reference's at every position,
// and its KV bytes do not depend on its length or capacity.
TEST(Architecture, MistralSlidingWindowKeepsOnlyTheWindow) {
  const test::TinyModel m = test::make_tiny_model("MistralForCausalLM");
  auto window_of = [&](auto&& edit) {
    nlohmann::json c = m.config;
    edit(c);
    const ModelConfig mc = parse_model_config(c, "config.json");
    EXPECT_EQ(mc.max_position_embeddings, c.value("max_position_embeddings", 2048));  // no longer capped
    return mc.attention[0].sliding_window();
  };
  EXPECT_EQ(window_of([](nlohmann::json& c) { c["sliding_window"] = 64; }), 64);
  EXPECT_EQ(window_of([](nlohmann::json& c) { c["sliding_window"] = 1024; }), 0);  // never reached
  EXPECT_EQ(window_of([](nlohmann::json& c) { c["sliding_window"] = nullptr; }), 0);
  EXPECT_EQ(window_of([](nlohmann::json& c) {
              c.erase("sliding_window");
              c["max_position_embeddings"] = 32768;
            }),
            4096);
  const std::string e = test::error_of([&] { window_of([](nlohmann::json& c) { c["sliding_window"] = 0; }); });
  EXPECT_NE(e.find("config.json: field 'sliding_window' must be positive, found 0"), std::string::npos) << e;

  const int64_t window = 6, chunk = 4, n = 40;
  TempDir dir;
  test::TinyModel w = m;
  w.config["sliding_window"] = window;
  test::write_tiny_model(w, dir.path());
  LoadOptions lo;
  lo.prefill_chunk = chunk;
  auto lm = CausalLM::load(dir.path().string(), f32_options(), lo);
  ASSERT_EQ(lm->max_model_len(), 256);
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < n; ++t) tokens.push_back(static_cast<int32_t>((t * 37 + 11) % 97));
  const auto want = test::naive::forward(w, tokens);
  // The reference with the window is far from full causal attention past the window.
  test::TinyModel full = w;
  full.config["sliding_window"] = nullptr;
  const auto unwindowed = test::naive::forward(full, tokens);

  // Prefill 30 tokens (steps of 4 rows: the ring wraps inside a step), then decode 10.
  const int64_t vocab = lm->vocab_size(), prompt = 30;
  SequenceState s = lm->new_sequence();
  std::vector<float> got(static_cast<size_t>(n * vocab));
  lm->forward(s, tokens.data(), prompt, LogitsMode::all, got.data());
  for (int64_t t = prompt; t < n; ++t) lm->forward(s, &tokens[t], 1, LogitsMode::last, got.data() + t * vocab);
  EXPECT_LT(max_rel_diff(got, want), 2e-5);
  EXPECT_GT(max_rel_diff(got, unwindowed), 1e-2);

  // Bytes: every layer's ring holds window - 1 + chunk rows of (K, V) × kv heads × head_dim floats.
  const nlohmann::json& c = w.config;
  const size_t ring_bytes = static_cast<size_t>(c["num_hidden_layers"].get<int64_t>()) * 2 *
                            c["num_key_value_heads"].get<size_t>() * c["head_dim"].get<size_t>() *
                            static_cast<size_t>(window - 1 + chunk) * sizeof(float);
  EXPECT_EQ(s.reserved_bytes(), ring_bytes);
  EXPECT_EQ(s.used_bytes(), ring_bytes);  // 40 positions written, the ring's rows all in use
  EXPECT_EQ(s.bytes_per_position(), 0u);  // no position adds bytes: no full-attention layer
  EXPECT_EQ(lm->sequence_bytes(), ring_bytes);
  EXPECT_EQ(lm->sequence_bytes(100), ring_bytes);
  EXPECT_EQ(lm->new_sequence(100).reserved_bytes(), ring_bytes);

  // Rewinding: only as far as the rings still hold the window before the new end (9 rows, 5 of
  // history: 4 positions back).
  const std::string e2 = test::error_of([&] { s.truncate(n - 5); });
  EXPECT_NE(e2.find("a sliding-window layer no longer holds the window before position 35"), std::string::npos) << e2;
  s.truncate(n - 4);
  std::vector<float> again(static_cast<size_t>(4 * vocab));
  lm->forward(s, &tokens[n - 4], 4, LogitsMode::all, again.data());
  EXPECT_LT(max_rel_diff(again, std::vector<std::vector<double>>(want.end() - 4, want.end())), 2e-5);
}

// The reference comparison is sensitive to the quirks it claims to check: dropping the llama3
// scaling, the Qwen2-MoE shared expert or the Qwen3-MoE renormalization from the float64
// reference moves it far outside the tolerance the engine meets.
TEST(Architecture, ReferenceComparisonDetectsMissingQuirks) {
  auto check = [](const std::string& arch, auto&& mutate) {
    TempDir dir;
    test::TinyModel m = test::make_tiny_model(arch);
    test::write_tiny_model(m, dir.path());
    auto lm = CausalLM::load(dir.path().string(), f32_options());
    std::vector<float> got = all_logits(*lm, kTokens);
    mutate(m);
    return max_rel_diff(got, test::naive::forward(m, kTokens));
  };
  EXPECT_GT(check("LlamaForCausalLM", [](test::TinyModel& m) { m.config.erase("rope_scaling"); }), 1e-3);
  EXPECT_GT(check("Qwen2MoeForCausalLM",
                  [](test::TinyModel& m) {
                    for (auto& [n, t] : m.w)
                      if (n.find("shared_expert_gate") != std::string::npos) std::fill(t.v.begin(), t.v.end(), -1e4f);
                  }),
            1e-3);
  EXPECT_GT(check("Qwen3MoeForCausalLM", [](test::TinyModel& m) { m.config["norm_topk_prob"] = false; }), 1e-3);
  EXPECT_GT(check("Qwen3ForCausalLM",
                  [](test::TinyModel& m) {
                    for (auto& [n, t] : m.w)
                      if (n.find("q_norm") != std::string::npos) std::fill(t.v.begin(), t.v.end(), 1.0f);
                  }),
            1e-3);
}

}  // namespace
}  // namespace fp4lm::model::architectures_test
