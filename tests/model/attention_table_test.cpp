// The per-layer attention table (model/attention_table.h) as each architecture fills it from its
// config: Gemma 3's 5:1 sliding pattern, Gemma 4's per-layer heads and K/V shared between layers,
// Gemma 3n's, gpt-oss's alternation, Llama 4's chunked RoPE and full NoPE layers, Mistral's one
// window, the hybrids' attention layers among recurrent ones; an unknown layer_types entry is an
// error naming the field; and the KV slots the loaded layers declare follow the table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/paths.h"
#include "io/json_file.h"
#include "model/attention_table.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "synth/synthetic_checkpoint.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::attention_table_test {
namespace {

using nlohmann::json;
constexpr AttentionKind S = AttentionKind::sliding, F = AttentionKind::full, C = AttentionKind::chunked,
                        N = AttentionKind::none;

json fixture_config(const std::string& name) {
  return io::read_json_file((test::source_dir() / "tests/model/fixtures" / name / "config.json").string());
}
json& text(json& c) { return c.contains("text_config") ? c["text_config"] : c; }

std::vector<AttentionKind> kinds(const ModelConfig& c) {
  std::vector<AttentionKind> out;
  for (const AttentionLayerSpec& l : c.attention.layers()) out.push_back(l.kind);
  return out;
}

// A synthetic checkpoint's config.json (the architecture's own synthetic keys), edited.
json synthetic_config(const std::string& arch, int64_t layers) {
  test::TempDir dir;
  synth::SyntheticOptions o;
  o.architecture = arch;
  o.algo = quant::QuantAlgo::None;
  o.layers = layers;
  synth::write_synthetic_checkpoint((dir / "ck").string(), o);
  return io::read_json_file((dir / "ck" / "config.json").string());
}

TEST(AttentionTable, Gemma3FiveSlidingToOneFull) {
  json c = fixture_config("gemma3_vl");
  text(c)["num_hidden_layers"] = 12;
  text(c).erase("layer_types");  // sliding_window_pattern's default 6: every 6th layer full
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{S, S, S, S, S, F, S, S, S, S, S, F}));
  for (int64_t i = 0; i < 12; ++i) {
    const AttentionLayerSpec& a = m.attention[i];
    const bool sliding = (i + 1) % 6 != 0;
    EXPECT_EQ(a.window, sliding ? 8 : 0) << i;
    EXPECT_EQ(a.sliding_window(), sliding ? 8 : 0) << i;
    EXPECT_EQ(a.head_dim, 16) << i;
    EXPECT_EQ(a.kv_heads, 1) << i;
    EXPECT_EQ(a.kv_source, -1) << i;
    EXPECT_TRUE(a.rope) << i;
    EXPECT_EQ(a.rope_theta, sliding ? 10000.0 : 1000000.0) << i;  // rope_parameters per layer type
  }
}

TEST(AttentionTable, Gemma4PerLayerHeadsAndSharedKv) {
  json c = fixture_config("gemma4_vl");
  json& t = text(c);
  t["num_hidden_layers"] = 12;
  t.erase("layer_types");  // every 6th full (and the last, always)
  t.erase("per_layer_config");
  t["global_head_dim"] = 32;
  t["attention_k_eq_v"] = true;
  t["num_global_key_value_heads"] = 1;
  t["num_kv_shared_layers"] = 2;
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{S, S, S, S, S, F, S, S, S, S, S, F}));
  // The last two layers read the K/V of the last earlier layer of their type: 9 (sliding), 5 (full).
  EXPECT_EQ(m.attention.kv_sources(), (std::vector<int64_t>{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 9, 5}));
  for (int64_t i = 0; i < 12; ++i) {
    const bool sliding = m.attention[i].kind == S;
    EXPECT_EQ(m.attention[i].head_dim, sliding ? 16 : 32) << i;
    EXPECT_EQ(m.attention[i].kv_heads, 1) << i;
    EXPECT_EQ(m.attention[i].window, sliding ? 8 : 0) << i;
    EXPECT_EQ(m.attention[i].rope_theta, sliding ? 10000.0 : 1000000.0) << i;
  }
  // 7 shared layers: layer 5 (full) has no earlier unshared full layer to read K/V from.
  t["num_kv_shared_layers"] = 7;
  const std::string e = test::error_of([&] { parse_model_config(c, "config.json"); });
  EXPECT_NE(e.find("num_kv_shared_layers = 7: layer 5 (full) has no earlier full layer"), std::string::npos) << e;
}

TEST(AttentionTable, Gemma3nSharedKvLayers) {
  const ModelConfig m = parse_model_config(fixture_config("gemma3n/causal"), "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{S, S, F, S, S, F}));
  EXPECT_EQ(m.attention.kv_sources(), (std::vector<int64_t>{-1, -1, -1, -1, 3, 2}));
  EXPECT_EQ(m.attention[4].sliding_window(), 8);
  EXPECT_EQ(m.attention[5].sliding_window(), 0);
}

TEST(AttentionTable, GptOssAlternatesSlidingAndFull) {
  json c = synthetic_config("GptOssForCausalLM", 4);
  c.erase("layer_types");  // transformers' default: the even layers sliding
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{S, F, S, F}));
  EXPECT_EQ(m.attention[0].window, 4);
  EXPECT_EQ(m.attention[1].window, 0);
  EXPECT_EQ(m.attention[2].sliding_window(), 4);
  c["layer_types"] = {"full_attention", "full_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(kinds(parse_model_config(c, "config.json")), (std::vector<AttentionKind>{F, F, S, F}));
}

TEST(AttentionTable, Llama4ChunkedRopeAndFullNopeLayers) {
  const ModelConfig m = parse_model_config(fixture_config("llama4/scout"), "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{C, C, C, F}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m.attention[i].chunk(), i < 3 ? 6 : 0) << i;
    EXPECT_EQ(m.attention[i].sliding_window(), 0) << i;  // a chunk is no window
    EXPECT_EQ(m.attention[i].rope, i < 3) << i;          // no_rope_layers [1, 1, 1, 0]
    EXPECT_EQ(m.attention[i].head_dim, 16) << i;
    EXPECT_EQ(m.attention[i].kv_heads, 2) << i;
  }
  EXPECT_EQ(m.attention[0].rope_theta, 500000.0);
}

TEST(AttentionTable, MistralOneWindowEveryLayer) {
  json c = test::make_tiny_model("MistralForCausalLM").config;
  c["sliding_window"] = 64;
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(kinds(m), (std::vector<AttentionKind>{S, S, S}));
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(m.attention[i].window, 64) << i;
  c["sliding_window"] = nullptr;
  EXPECT_EQ(kinds(parse_model_config(c, "config.json")), (std::vector<AttentionKind>{F, F, F}));
}

TEST(AttentionTable, HybridsMarkTheirRecurrentLayersNone) {
  // Nemotron-H: layers_block_type [linear_attention (Mamba-2), full_attention, mlp, linear_attention].
  const ModelConfig n = parse_model_config(fixture_config("nemotron_h_omni"), "config.json");
  EXPECT_EQ(kinds(n), (std::vector<AttentionKind>{N, F, N, N}));
  EXPECT_FALSE(n.attention[1].rope);  // NoPE attention
  EXPECT_EQ(n.attention[1].head_dim, 16);
  EXPECT_EQ(n.attention[0].head_dim, 0);  // no attention, no shape
  // Qwen3-Next: every 2nd layer gated full attention, the others gated delta-nets.
  const ModelConfig q = parse_model_config(synthetic_config("Qwen3NextForCausalLM", 4), "config.json");
  EXPECT_EQ(kinds(q), (std::vector<AttentionKind>{N, F, N, F}));
  EXPECT_EQ(q.attention[3].kv_heads, 2);
}

TEST(AttentionTable, UnknownLayerTypeNamesTheField) {
  json g = fixture_config("gemma3_vl");
  text(g)["layer_types"][1] = "bogus_attention";
  std::string e = test::error_of([&] { parse_model_config(g, "config.json"); });
  EXPECT_NE(e.find("config.json: field 'layer_types': layer_types[1] is \"bogus_attention\" (expected "
                   "\"sliding_attention\" or \"full_attention\")"),
            std::string::npos)
      << e;
  json l = fixture_config("llama4/scout");
  text(l)["layer_types"][2] = "sliding_attention";
  e = test::error_of([&] { parse_model_config(l, "config.json"); });
  EXPECT_NE(e.find("layer_types[2] is \"sliding_attention\" (expected \"chunked_attention\" or \"full_attention\")"),
            std::string::npos)
      << e;
  json o = synthetic_config("GptOssForCausalLM", 2);
  o["layer_types"] = {"sliding_attention"};
  e = test::error_of([&] { parse_model_config(o, "config.json"); });
  EXPECT_NE(e.find("field 'layer_types': layer_types must list one type per layer (2)"), std::string::npos) << e;
}

// The KV slots the loaded attention layers declare (what a sequence's cache holds) are the table's
// rows: one per layer that stores K/V, with its window, heads and head_dim.
TEST(AttentionTable, KvSlotsFollowTheTable) {
  for (const char* arch : {"Gemma4ForCausalLM", "GptOssForCausalLM", "NemotronHForCausalLM"}) {
    SCOPED_TRACE(arch);
    test::TempDir dir;
    synth::SyntheticOptions s;
    s.architecture = arch;
    s.algo = quant::QuantAlgo::None;
    s.layers = 4;
    s.kv_shared_layers = std::string(arch) == "Gemma4ForCausalLM" ? 2 : 0;
    synth::write_synthetic_checkpoint((dir / "ck").string(), s);
    LoadOptions lo;
    lo.progress = false;
    const auto lm = CausalLM::load((dir / "ck").string(), EngineOptions{}, lo);
    const ModelConfig& c = lm->config();
    std::vector<KvSlotShape> want;
    for (const AttentionLayerSpec& a : c.attention.layers())
      if (a.kind != AttentionKind::none && a.kv_source < 0) want.push_back({a.kv_heads, a.head_dim, a.sliding_window()});
    const std::vector<KvSlotShape>& got = lm->state_layout().kv_slots();
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(got.empty());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].kv_heads, want[i].kv_heads) << i;
      EXPECT_EQ(got[i].head_dim, want[i].head_dim) << i;
      EXPECT_EQ(got[i].window, want[i].window) << i;
    }
  }
}

}  // namespace
}  // namespace fp4lm::model::attention_table_test
