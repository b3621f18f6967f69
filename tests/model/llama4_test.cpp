// Llama 4 (Llama4ForCausalLM, Llama4ForConditionalGeneration) against transformers itself: tiny
// random checkpoints transformers built and saved (scout: ForCausalLM with L2 qk norm and llama3
// rope; maverick: the wrapper with a tiny vision tower, fed text), each with MoE and dense layers
// interleaved, NoPE layers and attention_chunk_size 6, and transformers' float64 logits
// (golden.json), written by scripts/make_llama4_goldens.py (torch stays out of CI). Float32 logits
// within 1e-4 of the reference's range at every position, argmax equal, over 24 tokens (four
// chunks): one forward, a prefill then decode through the cache, prefill in steps that cut chunks.
// Then the chunked KV ring's memory, the published configs, the config errors and an NVFP4 replica.
#include <gtest/gtest.h>

#include <fstream>
#include <numbers>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "model/layers/llama4_attention.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::llama4_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "llama4" / name).string();
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::vector<int32_t> tokens(const json& g) { return g["tokens"].get<std::vector<int32_t>>(); }

// got [rows, vocab] against want (rows of float64 logits): max |diff| relative to want's range,
// and every row's argmax equal.
double check(const std::vector<float>& got, const json& want, const std::string& what) {
  double lo = 1e300, hi = -1e300, diff = 0;
  const size_t vocab = want[0].size();
  EXPECT_EQ(got.size(), want.size() * vocab) << what;
  if (got.size() != want.size() * vocab) return 1;
  for (size_t r = 0; r < want.size(); ++r) {
    size_t best_w = 0, best_g = 0;
    for (size_t v = 0; v < vocab; ++v) {
      const double w = want[r][v].get<double>();
      lo = std::min(lo, w);
      hi = std::max(hi, w);
      diff = std::max(diff, std::abs(static_cast<double>(got[r * vocab + v]) - w));
      if (w > want[r][best_w].get<double>()) best_w = v;
      if (got[r * vocab + v] > got[r * vocab + best_g]) best_g = v;
    }
    EXPECT_EQ(best_g, best_w) << what << ": argmax at position " << r;
  }
  const double rel = diff / (hi - lo);
  EXPECT_LT(rel, 1e-4) << what;
  return rel;
}

class Llama4Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Llama4Golden, Float32MatchesTransformersFloat64) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  auto lm = CausalLM::load(dir, f32());
  const ModelConfig& c = lm->config();
  // The fixture has every kind of layer: MoE and dense, RoPE (chunked) and NoPE (full).
  EXPECT_NE(std::find(c.llama4.moe.begin(), c.llama4.moe.end(), true), c.llama4.moe.end());
  EXPECT_NE(std::find(c.llama4.moe.begin(), c.llama4.moe.end(), false), c.llama4.moe.end());
  const auto& layers = c.attention.layers();
  EXPECT_TRUE(std::any_of(layers.begin(), layers.end(), [](const AttentionLayerSpec& a) { return !a.rope; }));
  for (const AttentionLayerSpec& a : layers)  // the RoPE layers chunked by 6, the NoPE ones full
    EXPECT_EQ(a.chunk(), a.rope ? 6 : 0);
  RecordProperty("full_rel_diff", fmt::format("{:.2e}", check(all_logits(*lm, tokens(g)), g["full"], "full")));
}

// A prefill, then one token per call through the cache (transformers': its chunked layers keep a
// sliding window of the chunk), across three chunk boundaries.
TEST_P(Llama4Golden, DecodeAcrossChunksMatchesTransformersCache) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  auto lm = CausalLM::load(dir, f32());
  const std::vector<int32_t> t = tokens(g);
  const std::vector<float> got = prefill_then_decode_logits(*lm, t, g["prefill"].get<size_t>());
  RecordProperty("cached_rel_diff", fmt::format("{:.2e}", check(got, g["cached"], "cached")));
}

// Steps of 5 rows cut the chunks of 6 anywhere; the chunked layers' ring is then 6 - 1 + 5 rows.
// Every row is computed as in one forward, bit for bit.
TEST_P(Llama4Golden, PrefillInStepsEqualsOneForward) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  const std::vector<float> whole = all_logits(*CausalLM::load(dir, f32()), tokens(g));
  for (int64_t step : {1, 5, 7}) {
    LoadOptions lo;
    lo.prefill_chunk = step;
    const std::vector<float> stepped = all_logits(*CausalLM::load(dir, f32(), lo), tokens(g));
    EXPECT_TRUE(bit_identical(stepped, whole)) << "prefill_chunk " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Published, Llama4Golden, ::testing::Values("scout", "maverick"));

// Sequences of different lengths in one batch give each its logits alone.
TEST(Llama4, BatchedSequencesMatchAlone) {
  LoadOptions lo;
  lo.prefill_chunk = 7;
  auto lm = CausalLM::load(fixture("maverick"), f32(), lo);
  const std::vector<int32_t> t = tokens(read_json(fixture("maverick") + "/golden.json"));
  const std::vector<std::vector<int32_t>> prompts = {{9, 8, 7}, t, {50, 60, 10, 20, 30, 11, 4, 5}};
  std::vector<SequenceState> states;
  std::vector<std::vector<float>> got(prompts.size());
  std::vector<SequenceChunk> batch;
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(lm->new_sequence());
  for (size_t i = 0; i < prompts.size(); ++i) {
    got[i].resize(prompts[i].size() * static_cast<size_t>(lm->vocab_size()));
    batch.push_back(
        {&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all, got[i].data()});
  }
  lm->forward(batch);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], all_logits(*lm, prompts[i])) << i;
}

// The chunked layers' K/V is a ring of chunk - 1 + prefill_chunk rows; only the NoPE layers grow
// with the sequence.
TEST(Llama4, ChunkedLayersKeepARingOfTheChunk) {
  LoadOptions lo;
  lo.prefill_chunk = 5;
  lo.max_model_len = 200;
  auto lm = CausalLM::load(fixture("scout"), f32(), lo);
  const ModelConfig& c = lm->config();
  int64_t chunked = 0, full = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) (c.attention[i].kind == AttentionKind::chunked ? chunked : full) += 1;
  ASSERT_EQ(chunked, 3);
  ASSERT_EQ(full, 1);
  const size_t row = 2 * static_cast<size_t>(c.num_kv_heads * c.head_dim) * sizeof(float);
  SequenceState s = lm->new_sequence();
  EXPECT_EQ(s.bytes_per_position(), static_cast<size_t>(full) * row);
  EXPECT_EQ(lm->sequence_bytes(200), static_cast<size_t>(full) * 200 * row + static_cast<size_t>(chunked) * (6 - 1 + 5) * row);
}

TEST(Llama4, QueryTemperatureAndInterleavedRotation) {
  // 1 + 0.1 · log(1 + floor((p + 1) / 8192)): 1 below position 8191, then log(2) · 0.1 + 1.
  EXPECT_EQ(llama4_query_temperature(0, 8192, 0.1), 1.0f);
  EXPECT_EQ(llama4_query_temperature(8190, 8192, 0.1), 1.0f);
  EXPECT_FLOAT_EQ(llama4_query_temperature(8191, 8192, 0.1), 1.0f + 0.1f * std::log(2.0f));
  EXPECT_FLOAT_EQ(llama4_query_temperature(3 * 8192 - 1, 8192, 0.1), 1.0f + 0.1f * std::log(4.0f));
  // Pairs (0,1), (2,3): (a + ib)(cos + i sin).
  float x[4] = {1, 2, 3, 4};
  const float cs[2] = {0.0f, 1.0f}, sn[2] = {1.0f, 0.0f};
  rotate_interleaved(x, 1, 4, cs, sn);
  EXPECT_EQ(x[0], -2.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 3.0f);
  EXPECT_EQ(x[3], 4.0f);
}

// The published configs at full size (meta-llama/Llama-4-Scout-17B-16E-Instruct's text_config and
// Maverick's, as NVIDIA's FP4 checkpoints keep them).
json published(const std::string& which) {
  json text = {{"attention_bias", false}, {"attention_chunk_size", 8192}, {"attention_dropout", 0.0},
               {"attn_scale", 0.1}, {"attn_temperature_tuning", 4}, {"bos_token_id", 200000},
               {"eos_token_id", {200001, 200007, 200008}}, {"floor_scale", 8192}, {"for_llm_compressor", false},
               {"head_dim", 128}, {"hidden_act", "silu"}, {"hidden_size", 5120}, {"initializer_range", 0.02},
               {"interleave_moe_layer_step", 1}, {"intermediate_size", 8192}, {"intermediate_size_mlp", 16384},
               {"max_position_embeddings", 10485760}, {"model_type", "llama4_text"}, {"moe_layers", nullptr},
               {"no_rope_layers", json::array()}, {"num_attention_heads", 40}, {"num_experts_per_tok", 1},
               {"num_hidden_layers", 48}, {"num_key_value_heads", 8}, {"num_local_experts", 16},
               {"output_router_logits", false}, {"pad_token_id", 200018}, {"rms_norm_eps", 1e-05},
               {"rope_scaling", {{"factor", 16.0}, {"high_freq_factor", 1.0}, {"low_freq_factor", 1.0},
                                 {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
               {"rope_theta", 500000.0}, {"router_aux_loss_coef", 0.001}, {"router_jitter_noise", 0.0},
               {"torch_dtype", "bfloat16"}, {"use_cache", true}, {"use_qk_norm", true}, {"vocab_size", 202048}};
  if (which == "maverick") {
    text.update({{"interleave_moe_layer_step", 2}, {"num_local_experts", 128}, {"use_qk_norm", false},
                 {"rope_scaling", nullptr}, {"max_position_embeddings", 1048576}});
  }
  return {{"architectures", {"Llama4ForConditionalGeneration"}}, {"boi_token_index", 200080},
          {"eoi_token_index", 200081}, {"image_token_index", 200092}, {"model_type", "llama4"},
          {"text_config", text}, {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"},
          {"vision_config", {{"hidden_size", 1408}, {"num_hidden_layers", 34}, {"model_type", "llama4_vision_model"}}}};
}

TEST(Llama4, PublishedConfigs) {
  const ModelConfig scout = parse_model_config(published("scout"), "config.json");
  EXPECT_EQ(scout.wrapper_prefix, "language_model.");
  EXPECT_EQ(scout.head_dim, 128);
  EXPECT_EQ(scout.moe.num_experts, 16);
  EXPECT_EQ(scout.moe.top_k, 1);
  EXPECT_EQ(scout.moe.moe_intermediate_size, 8192);
  EXPECT_EQ(scout.llama4.intermediate_size_mlp, 16384);
  EXPECT_EQ(scout.attention[0].chunk(), 8192);
  EXPECT_TRUE(scout.llama4.temperature_tuning);  // published as 4
  EXPECT_EQ(scout.rope_scaling.type, "llama3");
  // Scout's llama3 factors: low = high = 1, no band between: wavelengths above 8192 slowed 16x, the rest kept.
  const Rope rope(scout.head_dim, scout.rope_theta, scout.rope_scaling);
  for (int64_t i = 0; i < 64; ++i) {
    const float f = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0));
    const float want = 2.0f * std::numbers::pi_v<float> / f > 8192.0f ? f / 16.0f : f;
    EXPECT_FLOAT_EQ(rope.inv_freq()[static_cast<size_t>(i)], want) << i;
  }
  for (int64_t i = 0; i < 48; ++i) {
    EXPECT_EQ(scout.attention[i].rope, (i + 1) % 4 != 0) << i;  // no_rope_layers [] -> every 4th NoPE
    EXPECT_EQ(scout.attention[i].chunk(), (i + 1) % 4 != 0 ? 8192 : 0) << i;
    EXPECT_TRUE(scout.llama4.moe[i]) << i;
  }
  const std::vector<LayerSpec> plan = plan_layers(scout);
  EXPECT_EQ(plan[0].name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(plan[2].name, "model.layers.0.feed_forward.router");
  EXPECT_TRUE(plan[2].router);
  EXPECT_EQ(plan[3].name, "model.layers.0.feed_forward.experts");
  EXPECT_TRUE(plan[3].fused_input_major);
  EXPECT_EQ(plan[4].name, "model.layers.0.feed_forward.shared_expert.gate_up_proj");
  EXPECT_EQ(plan[4].out_features, 2 * 8192);

  const ModelConfig mav = parse_model_config(published("maverick"), "config.json");
  EXPECT_EQ(mav.moe.num_experts, 128);
  EXPECT_FALSE(mav.llama4.l2_qk_norm);
  EXPECT_EQ(mav.rope_scaling.type, "");
  for (int64_t i = 0; i < 48; ++i) EXPECT_EQ(mav.llama4.moe[i], i % 2 == 1) << i;
  const std::vector<LayerSpec> mplan = plan_layers(mav);
  EXPECT_EQ(mplan[2].name, "model.layers.0.feed_forward.gate_up_proj");
  EXPECT_EQ(mplan[2].out_features, 2 * 16384);
  EXPECT_EQ(mplan[6].name, "model.layers.1.feed_forward.router");
  EXPECT_EQ(mplan[7].name, "model.layers.1.feed_forward.experts");

  // Defaults of Llama4TextConfig and the ForCausalLM form.
  json bare = published("scout")["text_config"];
  bare["architectures"] = {"Llama4ForCausalLM"};
  for (const char* k : {"attention_chunk_size", "no_rope_layers", "interleave_moe_layer_step", "use_qk_norm"})
    bare.erase(k);
  bare["moe_layers"] = {3, 7};
  const ModelConfig b = parse_model_config(bare, "config.json");
  EXPECT_EQ(b.wrapper_prefix, "");
  EXPECT_EQ(b.attention[0].chunk(), 8192);
  EXPECT_TRUE(b.llama4.l2_qk_norm);
  EXPECT_TRUE(b.llama4.moe[3] && b.llama4.moe[7] && !b.llama4.moe[0]);
  bare["attention_chunk_size"] = nullptr;
  EXPECT_EQ(parse_model_config(bare, "config.json").attention[0].kind, AttentionKind::full);
}

void expect_error(const json& c, const std::string& needle) {
  try {
    parse_model_config(c, "config.json");
    ADD_FAILURE() << "no error, expected one with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Llama4, UnsupportedConfigValuesAreClearErrors) {
  json c = published("scout");
  c["text_config"]["no_rope_layers"] = {1, 0};
  expect_error(c, "no_rope_layers' must list a value for each of the 48 layers");
  c = published("scout");
  c["text_config"]["moe_layers"] = {50};
  expect_error(c, "moe_layers entry 50 is not a layer index");
  c = published("scout");
  c["text_config"]["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(c, "supports rope type default or llama3");
  c = published("scout");
  c["text_config"]["attention_bias"] = true;
  expect_error(c, "attention_bias=true is not supported");
  c = published("scout");
  c["text_config"]["num_experts_per_tok"] = 17;
  expect_error(c, "num_experts_per_tok = 17");
  c = published("scout");
  c["text_config"]["layer_types"] = std::vector<std::string>(48, "sliding_attention");
  expect_error(c, "layer_types[0] is \"sliding_attention\"");
  c = published("scout");
  c.erase("text_config");
  expect_error(c, "'text_config'");
}

// An NVFP4 checkpoint (ModelOpt's per-expert names, the router and lm_head left out) loads, and
// decoding gives the logits of one forward across the chunks of 4.
TEST(Llama4, Nvfp4CheckpointLoadsAndDecodesAsItPrefills) {
  test::TempDir dir;
  synth::SyntheticOptions o;
  o.architecture = "Llama4ForCausalLM";
  o.algo = quant::QuantAlgo::NVFP4;
  o.layers = 4;
  synth::write_synthetic_checkpoint(dir.path().string(), o);
  const json q = read_json((dir.path() / "hf_quant_config.json").string());
  const json ex = q["quantization"]["exclude_modules"];
  EXPECT_NE(std::find(ex.begin(), ex.end(), "lm_head"), ex.end()) << ex.dump();
  EXPECT_NE(std::find(ex.begin(), ex.end(), "model.layers.1.feed_forward.router"), ex.end()) << ex.dump();
  auto lm = CausalLM::load(dir.path().string(), f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.attention[0].chunk(), 4);
  EXPECT_TRUE(c.llama4.moe[1] && !c.llama4.moe[0]);
  EXPECT_TRUE(c.attention[0].rope && !c.attention[1].rope);
  const std::vector<int32_t> t = {5, 9, 200, 17, 3, 77, 41, 8, 100, 12, 64};
  const std::vector<float> whole = all_logits(*lm, t);
  for (float v : whole) ASSERT_TRUE(std::isfinite(v));
  SequenceState s = lm->new_sequence();
  std::vector<float> step(static_cast<size_t>(lm->vocab_size()));
  for (size_t i = 0; i < t.size(); ++i) {
    lm->forward(s, &t[i], 1, LogitsMode::last, step.data());
    for (size_t v = 0; v < step.size(); ++v) ASSERT_NEAR(step[v], whole[i * step.size() + v], 1e-4) << i;
  }
}

// The wrapper's synthetic replica (text_config, language_model.model.*) gives the text model's logits.
TEST(Llama4, Nvfp4WrapperReplicaIsItsTextModel) {
  test::TempDir a, b;
  synth::SyntheticOptions o;
  o.algo = quant::QuantAlgo::NVFP4;
  o.architecture = "Llama4ForCausalLM";
  synth::write_synthetic_checkpoint(a.path().string(), o);
  o.architecture = "Llama4ForConditionalGeneration";
  synth::write_synthetic_checkpoint(b.path().string(), o);
  auto text = CausalLM::load(a.path().string(), f32());
  auto wrapped = CausalLM::load(b.path().string(), f32());
  EXPECT_EQ(wrapped->config().wrapper_prefix, "language_model.");
  const std::vector<int32_t> t = {5, 9, 200, 17, 3, 77, 41, 8, 100};
  EXPECT_EQ(all_logits(*wrapped, t), all_logits(*text, t));
}

// ModelOpt's export of the fused Llama4TextExperts (quantized, still fused) is named in the error.
TEST(Llama4, FusedQuantizedExpertsAreAClearError) {
  test::TempDir dir;
  synth::SyntheticOptions o;
  o.architecture = "Llama4ForCausalLM";
  o.algo = quant::QuantAlgo::NVFP4;
  synth::write_synthetic_checkpoint(dir.path().string(), o);
  test::edit_tensors(dir.path(), [](test::EditedTensor&) { return true; },
                     {{"model.layers.1.feed_forward.experts.gate_up_proj_weight_scale", DType::F8_E4M3, {4, 4, 64},
                       std::vector<uint8_t>(4 * 4 * 64, 0x38)}});
  try {
    CausalLM::load(dir.path().string(), f32());
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.feed_forward.experts.gate_up_proj_weight_scale"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fused quantized experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::model::llama4_test
