#pragma once
// DeepSeek-V4's attention (HF DeepseekV4Attention with its CSA / HCA compressors and lightning
// indexer; the mechanisms are described in arch/deepseek_v4.cpp): one shared K=V head with
// per-head sinks over a sliding window, plus, on compressed layers, entries pooling every `rate`
// positions (heavily compressed: all causal ones; compressed sparse: the indexer's top-k).
//
// State, bounded as the design allows (transformers' DeepseekV4HCACache / DeepseekV4CSACache),
// all in the sequence's KvCache:
//  - the window's K=V (after norm + RoPE): a key-only ring of head_dim, window sliding_window;
//  - per compressor (and the indexer's): a key-only ring of the rows its next entry pools,
//    [kv | gate + ape] (2·(2·dim) on CSA, 2·dim on HCA) for the last 2·rate (CSA) or rate (HCA)
//    positions — the unfinished window and CSA's previous one (the next entry's Ca);
//  - the compressed entries (dim per `rate` positions; the indexer's keys index_head_dim per 4):
//    a strided slot (KvSlotShape::stride = rate), written when a window completes.
// So a decode step reads the window and the entries (CSA: the indexer's keys, then only the
// top-k entries it picks), and a sequence grows by the entries alone. Rewinding (speculative
// decoding) is the rings' (KvCache::can_rewind_to; a stale entry past the cut is rewritten when
// its window completes again); prefix caching copies ring rows and the entries a block completes.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/state/kv_cache.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

struct LayerBuild;
class ModelLoader;

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
    int64_t tail_slot = -1, entry_slot = -1;  // its ring of pooled rows and its strided entries
    int64_t width() const { return (overlap ? 2 : 1) * dim; }
    // Rows x [n, hidden] at positions pos0.. : their [kv | gate + ape] into the ring, then the
    // entry of every window they complete (pooled, normed, RoPE'd at w·rate on its trailing
    // rope dims) into row w of the entries.
    void advance(KvCache& cache, const float* x, int64_t pos0, int64_t n, const Rope& rope, int64_t rope_dim,
                 DType act) const;
  };

 private:
  int64_t layer_, hidden_, heads_, dim_, rope_dim_, window_, q_lora_, groups_, o_lora_;
  DType act_;
  int kind_;  // 0 sliding, 1 CSA, 2 HCA
  int64_t index_heads_ = 0, index_dim_ = 0, index_topk_ = 0;
  double eps_;
  std::unique_ptr<Linear> wq_a_, wq_b_, wkv_, wo_b_;
  // wo_a: NVFP4 W4A16 (one shard): one kernel per group on its rows (a row-slice of the codes and
  // block scales, nothing copied); otherwise dequantized into wo_a_ [groups · o_lora, heads·dim /
  // groups], float32.
  std::vector<std::unique_ptr<Linear>> wo_a_groups_;
  std::vector<float> wo_a_;
  RmsNorm q_norm_, kv_norm_;
  std::vector<float> sinks_;
  Rope rope_;  // "main" or "compress"
  std::unique_ptr<Compressor> comp_, index_comp_;
  std::unique_ptr<Linear> index_wq_b_, index_weights_;
  int64_t window_slot_ = -1;
};

// What DeepSeek-V4 layer `layer`'s grouped wo_a adds in RAM to its weights as stored (`fp4lm
// inspect`'s estimate): 0 when it runs one NVFP4 W4A16 kernel per group on the stored bytes, else
// the float32 copy CompressedAttention makes of it (rows × k × 4).
size_t deepseek_v4_wo_a_float_bytes(const ModelLoader& l, int64_t layer);

}  // namespace fp4lm::model
