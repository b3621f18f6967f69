#include "model/layer_plan.h"

#include <fmt/format.h>

#include "model/arch/arch.h"

namespace fp4lm::model {

std::vector<std::string> LayerSpec::modules() const {
  if (kind == kernels::LayerKind::linear) return shards;
  if (expert_layout == ExpertLayout::gpt_oss) return {shards[0] + ".gate_up_proj", shards[0] + ".down_proj"};
  std::vector<std::string> out;
  for (int64_t e = 0; e < num_experts; ++e)
    for (const std::string& p : expert_proj) out.push_back(fmt::format("{}.{}.{}", shards[0], e, p));
  return out;
}

LayerSpec plan_linear(std::string name, int64_t layer, std::vector<std::string> shards, std::vector<int64_t> rows,
                      int64_t in, bool bias) {
  LayerSpec s;
  s.name = std::move(name);
  s.layer_index = layer;
  s.shards = std::move(shards);
  s.shard_rows = std::move(rows);
  s.in_features = in;
  for (int64_t r : s.shard_rows) s.out_features += r;
  s.bias = bias;
  return s;
}

void plan_attention(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out, bool o_proj_bias) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const std::string p = fmt::format("model.layers.{}.self_attn", i);
  // A gated attention's q_proj holds, per head, head_dim query rows then head_dim gate rows.
  out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj", p + ".k_proj", p + ".v_proj"},
                            {c.attn_output_gate ? 2 * q : q, kv, kv}, c.hidden_size, c.attention_bias));
  out.push_back(plan_linear(p + ".o_proj", i, {p + ".o_proj"}, {c.hidden_size}, q, o_proj_bias));
}

void plan_dense_mlp(const ModelConfig& c, int64_t i, const std::string& prefix, int64_t inter,
                    std::vector<LayerSpec>& out) {
  out.push_back(plan_linear(prefix + ".gate_up_proj", i, {prefix + ".gate_proj", prefix + ".up_proj"}, {inter, inter},
                            c.hidden_size));
  out.push_back(plan_linear(prefix + ".down_proj", i, {prefix + ".down_proj"}, {c.hidden_size}, inter));
}

void plan_sparse_moe(const ModelConfig& c, int64_t i, const std::string& block,
                     const std::array<std::string, 3>& proj, std::vector<LayerSpec>& out,
                     const std::string& router, bool router_bias) {
  const std::string r = block + "." + router;
  LayerSpec gate = plan_linear(r, i, {r}, {c.moe.num_experts}, c.hidden_size, router_bias);
  gate.router = true;
  out.push_back(gate);
  LayerSpec moe;
  moe.name = block + ".experts";
  moe.kind = kernels::LayerKind::moe;
  moe.layer_index = i;
  moe.shards = {moe.name};
  moe.num_experts = c.moe.num_experts;
  moe.hidden = c.hidden_size;
  moe.inter = c.moe.moe_intermediate_size;
  moe.in_features = c.hidden_size;
  moe.out_features = c.hidden_size;
  moe.expert_proj = proj;
  out.push_back(moe);
}

std::vector<LayerSpec> plan_layers(const ModelConfig& c) {
  std::vector<LayerSpec> out;
  for (int64_t i = 0; i < c.num_layers; ++i) c.arch->plan_layer(c, i, out);
  LayerSpec head = plan_linear("lm_head", -1, {c.tie_word_embeddings ? "model.embed_tokens" : "lm_head"},
                               {c.vocab_size}, c.hidden_size);
  head.tied_embedding = c.tie_word_embeddings;
  out.push_back(head);
  return out;
}

}  // namespace fp4lm::model
