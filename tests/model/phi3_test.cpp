// Phi3ForCausalLM against transformers itself: tiny random checkpoints that transformers built and
// saved, with the published configs of Phi-3-mini-4k (sliding window), Phi-3-mini-128k
// (LongRoPE), phi-4 (GQA, no scaling) and Phi-4-mini (LongRoPE over 3/4 of each head, tied
// embeddings) shrunk in their sizes, and transformers' float64 logits (golden.json), written by
// scripts/make_phi3_goldens.py (torch stays out of CI). Float32 logits within 1e-4 of the
// reference's range at every position, argmax equal: one forward longer than
// original_max_position_embeddings (long factors), a short one (short factors), a KV cache that
// crosses the boundary token by token, chunked prefill. Then the full-size published configs and
// the config errors.
#include <gtest/gtest.h>

#include <fstream>

#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::phi3_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "phi3" / name).string();
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

std::vector<int32_t> tokens(const json& g, size_t n = 0) {
  std::vector<int32_t> t = g["tokens"].get<std::vector<int32_t>>();
  if (n > 0) t.resize(n);
  return t;
}

// got [rows, vocab] against want (rows of float64 logits): max |diff| relative to want's range,
// and every row's argmax equal.
double check(const std::vector<float>& got, const json& want, const std::string& what) {
  double lo = 1e300, hi = -1e300, diff = 0;
  const size_t vocab = want[0].size();
  EXPECT_EQ(got.size(), want.size() * vocab) << what;
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

class Phi3Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Phi3Golden, Float32MatchesTransformersFloat64) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  auto lm = CausalLM::load(dir, f32());
  EXPECT_EQ(lm->config().architecture, "Phi3ForCausalLM");
  const double full = check(all_logits(*lm, tokens(g)), g["full"], "full");
  const double shrt = check(all_logits(*lm, tokens(g, g["short_tokens"].get<size_t>())), g["short"], "short");
  RecordProperty("full_rel_diff", fmt::format("{:.2e}", full));
  RecordProperty("short_rel_diff", fmt::format("{:.2e}", shrt));
}

// transformers' generate with a cache: a prefill, then one token per call; the call whose
// sequence passes original_max_position_embeddings and every later one use the long factors, the
// keys cached before keep their short rotation.
TEST_P(Phi3Golden, DecodeAcrossTheLongRopeBoundaryMatchesTransformersCache) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  auto lm = CausalLM::load(dir, f32());
  const std::vector<int32_t> t = tokens(g);
  const std::vector<float> got = prefill_then_decode_logits(*lm, t, g["prefill"].get<size_t>());
  RecordProperty("cached_rel_diff", fmt::format("{:.2e}", check(got, g["cached"], "cached")));
}

// A prompt runs in steps of prefill_chunk rows but LongRoPE decides by the whole call, so any
// chunking gives the one-forward logits bit for bit (and so transformers').
TEST_P(Phi3Golden, ChunkedPrefillEqualsOneForward) {
  const std::string dir = fixture(GetParam());
  const json g = read_json(dir + "/golden.json");
  const std::vector<float> whole = all_logits(*CausalLM::load(dir, f32()), tokens(g));
  LoadOptions lo;
  lo.prefill_chunk = 5;
  const std::vector<float> chunked = all_logits(*CausalLM::load(dir, f32(), lo), tokens(g));
  EXPECT_TRUE(bit_identical(chunked, whole));
  check(chunked, g["full"], "chunked");
}

INSTANTIATE_TEST_SUITE_P(Published, Phi3Golden,
                         ::testing::Values("phi3_mini_4k", "phi3_mini_128k", "phi4", "phi4_mini"));

// Decoding one token at a time gives one forward's logits where no call crosses the LongRoPE
// boundary (the 4k model's window of 15 is crossed); and in a batch each sequence picks its own
// factors: a sequence past the boundary beside short ones gives, like them, its logits alone.
TEST(Phi3, StepsAndBatchesMatchOneForward) {
  for (const char* name : {"phi3_mini_4k", "phi4"}) {
    auto lm = CausalLM::load(fixture(name), f32());
    const std::vector<int32_t> t = tokens(read_json(fixture(name) + "/golden.json"));
    const std::vector<float> whole = all_logits(*lm, t);
    SequenceState s = lm->new_sequence();
    std::vector<float> step(static_cast<size_t>(lm->vocab_size()));
    for (size_t i = 0; i < t.size(); ++i) {
      lm->forward(s, &t[i], 1, LogitsMode::last, step.data());
      for (size_t v = 0; v < step.size(); ++v) ASSERT_NEAR(step[v], whole[i * step.size() + v], 1e-5) << name << i;
    }
  }
  for (const char* name : {"phi3_mini_128k", "phi4_mini"}) {
    LoadOptions lo;
    lo.prefill_chunk = 7;
    auto lm = CausalLM::load(fixture(name), f32(), lo);
    const std::vector<int32_t> t = tokens(read_json(fixture(name) + "/golden.json"));
    const std::vector<std::vector<int32_t>> prompts = {{9, 8, 7}, t, {50, 60, 10, 20, 30, 11}};
    std::vector<SequenceState> states;
    std::vector<std::vector<float>> got(prompts.size());
    std::vector<SequenceChunk> batch;
    for (size_t i = 0; i < prompts.size(); ++i) states.push_back(lm->new_sequence());
    for (size_t i = 0; i < prompts.size(); ++i) {
      got[i].resize(prompts[i].size() * static_cast<size_t>(lm->vocab_size()));
      batch.push_back({&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all,
                       got[i].data()});
    }
    lm->forward(batch);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], all_logits(*lm, prompts[i])) << name << i;
  }
}

TEST(Phi3, FixtureConfigsParseAsTransformersSavesThemToo) {
  for (const char* name : {"phi3_mini_4k", "phi3_mini_128k", "phi4", "phi4_mini"}) {
    const std::string dir = fixture(name);
    const ModelConfig a = parse_model_config(read_json(dir + "/config.json"), "config.json");
    const ModelConfig b = parse_model_config(read_json(dir + "/config_transformers5.json"), "t5.json");
    EXPECT_EQ(a.rotary_dim, b.rotary_dim) << name;
    EXPECT_EQ(a.attention[0].sliding_window(), b.attention[0].sliding_window()) << name;
    EXPECT_EQ(a.rope_theta, b.rope_theta) << name;
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type) << name;
    EXPECT_EQ(a.rope_scaling.short_factor, b.rope_scaling.short_factor) << name;
    EXPECT_EQ(a.rope_scaling.long_factor, b.rope_scaling.long_factor) << name;
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
    EXPECT_DOUBLE_EQ(a.rope_scaling.attention_factor, b.rope_scaling.attention_factor) << name;
    EXPECT_EQ(a.rms_norm_eps, 1e-5);
  }
}

// The published configs at full size (the factor values are stand-ins of the published lengths).
json published(const std::string& which) {
  json c = {{"architectures", {"Phi3ForCausalLM"}}, {"attention_bias", false}, {"attention_dropout", 0.0},
            {"bos_token_id", 1}, {"embd_pdrop", 0.0}, {"eos_token_id", 32000}, {"hidden_act", "silu"},
            {"hidden_size", 3072}, {"initializer_range", 0.02}, {"intermediate_size", 8192},
            {"max_position_embeddings", 4096}, {"model_type", "phi3"}, {"num_attention_heads", 32},
            {"num_hidden_layers", 32}, {"num_key_value_heads", 32}, {"original_max_position_embeddings", 4096},
            {"pad_token_id", 32000}, {"resid_pdrop", 0.0}, {"rms_norm_eps", 1e-05}, {"rope_scaling", nullptr},
            {"rope_theta", 10000.0}, {"sliding_window", 2047}, {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"}, {"use_cache", true}, {"vocab_size", 32064}};
  json longrope = {{"long_factor", std::vector<double>(48, 1.0)}, {"short_factor", std::vector<double>(48, 1.0)},
                   {"type", "longrope"}};
  longrope["long_factor"][47] = 64.0;
  if (which == "128k") {
    c["max_position_embeddings"] = 131072;
    c["rope_scaling"] = longrope;
    c["sliding_window"] = 262144;
  } else if (which == "phi4") {
    c.update({{"bos_token_id", 100257}, {"eos_token_id", 100265}, {"pad_token_id", 100349}, {"hidden_size", 5120},
              {"intermediate_size", 17920}, {"max_position_embeddings", 16384}, {"num_attention_heads", 40},
              {"num_hidden_layers", 40}, {"num_key_value_heads", 10}, {"original_max_position_embeddings", 16384},
              {"rope_theta", 250000.0}, {"sliding_window", nullptr}, {"vocab_size", 100352}});
  } else if (which == "mini") {
    c.update({{"bos_token_id", 199999}, {"eos_token_id", 199999}, {"pad_token_id", 199999}, {"full_attn_mod", 1},
              {"interpolate_factor", 1}, {"lm_head_bias", false}, {"mlp_bias", false},
              {"max_position_embeddings", 131072}, {"num_attention_heads", 24}, {"num_key_value_heads", 8},
              {"partial_rotary_factor", 0.75}, {"rope_scaling", longrope}, {"sliding_window", 262144},
              {"tie_word_embeddings", true}, {"vocab_size", 200064}});
  }
  return c;
}

TEST(Phi3, PublishedConfigs) {
  const ModelConfig mini4k = parse_model_config(published("4k"), "config.json");
  EXPECT_EQ(mini4k.head_dim, 96);
  EXPECT_EQ(mini4k.rotary_dim, 96);
  EXPECT_EQ(mini4k.attention[0].sliding_window(), 2047);
  EXPECT_EQ(mini4k.rope_scaling.type, "");
  EXPECT_EQ(mini4k.rms_norm_eps, 1e-5);

  const ModelConfig m128k = parse_model_config(published("128k"), "config.json");
  EXPECT_EQ(m128k.rope_scaling.type, "longrope");
  EXPECT_EQ(m128k.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(m128k.attention[0].sliding_window(), 0);  // 262144 > 131072: no sequence reaches it
  EXPECT_DOUBLE_EQ(m128k.rope_scaling.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)));
  const Rope rope(m128k.rotary_dim, m128k.rope_theta, m128k.rope_scaling);
  EXPECT_FALSE(rope.long_factors(4096));
  EXPECT_TRUE(rope.long_factors(4097));
  std::vector<float> cs(48), sn(48), cl(48), sl(48);
  rope.cos_sin(1000, cs.data(), sn.data(), false);
  rope.cos_sin(1000, cl.data(), sl.data(), true);
  EXPECT_EQ(cs[0], cl[0]);   // factor 1 in both
  EXPECT_NE(cs[47], cl[47]);  // the long factor 64 slows the last frequency

  const ModelConfig phi4 = parse_model_config(published("phi4"), "config.json");
  EXPECT_EQ(phi4.head_dim, 128);
  EXPECT_EQ(phi4.num_kv_heads, 10);
  EXPECT_EQ(phi4.rope_theta, 250000.0);
  EXPECT_EQ(phi4.attention[0].sliding_window(), 0);
  EXPECT_EQ(phi4.eos_token_ids, std::vector<int64_t>{100265});

  const ModelConfig mini = parse_model_config(published("mini"), "config.json");
  EXPECT_EQ(mini.head_dim, 128);
  EXPECT_EQ(mini.rotary_dim, 96);
  EXPECT_TRUE(mini.tie_word_embeddings);
  const std::vector<LayerSpec> plan = plan_layers(mini);
  EXPECT_EQ(plan[0].name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(plan[0].shards, std::vector<std::string>{"model.layers.0.self_attn.qkv_proj"});
  EXPECT_EQ(plan[0].out_features, 24 * 128 + 2 * 8 * 128);
  EXPECT_EQ(plan[2].shards, std::vector<std::string>{"model.layers.0.mlp.gate_up_proj"});
  EXPECT_EQ(plan[2].out_features, 2 * 8192);

  // Phi3Config reads the legacy "su" (and "yarn") as longrope.
  json su = published("128k");
  su["rope_scaling"]["type"] = "su";
  EXPECT_EQ(parse_model_config(su, "config.json").rope_scaling.type, "longrope");
}

void expect_error(const json& c, const std::string& needle) {
  try {
    parse_model_config(c, "config.json");
    ADD_FAILURE() << "no error, expected one with: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Phi3, UnsupportedConfigValuesAreClearErrors) {
  json c = published("mini");
  c["rope_scaling"]["short_factor"] = std::vector<double>(64, 1.0);
  expect_error(c, "short_factor has 64 values, expected 48");
  c = published("128k");
  c["rope_scaling"]["long_factor"] = "x";
  expect_error(c, "long_factor' must be a non-empty list");
  c = published("4k");
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_error(c, "supports rope type default or longrope");
  c = published("4k");
  c["attention_bias"] = true;
  expect_error(c, "attention_bias=true is not supported");
  c = published("mini");
  c["lm_head_bias"] = true;
  expect_error(c, "lm_head_bias=true is not supported");
  c = published("mini");
  c["full_attn_mod"] = 2;
  expect_error(c, "full_attn_mod");
  c = published("mini");
  c["partial_rotary_factor"] = 0.0;
  expect_error(c, "partial_rotary_factor must be in (0, 1]");
  c = published("mini");
  c["partial_rotary_factor"] = 0.3;  // int(128 * 0.3) = 38 dims -> 19 factors expected: the lengths fail
  expect_error(c, "expected 19");
}

// An NVFP4 checkpoint in ModelOpt's layout: qkv_proj and gate_up_proj are one quantized Linear
// each (one weight_scale_2, as stored), only lm_head left out; it loads and decodes as it prefills.
TEST(Phi3, Nvfp4CheckpointLoadsWithFusedQuantizedProjections) {
  test::TempDir dir;
  synth::SyntheticOptions o;
  o.architecture = "Phi3ForCausalLM";
  o.algo = quant::QuantAlgo::NVFP4;
  synth::write_synthetic_checkpoint(dir.path().string(), o);
  const json q = read_json((dir.path() / "hf_quant_config.json").string());
  EXPECT_EQ(q["quantization"]["exclude_modules"], json::array({"lm_head"})) << q.dump();
  const json idx = read_json((dir.path() / "config.json").string());
  EXPECT_EQ(idx["architectures"][0], "Phi3ForCausalLM");
  auto lm = CausalLM::load(dir.path().string(), f32());
  const std::vector<int32_t> t = {5, 9, 200, 17, 3, 77, 41};
  const std::vector<float> whole = all_logits(*lm, t);
  for (float v : whole) ASSERT_TRUE(std::isfinite(v));
  SequenceState s = lm->new_sequence();
  std::vector<float> step(static_cast<size_t>(lm->vocab_size()));
  for (size_t i = 0; i < t.size(); ++i) {
    lm->forward(s, &t[i], 1, LogitsMode::last, step.data());
    for (size_t v = 0; v < step.size(); ++v) ASSERT_NEAR(step[v], whole[i * step.size() + v], 1e-4) << i;
  }
}

}  // namespace
}  // namespace fp4lm::model::phi3_test
