// Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration (text model only; VL tensors under
// model.language_model.): a hybrid whose layers' mixers are gated delta-nets (linear_attention)
// or gated full attention (model/gated_delta_net.h, model/attention.h, chosen by
// ModelConfig::layer_is_attention). Every layer's feed-forward is a sparse MoE (top-k always
// renormalized) with a shared expert scaled by sigmoid(shared_expert_gate(x)).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/model_loader.h"
#include "model/sparse_moe.h"

namespace fp4lm::model {

const ArchDef& qwen3_5_moe_arch() {
  static const ArchDef d{Arch::Qwen3_5Moe, "Qwen3_5MoeForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    return std::make_unique<SparseMoe>(l, fmt::format("model.layers.{}.mlp", i), /*renormalize=*/true,
                                       /*shared_expert=*/true);
  }};
  return d;
}

}  // namespace fp4lm::model
