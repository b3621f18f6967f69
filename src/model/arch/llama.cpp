// LlamaForCausalLM: dense SwiGLU MLP in every layer (RoPE scaling "linear"/"llama3" is in Rope).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

const ArchDef& llama_arch() {
  static const ArchDef d{Arch::Llama, "LlamaForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }};
  return d;
}

}  // namespace fp4lm::model
