#pragma once
// Qwen4-Exp's indexed attention layers (transformers' Qwen4ExpTextAttention with its
// Qwen4ExpTextQSAIndexer): the gated full attention of the Qwen3.5 hybrids (model/layers/attention.h:
// q/k/v, per-head q/k RMSNorm, partial RoPE, sigmoid output gate) whose queries attend only to
// the tokens the QSA indexer selects. The indexer: index_qk_proj(x) = [q (H heads), k (one head)]
// of index_head_dim D; q = q_layernorm(q) then RoPE at the query's position (the attention's
// rotary dims, rotate-half); the raw keys k are kept per position. For a query at position p the
// visible tokens 0 .. p split into c = (p + 1) / compress_ratio complete blocks and a tail; block
// b's key = RoPE(k_layernorm(mean of its raw keys), position b·ratio); score_b =
// Σ_h relu(q_h·key_b) / sqrt(D); the top min(budget / ratio, c) blocks (ties as torch.topk breaks
// them, model/layers/torch_topk.h) and their tokens plus the tail are
// the query's keys (every visible token while c ≤ budget / ratio: exactly the causal attention).
// A query whose own token sits in an unselected block does not see itself, as transformers.
// State: the raw indexer keys in a key-only KV slot beside the attention's own (they grow,
// rewind and are prefix-cached as the K/V do).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/layers/attention.h"
#include "model/layer_build.h"
#include "model/layers/mixer.h"

namespace fp4lm::model {

class Rope;

class QsaAttention final : public Mixer {
 public:
  QsaAttention(const LayerBuild& b, int64_t layer);
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;
  size_t weight_bytes() const override { return attn_->weight_bytes(); }
  size_t own_param_bytes() const override {
    return attn_->own_param_bytes() + (qk_.size() + q_norm_.size() + k_norm_.size()) * sizeof(float);
  }

  // Per row of x: its selected positions ascending, or empty for every visible one (exposed for tests).
  std::vector<std::vector<int32_t>> select(const float* x, std::span<const SequenceSpan> spans) const;

 private:
  void rotate(float* v, int64_t heads, int64_t pos) const;  // rotate-half RoPE on the first rotary dims

  std::unique_ptr<Attention> attn_;
  const Rope& rope_;
  DType act_;
  int64_t layer_, hidden_, heads_, dim_, ratio_, topk_blocks_, key_slot_ = -1;
  int64_t num_heads_, num_kv_heads_, head_dim_;
  double eps_;
  std::vector<float> qk_, q_norm_, k_norm_;  // norms: 1 + w
};

}  // namespace fp4lm::model
