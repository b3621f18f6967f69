#pragma once
// The feed-forward of the DeepSeek-style MoE families (DeepSeek-V3 / Kimi K2, GLM-4.x MoE,
// GLM-4.7-Flash): the first first_k_dense_replace layers are a dense SwiGLU MLP
// (intermediate_size), the others a SigmoidMoe (model/layers/sigmoid_moe.h) at "model.layers.{i}.mlp":
// router `gate` (float32 logits) with `gate.e_score_correction_bias`, experts
// `experts.E.{gate,up,down}_proj`, and shared experts `shared_experts.{gate,up,down}_proj` of
// n_shared_experts × moe_intermediate_size.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace fp4lm::model {

// HF defaults of the keys, which differ by family (DeepSeek-V3: first_k_dense_replace 3,
// routed_scaling_factor 2.5, n_group 8, topk_group 4; GLM: 1, 1.0, 1, 1).
struct DeepseekMoeDefaults {
  int64_t first_k_dense_replace = 3;
  double routed_scaling_factor = 2.5;
  int64_t n_group = 8, topk_group = 4;
};

// n_routed_experts (or num_local_experts), num_experts_per_tok, moe_intermediate_size,
// n_shared_experts, n_group, topk_group, norm_topk_prob (default true), routed_scaling_factor,
// first_k_dense_replace (-> c.moe.mlp_only_layers), intermediate_size (dense layers).
void read_deepseek_moe_keys(const ConfigReader& r, ModelConfig& c, const DeepseekMoeDefaults& d);
// mlp_layer_types (GLM-4.7-Flash, DeepSeek-V3.2, GLM-5), when given: one 'dense' or 'sparse' per
// layer, replacing the dense layers first_k_dense_replace gave (c.moe.mlp_only_layers).
void read_mlp_layer_types(const ConfigReader& r, ModelConfig& c);
// Decoder layer i's feed-forward engine layers ("model.layers.{i}.mlp").
void plan_deepseek_moe(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out);
// Its non-Linear parameter: the MoE layers' gate.e_score_correction_bias [n_routed_experts].
std::vector<LayerParam> deepseek_moe_params(const ModelConfig& c, int64_t i);
// Decoder layer i's feed-forward block, loaded.
std::unique_ptr<FeedForward> make_deepseek_moe(ModelLoader& l, int64_t i);
// The synthetic writer's MoE keys (layer 0 dense, the others sparse; one group per 2 experts
// when the experts split so, else one group).
void deepseek_moe_synthetic_config(const SampleShape& o, nlohmann::json& c);

// Once per load (at the first layer): the INFO line saying the num_nextn_predict_layers
// multi-token-prediction layers after the last decoder layer are skipped (never read).
void log_skipped_mtp(ModelLoader& l, int64_t layer);

}  // namespace fp4lm::model
