#include "model/layer_plan.h"

#include <fmt/format.h>

namespace fp4lm::model {

std::vector<std::string> LayerSpec::modules() const {
  if (kind == kernels::LayerKind::linear) return shards;
  std::vector<std::string> out;
  for (int64_t e = 0; e < num_experts; ++e)
    for (const std::string& p : expert_proj) out.push_back(fmt::format("{}.{}.{}", shards[0], e, p));
  return out;
}

namespace {

LayerSpec linear(std::string name, int64_t layer, std::vector<std::string> shards, std::vector<int64_t> rows,
                 int64_t in, bool bias = false) {
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

void add_dense_mlp(std::vector<LayerSpec>& out, const std::string& prefix, int64_t layer, int64_t hidden,
                   int64_t inter) {
  out.push_back(linear(prefix + ".gate_up_proj", layer, {prefix + ".gate_proj", prefix + ".up_proj"},
                       {inter, inter}, hidden));
  out.push_back(linear(prefix + ".down_proj", layer, {prefix + ".down_proj"}, {hidden}, inter));
}

}  // namespace

std::vector<LayerSpec> plan_layers(const ModelConfig& c) {
  std::vector<LayerSpec> out;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}", i);
    if (c.layer_is_attention(i)) {
      // A gated attention's q_proj holds, per head, head_dim query rows then head_dim gate rows.
      out.push_back(linear(p + ".self_attn.qkv_proj", i,
                           {p + ".self_attn.q_proj", p + ".self_attn.k_proj", p + ".self_attn.v_proj"},
                           {c.attn_output_gate ? 2 * q : q, kv, kv}, h, c.attention_bias));
      out.push_back(linear(p + ".self_attn.o_proj", i, {p + ".self_attn.o_proj"}, {h}, q));
    } else {
      // Gated delta-net projections. in_proj_b / in_proj_a (one row per value head) are kept
      // unquantized by exporters, like routers.
      const std::string a = p + ".linear_attn";
      const int64_t nv = c.linear_num_value_heads, vd = nv * c.linear_value_head_dim;
      out.push_back(linear(a + ".in_proj_qkv", i, {a + ".in_proj_qkv"}, {c.gdn_conv_dim()}, h));
      out.push_back(linear(a + ".in_proj_z", i, {a + ".in_proj_z"}, {vd}, h));
      LayerSpec ba = linear(a + ".in_proj_ba", i, {a + ".in_proj_b", a + ".in_proj_a"}, {nv, nv}, h);
      ba.router = true;
      out.push_back(ba);
      out.push_back(linear(a + ".out_proj", i, {a + ".out_proj"}, {h}, vd));
    }
    if (!c.layer_is_moe(i)) {
      add_dense_mlp(out, p + ".mlp", i, h, c.intermediate_size);
      continue;
    }
    const bool mixtral = c.arch == Arch::Mixtral;
    const std::string block = p + (mixtral ? ".block_sparse_moe" : ".mlp");
    LayerSpec router = linear(block + ".gate", i, {block + ".gate"}, {c.num_experts}, h);
    router.router = true;
    out.push_back(router);
    LayerSpec moe;
    moe.name = block + ".experts";
    moe.kind = kernels::LayerKind::moe;
    moe.layer_index = i;
    moe.shards = {moe.name};
    moe.num_experts = c.num_experts;
    moe.hidden = h;
    moe.inter = c.moe_intermediate_size;
    moe.in_features = h;
    moe.out_features = h;
    moe.expert_proj = mixtral ? std::array<std::string, 3>{"w1", "w3", "w2"}
                              : std::array<std::string, 3>{"gate_proj", "up_proj", "down_proj"};
    out.push_back(moe);
    if (c.arch == Arch::Qwen2Moe || c.arch == Arch::Qwen3_5Moe) {
      add_dense_mlp(out, block + ".shared_expert", i, h, c.shared_expert_intermediate_size);
      LayerSpec gate = linear(block + ".shared_expert_gate", i, {block + ".shared_expert_gate"}, {1}, h);
      gate.router = true;
      out.push_back(gate);
    }
  }
  LayerSpec head = linear("lm_head", -1, {c.tie_word_embeddings ? "model.embed_tokens" : "lm_head"},
                          {c.vocab_size}, h);
  head.tied_embedding = c.tie_word_embeddings;
  out.push_back(head);
  return out;
}

}  // namespace fp4lm::model
