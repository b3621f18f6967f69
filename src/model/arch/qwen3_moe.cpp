// Qwen3MoeForCausalLM: Qwen3 attention; layer i is a sparse MoE block ("mlp": router `gate`,
// `experts.E.{gate,up,down}_proj`, softmax top-k renormalized when norm_topk_prob) unless it is
// listed in mlp_only_layers or off the decoder_sparse_step grid, where it is a dense MLP.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"
#include "model/model_loader.h"
#include "model/sparse_moe.h"

namespace fp4lm::model {

const ArchDef& qwen3_moe_arch() {
  static const ArchDef d{Arch::Qwen3Moe, "Qwen3MoeForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, l.config().norm_topk_prob, /*shared_expert=*/false);
  }};
  return d;
}

}  // namespace fp4lm::model
