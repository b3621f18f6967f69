// MixtralForCausalLM: every layer a sparse MoE block "block_sparse_moe" (router `gate`, experts
// `experts.E.{w1,w3,w2}`), softmax top-k always renormalized.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/sparse_moe.h"

namespace fp4lm::model {

const ArchDef& mixtral_arch() {
  static const ArchDef d{Arch::Mixtral, "MixtralForCausalLM", [](ModelLoader& l, int64_t i) -> std::unique_ptr<FeedForward> {
    return std::make_unique<SparseMoe>(l, fmt::format("model.layers.{}.block_sparse_moe", i), /*renormalize=*/true,
                                       /*shared_expert=*/false);
  }};
  return d;
}

}  // namespace fp4lm::model
