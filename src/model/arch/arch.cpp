#include "model/arch/arch.h"

#include <fmt/format.h>

#include "model/attention.h"

namespace fp4lm::model {

std::vector<LayerParam> ArchDef::layer_params(const ModelConfig& c, int64_t i) const {
  const std::string p = fmt::format("model.layers.{}.", i);
  std::vector<LayerParam> out = {{p + "input_layernorm.weight", {c.hidden_size}},
                                 {p + "post_attention_layernorm.weight", {c.hidden_size}}};
  if (c.qk_norm) {
    out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  }
  return out;
}

std::unique_ptr<Mixer> ArchDef::make_mixer(ModelLoader& l, int64_t i, const Rope& rope) const {
  return std::make_unique<Attention>(l, i, rope);
}

const ArchDef* find_arch(std::string_view hf_name) {
  for (const ArchDef* a : architectures())
    if (a->hf_name() == hf_name) return a;
  return nullptr;
}

}  // namespace fp4lm::model
