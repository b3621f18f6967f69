#pragma once
// Llama 4's self-attention (transformers' Llama4TextAttention), a form of its own beside
// model/layers/attention.h: q/k/v/o without bias; on RoPE layers the rotation in the interleaved
// (complex) form — pairs (2i, 2i+1) rotated by angle pos · inv_freq[i] — then, with use_qk_norm, an
// L2 norm of each q and k head (x / sqrt(mean(x²) + rms_norm_eps), no weight), and attention within
// the position's chunk: position p attends to [floor(p / C)·C, p] (attention_chunk_size C). NoPE
// layers attend to every earlier position, their queries scaled by the temperature
// 1 + attn_scale · log(1 + floor((p + 1) / floor_scale)) (attn_temperature_tuning). Softmax scale
// 1/sqrt(head_dim).
//
// The KV cache of a chunked layer is a ring of C - 1 + prefill_chunk rows (a window-C slot): a query
// at p reads at most the C - 1 positions before it, so the ring is exact and its memory does not grow
// with the sequence.
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

class KvCache;

struct Llama4AttentionLayout {
  bool rope = true;        // rotate q/k (else NoPE)
  bool l2_qk_norm = false;  // L2-normalize q/k heads after the rotation
  int64_t chunk = 0;       // attend within chunks of this many positions (0: all earlier positions)
  bool temperature = false;  // scale the queries by the NoPE temperature
  double floor_scale = 8192, attn_scale = 0.1;
};

// The temperature transformers multiplies a NoPE layer's query at position `pos` by.
float llama4_query_temperature(int64_t pos, double floor_scale, double attn_scale);

// Rotates n_heads heads of x (head_dim values each) in the interleaved form: x[2i], x[2i+1] by the
// angle whose cos/sin are cos[i], sin[i], i < head_dim / 2.
void rotate_interleaved(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin);

class Llama4Attention final : public Mixer {
 public:
  // Loads model.layers.<layer>.self_attn.{qkv_proj, o_proj}; declares its KV slot (a ring of the
  // chunk on chunked layers).
  Llama4Attention(const LayerBuild& b, int64_t layer, const Llama4AttentionLayout& layout);
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;
  size_t weight_bytes() const override { return qkv_->weight_bytes() + o_->weight_bytes(); }
  int64_t kv_slot() const { return kv_slot_; }

 private:
  Llama4AttentionLayout layout_;
  int64_t kv_slot_, num_heads_, num_kv_heads_, head_dim_;
  DType act_;
  const Rope& rope_;
  std::unique_ptr<Linear> qkv_, o_;
  RmsNorm l2_;  // weight of ones: the L2 norm
};

}  // namespace fp4lm::model
