#pragma once
// The engine layers of a model, in model order, with the HF modules each one fuses: q/k/v ->
// qkv_proj, gate/up -> gate_up_proj, every expert of a MoE block -> one `experts` layer.
// Used by the loader (what to load), `fp4lm inspect` (what to report) and the quantizer.
#include <array>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/model_config.h"

namespace fp4lm::model {

struct LayerSpec {
  std::string name;  // engine name, e.g. "model.layers.0.self_attn.qkv_proj", "lm_head"
  kernels::LayerKind kind = kernels::LayerKind::linear;
  int64_t layer_index = -1;  // decoder layer, -1 for lm_head
  // Linear: the HF modules stacked along the output dimension, and each one's rows.
  std::vector<std::string> shards;
  std::vector<int64_t> shard_rows;
  int64_t in_features = 0, out_features = 0;
  bool bias = false;
  bool router = false;      // MoE router / shared_expert_gate: kept unquantized by exporters
  // Runs in float32 whatever the engine's activation dtype, when unquantized (DeepSeek-style
  // routers: HF computes their logits in float32).
  bool f32_act = false;
  bool tied_embedding = false;  // lm_head reading model.embed_tokens.weight
  // MoE: the experts container ("model.layers.0.mlp.experts") is shards[0]; experts are
  // <container>.<e>.<proj> with proj names {w1 (gate), w3 (up), w2 (down)} in HF spelling.
  int64_t num_experts = 0, hidden = 0, inter = 0;
  std::array<std::string, 3> expert_proj;  // {"gate_proj", "up_proj", "down_proj"} or {"w1", "w3", "w2"}
  // How the experts are stored. per_expert: the modules above. gpt_oss: two fused parameters of
  // the container, `gate_up_proj` (gate and up rows interleaved) and `down_proj`, each with a
  // `_bias` [E, rows]; unquantized as [E, in, out] (transposed), MXFP4 as `<param>_blocks`
  // [E, out, in/32, 16] + `<param>_scales` [E, out, in/32]. modules() names the two parameters.
  enum class ExpertLayout { per_expert, gpt_oss };
  ExpertLayout expert_layout = ExpertLayout::per_expert;
  // per_expert stored fused (`<container>.gate_up_proj`, `.down_proj`, 3-D, no `.weight`): true when
  // input-major, [E, D, 2I] (gate columns, then up) and [E, I, D], as Llama 4's Llama4TextExperts;
  // false: [E, 2I, D] and [E, D, I] (Qwen3.5).
  bool fused_input_major = false;
  // Fused experts in either form, told apart by shape as transformers' Transpose(check_dims) does
  // (Qwen3-VL-MoE): the [E, 2I, D] / [E, D, I] form when gate_up_proj has that shape, else input-major.
  bool fused_major_by_shape = false;
  // What runs between w13 and w2 (the one place an architecture chooses it; kernels/expert_activation.h).
  kernels::ExpertActivation expert_activation;

  // HF module names of every quantizable weight under this layer (experts expanded).
  std::vector<std::string> modules() const;
};

// Every engine layer of the model: each decoder layer's by its ArchDef, then lm_head.
std::vector<LayerSpec> plan_layers(const ModelConfig& c);

// Building blocks of an ArchDef's plan.
// A Linear fusing `shards` (HF modules, `rows` each) along its output dimension.
LayerSpec plan_linear(std::string name, int64_t layer, std::vector<std::string> shards, std::vector<int64_t> rows,
                      int64_t in, bool bias = false);
// Self-attention "model.layers.<i>.self_attn": q/k/v fused into qkv_proj (bias per
// c.attention_bias), o_proj (with a bias only where the architecture has one: gpt-oss).
void plan_attention(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out, bool o_proj_bias = false);
// A dense SwiGLU MLP at `prefix`: gate/up fused into gate_up_proj, down_proj.
void plan_dense_mlp(const ModelConfig& c, int64_t i, const std::string& prefix, int64_t inter,
                    std::vector<LayerSpec>& out);
// A sparse MoE block at `block`: the router `<block>.<router>` (never quantized) and the experts
// `<block>.experts.<e>.<proj>` with proj = {gate, up, down} in the checkpoint's spelling. The
// experts' layer is last in `out`, for an architecture to set its layout and activation.
void plan_sparse_moe(const ModelConfig& c, int64_t i, const std::string& block,
                     const std::array<std::string, 3>& proj, std::vector<LayerSpec>& out,
                     const std::string& router = "gate", bool router_bias = false);

}  // namespace fp4lm::model
