#pragma once
// DeepSeek-V4's attention (HF DeepseekV4Attention with its CSA / HCA compressors and lightning
// indexer; the mechanisms are described in arch/deepseek_v4.cpp): one shared K=V head with
// per-head sinks over a sliding window, plus, on compressed layers, entries pooling every `rate`
// positions (heavily compressed: all causal ones; compressed sparse: the indexer's top-k).
//
// State (this first form): the layer's normed input of every position, in a key-only KV slot of
// hidden_size values; each step recomputes the window's K=V, the compressed entries and the
// indexer's keys from it, so a decode step gives exactly the one-forward result (O(context) work
// per step and hidden_size floats per position). The bounded caches transformers keeps
// (DeepseekV4HCACache / DeepseekV4CSACache) are the next step:
//  - the window's K=V (after norm + RoPE): a key-only ring slot of head_dim, window sliding_window;
//  - per compressor (and the indexer's): the unfinished window's projected kv and gate + ape rows
//    (< rate rows of 2·dim on CSA, dim on HCA) and, on CSA, the last complete window's first
//    halves (rate × dim kv and gate: the next entry's Ca) — a fixed-size recurrent slot;
//  - the compressed entries (dim per `rate` positions; the indexer's keys index_head_dim per 4):
//    a slot of capacity / rate rows (StateLayout has no such kind yet: a KvSlotShape with a
//    positions-per-row stride would count its bytes right).
// Rewinding (speculative decoding) and prefix caching then need the compressor slots replayed.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/linear.h"
#include "model/mixer.h"
#include "model/rms_norm.h"
#include "model/rope.h"

namespace fp4lm::model {

struct LayerBuild;

class CompressedAttention final : public Mixer {
 public:
  // Decoder layer `layer`'s attention, "model.layers.<layer>.attn" (DeepSeek's names).
  CompressedAttention(const LayerBuild& b, int64_t layer);
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;
  size_t weight_bytes() const override;
  size_t own_param_bytes() const override;

  // A pooling compressor (attn.compressor or attn.indexer.compressor): wkv / wgate / ape / norm,
  // `overlap`: CSA's two series (2·dim wide), entry w pooling window w-1's first half and window
  // w's second half.
  struct Compressor {
    std::unique_ptr<Linear> wkv, wgate;
    std::vector<float> ape;  // [rate, (overlap ? 2 : 1) · dim]
    RmsNorm norm;
    int64_t dim = 0, rate = 0;
    bool overlap = false;
    // The entries of the first n_win complete windows of the rows x [n_win·rate, hidden], RoPE'd
    // at w·rate on their trailing rope dims -> out [n_win, dim].
    void entries(const float* x, int64_t n_win, const Rope& rope, int64_t rope_dim, DType act,
                 std::vector<float>& out) const;
  };

 private:
  int64_t layer_, hidden_, heads_, dim_, rope_dim_, window_, q_lora_, groups_, o_lora_;
  DType act_;
  int kind_;  // 0 sliding, 1 CSA, 2 HCA
  int64_t index_heads_ = 0, index_dim_ = 0, index_topk_ = 0;
  double eps_;
  std::unique_ptr<Linear> wq_a_, wq_b_, wkv_, wo_b_;
  std::vector<float> wo_a_;  // [groups · o_lora, heads·dim / groups], float32
  RmsNorm q_norm_, kv_norm_;
  std::vector<float> sinks_;
  Rope rope_;  // "main" or "compress"
  std::unique_ptr<Compressor> comp_, index_comp_;
  std::unique_ptr<Linear> index_wq_b_, index_weights_;
  int64_t slot_ = -1;
};

}  // namespace fp4lm::model
