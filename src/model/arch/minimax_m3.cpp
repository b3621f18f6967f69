// MiniMax-M3's text model, as transformers 5.24's models/minimax_m3_vl computes it: the class
// MiniMaxM3VLForCausalLM (its own tensor names: self_attn.indexer.*, mlp.gate, fused
// mlp.experts.gate_up_proj [E, 2I, D] / down_proj [E, D, I], mlp[.shared_experts].gate_up_proj)
// and the wrapper MiniMaxM3SparseForConditionalGeneration (keys under text_config, the published
// layout transformers also saves: language_model.model.layers.N.{self_attn.index_{q,k}_{proj,norm},
// block_sparse_moe.{gate,e_score_correction_bias,experts.E.{w1,w3,w2},shared_experts.{gate,up,down}_proj},
// mlp.{gate,up,down}_proj}, language_model.lm_head). The pre-norm block with Gemma-style RMSNorms
// (x/rms · (1 + w), rounded once) everywhere, q_norm / k_norm per head; RoPE over the first
// head_dim × partial_rotary_factor dims (rope_parameters; `rotary_dim` is not read by transformers
// either); layer_types "minimax_m3_sparse" layers select key blocks with the lightning indexer
// (model/layers/block_sparse_attention.h); every MLP (dense layers per mlp_layer_types, the shared
// expert, the routed experts) the clamped SwiGLU (clamp(up, ±limit) + 1) · g · sigmoid(alpha · g),
// g = min(gate, limit), gate and up halves (not interleaved); MoE layers routed by sigmoid scores
// chosen with e_score_correction_bias, renormalized, × routed_scaling_factor, plus the shared expert.
// The wrapper's vision tower and projectors are not run (text input only, said once at load).
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/expert_activation.h"
#include "model/layers/activation.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/block_sparse_attention.h"
#include "model/layers/sigmoid_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

kernels::ExpertActivation clamped(const ModelConfig& c) {
  return {kernels::ExpertActivation::Gate::clamped_swiglu, /*interleaved=*/false,
          static_cast<float>(c.minimax_m3.swiglu_alpha), static_cast<float>(c.minimax_m3.swiglu_limit)};
}

// Per-layer names in either layout.
struct Names {
  std::string attn, indexer_q, indexer_k, indexer_q_norm, indexer_k_norm;
  std::string mlp;                // the dense MLP / the MoE block
  std::string shared, router, bias, experts;
};

Names names_of(const ModelConfig& c, int64_t i) {
  Names n;
  n.attn = fmt::format("model.layers.{}.self_attn", i);
  const bool orig = c.minimax_m3.original_names;
  const std::string ix = n.attn + (orig ? ".index_" : ".indexer.");
  n.indexer_q = ix + "q_proj";
  n.indexer_k = ix + "k_proj";
  n.indexer_q_norm = ix + "q_norm.weight";
  n.indexer_k_norm = ix + "k_norm.weight";
  const bool moe = c.layer_is_moe(i);
  n.mlp = fmt::format("model.layers.{}.{}", i, moe && orig ? "block_sparse_moe" : "mlp");
  n.shared = n.mlp + ".shared_experts";
  n.router = n.mlp + ".gate";
  n.bias = orig ? n.mlp + ".e_score_correction_bias" : n.router + ".e_score_correction_bias";
  n.experts = n.mlp + ".experts";
  return n;
}

// A dense MLP of the clamped SwiGLU: gate_up_proj (gate rows, then up) fused as the plan says.
void plan_mlp(const ModelConfig& c, int64_t i, const std::string& prefix, int64_t inter, std::vector<LayerSpec>& out) {
  if (c.minimax_m3.original_names) return plan_dense_mlp(c, i, prefix, inter, out);
  out.push_back(plan_linear(prefix + ".gate_up_proj", i, {prefix + ".gate_up_proj"}, {2 * inter}, c.hidden_size));
  out.push_back(plan_linear(prefix + ".down_proj", i, {prefix + ".down_proj"}, {c.hidden_size}, inter));
}

class ClampedSwigluMlp final : public FeedForward {
 public:
  ClampedSwigluMlp(ModelLoader& l, const std::string& prefix) : act_(l.dtype()), fn_(clamped(l.config())) {
    gate_up_ = l.load_linear(prefix + ".gate_up_proj");
    down_ = l.load_linear(prefix + ".down_proj");
    inter_ = down_->in_features();
  }
  void forward(const float* x, int64_t m, float* y) const override {
    std::vector<float> gu(static_cast<size_t>(m * 2 * inter_)), h(static_cast<size_t>(m * inter_));
    gate_up_->forward(x, m, gu.data());
    for (int64_t r = 0; r < m; ++r) kernels::apply_expert_activation(fn_, gu.data() + r * 2 * inter_, inter_, h.data() + r * inter_);
    round_to_dtype(h.data(), h.size(), act_);
    down_->forward(h.data(), m, y);
  }
  size_t weight_bytes() const override { return gate_up_->weight_bytes() + down_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> gate_up_, down_;
  int64_t inter_ = 0;
  DType act_;
  kernels::ExpertActivation fn_;
};

// Routed experts (weights renormalized × routed_scaling_factor) plus the shared expert.
class MiniMaxM3Moe final : public FeedForward {
 public:
  MiniMaxM3Moe(ModelLoader& l, const Names& n)
      : router_(l, n.router, n.bias, sigmoid_routing(l.config()), DType::F32),
        shared_(l, n.shared),
        hidden_(l.config().hidden_size),
        act_(l.dtype()) {
    experts_ = l.load_moe(n.experts);
  }
  void forward(const float* x, int64_t m, float* y) const override {
    const int64_t k = router_.top_k();
    std::vector<int32_t> ids(static_cast<size_t>(m * k));
    std::vector<float> w(ids.size()), s(static_cast<size_t>(m * hidden_));
    router_.route(x, m, ids.data(), w.data());
    experts_->forward(x, m, ids.data(), w.data(), k, y);
    shared_.forward(x, m, s.data());
    for (size_t i = 0; i < s.size(); ++i) y[i] += s[i];
    round_to_dtype(y, s.size(), act_);
  }
  size_t weight_bytes() const override {
    return router_.weight_bytes() + router_.own_param_bytes() + experts_->weight_bytes() + shared_.weight_bytes();
  }

 private:
  SigmoidRouter router_;
  std::unique_ptr<FusedMoe> experts_;
  ClampedSwigluMlp shared_;
  int64_t hidden_;
  DType act_;
};

// One entry per layer of a string list (`key`), each one of `a` / `b` (true for `a`).
std::vector<bool> read_kinds(const ConfigReader& r, const char* key, const nlohmann::json& t, int64_t layers,
                             const char* a, const char* b) {
  if (!t.is_array() || static_cast<int64_t>(t.size()) != layers)
    fail("{}: field '{}' must list {} entries ('{}' or '{}'), found {}", r.path, key, layers, a, b, t.dump());
  std::vector<bool> out;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string s = t[i].is_string() ? t[i].get<std::string>() : t[i].dump();
    if (s != a && s != b) fail("{}: {}[{}] is '{}' (expected '{}' or '{}')", r.path, key, i, s, a, b);
    out.push_back(s == a);
  }
  return out;
}

// 0/1 flags per layer (the published config's sparse_attention_freq / moe_layer_freq).
std::vector<bool> read_flags(const ConfigReader& r, const char* key, const nlohmann::json& t, int64_t layers) {
  if (!t.is_array() || static_cast<int64_t>(t.size()) != layers)
    fail("{}: field '{}' must list {} flags (0 or 1), found {}", r.path, key, layers, t.dump());
  std::vector<bool> out;
  for (const nlohmann::json& v : t) {
    if (!v.is_number_integer() && !v.is_boolean()) fail("{}: field '{}' holds {} (expected 0 or 1)", r.path, key, v.dump());
    out.push_back(v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0);
  }
  return out;
}

class MiniMaxM3 : public ArchDef {
 public:
  std::string_view hf_name() const override { return "MiniMaxM3VLForCausalLM"; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    MiniMaxM3Config& m = c.minimax_m3;
    m.original_names = wrapper().has_value();
    const char* experts = r.has("num_local_experts") || !r.has("num_experts") ? "num_local_experts" : "num_experts";
    c.moe.num_experts = r.opt<int64_t>(experts, 128);
    r.positive(experts, c.moe.num_experts);
    c.moe.top_k = r.opt<int64_t>("num_experts_per_tok", 4);
    c.moe.moe_intermediate_size = r.opt<int64_t>("intermediate_size", 3072);  // the routed experts'
    c.moe.norm_topk_prob = true;
    c.moe.sigmoid.enabled = true;
    c.moe.sigmoid.routed_scaling_factor = r.opt<double>("routed_scaling_factor", 2.0);
    m.dense_intermediate_size = r.opt<int64_t>("dense_intermediate_size", 12288);
    m.shared_intermediate_size = r.opt<int64_t>("shared_intermediate_size", 3072);
    r.positive("dense_intermediate_size", m.dense_intermediate_size);
    r.positive("shared_intermediate_size", m.shared_intermediate_size);
    c.intermediate_size = m.dense_intermediate_size;
    c.moe.shared_expert_intermediate_size = m.shared_intermediate_size;
    m.swiglu_alpha = r.opt<double>("swiglu_alpha", 1.702);
    m.swiglu_limit = r.opt<double>("swiglu_limit", 7.0);
    if (!(m.swiglu_limit > 0)) fail("{}: swiglu_limit must be positive, found {}", r.path, m.swiglu_limit);
    // The checkpoint says "swigluoai"; transformers computes the clamped gate from swiglu_alpha /
    // swiglu_limit whatever hidden_act says, so only these two spellings are accepted.
    const std::string act = r.opt<std::string>("hidden_act", "silu");
    if (act != "silu" && act != "swigluoai")
      fail("{}: unsupported hidden_act '{}' (supported: swigluoai, silu: both the clamped SwiGLU)", r.path, act);
    c.hidden_act = "silu";
    if (r.opt<double>("router_jitter_noise", 0.0) != 0.0)
      log().info("{}: router_jitter_noise applies in training only (not at inference)", r.path);
    // transformers' MiniMaxM3VLRMSNorm is always the Gemma form, whatever the checkpoint's flag says.
    if (!r.opt<bool>("use_gemma_norm", true))
      log().warn("{}: use_gemma_norm is false, but transformers' MiniMax-M3 always scales its RMSNorms by (1 + w); "
                 "so does fp4lm",
                 r.path);
    c.qk_norm = true;  // per head
    c.zero_centered_norm = true;
    c.norm_rounds_once = true;
    // RoPE dims: transformers reads partial_rotary_factor (rope_parameters, else the top level);
    // the checkpoint's rotary_dim is not read by it, so a disagreeing one is a warning.
    double factor = r.opt<double>("partial_rotary_factor", 1.0);
    if (r.has("rope_parameters") && r.j["rope_parameters"].is_object())
      factor = ConfigReader{r.j["rope_parameters"], r.path}.opt<double>("partial_rotary_factor", factor);
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
    if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
      fail("{}: partial_rotary_factor {} gives {} rotary dims of head_dim {} (must be even, in (0, head_dim])", r.path,
           factor, c.rotary_dim, c.head_dim);
    if (r.has("rotary_dim") && r.get<int64_t>("rotary_dim") != c.rotary_dim)
      log().warn("{}: rotary_dim is {} but partial_rotary_factor gives {} rotary dims; transformers rotates {}, and so "
                 "does fp4lm",
                 r.path, r.get<int64_t>("rotary_dim"), c.rotary_dim, c.rotary_dim);

    // The indexer: flat keys, or the published sparse_attention_config (whose keys win, as in
    // MiniMaxM3VLTextConfig.__post_init__).
    m.index_heads = r.opt<int64_t>("index_n_heads", 4);
    m.index_head_dim = r.opt<int64_t>("index_head_dim", 128);
    m.index_block_size = r.opt<int64_t>("index_block_size", 128);
    m.index_topk_blocks = r.opt<int64_t>("index_topk_blocks", 16);
    m.index_local_blocks = r.opt<int64_t>("index_local_blocks", 1);
    nlohmann::json sparse_cfg = nlohmann::json::object();
    if (r.has("sparse_attention_config")) {
      sparse_cfg = r.j["sparse_attention_config"];
      if (!sparse_cfg.is_object()) fail("{}: field 'sparse_attention_config' must be an object", r.path);
      const std::string where = r.path + " (sparse_attention_config)";
      const ConfigReader s{sparse_cfg, where};
      for (auto [legacy, field] : {std::pair{"sparse_num_index_heads", &m.index_heads}, {"sparse_index_dim", &m.index_head_dim},
                                   {"sparse_block_size", &m.index_block_size}, {"sparse_topk_blocks", &m.index_topk_blocks},
                                   {"sparse_local_block", &m.index_local_blocks}})
        if (s.has(legacy)) *field = s.get<int64_t>(legacy);
    }
    if (r.has("layer_types")) {
      m.sparse = read_kinds(r, "layer_types", r.j["layer_types"], c.num_layers, "minimax_m3_sparse", "full_attention");
    } else if (sparse_cfg.contains("sparse_attention_freq")) {
      m.sparse = read_flags(r, "sparse_attention_config.sparse_attention_freq", sparse_cfg["sparse_attention_freq"],
                            c.num_layers);
    } else {
      m.sparse.assign(static_cast<size_t>(c.num_layers), false);
    }
    bool any_sparse = false;
    for (bool s : m.sparse) any_sparse |= s;
    if (any_sparse) {
      for (auto [k, v] : {std::pair{"index_n_heads", m.index_heads}, {"index_head_dim", m.index_head_dim},
                          {"index_block_size", m.index_block_size}, {"index_topk_blocks", m.index_topk_blocks}})
        r.positive(k, v);
      // More forced blocks than kept ones would leave the choice among them to torch.topk's tie order.
      if (m.index_local_blocks < 0 || m.index_local_blocks > m.index_topk_blocks)
        fail("{}: index_local_blocks must be in [0, index_topk_blocks = {}], found {}", r.path, m.index_topk_blocks,
             m.index_local_blocks);
      if (m.index_head_dim % 2 != 0) fail("{}: index_head_dim must be even, found {}", r.path, m.index_head_dim);
      if (c.num_heads % m.index_heads != 0)
        fail("{}: num_attention_heads ({}) is not a multiple of index_n_heads ({})", r.path, c.num_heads, m.index_heads);
    }
    std::vector<bool> moe;
    if (r.has("mlp_layer_types"))
      moe = read_kinds(r, "mlp_layer_types", r.j["mlp_layer_types"], c.num_layers, "sparse", "dense");
    else if (r.has("moe_layer_freq"))
      moe = read_flags(r, "moe_layer_freq", r.j["moe_layer_freq"], c.num_layers);
    else
      moe.assign(static_cast<size_t>(c.num_layers), true);
    c.moe.mlp_only_layers.clear();
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (!moe[static_cast<size_t>(i)]) c.moe.mlp_only_layers.push_back(i);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const Names n = names_of(c, i);
    const MiniMaxM3Config& m = c.minimax_m3;
    plan_attention(c, i, out);
    if (m.sparse[static_cast<size_t>(i)]) {
      out.push_back(plan_linear(n.indexer_q, i, {n.indexer_q}, {m.index_heads * m.index_head_dim}, c.hidden_size));
      out.push_back(plan_linear(n.indexer_k, i, {n.indexer_k}, {m.index_head_dim}, c.hidden_size));
    }
    if (!c.layer_is_moe(i)) return plan_mlp(c, i, n.mlp, m.dense_intermediate_size, out);
    plan_sparse_moe(c, i, n.mlp,
                    m.original_names ? std::array<std::string, 3>{"w1", "w3", "w2"}
                                     : std::array<std::string, 3>{"gate_proj", "up_proj", "down_proj"},
                    out);
    out.back().expert_activation = clamped(c);
    plan_mlp(c, i, n.shared, m.shared_intermediate_size, out);
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const Names n = names_of(c, i);
    const PreNormNames pn = pre_norm_names(i);
    std::vector<LayerParam> out = {{pn.input, {c.hidden_size}},
                                   {pn.post, {c.hidden_size}},
                                   {n.attn + ".q_norm.weight", {c.head_dim}},
                                   {n.attn + ".k_norm.weight", {c.head_dim}}};
    if (c.minimax_m3.sparse[static_cast<size_t>(i)]) {
      out.push_back({n.indexer_q_norm, {c.minimax_m3.index_head_dim}});
      out.push_back({n.indexer_k_norm, {c.minimax_m3.index_head_dim}});
    }
    if (c.layer_is_moe(i)) out.push_back({n.bias, {c.moe.num_experts}});
    return out;
  }

  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    const ModelConfig& c = b.loader.config();
    const MiniMaxM3Config& m = c.minimax_m3;
    if (!m.sparse[static_cast<size_t>(i)]) return std::make_unique<Attention>(b, i);
    const Names n = names_of(c, i);
    return std::make_unique<BlockSparseAttention>(
        b, i, LightningIndexerNames{n.indexer_q, n.indexer_k, n.indexer_q_norm, n.indexer_k_norm},
        LightningIndexerConfig{m.index_heads, m.index_head_dim, m.index_block_size, m.index_topk_blocks,
                               m.index_local_blocks});
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const Names n = names_of(l.config(), i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<ClampedSwigluMlp>(l, n.mlp);
    return std::make_unique<MiniMaxM3Moe>(l, n);
  }

  // No default_exclusions: ModelOpt's MiniMax-M3 recipes (modelopt_recipes/huggingface/minimax_m3_vl/ptq)
  // quantize only the routed experts, but `fp4lm quantize` lists an architecture's default
  // exclusions without leaving those Linear layers unquantized (make_export_plan), which would write
  // an export that does not load; the recipe's form is `--exclude '*self_attn*' --exclude
  // '*shared_experts*'` plus the dense layers' `model.layers.<i>.mlp*` (docs/RUNTIME.md).

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_local_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["intermediate_size"] = o.moe_intermediate;
    c["dense_intermediate_size"] = o.intermediate;
    c["shared_intermediate_size"] = o.shared_expert_intermediate;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
    c["index_n_heads"] = o.kv_heads;
    c["index_head_dim"] = o.head_dim;
    c["index_block_size"] = 2;
    c["index_topk_blocks"] = 2;
    c["index_local_blocks"] = 1;
    nlohmann::json lt = nlohmann::json::array(), mt = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) {
      lt.push_back(i % 2 == 0 ? "minimax_m3_sparse" : "full_attention");
      mt.push_back(i == 0 ? "dense" : "sparse");
    }
    c["layer_types"] = lt;
    c["mlp_layer_types"] = mt;
  }
};

// The wrapper: the same text model under text_config, its tensors under language_model.
class MiniMaxM3Sparse final : public MiniMaxM3 {
 public:
  std::string_view hf_name() const override { return "MiniMaxM3SparseForConditionalGeneration"; }
  std::optional<Wrapper> wrapper() const override { return Wrapper{{"text_config"}, "language_model."}; }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    if (i == 0)
      b.loader.log_once(
          "MiniMaxM3SparseForConditionalGeneration: loading the language model only (language_model.*); the vision "
          "tower (vision_tower.*) and its projectors (multi_modal_projector.*, patch_merge_mlp.*) are skipped (text "
          "input only)");
    return MiniMaxM3::make_layer(b, i);
  }
};

}  // namespace

const ArchDef& minimax_m3_arch() {
  static const MiniMaxM3 d;
  return d;
}

const ArchDef& minimax_m3_sparse_arch() {
  static const MiniMaxM3Sparse d;
  return d;
}

}  // namespace fp4lm::model
