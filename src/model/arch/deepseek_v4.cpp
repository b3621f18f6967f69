// DeepseekV4ForCausalLM (deepseek-ai/DeepSeek-V4-Flash / -Pro, NVIDIA's NVFP4 release), as
// transformers 5.24's models/deepseek_v4 computes it.
//
// Residual: hc_mult (4) parallel streams per token ("manifold-constrained hyper-connections",
// mHC): the embedding is copied into every stream; each sub-layer (attention, then MoE) has its
// own HyperConnection (hc_{attn,ffn}_{fn,base,scale}): from the flattened streams
// u = x_flat / rms(x_flat) (unweighted, rms_norm_eps), mixes = u · fnᵀ ((2 + n)·n values) split
// into pre [n], post [n], comb [n, n]: pre = sigmoid(pre·scale0 + base) + hc_eps,
// post = 2·sigmoid(post·scale1 + base), comb = softmax_rows(comb·scale2 + base) + hc_eps, then
// Sinkhorn: columns normalized once, then hc_sinkhorn_iters - 1 rounds of rows then columns
// (each divided by its sum + hc_eps). The sub-layer reads collapsed = Σ_j pre_j·stream_j
// (then its RMSNorm: attn_norm / ffn_norm) and the streams become
// stream_k ← post_k·out + Σ_j comb[j, k]·stream_j. After the last layer hc_head_{fn,base,scale}
// collapses them (pre only: sigmoid(mix·scale + base) + hc_eps) before the final norm and head.
// Norm weights and all mHC parameters are float32 in the checkpoint.
//
// Attention (every layer; `attn.`): q = wq_b(q_norm(wq_a(x))) [heads, head_dim 512], each head
// RMS-normalized without a weight; one shared K=V head kv = norm(wkv(x)) [head_dim]; partial RoPE
// on the *trailing* qk_rope_head_dim (64) dims, interleaved pairs (2i, 2i+1); softmax scale
// head_dim^-0.5 with a learned per-head sink logit (attn_sink, in the denominator as gpt-oss);
// the output's rope dims rotated back by the query's angle (K=V carried rope into the values);
// grouped output: the heads split into o_groups, each group's heads·head_dim/o_groups values
// projected by its own o_lora_rank rows of wo_a ([o_groups·o_lora_rank, heads·head_dim/o_groups]),
// then wo_b to hidden. Every layer sees the last sliding_window (128) positions (its own
// included). layer_types (or the legacy compress_ratios 0 / 4 / 128) add compressed history:
//  - sliding_attention: nothing more; RoPE "main" (rope_theta, no scaling).
//  - heavily_compressed_attention (HCA, rate m' = 128): `attn.compressor`: per complete window
//    of m' positions one entry Σ softmax_over_window(wgate(x) + ape)·wkv(x) (per dim, float32
//    softmax), RMS-normed (compressor.norm), RoPE'd at position w·m'; query t sees entries
//    w < (t + 1) / m' — all of them (no selection).
//  - compressed_sparse_attention (CSA, rate m = 4): wkv / wgate / ape are 2·head_dim wide: Ca
//    (first half) and Cb (second half); entry w pools window w-1's Ca and window w's Cb
//    (2m slots, softmax per dim; window 0 has only Cb). A lightning indexer
//    (`attn.indexer.`: its own compressor of the same form at index_head_dim, wq_b on the query
//    latent q_norm(wq_a(x)), weights_proj on x) scores entry w for query t as
//    Σ_h weights_h·n_h^-0.5 · relu(q_h·k_w)·index_head_dim^-0.5 and keeps the index_topk best
//    of the causal ones (w < (t + 1) / m); the attention sees those.
//  CSA / HCA layers (queries, window keys, compressed entries, indexer q/k) use RoPE "compress":
//  compress_rope_theta with the rope_scaling YaRN (attention_factor forced to 1).
// MoE (`ffn.`): sqrtsoftplus scores = sqrt(softplus(gate(x))), float32; the first
// num_hash_layers (mlp_layer_types "hash_moe") pick experts by ffn.gate.tid2eid[token]
// ([vocab, top_k]), the others top-k of scores + gate.bias (e_score_correction_bias); weights =
// the chosen scores / their sum · routed_scaling_factor. Experts and the shared expert
// (w1 gate, w3 up, w2 down): silu(min(gate, swiglu_limit)) · clamp(up, ±swiglu_limit).
//
// Names: DeepSeek's native ones, as the published checkpoints (or transformers' save_pretrained mix) (embed.weight, layers.N.attn_norm,
// layers.N.attn.{wq_a,q_norm,wq_b,wkv,norm,wo_a,wo_b,attn_sink}, layers.N.attn.compressor.
// {wkv,wgate,ape,norm}, layers.N.attn.indexer.{wq_b,weights_proj,compressor.*},
// layers.N.ffn.{gate.weight,gate.bias,gate.tid2eid,experts.E.w{1,2,3},shared_experts.w{1,2,3}},
// layers.N.hc_{attn,ffn}_{fn,base,scale}, norm.weight, hc_head_{fn,base,scale}, head.weight;
// mtp.* skipped). NVIDIA's release: quantization_config quant_method "fp8" (DeepSeek's
// 128×128 block FP8 for the attention / shared Linears) with the routed experts NVFP4 by a
// manifest; the compressors' and indexer's kv/gate/weights_proj stay bf16.
// Config keys: transformers' (layer_types, mlp_layer_types, compress_rates, rope_parameters
// {main, compress}) or DeepSeek's legacy ones it folds in (compress_ratios, compress_rate_csa /
// _hca, num_hash_layers, qk_rope_head_dim, rope_scaling).
//
// Every mechanism above, exact; the attention's state is bounded as the design allows: the
// window's ring, each compressor's unfinished rows, the compressed entries and indexer keys
// (model/layers/compressed_attention.h).
// Refused by name: scoring_func other than sqrtsoftplus, n_shared_experts other than 1,
// num_key_value_heads other than 1, attention_bias / mlp_bias, a non-silu hidden_act, RoPE types
// other than default / yarn, a quantized or FP8 KV cache.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/layers/activation.h"
#include "model/arch/arch.h"
#include "model/layers/compressed_attention.h"
#include "model/layers/hyper_connection.h"
#include "model/layers/linear.h"
#include "model/load/model_loader.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

namespace {

using Attn = DeepseekV4Config::Attn;

std::string layer_prefix(int64_t i) { return fmt::format("model.layers.{}", i); }

// A RoPE parameter object ({rope_type default | yarn, ...}) as transformers reads it.
RopeScaling read_rope(const nlohmann::json& o, const std::string& path, const char* where, double* theta,
                      bool force_unit_attention) {
  if (!o.is_object()) fail("{}: field '{}' must be an object", path, where);
  const ConfigReader r{o, path};
  if (theta && r.has("rope_theta")) *theta = r.get<double>("rope_theta");
  const std::string type = o.value("rope_type", o.value("type", std::string("default")));
  RopeScaling s;
  if (type == "default") return s;
  if (type != "yarn")
    fail("{}: {}: rope_type '{}' is not supported for DeepSeek-V4 (supported: default, yarn)", path, where, type);
  s.type = "yarn";
  s.factor = r.req<double>("factor");
  s.original_max_position_embeddings = r.req<int64_t>("original_max_position_embeddings");
  s.beta_fast = r.opt<double>("beta_fast", 32.0);
  s.beta_slow = r.opt<double>("beta_slow", 1.0);
  s.mscale = r.opt<double>("mscale", 0.0);
  s.mscale_all_dim = r.opt<double>("mscale_all_dim", 0.0);
  s.truncate = r.opt<bool>("truncate", true);
  // V4 does not scale cos / sin by YaRN's mscale: transformers forces attention_factor 1.
  s.attention_factor = force_unit_attention ? 1.0 : r.opt<double>("attention_factor", 1.0);
  return s;
}

// sqrt(softplus(v)) in float32 (torch's softplus: v itself above 20).
float sqrt_softplus(float v) { return std::sqrt(v > 20.0f ? v : std::log1p(std::exp(v))); }

// The MoE block `ffn.`: hash or top-k routing, clamped SwiGLU experts, one shared expert.
class V4Moe {
 public:
  V4Moe(ModelLoader& l, int64_t i) {
    const ModelConfig& c = l.config();
    const DeepseekV4Config& v = c.deepseek_v4;
    const std::string p = layer_prefix(i) + ".ffn";
    hidden_ = c.hidden_size;
    experts_n_ = c.moe.num_experts;
    top_k_ = c.moe.top_k;
    inter_ = c.moe.moe_intermediate_size;
    limit_ = static_cast<float>(v.swiglu_limit);
    scaling_ = static_cast<float>(v.routed_scaling_factor);
    act_ = l.dtype();
    // The router in float32 from its weight: a Linear would take gate.bias (the selection bias,
    // DeepSeek's name for e_score_correction_bias) for its own bias. Routers stay unquantized.
    gate_ = l.tensor_f32(p + ".gate.weight", {experts_n_, hidden_});
    experts_ = l.load_moe(p + ".experts");
    shared_gate_up_ = l.load_linear(p + ".shared_experts.gate_up_proj");
    shared_down_ = l.load_linear(p + ".shared_experts.w2");
    if (v.hash_moe[static_cast<size_t>(i)]) {
      const std::string name = p + ".gate.tid2eid";
      const TensorView& t = l.checkpoint().get(name);
      l.checkpoint().mark_used(name);
      if (t.shape != Shape{c.vocab_size, top_k_} || (t.dtype != DType::I64 && t.dtype != DType::I32))
        fail("{}: tensor '{}' must be int64 or int32 [{}, {}] (vocab_size, num_experts_per_tok)", l.checkpoint().dir(),
             name, c.vocab_size, top_k_);
      tid2eid_.resize(static_cast<size_t>(t.numel()));
      for (size_t k = 0; k < tid2eid_.size(); ++k) {
        const int64_t e = t.dtype == DType::I64 ? t.as<int64_t>()[k] : t.as<int32_t>()[k];
        if (e < 0 || e >= experts_n_)
          fail("{}: tensor '{}' holds expert {} at {} (expected 0 .. {})", l.checkpoint().dir(), name, e, k,
               experts_n_ - 1);
        tid2eid_[k] = static_cast<int32_t>(e);
      }
    } else {
      bias_ = l.tensor_f32(p + ".gate.bias", {experts_n_});
    }
  }

  void forward(const float* x, const int32_t* tokens, int64_t m, float* y) const {
    std::vector<float> logits(static_cast<size_t>(m * experts_n_)), weights(static_cast<size_t>(m * top_k_));
    std::vector<int32_t> ids(weights.size());
    for (int64_t t = 0; t < m; ++t)
      for (int64_t e = 0; e < experts_n_; ++e) {
        double acc = 0;
        for (int64_t k = 0; k < hidden_; ++k)
          acc += static_cast<double>(gate_[static_cast<size_t>(e * hidden_ + k)]) * x[t * hidden_ + k];
        logits[static_cast<size_t>(t * experts_n_ + e)] = static_cast<float>(acc);
      }
    std::vector<float> score(static_cast<size_t>(experts_n_));
    std::vector<int32_t> order(static_cast<size_t>(experts_n_));
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t e = 0; e < experts_n_; ++e) score[static_cast<size_t>(e)] = sqrt_softplus(logits[static_cast<size_t>(t * experts_n_ + e)]);
      int32_t* id = ids.data() + t * top_k_;
      if (!tid2eid_.empty()) {
        std::copy_n(tid2eid_.data() + static_cast<int64_t>(tokens[t]) * top_k_, top_k_, id);
      } else {
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + top_k_, order.end(), [&](int32_t a, int32_t b) {
          const float sa = score[static_cast<size_t>(a)] + bias_[static_cast<size_t>(a)];
          const float sb = score[static_cast<size_t>(b)] + bias_[static_cast<size_t>(b)];
          return sa > sb || (sa == sb && a < b);
        });
        std::copy_n(order.data(), top_k_, id);
      }
      float sum = 0;
      for (int64_t k = 0; k < top_k_; ++k) sum += score[static_cast<size_t>(id[k])];
      for (int64_t k = 0; k < top_k_; ++k)
        weights[static_cast<size_t>(t * top_k_ + k)] = score[static_cast<size_t>(id[k])] / (sum + 1e-20f) * scaling_;
    }
    experts_->forward(x, m, ids.data(), weights.data(), top_k_, y);
    // The shared expert, same clamped SwiGLU, added unscaled.
    std::vector<float> gu(static_cast<size_t>(m * 2 * inter_)), a(static_cast<size_t>(m * inter_)),
        sh(static_cast<size_t>(m * hidden_));
    shared_gate_up_->forward(x, m, gu.data());
    for (int64_t t = 0; t < m; ++t)
      for (int64_t k = 0; k < inter_; ++k) {
        const float g = std::min(gu[static_cast<size_t>(t * 2 * inter_ + k)], limit_);
        const float u = std::clamp(gu[static_cast<size_t>(t * 2 * inter_ + inter_ + k)], -limit_, limit_);
        a[static_cast<size_t>(t * inter_ + k)] = g / (1.0f + std::exp(-g)) * u;
      }
    round_to_dtype(a.data(), a.size(), act_);
    shared_down_->forward(a.data(), m, sh.data());
    for (size_t k = 0; k < sh.size(); ++k) y[k] += sh[k];
    round_to_dtype(y, sh.size(), act_);
  }

  size_t weight_bytes() const {
    return gate_.size() * sizeof(float) + experts_->weight_bytes() + shared_gate_up_->weight_bytes() +
           shared_down_->weight_bytes();
  }
  // The float32 router, selection bias and hash table (outside the loader's kernels).
  size_t own_param_bytes() const {
    return (gate_.size() + bias_.size()) * sizeof(float) + tid2eid_.size() * sizeof(int32_t);
  }

 private:
  int64_t hidden_, experts_n_, top_k_, inter_;
  float limit_, scaling_;
  DType act_;
  std::vector<float> gate_;  // [experts, hidden]
  std::unique_ptr<Linear> shared_gate_up_, shared_down_;
  std::unique_ptr<FusedMoe> experts_;
  std::vector<float> bias_;
  std::vector<int32_t> tid2eid_;
};

// One decoder layer over the hc_mult residual streams (LayerStep::h is [m, hc_mult, hidden]).
class V4Layer final : public DecoderLayer {
 public:
  V4Layer(const LayerBuild& b, int64_t i) : attn_(b, i), moe_(b.loader, i) {
    ModelLoader& l = b.loader;
    const ModelConfig& c = l.config();
    const DeepseekV4Config& v = c.deepseek_v4;
    const std::string p = layer_prefix(i);
    n_ = v.hc_mult;
    hidden_ = c.hidden_size;
    attn_norm_ = RmsNorm(l.tensor_f32(p + ".attn_norm.weight", {hidden_}), c.rms_norm_eps, true);
    ffn_norm_ = RmsNorm(l.tensor_f32(p + ".ffn_norm.weight", {hidden_}), c.rms_norm_eps, true);
    hc_attn_ = HyperConnection(l, p + ".hc_attn", n_, hidden_, v.hc_sinkhorn_iters, v.hc_eps, c.rms_norm_eps);
    hc_ffn_ = HyperConnection(l, p + ".hc_ffn", n_, hidden_, v.hc_sinkhorn_iters, v.hc_eps, c.rms_norm_eps);
  }

  void forward(const LayerStep& s) const override {
    const int64_t m = s.m;
    std::vector<float> col(static_cast<size_t>(m * hidden_)), post(static_cast<size_t>(m * n_)),
        comb(static_cast<size_t>(m * n_ * n_));
    hc_attn_.weigh(s.h, m, col.data(), post.data(), comb.data(), s.act);
    attn_norm_.forward(col.data(), m, s.x, s.act);
    attn_.forward(s.x, s.spans, s.y);
    hc_attn_.mix(s.h, m, s.y, post.data(), comb.data(), s.act);
    hc_ffn_.weigh(s.h, m, col.data(), post.data(), comb.data(), s.act);
    ffn_norm_.forward(col.data(), m, s.x, s.act);
    moe_.forward(s.x, s.tokens, m, s.y);
    hc_ffn_.mix(s.h, m, s.y, post.data(), comb.data(), s.act);
  }

  size_t own_param_bytes() const override {
    return attn_.own_param_bytes() + moe_.own_param_bytes() + hc_attn_.param_bytes() + hc_ffn_.param_bytes() +
           2 * static_cast<size_t>(hidden_) * sizeof(float);
  }

 private:
  int64_t n_ = 4, hidden_ = 0;
  CompressedAttention attn_;
  V4Moe moe_;
  RmsNorm attn_norm_, ffn_norm_;
  HyperConnection hc_attn_, hc_ffn_;
};

class DeepseekV4 final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "DeepseekV4ForCausalLM"; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    DeepseekV4Config& v = c.deepseek_v4;
    const int64_t n = c.num_layers;
    if (c.num_kv_heads != 1)
      fail("{}: DeepSeek-V4 has one shared K=V head; num_key_value_heads must be 1, found {}", r.path, c.num_kv_heads);
    if (c.attention_bias || r.opt<bool>("mlp_bias", false))
      fail("{}: DeepSeek-V4 with attention_bias / mlp_bias true is not supported", r.path);
    if (c.hidden_act != "silu") fail("{}: DeepSeek-V4's hidden_act must be 'silu', found '{}'", r.path, c.hidden_act);
    // Attention kinds: layer_types, else the legacy per-layer compress_ratios (0 / 4 / 128).
    v.csa_rate = 4;
    v.hca_rate = 128;
    if (r.has("compress_rates")) {
      const nlohmann::json& cr = r.j["compress_rates"];
      if (!cr.is_object()) fail("{}: field 'compress_rates' must be an object", r.path);
      const ConfigReader rr{cr, r.path};
      v.csa_rate = rr.opt<int64_t>("compressed_sparse_attention", 4);
      v.hca_rate = rr.opt<int64_t>("heavily_compressed_attention", 128);
    }
    v.csa_rate = r.opt<int64_t>("compress_rate_csa", v.csa_rate);
    v.hca_rate = r.opt<int64_t>("compress_rate_hca", v.hca_rate);
    r.positive("compress_rates.compressed_sparse_attention", v.csa_rate);
    r.positive("compress_rates.heavily_compressed_attention", v.hca_rate);
    v.attn.clear();
    if (r.has("layer_types")) {
      const nlohmann::json& lt = r.j["layer_types"];
      if (!lt.is_array() || static_cast<int64_t>(lt.size()) < n)
        fail("{}: field 'layer_types' must list {} entries, found {}", r.path, n, lt.dump());
      for (int64_t i = 0; i < n; ++i) {
        const std::string t = lt[static_cast<size_t>(i)].is_string() ? lt[static_cast<size_t>(i)].get<std::string>() : "";
        if (t == "sliding_attention") v.attn.push_back(Attn::sliding);
        else if (t == "compressed_sparse_attention") v.attn.push_back(Attn::csa);
        else if (t == "heavily_compressed_attention") v.attn.push_back(Attn::hca);
        else
          fail("{}: layer_types[{}] is {} (expected sliding_attention, compressed_sparse_attention or "
               "heavily_compressed_attention)", r.path, i, lt[static_cast<size_t>(i)].dump());
      }
    } else if (r.has("compress_ratios")) {
      const std::vector<int64_t> cr = r.int_list("compress_ratios");
      if (static_cast<int64_t>(cr.size()) < n)
        fail("{}: field 'compress_ratios' must list {} entries, found {}", r.path, n, cr.size());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t x = cr[static_cast<size_t>(i)];
        if (x == 0) v.attn.push_back(Attn::sliding);
        else if (x == 4) v.attn.push_back(Attn::csa);
        else if (x == 128) v.attn.push_back(Attn::hca);
        else fail("{}: compress_ratios[{}] is {} (expected 0, 4 or 128)", r.path, i, x);
      }
    } else {  // transformers' default: two HCA layers, then CSA / HCA alternating
      for (int64_t i = 0; i < n; ++i) v.attn.push_back(i < 2 || (i - 2) % 2 == 0 ? Attn::hca : Attn::csa);
    }
    // MoE kinds: mlp_layer_types, else the first num_hash_layers (default 3) hash-routed.
    v.hash_moe.assign(static_cast<size_t>(n), false);
    if (r.has("mlp_layer_types")) {
      const nlohmann::json& mt = r.j["mlp_layer_types"];
      if (!mt.is_array() || static_cast<int64_t>(mt.size()) < n)
        fail("{}: field 'mlp_layer_types' must list {} entries, found {}", r.path, n, mt.dump());
      for (int64_t i = 0; i < n; ++i) {
        const nlohmann::json& t = mt[static_cast<size_t>(i)];
        if (t == "hash_moe") v.hash_moe[static_cast<size_t>(i)] = true;
        else if (t != "moe") fail("{}: mlp_layer_types[{}] is {} (expected hash_moe or moe)", r.path, i, t.dump());
      }
    } else {
      const int64_t h = r.opt<int64_t>("num_hash_layers", 3);
      for (int64_t i = 0; i < std::min(h, n); ++i) v.hash_moe[static_cast<size_t>(i)] = true;
    }
    v.hc_mult = r.opt<int64_t>("hc_mult", 4);
    v.hc_sinkhorn_iters = r.opt<int64_t>("hc_sinkhorn_iters", 20);
    v.hc_eps = r.opt<double>("hc_eps", 1e-6);
    v.sliding_window = r.opt<int64_t>("sliding_window", 128);
    v.q_lora_rank = r.opt<int64_t>("q_lora_rank", 1024);
    v.o_groups = r.opt<int64_t>("o_groups", 8);
    v.o_lora_rank = r.opt<int64_t>("o_lora_rank", 1024);
    v.index_heads = r.opt<int64_t>("index_n_heads", 64);
    v.index_head_dim = r.opt<int64_t>("index_head_dim", 128);
    v.index_topk = r.opt<int64_t>("index_topk", 512);
    for (auto [k, x] : {std::pair{"hc_mult", v.hc_mult}, {"hc_sinkhorn_iters", v.hc_sinkhorn_iters},
                        {"sliding_window", v.sliding_window}, {"q_lora_rank", v.q_lora_rank}, {"o_groups", v.o_groups},
                        {"o_lora_rank", v.o_lora_rank}, {"index_n_heads", v.index_heads},
                        {"index_head_dim", v.index_head_dim}, {"index_topk", v.index_topk}})
      r.positive(k, x);
    if ((c.num_heads * c.head_dim) % v.o_groups != 0)
      fail("{}: o_groups ({}) must divide num_attention_heads × head_dim ({})", r.path, v.o_groups,
           c.num_heads * c.head_dim);
    // RoPE covers the trailing qk_rope_head_dim dims: partial_rotary_factor · head_dim.
    if (r.has("qk_rope_head_dim") && !r.has("partial_rotary_factor")) v.rope_dim = r.get<int64_t>("qk_rope_head_dim");
    else v.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * r.opt<double>("partial_rotary_factor", 0.125));
    if (v.rope_dim <= 0 || v.rope_dim % 2 != 0 || v.rope_dim > c.head_dim || v.rope_dim > v.index_head_dim)
      fail("{}: qk_rope_head_dim (partial_rotary_factor × head_dim) = {} must be even, positive and at most head_dim "
           "({}) and index_head_dim ({})", r.path, v.rope_dim, c.head_dim, v.index_head_dim);
    v.main_theta = r.opt<double>("rope_theta", 10000.0);
    v.compress_theta = r.opt<double>("compress_rope_theta", 160000.0);
    const nlohmann::json* rp = r.has("rope_parameters") ? &r.j["rope_parameters"] : nullptr;
    if (rp && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
      v.main_scaling = read_rope((*rp)["main"], r.path, "rope_parameters.main", &v.main_theta, false);
      if (!v.main_scaling.type.empty())
        fail("{}: rope_parameters.main must be rope_type 'default' (V4's sliding layers use plain RoPE)", r.path);
      v.compress_scaling = read_rope((*rp)["compress"], r.path, "rope_parameters.compress", &v.compress_theta, false);
    } else {
      // A flat rope_parameters / rope_scaling: its scaling applies to the compressed layers only.
      const nlohmann::json* flat = rp ? rp : r.has("rope_scaling") ? &r.j["rope_scaling"] : nullptr;
      if (flat) v.compress_scaling = read_rope(*flat, r.path, rp ? "rope_parameters" : "rope_scaling", nullptr, true);
    }
    // MoE.
    c.moe.num_experts = r.req<int64_t>(r.has("n_routed_experts") ? "n_routed_experts" : "num_local_experts");
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    c.moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
    c.moe.norm_topk_prob = r.opt<bool>("norm_topk_prob", true);
    if (!c.moe.norm_topk_prob)
      fail("{}: DeepSeek-V4 with norm_topk_prob false is not supported (transformers always renormalizes)", r.path);
    if (const int64_t shared = r.opt<int64_t>("n_shared_experts", 1); shared != 1)
      fail("{}: DeepSeek-V4 has one shared expert of moe_intermediate_size; n_shared_experts {} is not supported",
           r.path, shared);
    if (const std::string f = r.opt<std::string>("scoring_func", "sqrtsoftplus"); f != "sqrtsoftplus")
      fail("{}: DeepSeek-V4 scoring_func '{}' is not supported (supported: sqrtsoftplus)", r.path, f);
    v.routed_scaling_factor = r.opt<double>("routed_scaling_factor", 1.5);
    v.swiglu_limit = r.opt<double>("swiglu_limit", 10.0);
    if (!(v.swiglu_limit > 0)) fail("{}: swiglu_limit must be positive, found {}", r.path, v.swiglu_limit);
    c.num_nextn_predict_layers = r.opt<int64_t>("num_nextn_predict_layers", 0);
    // DeepSeek's native names: no model. prefix, embed / head / norm at the top level. transformers'
    // save_pretrained writes a mix (model.layers.N.attn.wq_a, model.embed_tokens, model.hc_head.hc_fn,
    // head.weight), which the engine names reach directly or through the hc_head renames.
    c.tensor_prefix = "";
    c.tensor_renames = {{"model.embed_tokens.weight", "embed.weight"},
                        {"lm_head.weight", "head.weight"},
                        {"model.hc_head_fn", "model.hc_head.hc_fn"},
                        {"model.hc_head_base", "model.hc_head.hc_base"},
                        {"model.hc_head_scale", "model.hc_head.hc_scale"}};
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const DeepseekV4Config& v = c.deepseek_v4;
    const std::string p = layer_prefix(i) + ".attn";
    const int64_t hid = c.hidden_size, qd = c.num_heads * c.head_dim, d = c.head_dim;
    auto lin = [&](const std::string& name, int64_t rows, int64_t in) {
      out.push_back(plan_linear(name, i, {name}, {rows}, in));
    };
    lin(p + ".wq_a", v.q_lora_rank, hid);
    lin(p + ".wq_b", qd, v.q_lora_rank);
    lin(p + ".wkv", d, hid);
    lin(p + ".wo_a", v.o_groups * v.o_lora_rank, qd / v.o_groups);
    lin(p + ".wo_b", hid, v.o_groups * v.o_lora_rank);
    const Attn a = v.attn[static_cast<size_t>(i)];
    if (a != Attn::sliding) {
      const int64_t w = (a == Attn::csa ? 2 : 1) * d;
      lin(p + ".compressor.wkv", w, hid);
      lin(p + ".compressor.wgate", w, hid);
    }
    if (a == Attn::csa) {
      lin(p + ".indexer.wq_b", v.index_heads * v.index_head_dim, v.q_lora_rank);
      lin(p + ".indexer.weights_proj", v.index_heads, hid);
      lin(p + ".indexer.compressor.wkv", 2 * v.index_head_dim, hid);
      lin(p + ".indexer.compressor.wgate", 2 * v.index_head_dim, hid);
    }
    const std::string f = layer_prefix(i) + ".ffn";
    plan_sparse_moe(c, i, f, {"w1", "w3", "w2"}, out);
    out.end()[-2].f32_act = true;  // the router: float32 logits
    out.back().expert_activation = {kernels::ExpertActivation::Gate::clamped_silu, /*interleaved=*/false, 1.702f,
                                    static_cast<float>(v.swiglu_limit)};
    const int64_t inter = c.moe.moe_intermediate_size;
    out.push_back(plan_linear(f + ".shared_experts.gate_up_proj", i, {f + ".shared_experts.w1", f + ".shared_experts.w3"},
                              {inter, inter}, hid));
    out.push_back(plan_linear(f + ".shared_experts.w2", i, {f + ".shared_experts.w2"}, {hid}, inter));
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const DeepseekV4Config& v = c.deepseek_v4;
    const std::string p = layer_prefix(i);
    const int64_t hid = c.hidden_size, n = v.hc_mult, d = c.head_dim, rows = (2 + n) * n;
    std::vector<LayerParam> out = {{p + ".attn_norm.weight", {hid}},
                                   {p + ".ffn_norm.weight", {hid}},
                                   {p + ".attn.q_norm.weight", {v.q_lora_rank}},
                                   {p + ".attn.norm.weight", {d}},
                                   {p + ".attn.attn_sink", {c.num_heads}}};
    for (const char* hc : {".hc_attn", ".hc_ffn"}) {
      out.push_back({p + hc + "_fn", {rows, n * hid}});
      out.push_back({p + hc + "_base", {rows}});
      out.push_back({p + hc + "_scale", {3}});
    }
    const Attn a = v.attn[static_cast<size_t>(i)];
    if (a != Attn::sliding) {
      const int64_t rate = a == Attn::csa ? v.csa_rate : v.hca_rate;
      out.push_back({p + ".attn.compressor.ape", {rate, (a == Attn::csa ? 2 : 1) * d}});
      out.push_back({p + ".attn.compressor.norm.weight", {d}});
    }
    if (a == Attn::csa) {
      out.push_back({p + ".attn.indexer.compressor.ape", {v.csa_rate, 2 * v.index_head_dim}});
      out.push_back({p + ".attn.indexer.compressor.norm.weight", {v.index_head_dim}});
    }
    if (v.hash_moe[static_cast<size_t>(i)]) out.push_back({p + ".ffn.gate.tid2eid", {c.vocab_size, c.moe.top_k}});
    else out.push_back({p + ".ffn.gate.bias", {c.moe.num_experts}});
    return out;
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    if (i == 0 && b.loader.config().num_nextn_predict_layers > 0)
      b.loader.log_once(fmt::format("DeepSeek-V4: the {} multi-token-prediction layer(s) (mtp.*) are skipped",
                                    b.loader.config().num_nextn_predict_layers));
    return std::make_unique<V4Layer>(b, i);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader&, int64_t) const override {
    fail("DeepSeek-V4's feed-forward is built with its layer (make_layer)");
  }
  std::unique_ptr<HyperHead> load_hyper_head(ModelLoader& l) const override {
    const ModelConfig& c = l.config();
    return std::make_unique<HyperHead>(l, c.deepseek_v4.hc_mult, c.hidden_size, c.deepseek_v4.hc_eps, c.rms_norm_eps);
  }
  void synthetic_config(const SampleShape&, nlohmann::json&) const override {
    fail("fp4lm synth: DeepseekV4ForCausalLM is not supported yet (use scripts/make_deepseek_v4_goldens.py's "
         "checkpoint)");
  }
};

}  // namespace

const ArchDef& deepseek_v4_arch() {
  static const DeepseekV4 d;
  return d;
}

}  // namespace fp4lm::model
