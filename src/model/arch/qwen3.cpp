// Qwen3ForCausalLM: Llama's layout with per-head q_norm/k_norm RMSNorm before RoPE
// (ModelConfig::qk_norm), no q/k/v bias unless attention_bias says so.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

const ArchDef& qwen3_arch() {
  static const ArchDef d{Arch::Qwen3, "Qwen3ForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }};
  return d;
}

}  // namespace fp4lm::model
