#pragma once
// DeepSeek Sparse Attention's "lightning" indexer (DeepSeek-V3.2, GLM-5), transformers 5.24's
// DeepseekV32Indexer / GlmMoeDsaIndexer: per query it picks the index_topk past positions the
// multi-head latent attention (model/layers/latent_attention.h) then attends to. For x the attention's
// normed input and q_resid = q_a_layernorm(q_a_proj(x)):
//   q = wq_b(q_resid)                        per indexer head [rope (qk_rope_head_dim) | pass]
//   k = k_norm(wk(x))                        one head, LayerNorm (weight and bias, eps 1e-6)
//   q_rope, k_rope rotated by the model's RoPE: half-split (DeepSeek-V3.2) or interleaved pairs
//     (GLM-5); the keys are cached per position (a key-only KV slot of index_head_dim values)
//   w = weights_proj(x) × n_heads^-1/2
//   score(u) = Σ_h w[h] · relu(q[h]·k[u] × index_head_dim^-1/2)
// A query at position p keeps the min(index_topk, p + 1) positions u <= p of highest score (the
// causal mask is added before transformers' topk, so a masked position is never kept while a
// causal one is left). Below the budget every past position is kept: dense attention, exactly.
// Ties (equal float32 scores) keep the earlier position; transformers' topk leaves their order
// unspecified.
// GLM-5's "shared" layers have no indexer and reuse the previous full layer's selection of the
// same step (DsaSelection, shared by the model's layers and carried across pipeline stages).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/state/stage_carried.h"

namespace fp4lm::model {

// One forward step's selections: per row, index_topk positions ascending, -1 after the last.
// Written by the full layers' indexers, read by their attention and the shared layers after.
class DsaSelection final : public StageCarried {
 public:
  explicit DsaSelection(int64_t topk) : topk_(topk) {}
  int64_t topk() const { return topk_; }
  int64_t rows() const { return rows_; }
  // The step's buffer for m rows (by a full layer's indexer).
  int32_t* reset(int64_t m);
  const int32_t* row(int64_t r) const { return sel_.data() + r * topk_; }

  const char* what() const override { return "the sparse-attention indexer's selections"; }
  std::span<const uint8_t> carried(int64_t rows) const override;
  void receive(std::span<const uint8_t> bytes, int64_t rows) override;

 private:
  int64_t topk_, rows_ = 0;
  std::vector<int32_t> sel_;
};

// The model's one DsaSelection (ModelLoader::shared), registered to cross pipeline cuts when some
// layer shares another's selection.
std::shared_ptr<DsaSelection> dsa_selection(ModelLoader& l);

class DsaIndexer {
 public:
  // Loads model.layers.<layer>.self_attn.indexer.* and declares its key slot in b.state.
  DsaIndexer(const LayerBuild& b, int64_t layer);
  // x [m, hidden], q_resid [m, q_lora_rank]: stores the spans' new keys, then writes every row's
  // selection into `out` (reset to m rows).
  void select(const float* x, const float* q_resid, std::span<const SequenceSpan> spans, DsaSelection& out) const;
  size_t weight_bytes() const;
  size_t own_param_bytes() const;
  int64_t kv_slot() const { return kv_slot_; }

 private:
  int64_t layer_, kv_slot_, heads_, dim_, rope_dims_, topk_;
  bool interleave_;
  DType act_;
  const Rope& rope_;
  std::unique_ptr<Linear> wq_b_, wk_, weights_proj_;
  std::vector<float> k_norm_w_, k_norm_b_;
};

}  // namespace fp4lm::model
