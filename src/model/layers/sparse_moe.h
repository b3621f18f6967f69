#pragma once
// A sparse MoE block: router Linear (`gate`) -> softmax top-k -> fused experts, plus, for
// Qwen2-MoE, a dense shared expert scaled per token by sigmoid(shared_expert_gate(x)).
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"

namespace fp4lm::model {

class ModelLoader;

class SparseMoe final : public FeedForward {
 public:
  // `block`: the HF module holding gate + experts ("model.layers.0.mlp",
  // "model.layers.0.block_sparse_moe"). `renormalize`: norm_topk_prob. `router`: the router's
  // module under the block ("gate"; gpt-oss: "router").
  SparseMoe(ModelLoader& loader, const std::string& block, bool renormalize, bool shared_expert,
            const std::string& router = "gate");
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override;

  // The routing alone: ids, weights [m, top_k].
  void route(const float* x, int64_t m, int32_t* ids, float* weights) const;
  int64_t top_k() const { return top_k_; }

 private:
  std::unique_ptr<Linear> router_, shared_gate_;
  std::unique_ptr<FusedMoe> experts_;
  std::unique_ptr<DenseMlp> shared_;
  int64_t num_experts_, top_k_, hidden_;
  bool renormalize_;
  DType act_;
};

}  // namespace fp4lm::model
