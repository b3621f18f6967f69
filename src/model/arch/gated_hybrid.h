#pragma once
// What the Qwen3.5 (dense), Qwen3.5-MoE and Qwen3-Next hybrids share (arch/qwen3_5.cpp,
// arch/qwen3_5_moe.cpp, arch/qwen3_next.cpp): the layer-type keys, the gated delta-net (GDN) and
// gated-attention mixers and their parameters. They differ in how the GDN input projections are
// stored (ModelConfig::gdn_fused_qkvz) and in their feed-forward (a dense MLP, or the
// shared-expert MoE of arch/shared_expert_moe.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace fp4lm::model {

// layer_types (or full_attention_interval), the linear_* GDN dims, attn_output_gate, partial
// RoPE (partial_rotary_factor at the top or in rope_parameters; default 0.25 as both HF configs),
// mamba_ssm_dtype; sets the zero-centered norms and q/k norms.
void read_gated_hybrid_keys(const ConfigReader& r, ModelConfig& c);

// Decoder layer i's mixer layers: gated attention, or the GDN's projections in the layout
// c.gdn.fused_qkvz says (in_proj_qkv + in_proj_z + in_proj_b/a, or in_proj_qkvz + in_proj_ba).
// in_proj_b / in_proj_a (one row per value head) are planned as routers: never quantized.
void plan_gated_hybrid_mixer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out);
// Norms, q/k norms of attention layers, conv1d / A_log / dt_bias / norm of GDN layers.
std::vector<LayerParam> gated_hybrid_layer_params(const ModelConfig& c, int64_t i);
// Gated attention or a gated delta-net, as layer_types says (each declares its own state).
std::unique_ptr<Mixer> make_gated_hybrid_mixer(const LayerBuild& b, int64_t i);
// ModelOpt's quantizer config disables *linear_attn.conv1d*: the GDN layers' conv1d modules.
std::vector<std::string> gated_hybrid_default_exclusions(const ModelConfig& c);
// The synthetic writer's keys for the hybrid's mixers (layer_types, GDN dims, RoPE).
void gated_hybrid_synthetic_config(const SampleShape& o, nlohmann::json& c);
// Those keys as Qwen3.5 (dense and MoE) configs write them: attn_output_gate, mamba_ssm_dtype
// and rope_parameters (partial_rotary_factor 0.25, an mrope_section) instead of rope_theta.
void qwen3_5_synthetic_config(const SampleShape& o, nlohmann::json& c);

// The ArchDef parts every gated hybrid shares: its layers' parameters and mixers.
class GatedHybridArch : public ArchDef {
 public:
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    return gated_hybrid_layer_params(c, i);
  }
  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    return make_gated_hybrid_mixer(b, i);
  }
  std::vector<std::string> default_exclusions(const ModelConfig& c) const override {
    return gated_hybrid_default_exclusions(c);
  }
};

}  // namespace fp4lm::model
