// Qwen3-VL (Qwen3VLForConditionalGeneration) and Qwen3-VL-MoE (Qwen3VLMoeForConditionalGeneration)
// text models against transformers itself: tiny random checkpoints transformers 5.24 built and
// saved (scripts/make_qwen3_vl_goldens.py, fixtures in tests/cli/fixtures/qwen3_vl_e2e; torch stays
// out of CI), fed text: float32 logits within 1e-4 of the range of transformers' float64 logits at
// every position, argmax equal. The MoE in all three expert layouts on the same weights: fused as
// transformers saves it, fused input-major as the Qwen releases store it, and per expert as
// NVIDIA's exports. Then decoding, prefill chunks and batches against one forward, the published
// configs and the config errors.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/vision/qwen3_5_vision_tower.h"

namespace fp4lm::model::qwen3_vl_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return (test::source_dir() / "tests" / "cli" / "fixtures" / "qwen3_vl_e2e" / name).string();
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

struct Golden {
  std::vector<int32_t> tokens;
  std::vector<double> logits;  // tokens x vocab
};

Golden golden(const std::string& name) {
  const json g = io::read_json_file(fixture(name) + "/golden.json");
  Golden out{g["text_tokens"].get<std::vector<int32_t>>(), {}};
  const std::string raw = test::read_file(fixture(name) + "/text_logits.f64");
  out.logits.resize(raw.size() / sizeof(double));
  std::memcpy(out.logits.data(), raw.data(), raw.size());
  EXPECT_EQ(out.logits.size(), out.tokens.size() * g["logits_cols"].get<size_t>());
  return out;
}

// Max |got - want| relative to want's range; every row's argmax equal.
double rel_diff(const std::vector<float>& got, const std::vector<double>& want, size_t vocab, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return 1;
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double diff = 0;
  for (size_t r = 0; r < want.size() / vocab; ++r) {
    size_t bw = 0, bg = 0;
    for (size_t v = 0; v < vocab; ++v) {
      const size_t k = r * vocab + v;
      diff = std::max(diff, std::abs(static_cast<double>(got[k]) - want[k]));
      if (want[k] > want[r * vocab + bw]) bw = v;
      if (got[k] > got[r * vocab + bg]) bg = v;
    }
    EXPECT_EQ(bg, bw) << what << ": argmax at position " << r;
  }
  return diff / (*hi - *lo);
}

class Qwen3VlGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen3VlGolden, Float32MatchesTransformersFloat64) {
  const std::string name = GetParam();
  // The three MoE layouts hold the same weights, so the MoE's goldens.
  const Golden g = golden(name == "dense" ? "dense" : "moe");
  auto lm = CausalLM::load(fixture(name), f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_TRUE(c.mrope_interleaved);
  EXPECT_EQ(c.rotary_dim, c.head_dim);
  if (name != "dense") {
    EXPECT_TRUE(c.layer_is_moe(0) && c.layer_is_moe(1));
    EXPECT_FALSE(c.layer_is_moe(2));  // mlp_only_layers [2]
  }
  const double rel = rel_diff(all_logits(*lm, g.tokens), g.logits, static_cast<size_t>(lm->vocab_size()), name);
  EXPECT_LT(rel, 1e-4) << name;
  RecordProperty("rel_diff", fmt::format("{:.2e}", rel));
}

INSTANTIATE_TEST_SUITE_P(Tiny, Qwen3VlGolden, ::testing::Values("dense", "moe", "moe_input_major", "moe_per_expert"));

TEST(Qwen3Vl, StepsChunksAndBatchesMatchOneForward) {
  const std::vector<int32_t> toks = golden("dense").tokens;
  for (const char* name : {"dense", "moe", "moe_per_expert"}) {
    SCOPED_TRACE(name);
    expect_steps_chunks_and_batches_match_one_forward(fixture(name), f32(), toks);
  }
}

// Qwen/Qwen3-VL-30B-A3B-Instruct's config.json (its text_config; the vision_config's keys), and the
// dense 8B's text_config shape: rope under rope_scaling with rope_theta beside it.
json published_moe() {
  json text = {{"attention_bias", false}, {"attention_dropout", 0.0}, {"bos_token_id", 151643},
               {"decoder_sparse_step", 1}, {"dtype", "bfloat16"}, {"eos_token_id", 151645}, {"head_dim", 128},
               {"hidden_act", "silu"}, {"hidden_size", 2048}, {"initializer_range", 0.02},
               {"intermediate_size", 6144}, {"max_position_embeddings", 262144}, {"mlp_only_layers", json::array()},
               {"model_type", "qwen3_vl_moe_text"}, {"moe_intermediate_size", 768}, {"norm_topk_prob", true},
               {"num_attention_heads", 32}, {"num_experts", 128}, {"num_experts_per_tok", 8},
               {"num_hidden_layers", 48}, {"num_key_value_heads", 4}, {"rms_norm_eps", 1e-06},
               {"rope_scaling", {{"mrope_interleaved", true}, {"mrope_section", {24, 20, 20}}, {"rope_type", "default"}}},
               {"rope_theta", 5000000}, {"use_cache", true}, {"vocab_size", 151936}};
  json vision = {{"deepstack_visual_indexes", {8, 16, 24}}, {"depth", 27}, {"hidden_act", "gelu_pytorch_tanh"},
                 {"hidden_size", 1152}, {"in_channels", 3}, {"initializer_range", 0.02}, {"intermediate_size", 4304},
                 {"model_type", "qwen3_vl_moe"}, {"num_heads", 16}, {"num_position_embeddings", 2304},
                 {"out_hidden_size", 2048}, {"patch_size", 16}, {"spatial_merge_size", 2},
                 {"temporal_patch_size", 2}};
  return {{"architectures", {"Qwen3VLMoeForConditionalGeneration"}}, {"image_token_id", 151655},
          {"model_type", "qwen3_vl_moe"}, {"text_config", text}, {"tie_word_embeddings", false},
          {"video_token_id", 151656}, {"vision_config", vision}, {"vision_end_token_id", 151653},
          {"vision_start_token_id", 151652}};
}

TEST(Qwen3Vl, PublishedConfigs) {
  const ModelConfig m = parse_model_config(published_moe(), "config.json");
  EXPECT_EQ(m.tensor_prefix, "model.language_model.");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.rotary_dim, 128);
  EXPECT_EQ(m.rope_theta, 5000000.0);
  EXPECT_EQ(m.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(m.mrope_interleaved);
  EXPECT_EQ(m.moe.num_experts, 128);
  EXPECT_EQ(m.moe.top_k, 8);
  EXPECT_EQ(m.moe.moe_intermediate_size, 768);
  EXPECT_TRUE(m.moe.norm_topk_prob);
  EXPECT_FALSE(m.tie_word_embeddings);
  const std::vector<LayerSpec> plan = plan_layers(m);
  EXPECT_EQ(plan[0].name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(plan[2].name, "model.layers.0.mlp.gate");
  EXPECT_TRUE(plan[2].router);
  EXPECT_EQ(plan[3].name, "model.layers.0.mlp.experts");
  EXPECT_TRUE(plan[3].fused_major_by_shape);
  EXPECT_FALSE(plan[3].fused_input_major);

  json dense = published_moe();
  dense["architectures"] = {"Qwen3VLForConditionalGeneration"};
  json& t = dense["text_config"];
  for (const char* k : {"decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size", "norm_topk_prob",
                        "num_experts", "num_experts_per_tok", "head_dim", "rope_theta"})
    t.erase(k);
  // Qwen3-VL-4B's shape: head_dim 128 is not hidden / heads (80).
  t.update({{"hidden_size", 2560}, {"intermediate_size", 9728}, {"num_hidden_layers", 36},
            {"num_key_value_heads", 8}, {"model_type", "qwen3_vl_text"}});
  const ModelConfig d = parse_model_config(dense, "config.json");
  EXPECT_FALSE(d.is_moe());
  EXPECT_EQ(d.head_dim, 128);           // Qwen3VLTextConfig's default, not hidden / heads
  EXPECT_EQ(d.rope_theta, 500000.0);    // its default_theta
  EXPECT_EQ(d.intermediate_size, 9728);
  // transformers 5's form: rope_parameters holding rope_theta and the M-RoPE keys.
  t["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000.0}, {"mrope_section", {16, 24, 24}}};
  t.erase("rope_scaling");
  const ModelConfig d5 = parse_model_config(dense, "config.json");
  EXPECT_EQ(d5.rope_theta, 5000000.0);
  EXPECT_EQ(d5.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  // No mrope_section: Qwen3VLTextRotaryEmbedding's default.
  t["rope_parameters"].erase("mrope_section");
  EXPECT_EQ(parse_model_config(dense, "config.json").mrope_section, (std::vector<int64_t>{24, 20, 20}));
}

void expect_error(const json& c, const std::string& needle) {
  try {
    parse_model_config(c, "config.json");
    ADD_FAILURE() << "no error, expected one with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Qwen3Vl, ConfigErrorsNameTheField) {
  json c = published_moe();
  c["text_config"]["rope_scaling"]["mrope_section"] = {24, 20};
  expect_error(c, "rope_scaling.mrope_section must be 3 non-negative counts (t, h, w), found [24,20]");
  c["text_config"]["rope_scaling"]["mrope_section"] = {24, -1, 20};
  expect_error(c, "found [24,-1,20]");
  c = published_moe();
  c["text_config"]["rope_scaling"]["rope_type"] = "dynamic";
  expect_error(c, "unsupported rope_scaling type 'dynamic'");
  c = published_moe();
  c.erase("text_config");
  expect_error(c, "Qwen3VLMoeForConditionalGeneration needs an object 'text_config'");
  c = published_moe();
  c["text_config"].erase("num_experts");
  expect_error(c, "missing required field 'num_experts'");
}

// The tower's DeepStack keys: the published list read in the Qwen3-VL form, transformers' default
// when absent, blocks outside the tower or listed twice refused; Qwen3.5's form refuses any.
TEST(Qwen3Vl, DeepstackIndexesAreReadAndChecked) {
  json v = published_moe()["vision_config"];
  EXPECT_EQ(parse_qwen3_5_vision_config(v, "vc", true).deepstack_visual_indexes, (std::vector<int64_t>{8, 16, 24}));
  json absent = v;
  absent.erase("deepstack_visual_indexes");
  EXPECT_EQ(parse_qwen3_5_vision_config(absent, "vc", true).deepstack_visual_indexes,
            (std::vector<int64_t>{8, 16, 24}));
  const auto error_of = [](const json& j, bool deepstack) {
    try {
      parse_qwen3_5_vision_config(j, "vc", deepstack);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(v, false).find("field 'deepstack_visual_indexes' is [8,16,24]"), std::string::npos)
      << error_of(v, false);
  v["deepstack_visual_indexes"] = {8, 27};
  EXPECT_NE(error_of(v, true).find("vc: field 'deepstack_visual_indexes' holds 27, not a block of the tower (depth 27)"),
            std::string::npos)
      << error_of(v, true);
  v["deepstack_visual_indexes"] = {8, 16, 8};
  EXPECT_NE(error_of(v, true).find("vc: field 'deepstack_visual_indexes' holds block 8 twice"), std::string::npos)
      << error_of(v, true);
}

// A fused checkpoint whose gate_up_proj has neither form's shape is a load error naming it.
TEST(Qwen3Vl, ExpertsOfAnotherShapeAreALoadError) {
  // moe_input_major's down_proj is [E, I, D]; the output-major gate_up_proj of moe with it is neither layout.
  test::TempDir tmp;
  for (const auto& f : std::filesystem::directory_iterator(fixture("moe")))
    std::filesystem::copy(f.path(), tmp / f.path().filename().string());
  json cfg = io::read_json_file(fixture("moe") + "/config.json");
  cfg["text_config"]["moe_intermediate_size"] = 8;  // gate_up_proj [4, 32, 40] is then neither [4, 16, 40] nor [4, 40, 16]
  {
    std::ofstream o(tmp / "config.json");
    o << cfg.dump();
  }
  try {
    CausalLM::load(tmp.path().string(), f32());
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.experts.gate_up_proj"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::model::qwen3_vl_test
