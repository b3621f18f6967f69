#pragma once
// The decoder of Llama and the architectures that keep its layout (Mistral, Qwen2, Qwen3):
// self-attention, then a dense SwiGLU MLP (`mlp.{gate,up,down}_proj`, intermediate_size) in
// every layer. They differ only in the config keys they read (q/k/v bias, q/k norms, the
// sliding window), so they derive from this and override parse_config (and synthetic_config).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/mlp.h"

namespace fp4lm::model {

class LlamaLayoutArch : public ArchDef {
 public:
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), c.intermediate_size, out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }
  void synthetic_config(const SampleShape&, nlohmann::json&) const override {}
};

}  // namespace fp4lm::model
