// Gemma 3n's text model against transformers itself: tiny random Gemma3nForCausalLM and
// Gemma3nForConditionalGeneration models transformers 5.24 built (scripts/make_gemma3n_goldens.py,
// fixtures in tests/model/fixtures/gemma3n/{causal,conditional}): 4 AltUp streams (active stream 1
// in the CausalLM, 0 in the other), Laurel, per-layer inputs (ids past the per-layer table read
// row 0), the Gaussian top-k on the gates of 3 of 6 layers, per-layer MLP widths, sliding window 8,
// the last 2 layers reading layers 3's and 2's K/V, final softcapping; the conditional model's
// prompt holds ids of its vision and audio hard-token ranges. A 40-token prompt: float32 logits
// within 1e-4 of the range of transformers' float64 logits at every position, argmax equal, in one
// forward, token by token and prefill + decode; greedy tokens equal transformers' generate. Then
// the feature checks, tensor usage and the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/layers/gaussian_topk_mlp.h"
#include "reference/logits_check.h"
#include "model/model_config.h"

namespace fp4lm::model::gemma3n_test {
namespace {

using nlohmann::json;

const char* const kKinds[] = {"causal", "conditional"};

std::string dir(const std::string& kind) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "gemma3n" / kind).string();
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

json golden(const std::string& kind) { return io::read_json_file(dir(kind) + "/golden.json"); }
std::vector<int32_t> tokens(const std::string& kind) { return golden(kind)["tokens"].get<std::vector<int32_t>>(); }

std::vector<std::vector<double>> want(const std::string& kind) {
  const json g = golden(kind);
  return read_f64_rows(dir(kind) + "/logits.f64", g["tokens"].size(), g["logits_cols"].get<size_t>());
}

TEST(Gemma3n, OneForwardMatchesTransformersFloat64) {
  for (const std::string kind : kKinds) {
    auto lm = CausalLM::load(dir(kind), f32());
    EXPECT_EQ(lm->config().architecture, kind == "causal" ? "Gemma3nForCausalLM" : "Gemma3nForConditionalGeneration");
    ASSERT_GT(tokens(kind).size(), 4u * static_cast<size_t>(lm->config().attention[0].sliding_window()));
    EXPECT_LT(range_rel_diff(all_logits(*lm, tokens(kind)), want(kind), "gemma3n " + kind, "one forward"), 1e-4);
  }
}

TEST(Gemma3n, DecodeStepsMatchTransformersFloat64) {
  for (const std::string kind : kKinds) {
    auto lm = CausalLM::load(dir(kind), f32());
    const std::vector<int32_t> toks = tokens(kind);
    const size_t vocab = static_cast<size_t>(lm->vocab_size());
    for (const size_t prefill : {size_t{1}, size_t{13}}) {  // token by token; mid-window prefill + decode
      SequenceState s = lm->new_sequence();
      std::vector<float> got(toks.size() * vocab);
      lm->forward(s, toks.data(), static_cast<int64_t>(prefill), LogitsMode::all, got.data());
      for (size_t t = prefill; t < toks.size(); ++t)
        lm->forward(s, &toks[t], 1, LogitsMode::last, got.data() + t * vocab);
      EXPECT_LT(range_rel_diff(got, want(kind), "gemma3n " + kind, fmt::format("prefill {} + decode", prefill)),
                1e-4);
    }
  }
}

TEST(Gemma3n, GreedyTokensMatchTransformers) {
  for (const std::string kind : kKinds) {
    auto lm = CausalLM::load(dir(kind), f32());
    const std::vector<int32_t> toks = tokens(kind);
    const auto greedy = golden(kind)["greedy"].get<std::vector<int32_t>>();
    std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
    SequenceState s = lm->new_sequence();
    lm->forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::last, logits.data());
    std::vector<int32_t> got;
    for (size_t i = 0; i < greedy.size(); ++i) {
      const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      got.push_back(t);
      lm->forward(s, &t, 1, LogitsMode::last, logits.data());
    }
    EXPECT_EQ(got, greedy) << kind;
  }
}

TEST(Gemma3n, StepsChunksAndBatchesMatchOneForward) {
  for (const std::string kind : kKinds) expect_steps_chunks_and_batches_match_one_forward(dir(kind), f32(), tokens(kind));
}

// Pipeline stages [0, 3) and [3, 6): the 4 streams, the per-layer inputs and layers 2's and 3's
// K/V (read by layers 5 and 4) cross the cut; the logits equal the whole model's bit for bit,
// prompt then decode steps.
TEST(Gemma3n, PipelineStagesCarryStreamsInputsAndKv) {
  struct Link final : StageLink {
    std::vector<float> h;
    std::vector<uint8_t> extra;
    void receive(float* out, int64_t rows, int64_t hidden, std::vector<uint8_t>& e) override {
      ASSERT_EQ(h.size(), static_cast<size_t>(rows * hidden));
      std::copy(h.begin(), h.end(), out);
      e = extra;
    }
    void send(const float* in, int64_t rows, int64_t hidden, std::span<const uint8_t> e) override {
      h.assign(in, in + rows * hidden);
      extra.assign(e.begin(), e.end());
    }
  };
  for (const std::string kind : kKinds) {
    const auto whole = CausalLM::load(dir(kind), f32());
    LoadOptions a, b;
    a.first_layer = 0;
    a.end_layer = 3;
    b.first_layer = 3;
    b.end_layer = 6;
    const auto s0 = CausalLM::load(dir(kind), f32(), a), s1 = CausalLM::load(dir(kind), f32(), b);
    const std::vector<int32_t> toks = tokens(kind);
    const size_t vocab = static_cast<size_t>(whole->vocab_size());
    SequenceState w = whole->new_sequence(), q0 = s0->new_sequence(), q1 = s1->new_sequence();
    Link link;
    for (const auto& [from, n] : {std::pair<size_t, size_t>{0, 30}, {30, 1}, {31, 9}}) {
      std::vector<float> want_rows(n * vocab), got(n * vocab, -1.0f);
      SequenceChunk cw{&w, toks.data() + from, static_cast<int64_t>(n), LogitsMode::all, want_rows.data()};
      whole->forward(std::span(&cw, 1));
      SequenceChunk c0{&q0, toks.data() + from, static_cast<int64_t>(n), LogitsMode::none, nullptr};
      s0->forward(std::span(&c0, 1), &link);
      SequenceChunk c1{&q1, toks.data() + from, static_cast<int64_t>(n), LogitsMode::all, got.data()};
      s1->forward(std::span(&c1, 1), &link);
      EXPECT_EQ(want_rows, got) << kind << ": rows from " << from;
    }
  }
}

// Each mechanism is on in the fixture and changes the logits: without the Gaussian top-k, with
// another active stream, without correct_output_scale, the logits move far from transformers'.
TEST(Gemma3n, EachFeatureMatters) {
  const json base = io::read_json_file(dir("causal") + "/config.json");
  const std::vector<json> edits = {{{"activation_sparsity_pattern", {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}}},
                                   {{"altup_active_idx", 0}},
                                   {{"altup_correct_scale", false}},
                                   {{"num_kv_shared_layers", 0}}};
  for (const json& e : edits) {
    test::TempDir tmp;
    test::copy_dir(dir("causal"), tmp.path());
    json c = base;
    c.update(e);
    test::write_file(tmp / "config.json", c.dump(1));
    if (e.contains("num_kv_shared_layers")) {  // the layers need their own K/V projections then
      EXPECT_NE(test::error_of([&] { CausalLM::load(tmp.path().string(), f32()); }).find("self_attn.k_proj"),
                std::string::npos);
      continue;
    }
    const std::vector<float> got = checkpoint_logits(tmp.path().string(), tokens("causal"), f32());
    const auto w = want("causal");
    double diff = 0, lo = w[0][0], hi = lo;
    for (size_t r = 0; r < w.size(); ++r)
      for (size_t v = 0; v < w[r].size(); ++v) {
        diff = std::max(diff, std::abs(static_cast<double>(got[r * w[r].size() + v]) - w[r][v]));
        lo = std::min(lo, w[r][v]);
        hi = std::max(hi, w[r][v]);
      }
    EXPECT_GT(diff / (hi - lo), 1e-2) << e.dump();
  }
}

// Φ⁻¹ as torch's Normal(0, 1).icdf gives it.
TEST(Gemma3n, NormalQuantile) {
  EXPECT_NEAR(normal_quantile(0.95), 1.6448536269514722, 1e-13);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(normal_quantile(0.025), -1.959963984540054, 1e-13);
}

// Every language-model tensor is read; the conditional model's towers and the embedders' soft
// norms are the ignored "other components", and its embedders' hard-token tensors are read.
TEST(Gemma3n, TensorUsage) {
  auto causal = CausalLM::load(dir("causal"), f32());
  EXPECT_TRUE(causal->tensor_usage().unused_model.empty() && causal->tensor_usage().ignored.empty());
  auto cond = CausalLM::load(dir("conditional"), f32());
  const TensorUsage& u = cond->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  std::vector<std::string> ignored;
  for (const auto& [why, names] : u.ignored) ignored.insert(ignored.end(), names.begin(), names.end());
  for (const std::string& n : ignored)
    EXPECT_TRUE(n.starts_with("model.vision_tower.") || n.starts_with("model.audio_tower.") ||
                n.ends_with("soft_embedding_norm.weight"))
        << n;
  for (const char* n : {"model.vision_tower.conv.weight", "model.audio_tower.conformer.0.norm.weight",
                        "model.embed_audio.soft_embedding_norm.weight"})
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), n), ignored.end()) << n;
  for (const char* n : {"model.embed_vision.embedding.weight", "model.embed_audio.embedding_projection.weight"})
    EXPECT_EQ(std::find(ignored.begin(), ignored.end(), n), ignored.end()) << n;
}

// A conditional checkpoint without embed_vision: text still runs, a vision hard-token id is an
// error naming the absent tensor (not the text embedding).
TEST(Gemma3n, AbsentMultimodalEmbedderIsAnErrorForItsIds) {
  test::TempDir tmp;
  test::copy_dir(dir("conditional"), tmp.path());
  test::edit_tensors(tmp.path(), [](test::EditedTensor& t) { return !t.name.starts_with("model.embed_vision."); });
  const std::vector<int32_t> toks = tokens("conditional");
  const auto vision = std::find_if(toks.begin(), toks.end(), [](int32_t t) { return t >= 224 && t < 240; });
  ASSERT_NE(vision, toks.end()) << "the golden prompt holds a vision hard token";
  auto lm = CausalLM::load(tmp.path().string(), f32());
  const std::vector<int32_t> text(toks.begin(), vision);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(all_logits(*lm, text).size(), text.size() * static_cast<size_t>(lm->vocab_size()));
  const std::string e = test::error_of([&] { all_logits(*lm, toks); });
  EXPECT_NE(e.find(fmt::format("token id {} is a multimodal hard token", *vision)), std::string::npos) << e;
  EXPECT_NE(e.find("model.embed_vision.embedding.weight is absent"), std::string::npos) << e;
}

TEST(Gemma3n, ConfigDefaultsAndRefusalsNameTheField) {
  const json base = io::read_json_file(dir("causal") + "/config.json");
  ModelConfig m = parse_model_config(base, "config.json");
  EXPECT_EQ(m.gemma3n.altup_inputs, 4);
  EXPECT_EQ(m.gemma3n.altup_active, 1);
  EXPECT_EQ(m.gemma3n.intermediate_sizes, (std::vector<int64_t>{48, 64, 48, 64, 48, 64}));
  EXPECT_EQ(m.attention.kv_sources(), (std::vector<int64_t>{-1, -1, -1, -1, 3, 2}));
  EXPECT_EQ(m.final_logit_softcapping, 30.0);
  // Absent keys take Gemma3nTextConfig's defaults: every 5th layer full, the first 10 of more
  // than 10 layers sparse at 0.95, rope theta 1e6 (full) / 1e4 (sliding).
  json d = base;
  for (const char* k : {"layer_types", "activation_sparsity_pattern", "rope_parameters", "altup_active_idx"}) d.erase(k);
  d["num_hidden_layers"] = 12;
  d["intermediate_size"] = 48;
  d["num_kv_shared_layers"] = 0;
  m = parse_model_config(d, "config.json");
  EXPECT_EQ(m.attention.is(AttentionKind::sliding), (std::vector<bool>{true, true, true, true, false, true, true, true, true, false, true, true}));
  EXPECT_EQ(m.gemma3n.activation_sparsity[9], 0.95);
  EXPECT_EQ(m.gemma3n.activation_sparsity[10], 0.0);
  EXPECT_EQ(m.rope_theta, 1000000.0);
  EXPECT_EQ(m.gemma.local_rope_theta, 10000.0);
  EXPECT_EQ(m.gemma3n.altup_active, 0);

  auto error = [&](const json& edit) {
    json c = base;
    c.update(edit);
    return test::error_of([&] { parse_model_config(c, "config.json"); });
  };
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"altup_active_idx", 4}}, "altup_active_idx = 4 must be in [0, altup_num_inputs = 4)"},
      {{{"activation_sparsity_pattern", {0.95}}}, "activation_sparsity_pattern"},
      {{{"activation_sparsity_pattern", {1.0, 0, 0, 0, 0, 0}}}, "activation_sparsity_pattern"},
      {{{"intermediate_size", {48, 64}}}, "'intermediate_size' lists 2 widths, expected one per layer (6)"},
      {{{"laurel_rank", 0}}, "laurel_rank"},
      {{{"hidden_size_per_layer_input", 0}}, "hidden_size_per_layer_input"},
      {{{"altup_coef_clip", -1.0}}, "altup_coef_clip"},
      {{{"attention_bias", true}}, "attention_bias"},
      {{{"hidden_activation", "silu"}}, "hidden_activation"},
      {{{"num_kv_shared_layers", 5}}, "layer 2 (full) has no earlier full layer"},
  };
  for (const auto& [edit, text] : cases) EXPECT_NE(error(edit).find(text), std::string::npos) << error(edit);
}

}  // namespace
}  // namespace fp4lm::model::gemma3n_test
