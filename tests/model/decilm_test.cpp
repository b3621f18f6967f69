// DeciLMForCausalLM (Llama-Nemotron NAS: 51B, Super-49B, Ultra-253B). transformers has no class
// for it (the checkpoints ship remote code), so the reference is tests/reference/decilm_reference.h:
// a float64 forward from the remote code's semantics over a tiny random checkpoint with a layer
// of every block kind (GQA / MHA / MQA attention, attention no_op, attention replace_with_linear,
// ffn no_op, ffn replace_with_linear, two ffn_mult widths, a layer that is all no_op). Float32
// logits within 1e-4 of the reference's range at every position, argmax equal; decode, chunked
// prefill and batches as one forward; the width rule on published sizes; the NVFP4 ModelOpt
// layout (hf_quant_config.json) loads and generates; unsupported options refused by name.
#include <gtest/gtest.h>

#include "common/error_norms.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/decilm_reference.h"
#include "model/layer_plan.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::decilm_test {
namespace {

using nlohmann::json;
using test::TempDir;
namespace ref = test::decilm_ref;

const std::vector<int32_t> kTokens = {1, 40, 17, 5, 96, 40, 40, 3, 62, 11, 80, 7, 50, 29, 2, 9, 33, 71, 18, 64,
                                      90, 4, 45, 12, 58, 27, 36, 88, 13, 70, 21, 55, 6, 77, 39, 8, 94, 25};

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

class DeciLMTiny : public ::testing::TestWithParam<bool> {};

TEST_P(DeciLMTiny, Float32MatchesFloat64Reference) {
  TempDir tmp;
  const test::TinyModel m = ref::make_decilm(/*tied=*/GetParam());
  test::write_tiny_model(m, tmp.path());
  auto lm = CausalLM::load(tmp.path().string(), f32());
  const std::vector<test::naive::Vec> want = ref::forward(m, kTokens);
  const double rel = range_rel_diff(all_logits(*lm, kTokens), want, "DeciLM",
                                    GetParam() ? "tied embeddings" : "own lm_head");
  EXPECT_LT(rel, 1e-4);
  // The KV slots are the three attention layers' own (no_op and linear attention keep none), with
  // each layer's KV heads.
  const auto& slots = lm->state_layout().kv_slots();
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(slots[0].kv_heads, 2);
  EXPECT_EQ(slots[1].kv_heads, 4);
  EXPECT_EQ(slots[2].kv_heads, 1);
}

TEST_P(DeciLMTiny, StepsChunksAndBatchesMatchOneForward) {
  TempDir tmp;
  test::write_tiny_model(ref::make_decilm(GetParam()), tmp.path());
  expect_steps_chunks_and_batches_match_one_forward(tmp.path().string(), f32(), kTokens);
}

// Decode after a prefill against the reference: the cached K/V of every attention layer carry
// the earlier positions.
TEST_P(DeciLMTiny, PrefillThenDecodeMatchesReference) {
  TempDir tmp;
  const test::TinyModel m = ref::make_decilm(GetParam());
  test::write_tiny_model(m, tmp.path());
  auto lm = CausalLM::load(tmp.path().string(), f32());
  const double rel =
      range_rel_diff(prefill_then_decode_logits(*lm, kTokens, 11), ref::forward(m, kTokens), "DeciLM", "decode");
  EXPECT_LT(rel, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Embeddings, DeciLMTiny, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });

json published_like(int64_t hidden, const json& blocks) {
  return {{"architectures", {"DeciLMForCausalLM"}},
          {"model_type", "nemotron-nas"},
          {"vocab_size", 128256},
          {"hidden_size", hidden},
          {"num_hidden_layers", blocks.size()},
          {"num_attention_heads", 64},
          {"num_key_value_heads", nullptr},
          {"intermediate_size", nullptr},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"rope_scaling",
           {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}}},
          {"max_position_embeddings", 131072},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"block_configs", blocks}};
}

// The FFN width of each layer: round_up(int(2 * ffn_mult * hidden / 3), 256), checked on the
// published models' shapes (Super-49B's 2.625 / 1.3125 / 0.5, 51B's 1.95, Ultra's 2.4 at 16384),
// and the KV heads of each attention block.
TEST(DeciLM, WidthsAndKvHeadsFromBlockConfigs) {
  auto b = [](json attn, double mult) { return json{{"attention", attn}, {"ffn", {{"ffn_mult", mult}}}}; };
  const json g8 = {{"n_heads_in_group", 8}}, noop = {{"no_op", true}};
  const json blocks = {b(g8, 2.625), b(noop, 1.3125), b(g8, 0.5), b({{"n_heads_in_group", 64}}, 1.95)};
  const ModelConfig c = parse_model_config(published_like(8192, blocks), "config.json");
  EXPECT_EQ(c.decilm.intermediate, (std::vector<int64_t>{14336, 7168, 2816, 10752}));
  std::vector<int64_t> kv;
  for (const AttentionLayerSpec& a : c.attention.layers()) kv.push_back(a.kind == AttentionKind::none ? 0 : a.kv_heads);
  EXPECT_EQ(kv, (std::vector<int64_t>{8, 0, 8, 1}));
  std::map<std::string, int64_t> rows;
  for (const LayerSpec& s : plan_layers(c)) rows[s.name] = s.out_features;
  EXPECT_EQ(rows.at("model.layers.0.self_attn.qkv_proj"), (64 + 2 * 8) * 128);
  EXPECT_EQ(rows.at("model.layers.0.mlp.gate_up_proj"), 2 * 14336);
  EXPECT_EQ(rows.count("model.layers.1.self_attn.qkv_proj"), 0u);
  EXPECT_EQ(rows.at("model.layers.3.self_attn.qkv_proj"), (64 + 2) * 128);
  const ModelConfig ultra = parse_model_config(published_like(16384, json{b(g8, 2.4)}), "config.json");
  EXPECT_EQ(ultra.decilm.intermediate[0], 26368);
}

void expect_refused(const json& config, const std::string& needle) {
  try {
    parse_model_config(config, "config.json");
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DeciLM, UnsupportedOptionsAreRefusedByName) {
  auto one = [](json attn, json ffn) { return published_like(8192, json{{{"attention", attn}, {"ffn", ffn}}}); };
  const json ffn = {{"ffn_mult", 1.0}};
  const json g8 = {{"n_heads_in_group", 8}};
  for (const char* k : {"window_length", "num_sink_tokens"}) {
    json a = g8;
    a[k] = 128;
    expect_refused(one(a, ffn), std::string("block_configs[0].attention.") + k);
  }
  for (const char* k : {"use_prefill_window_in_sink_attention", "unshifted_sink"}) {
    json a = g8;
    a[k] = true;
    expect_refused(one(a, ffn), std::string("block_configs[0].attention.") + k);
  }
  json sparse = g8;
  sparse["sparsify"] = {"q_proj"};
  expect_refused(one(sparse, ffn), "block_configs[0].attention.sparsify");
  expect_refused(one(g8, {{"ffn_mult", 1.0}, {"sparsify", {"down_proj"}}}), "block_configs[0].ffn.sparsify");
  expect_refused(one(g8, {{"ffn_mult", 1.0}, {"gated", false}}), "block_configs[0].ffn.gated");
  expect_refused(one(g8, {{"ffn_mult", 1.0}, {"hidden_act", "relu"}}), "block_configs[0].ffn.hidden_act");
  expect_refused(one(g8, {{"ffn_mult", 1.0}, {"moe", {{"num_experts", 8}}}}), "block_configs[0].ffn.moe");
  expect_refused(one({{"n_heads_in_group", 3}}, ffn), "n_heads_in_group (3)");
  expect_refused(one({{"no_op", false}}, ffn), "block_configs[0].attention.n_heads_in_group");
  expect_refused(one(g8, {{"no_op", false}}), "block_configs[0].ffn.ffn_mult");
  json wrong_count = one(g8, ffn);
  wrong_count["num_hidden_layers"] = 2;
  expect_refused(wrong_count, "block_configs has 1 entries");
  json no_blocks = one(g8, ffn);
  no_blocks.erase("block_configs");
  expect_refused(no_blocks, "block_configs");
  json bias = one(g8, ffn);
  bias["attention_bias"] = true;
  expect_refused(bias, "attention_bias");
  for (const char* t : {"mistral_yarn", "rope_llama4", "alibi"}) {
    json pe = one(g8, ffn);
    pe["position_embedding_type"] = t;
    expect_refused(pe, std::string("position_embedding_type '") + t + "'");
  }
  json rope = one(g8, ffn);
  rope["position_embedding_type"] = "rope";
  EXPECT_NO_THROW(parse_model_config(rope, "config.json")) << "\"rope\" is the Llama rotary embedding";
}

// The NVFP4 layout ModelOpt exports (hf_quant_config.json; q/k/v, gate/up, linear_attn and
// linear_mlp quantized, lm_head not) loads and runs: within NVFP4's error of the same random
// weights unquantized, and greedy decoding goes on from the prompt.
TEST(DeciLM, Nvfp4ModelOptLayoutLoadsAndGenerates) {
  TempDir tmp;
  auto write = [&](quant::QuantAlgo algo) {
    synth::SyntheticOptions s;
    s.architecture = "DeciLMForCausalLM";
    s.algo = algo;
    s.layers = 5;  // one of each block of synthetic_config's cycle
    s.seed = 3;
    const std::string d = (tmp / std::string(quant::algo_name(algo))).string();
    synth::write_synthetic_checkpoint(d, s);
    return d;
  };
  const std::string plain = write(quant::QuantAlgo::None), nvfp4 = write(quant::QuantAlgo::NVFP4);
  ASSERT_TRUE(std::filesystem::exists(std::filesystem::path(nvfp4) / "hf_quant_config.json"));
  const std::vector<int32_t> toks = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};
  const auto want = checkpoint_logits(plain, toks, f32());
  auto lm = CausalLM::load(nvfp4, f32());
  const auto got = all_logits(*lm, toks);
  const double e = test::rel_rms(got, want);
  std::printf("[ DeciLM ] NVFP4 vs unquantized: rel rms %.3f\n", e);
  EXPECT_GT(e, 0.005);
  EXPECT_LT(e, 0.4);
  // Greedy decode of 8 tokens after the prompt: the step logits equal one forward's.
  SequenceState s = lm->new_sequence();
  std::vector<int32_t> seq = toks;
  std::vector<float> last(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, seq.data(), static_cast<int64_t>(seq.size()), LogitsMode::last, last.data());
  for (int i = 0; i < 8; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    seq.push_back(next);
    lm->forward(s, &seq.back(), 1, LogitsMode::last, last.data());
  }
  const auto whole = all_logits(*lm, seq);
  const size_t v = static_cast<size_t>(lm->vocab_size());
  for (size_t j = 0; j < v; ++j) EXPECT_NEAR(last[j], whole[(seq.size() - 1) * v + j], 1e-4) << j;
}

}  // namespace
}  // namespace fp4lm::model::decilm_test
