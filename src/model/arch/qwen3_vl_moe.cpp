// Qwen3VLMoeForConditionalGeneration (Qwen3-VL-30B-A3B, 235B-A22B): Qwen3-MoE's text model
// (arch/qwen3_moe.cpp: q_norm / k_norm; layer i a sparse MoE `mlp` unless in mlp_only_layers or off
// the decoder_sparse_step grid) with M-RoPE (arch/qwen3_vl_text.h), its keys under text_config and
// its tensors under model.language_model.. The router (`mlp.gate`) always renormalizes its top-k,
// whatever norm_topk_prob says (Qwen3VLMoeTextTopKRouter). The experts are read in every form
// published: fused as transformers 5.24 saves them (`experts.gate_up_proj` [E, 2I, D], gate rows
// then up, `experts.down_proj` [E, D, I]), fused input-major as the Qwen releases store them
// ([E, D, 2I], [E, I, D]; told apart by shape as transformers' Transpose(check_dims) does), or per
// expert (`experts.<e>.{gate,up,down}_proj`) as NVIDIA's / ModelOpt's exports write them.
#include <fmt/format.h>

#include "core/log.h"
#include "model/arch/arch.h"
#include "model/arch/qwen3_vl_text.h"
#include "model/vision/qwen3_5_vision_tower.h"
#include "model/layers/mlp.h"
#include "model/layers/sparse_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Qwen3VlMoe final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen3VLMoeForConditionalGeneration"; }
  void fill_config_defaults(nlohmann::json& j) const override { fill_qwen3_vl_text_defaults(j, /*dense=*/false); }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_sparse_moe_keys(r, c, /*norm_topk_default=*/true);
    if (!c.moe.norm_topk_prob)
      log().warn("{}: norm_topk_prob is false, but Qwen3-VL-MoE's router always renormalizes its top-k weights "
                 "(transformers' Qwen3VLMoeTextTopKRouter); fp4lm does the same",
                 r.path);
    c.moe.norm_topk_prob = true;
    read_qwen3_vl_text_keys(r, c);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, p, c.intermediate_size, out);
    plan_sparse_moe(c, i, p, {"gate_proj", "up_proj", "down_proj"}, out);
    out.back().fused_major_by_shape = true;
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, /*norm_topk_prob=*/true, /*shared_expert=*/false);
  }
  // model.visual.* (vision_config): Qwen3.5's tower plus DeepStack; nullptr for a checkpoint without one.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Qwen3_5VisionTower::load(l, /*deepstack=*/true);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {2, 1, 1}},
                            {"mrope_interleaved", true}};
  }
};

}  // namespace

const ArchDef& qwen3_vl_moe_arch() {
  static const Qwen3VlMoe d;
  return d;
}

}  // namespace fp4lm::model
