#pragma once
// The feed-forward of Qwen2-MoE, Qwen3-Next and Qwen3.5-MoE (arch/qwen2_moe.cpp,
// arch/qwen3_next.cpp, arch/qwen3_5_moe.cpp): per layer either a dense SwiGLU MLP
// (mlp_only_layers / decoder_sparse_step; intermediate_size) or a sparse MoE (router `gate`,
// experts `experts.E.{gate,up,down}_proj`) plus a dense shared expert scaled per token by
// sigmoid(shared_expert_gate(x)).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace fp4lm::model {

// Qwen2-MoE's keys (read_sparse_moe_keys) plus shared_expert_intermediate_size.
void read_shared_expert_moe_keys(const ConfigReader& r, ModelConfig& c, bool norm_topk_default);
// Decoder layer i's feed-forward layers at `block` ("model.layers.{i}.mlp"): the dense MLP, or
// the MoE, its shared expert and shared_expert_gate (a router: never quantized by fp4lm).
void plan_shared_expert_moe(const ModelConfig& c, int64_t i, const std::string& block, std::vector<LayerSpec>& out);
// Decoder layer i's feed-forward block, loaded; `renormalize` the top-k router weights.
std::unique_ptr<FeedForward> make_shared_expert_moe(ModelLoader& l, int64_t i, bool renormalize);
// The synthetic writer's MoE keys (every layer sparse; norm_topk_prob as given).
void shared_expert_moe_synthetic_config(const SampleShape& o, bool norm_topk, nlohmann::json& c);

}  // namespace fp4lm::model
