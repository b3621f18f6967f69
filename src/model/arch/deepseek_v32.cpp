// DeepseekV32ForCausalLM (DeepSeek-V3.2) and GlmMoeDsaForCausalLM (GLM-5): DeepSeek-V3's decoder
// layer (arch/deepseek_v3.cpp: MLA with q_lora_rank, the DeepSeek MoE, the MTP layers skipped)
// with DeepSeek Sparse Attention: an indexer per layer (self_attn.indexer.{wq_b, wk, k_norm,
// weights_proj}) keeps each query's index_topk best past positions (model/layers/dsa_indexer.h), as
// transformers 5.24's DeepseekV32 / GlmMoeDsa classes compute it. GLM-5 differs in its defaults
// (n_group 1, topk_group 1, rms_norm_eps 1e-5), its indexer's interleaved RoPE (DeepSeek-V3.2's
// is half-split) and its per-layer indexer_types: a "shared" layer has no indexer and reuses the
// previous "full" layer's selection (from index_topk_pattern, or index_topk_freq and
// index_skip_topk_offset, when indexer_types is absent, as GlmMoeDsaConfig derives it).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/deepseek_moe.h"

namespace fp4lm::model {

const ArchDef& deepseek_v3_arch();

namespace {

// GLM-5's indexer_types (GlmMoeDsaConfig.__post_init__): true = "shared".
std::vector<bool> glm_indexer_types(const ConfigReader& r, int64_t layers) {
  std::vector<std::string> types;
  auto take = [&](const char* key) {
    for (const nlohmann::json& v : r.j[key]) {
      if (!v.is_string()) fail("{}: field '{}' holds {} (expected \"full\" or \"shared\")", r.path, key, v.dump());
      types.push_back(v.get<std::string>());
    }
  };
  if (r.has("indexer_types")) {
    if (!r.j["indexer_types"].is_array()) fail("{}: field 'indexer_types' must be a list", r.path);
    take("indexer_types");
  } else if (r.has("index_topk_pattern")) {
    const nlohmann::json& p = r.j["index_topk_pattern"];
    if (p.is_string()) {
      for (char ch : p.get<std::string>()) {
        if (ch != 'F' && ch != 'S')
          fail("{}: field 'index_topk_pattern' holds '{}' (expected F or S per layer)", r.path, std::string(1, ch));
        types.push_back(ch == 'F' ? "full" : "shared");
      }
    } else if (p.is_array()) {
      take("index_topk_pattern");
    } else {
      fail("{}: field 'index_topk_pattern' must be a string of F/S or a list, found {}", r.path, p.dump());
    }
  } else {
    const int64_t freq = std::max<int64_t>(r.opt<int64_t>("index_topk_freq", 1), 1);
    const int64_t offset = r.opt<int64_t>("index_skip_topk_offset", 2);
    for (int64_t i = 0; i < layers; ++i)
      types.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
  }
  if (static_cast<int64_t>(types.size()) < layers)
    fail("{}: the indexer types list {} layers, the model has {}", r.path, types.size(), layers);
  std::vector<bool> shared;
  for (int64_t i = 0; i < layers; ++i) {
    const std::string& t = types[static_cast<size_t>(i)];
    if (t != "full" && t != "shared")
      fail("{}: indexer type '{}' of layer {} (expected \"full\" or \"shared\")", r.path, t, i);
    shared.push_back(t == "shared");
  }
  if (!shared.empty() && shared[0])
    fail("{}: layer 0's indexer type is \"shared\", but a shared layer reuses an earlier full layer's selection",
         r.path);
  return shared;
}

class DeepseekV32 : public ArchDef {
 public:
  std::string_view hf_name() const override { return "DeepseekV32ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    deepseek_v3_arch().parse_config(r, c);
    read_mlp_layer_types(r, c);
    const char* name = hf_name().data();
    if (c.mla.q_lora_rank <= 0)
      fail("{}: {} needs q_lora_rank (its indexer reads the query latent), found null", r.path, name);
    // transformers' attention always rotates interleaved pairs (it does not read rope_interleave).
    if (!c.mla.rope_interleave)
      fail("{}: field 'rope_interleave' is false, but {} rotates its attention's RoPE dims as interleaved pairs", r.path,
           name);
    DsaConfig& d = c.dsa;
    d.index_topk = r.opt<int64_t>("index_topk", 2048);
    d.index_head_dim = r.opt<int64_t>("index_head_dim", 128);
    d.index_n_heads = r.opt<int64_t>("index_n_heads", default_index_heads());
    for (auto [k, v] : {std::pair{"index_topk", d.index_topk}, {"index_head_dim", d.index_head_dim},
                        {"index_n_heads", d.index_n_heads}})
      r.positive(k, v);
    if (d.index_head_dim < c.mla.qk_rope_head_dim)
      fail("{}: index_head_dim ({}) is below qk_rope_head_dim ({}), which the indexer rotates", r.path, d.index_head_dim,
           c.mla.qk_rope_head_dim);
    if (r.has("layer_types")) {
      const nlohmann::json& t = r.j["layer_types"];
      if (!t.is_array()) fail("{}: field 'layer_types' must be a list", r.path);
      for (const nlohmann::json& v : t)
        if (!v.is_string() || v.get<std::string>() != "indexed_attention")
          fail("{}: field 'layer_types' holds {}; {} runs only \"indexed_attention\" layers", r.path, v.dump(), name);
    }
    d.rope_interleave = interleaved_indexer_rope();
    // transformers' indexer rotates one way per class whatever this key says (vLLM reads it).
    if (r.has("indexer_rope_interleave") && r.get<bool>("indexer_rope_interleave") != d.rope_interleave)
      fail("{}: field 'indexer_rope_interleave' is {}, but {}'s indexer rotates {}", r.path,
           !d.rope_interleave, name, d.rope_interleave ? "interleaved pairs" : "the two halves (not interleaved)");
    // Indexer variants newer than transformers 5.24's classes (pooled keys, no-RoPE MLA, linear
    // attention layers): refused rather than run as something else.
    for (const char* k : {"index_kpool", "index_kpool_compress", "index_kpool_always_select_tail", "mla_use_nope",
                          "linear_attn_config"})
      if (r.has(k) && r.j[k] != false && r.j[k] != 0)
        fail("{}: field '{}' ({}) asks for an attention variant {} does not have in transformers 5.24; fp4lm does "
             "not run it",
             r.path, k, r.j[k].dump(), name);
    d.shared = indexer_types(r, c.num_layers);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    deepseek_v3_arch().plan_layer(c, i, out);
    if (c.dsa.shares(i)) return;
    const std::string p = fmt::format("model.layers.{}.self_attn.indexer", i);
    const DsaConfig& d = c.dsa;
    out.push_back(plan_linear(p + ".wq_b", i, {p + ".wq_b"}, {d.index_n_heads * d.index_head_dim}, c.mla.q_lora_rank));
    out.push_back(plan_linear(p + ".wk", i, {p + ".wk"}, {d.index_head_dim}, c.hidden_size));
    out.push_back(plan_linear(p + ".weights_proj", i, {p + ".weights_proj"}, {d.index_n_heads}, c.hidden_size));
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    std::vector<LayerParam> out = deepseek_v3_arch().layer_params(c, i);
    if (c.dsa.shares(i)) return out;
    const std::string p = fmt::format("model.layers.{}.self_attn.indexer.k_norm.", i);
    out.push_back({p + "weight", {c.dsa.index_head_dim}});
    out.push_back({p + "bias", {c.dsa.index_head_dim}});
    return out;
  }
  // DeepSeek-V3's layer; its LatentAttention builds the indexer from c.dsa.
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    return deepseek_v3_arch().make_layer(b, i);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return deepseek_v3_arch().make_ffn(l, i);
  }
  // kv_b_proj, as DeepSeek-V3's. The indexer's Linears are quantized as any other: ModelOpt
  // 0.47's quantizer config has no rule for them.
  std::vector<std::string> default_exclusions(const ModelConfig& c) const override {
    return deepseek_v3_arch().default_exclusions(c);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    deepseek_v3_arch().synthetic_config(o, c);
    c["index_topk"] = 4;
    c["index_n_heads"] = 2;
    c["index_head_dim"] = o.head_dim;
  }

 protected:
  virtual int64_t default_index_heads() const { return 64; }
  virtual bool interleaved_indexer_rope() const { return false; }
  // transformers' DeepseekV32 runs its indexer in every layer and does not read indexer_types.
  virtual std::vector<bool> indexer_types(const ConfigReader& r, int64_t layers) const {
    for (const char* k : {"indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"})
      if (r.has(k))
        fail("{}: field '{}' is GLM-5's (GlmMoeDsaForCausalLM); DeepseekV32ForCausalLM runs the indexer in every layer",
             r.path, k);
    return std::vector<bool>(static_cast<size_t>(layers), false);
  }
};

class GlmMoeDsa final : public DeepseekV32 {
 public:
  std::string_view hf_name() const override { return "GlmMoeDsaForCausalLM"; }
  // GlmMoeDsaConfig's defaults where DeepseekV3Config's differ.
  void fill_config_defaults(nlohmann::json& j) const override {
    for (auto [k, v] : {std::pair{"n_group", 1}, {"topk_group", 1}})
      if (!j.contains(k) || j[k].is_null()) j[k] = v;
    if (!j.contains("rms_norm_eps") || j["rms_norm_eps"].is_null()) j["rms_norm_eps"] = 1e-5;
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    DeepseekV32::synthetic_config(o, c);
    c["indexer_types"] = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) c["indexer_types"].push_back(i % 2 == 0 ? "full" : "shared");
  }

 protected:
  int64_t default_index_heads() const override { return 32; }
  bool interleaved_indexer_rope() const override { return true; }
  std::vector<bool> indexer_types(const ConfigReader& r, int64_t layers) const override {
    return glm_indexer_types(r, layers);
  }
};

}  // namespace

const ArchDef& deepseek_v32_arch() {
  static const DeepseekV32 d;
  return d;
}

const ArchDef& glm_moe_dsa_arch() {
  static const GlmMoeDsa d;
  return d;
}

}  // namespace fp4lm::model
