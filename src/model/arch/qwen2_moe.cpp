// Qwen2MoeForCausalLM: Qwen2 attention (q/k/v bias); sparse layers add a dense shared expert
// scaled per token by sigmoid(shared_expert_gate(x)); top-k weights renormalized only when
// norm_topk_prob (default false). mlp_only_layers / decoder_sparse_step give dense layers.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"
#include "model/model_loader.h"
#include "model/sparse_moe.h"

namespace fp4lm::model {

const ArchDef& qwen2_moe_arch() {
  static const ArchDef d{Arch::Qwen2Moe, "Qwen2MoeForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, l.config().norm_topk_prob, /*shared_expert=*/true);
  }};
  return d;
}

}  // namespace fp4lm::model
