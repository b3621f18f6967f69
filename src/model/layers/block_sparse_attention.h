#pragma once
// MiniMax-M3's sparse attention layers ("minimax_m3_sparse" in layer_types): the model's
// attention (model/layers/attention.h: q/k/v, per-head q/k RMSNorm, partial RoPE, the K/V cache) whose
// query rows attend only to the key blocks the lightning indexer (model/layers/lightning_indexer.h) keeps
// for their head's group, as transformers' MiniMaxM3VLIndexer.build_block_mask masks the eager
// attention: query head a reads indexer head a / (num_heads / index heads), and within the kept
// blocks the causal keys. Rows whose selection is every causal block (the first
// topk_blocks × block_size positions) run the ordinary causal core; the others attend over their
// kept keys gathered in position order (the same kernel, float32 copies of the cached rows).
#include <memory>
#include <span>

#include "model/layers/attention.h"
#include "model/layers/lightning_indexer.h"
#include "model/layers/mixer.h"

namespace fp4lm::model {

class BlockSparseAttention final : public Mixer {
 public:
  BlockSparseAttention(const LayerBuild& b, int64_t layer, const LightningIndexerNames& names,
                       const LightningIndexerConfig& cfg);
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;
  size_t weight_bytes() const override { return attn_->weight_bytes() + indexer_->weight_bytes(); }
  size_t own_param_bytes() const override { return attn_->own_param_bytes() + indexer_->own_param_bytes(); }

 private:
  std::unique_ptr<Attention> attn_;
  std::unique_ptr<LightningIndexer> indexer_;
  int64_t num_heads_, num_kv_heads_, head_dim_;
};

}  // namespace fp4lm::model
