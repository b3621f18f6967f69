#pragma once
// MiniMax-M3's lightning indexer (transformers' MiniMaxM3VLIndexer): the key selector of a
// block-sparse attention layer. Per query row at position p it scores every key t <= p with
// `heads` small dot-product heads (q: index_q_proj → per-head RMSNorm → RoPE; k: index_k_proj →
// RMSNorm → RoPE, one head shared by all), max-pools the scores over blocks of `block_size`
// positions, forces the `local_blocks` blocks ending at the query's own to +inf, and keeps the
// top `topk_blocks` blocks per head. When the query's own block is at most the topk_blocks-th
// (p < topk_blocks × block_size) every causal block is kept: the layer is exactly dense there.
//
// State: the indexer's keys, one row of head_dim values per position, in a key-only KV slot of
// the sequence's cache (declared beside the attention's own), so they grow, rewind, and are
// prefix-cached exactly as the K/V do; nothing else is kept between calls.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

class Rope;

struct LightningIndexerConfig {
  int64_t heads = 0, head_dim = 0, block_size = 0, topk_blocks = 0, local_blocks = 0;
};

// The indexer's HF modules (transformers' internal names or the published checkpoint's).
struct LightningIndexerNames {
  std::string q_proj, k_proj, q_norm, k_norm;  // q/k_norm: the weight tensors
};

// The selection for one query row: dense (every causal key), or per index head `k` block numbers
// (ascending, no duplicates, none past the query's own block).
struct KeyBlockSelection {
  bool dense = true;
  int64_t k = 0;                // blocks kept per head
  std::vector<int32_t> blocks;  // [heads, k]
};

class LightningIndexer {
 public:
  LightningIndexer(const LayerBuild& b, int64_t layer, const LightningIndexerNames& names,
                   const LightningIndexerConfig& cfg);
  // x [m, hidden] (the layer's normed input, every span's rows in order): stores each row's key
  // in its sequence's cache and returns each row's selection.
  std::vector<KeyBlockSelection> select(const float* x, std::span<const SequenceSpan> spans) const;

  const LightningIndexerConfig& config() const { return cfg_; }
  int64_t kv_slot() const { return kv_slot_; }
  size_t weight_bytes() const { return q_->weight_bytes() + k_->weight_bytes(); }
  size_t own_param_bytes() const { return static_cast<size_t>(q_norm_.dim() + k_norm_.dim()) * sizeof(float); }

 private:
  // transformers' apply_rotary_pos_emb on the first min(head_dim, rotary dims) dims of `n` heads,
  // with its cos/sin cut to head_dim entries (cos[..., :index_head_dim]).
  void rotate(float* x, int64_t n, int64_t pos) const;

  LightningIndexerConfig cfg_;
  const Rope& rope_;
  DType act_;
  int64_t kv_slot_ = -1;
  std::unique_ptr<Linear> q_, k_;
  RmsNorm q_norm_, k_norm_;
};

}  // namespace fp4lm::model
