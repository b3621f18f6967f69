// Glm4MoeForCausalLM (GLM-4.5 / 4.6 / 4.7): GQA attention with q/k/v bias (attention_bias),
// optional per-head q_norm / k_norm (use_qk_norm), RoPE over the first partial_rotary_factor
// (default 0.5) of each head, rotate-half style; the DeepSeek-style MoE feed-forward
// (arch/deepseek_moe.h: sigmoid routing with e_score_correction_bias, shared experts, the first
// first_k_dense_replace layers dense). The multi-token-prediction layer(s) after the last
// decoder layer (num_nextn_predict_layers) are not read.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/deepseek_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Glm4Moe final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Glm4MoeForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_deepseek_moe_keys(r, c, {.first_k_dense_replace = 1, .routed_scaling_factor = 1.0, .n_group = 1,
                                  .topk_group = 1});
    c.qk_norm = r.opt<bool>("use_qk_norm", false);
    double factor = r.opt<double>("partial_rotary_factor", 0.5);
    if (r.has("rope_parameters") && r.j["rope_parameters"].is_object())
      factor = ConfigReader{r.j["rope_parameters"], r.path}.opt<double>("partial_rotary_factor", factor);
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
    if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
      fail("{}: partial_rotary_factor {} gives rotary dims {} (must be even, in (0, head_dim {}])", r.path, factor,
           c.rotary_dim, c.head_dim);
    c.num_nextn_predict_layers = r.opt<int64_t>("num_nextn_predict_layers", 0);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_deepseek_moe(c, i, out);
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    std::vector<LayerParam> out = ArchDef::layer_params(c, i);
    for (LayerParam& p : deepseek_moe_params(c, i)) out.push_back(std::move(p));
    return out;
  }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    log_skipped_mtp(b.loader, i);
    return ArchDef::make_layer(b, i);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override { return make_deepseek_moe(l, i); }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    deepseek_moe_synthetic_config(o, c);
    c["attention_bias"] = true;
    c["use_qk_norm"] = true;
    c["partial_rotary_factor"] = 0.5;
  }
};

}  // namespace

const ArchDef& glm4_moe_arch() {
  static const Glm4Moe d;
  return d;
}

}  // namespace fp4lm::model
