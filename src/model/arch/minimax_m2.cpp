// MiniMaxM2ForCausalLM (MiniMax-M2 / M2.1 / M2.5): GQA attention without biases whose q_norm /
// k_norm are RMSNorms over the whole q / k projection (all heads at once), RoPE over the first
// rotary_dim (or partial_rotary_factor) dims of each head; every layer a sparse MoE
// "block_sparse_moe" (router `gate`, experts `experts.E.{w1,w3,w2}`, Mixtral's names) routed by
// sigmoid scores chosen with `block_sparse_moe.e_score_correction_bias`, weights renormalized,
// no groups, no scaling, no shared expert.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/sigmoid_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

std::string block_of(int64_t i) { return fmt::format("model.layers.{}.block_sparse_moe", i); }

class MiniMaxM2 final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "MiniMaxM2ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    const char* experts = r.has("num_local_experts") || !r.has("num_experts") ? "num_local_experts" : "num_experts";
    c.moe.num_experts = r.req<int64_t>(experts);
    r.positive(experts, c.moe.num_experts);
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    c.moe.moe_intermediate_size = r.req<int64_t>("intermediate_size");  // the experts' (as Mixtral)
    c.moe.norm_topk_prob = true;
    c.moe.sigmoid.enabled = true;
    const std::string scoring = r.opt<std::string>("scoring_func", "sigmoid");
    if (scoring != "sigmoid") fail("{}: unsupported scoring_func '{}' (supported: sigmoid)", r.path, scoring);
    if (!r.opt<bool>("use_qk_norm", true)) fail("{}: use_qk_norm=false is not supported", r.path);
    c.qk_norm = true;
    c.qk_norm_full_width = true;
    // The published config gives rotary_dim; transformers 5 writes partial_rotary_factor (top
    // level or in rope_parameters).
    if (r.has("rotary_dim")) {
      c.rotary_dim = r.get<int64_t>("rotary_dim");
    } else {
      double factor = r.opt<double>("partial_rotary_factor", 1.0);
      if (r.has("rope_parameters") && r.j["rope_parameters"].is_object())
        factor = ConfigReader{r.j["rope_parameters"], r.path}.opt<double>("partial_rotary_factor", factor);
      c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
    }
    if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
      fail("{}: rotary_dim {} must be even, in (0, head_dim {}]", r.path, c.rotary_dim, c.head_dim);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_sparse_moe(c, i, block_of(i), {"w1", "w3", "w2"}, out);
    for (LayerSpec& s : out)
      if (s.name == block_of(i) + ".gate") s.f32_act = true;  // a float32 router: HF computes in its dtype
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const PreNormNames n = pre_norm_names(i);
    const std::string p = fmt::format("model.layers.{}.self_attn.", i);
    return {{n.input, {c.hidden_size}},
            {n.post, {c.hidden_size}},
            {p + "q_norm.weight", {c.num_heads * c.head_dim}},
            {p + "k_norm.weight", {c.num_kv_heads * c.head_dim}},
            {block_of(i) + ".e_score_correction_bias", {c.moe.num_experts}}};
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<SigmoidMoe>(l, block_of(i), block_of(i) + ".e_score_correction_bias", /*shared=*/false,
                                        DType::F32);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_local_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["intermediate_size"] = o.moe_intermediate;
    c["use_qk_norm"] = true;
    c["scoring_func"] = "sigmoid";
    c["rotary_dim"] = o.head_dim / 2;
  }
};

}  // namespace

const ArchDef& minimax_m2_arch() {
  static const MiniMaxM2 d;
  return d;
}

}  // namespace fp4lm::model
