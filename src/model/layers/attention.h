#pragma once
// Multi-head causal self-attention with grouped KV heads (GQA), HF semantics: fused qkv
// projection (+ bias for Qwen2), optional per-head q_norm/k_norm RMSNorm (Qwen3) before RoPE,
// KV entries stored in the cache, softmax(q·kᵀ / sqrt(head_dim)) in float32, o_proj.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/state/kv_cache.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

class ModelLoader;

// The rows of one sequence inside a batched call: rows [row0, row0 + n) are that sequence's
// positions pos0 .. pos0 + n - 1, and its K/V live in `cache`.
struct AttentionSpan {
  KvCache* cache = nullptr;
  int64_t row0 = 0, n = 0, pos0 = 0;
  int64_t chunk_end = 0;  // as SequenceSpan::chunk_end (LongRoPE's factors); 0 = pos0 + n
  const int64_t* rope_pos = nullptr;  // as SequenceSpan::rope_pos / rope_delta
  int64_t rope_delta = 0;
  const int64_t* bidir_end = nullptr;  // as SequenceSpan::bidir_end
};

// The attention core over a batch: every row attends to its own sequence's cache positions
// [0, its own] of `layer` (which must already hold them); on a sliding-window slot (window W)
// to positions (its own - W, its own], read from the slot's ring. A row whose span's bidir_end
// reaches past its own position e attends up to e instead: [0, e], or (its own - W, e] on a
// window (transformers' Gemma 3 masks: causal OR same image block, AND the window). q [m, num_heads*head_dim] float32 with
// m = the spans' rows; out likewise. Runs kernels/attention.h per (KV head, run of rows): `kernel`,
// or when null the variant kernels::attention_kernel() chose. Each (row, head) is computed the
// same way whatever else is in the batch or how the work splits over threads.
// `sinks` (num_heads values, or nullptr): each head's attention-sink logit (kernels/attention.h).
void causal_attention(std::span<const AttentionSpan> spans, int64_t layer, const float* q, int64_t num_heads,
                      float* out, ThreadPool& pool = ThreadPool::global(),
                      const kernels::AttentionKernel* kernel = nullptr, const float* sinks = nullptr);

// The attention core for one sequence: m query tokens at positions pos0 .. pos0+m-1, each attending to cache
// positions [0, its own] of `layer` (which must already hold them). q [m, num_heads*head_dim]
// float32; out [m, num_heads*head_dim] float32 (unrounded). Query head h reads KV head
// h / (num_heads / num_kv_heads). Scores q·k / sqrt(head_dim), softmax and the weighted sum of
// values in float32 (the rule in kernels/attention.h).
void causal_attention(const KvCache& cache, int64_t layer, const float* q, int64_t m, int64_t pos0,
                      int64_t num_heads, float* out, ThreadPool& pool = ThreadPool::global(),
                      const kernels::AttentionKernel* kernel = nullptr);

// How one attention layer uses the KV cache (its ArchDef decides).
struct AttentionLayout {
  int64_t window = 0;       // sliding window in positions (the query's own included); 0 = full causal
  int64_t reads_kv_of = -1;  // >= 0: attend to the K/V that this earlier decoder layer stored (K/V
                             // shared between layers); this layer declares and stores none of its own
  bool rope = true;          // false: no position encoding (Nemotron-H's attention layers)
  const char* module = "self_attn";  // the layer's module under model.layers.<i> (Nemotron-H: "mixer")
  double scaling = 0;        // softmax scale of q·k (Gemma 3: query_pre_attn_scalar^-0.5); 0 = 1/sqrt(head_dim)
  int64_t head_dim = 0, kv_heads = 0;  // this layer's own (Gemma 4's full layers); 0 = the config's
  bool k_eq_v = false;  // no v_proj: the values are the key projection's output (before k_norm / RoPE)
  bool v_norm = false;  // values RMS-normalized per head, without a weight (Gemma 4)
  bool sinks = false;   // a learned logit per head in the softmax denominator, `self_attn.sinks` (gpt-oss)
  // With reads_kv_of: the layer has no key / value projections nor k_norm (qkv_proj is q_proj
  // alone; Gemma 4's KV-sharing layers).
  bool q_only = false;
  // Whether the layer reads image blocks bidirectionally (SequenceSpan::bidir_end); false: causal
  // whatever the prompt's blocks (Gemma 4's full-attention layers, and every layer of a Gemma 4
  // without use_bidirectional_attention "vision").
  bool image_blocks = true;
};

// Replaces causal_attention for one forward call (MiniMax-M3's block-sparse layers,
// model/layers/block_sparse_attention.h): given the spans, the layer's KV slot and the queries (as
// causal_attention takes them, K/V already stored), writes out [m, num_heads*head_dim] unrounded.
using AttentionCore =
    std::function<void(std::span<const AttentionSpan> spans, int64_t kv_slot, const float* q, float* out)>;

class Attention final : public Mixer {
 public:
  // Loads model.layers.<layer>.self_attn.{qkv_proj (q/k only when layout.k_eq_v), o_proj[, q_norm,
  // k_norm]} and declares its
  // KV slot in b.state (with an FP8 cache: its k_scale / v_scale, 1.0 when absent).
  // Gated attention (config.attn_output_gate): the output is multiplied by sigmoid(gate), the
  // gate rows following each head's query rows in q_proj. RoPE covers the rope's head_dim()
  // leading dims of each head (partial RoPE when less than head_dim).
  Attention(const LayerBuild& b, int64_t layer, const AttentionLayout& layout = {});
  // The KV slot it attends to (its own, or the one it reads).
  int64_t kv_slot() const { return kv_slot_; }

  // x [m, hidden] (the normed hidden states of every span's rows, in order): projects all rows
  // at once, applies RoPE to each row at its own position, writes its K/V into its sequence's
  // cache, attends per sequence, and writes y [m, hidden]. Cache lengths are not changed (the
  // model advances them).
  void forward(const float* x, std::span<const AttentionSpan> spans, float* y) const;
  // The same with `core` in place of the causal core (no sinks).
  void forward(const float* x, std::span<const AttentionSpan> spans, float* y, const AttentionCore& core) const;
  // As a decoder layer's Mixer: each sequence's K/V live in its state's KV cache.
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;

  size_t weight_bytes() const override { return qkv_->weight_bytes() + o_->weight_bytes(); }
  size_t own_param_bytes() const override {
    return static_cast<size_t>(q_norm_.dim() + k_norm_.dim() + v_rms_.dim()) * sizeof(float) +
           sinks_.size() * sizeof(float);
  }

 private:
  int64_t layer_, kv_slot_, num_heads_, num_kv_heads_, head_dim_;
  bool gated_ = false, stores_kv_ = true, rope_enabled_ = true;
  // The queries are multiplied by this before the kernel's 1/sqrt(head_dim): layout.scaling × sqrt(head_dim).
  float q_mult_ = 1.0f;
  DType act_;
  const Rope& rope_;
  std::unique_ptr<Linear> qkv_, o_;
  bool qk_norm_ = false, k_eq_v_ = false, v_norm_ = false, q_only_ = false, image_blocks_ = true;
  RmsNorm q_norm_, k_norm_, v_rms_;
  std::vector<float> sinks_;  // [num_heads] or empty
};

}  // namespace fp4lm::model
