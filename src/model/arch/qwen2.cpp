// Qwen2ForCausalLM: Llama's layout with q/k/v biases (ModelConfig::attention_bias is forced on).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

const ArchDef& qwen2_arch() {
  static const ArchDef d{Arch::Qwen2, "Qwen2ForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }};
  return d;
}

}  // namespace fp4lm::model
