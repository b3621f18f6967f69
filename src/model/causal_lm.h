#pragma once
// A loaded decoder-only language model: embedding, decoder layers (RMSNorm -> attention ->
// residual -> RMSNorm -> feed-forward -> residual), final norm and lm_head. forward() runs a
// span of tokens of one sequence at the next positions of its KV cache: a prompt as one batch
// (in chunks of prefill_chunk tokens, through the GEMM kernels) or one decode token.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/embedding.h"
#include "model/engine_options.h"
#include "model/feed_forward.h"
#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/model_config.h"
#include "model/rms_norm.h"
#include "model/rope.h"

namespace fp4lm::model {

class ModelLoader;

// Which logits forward() produces.
enum class LogitsMode { none, last, all };

struct LoadOptions {
  // KV capacity of new caches; 0 = min(max_position_embeddings, 8192). Must not exceed
  // max_position_embeddings.
  int64_t max_model_len = 0;
  int64_t prefill_chunk = 256;  // tokens per prefill batch
  bool progress = true;         // a progress line on stderr when it is a terminal
};

class CausalLM {
 public:
  static std::unique_ptr<CausalLM> load(const std::string& dir, const EngineOptions& opts,
                                        const LoadOptions& load = {});
  static std::unique_ptr<CausalLM> load(std::shared_ptr<io::Checkpoint> ckpt, const EngineOptions& opts,
                                        const LoadOptions& load = {});
  ~CausalLM();

  const ModelConfig& config() const;
  const ModelLoader& loader() const { return *loader_; }
  const io::Checkpoint& checkpoint() const { return *ckpt_; }
  DType dtype() const { return dtype_; }  // activation / KV dtype
  int64_t vocab_size() const { return config().vocab_size; }
  int64_t max_model_len() const { return max_model_len_; }
  // EOS ids from config.json and generation_config.json (deduplicated).
  const std::vector<int64_t>& eos_ids() const { return eos_ids_; }
  double load_seconds() const { return load_seconds_; }
  // Resident weight bytes: every kernel's weights, the norms and the embedding table.
  size_t weight_bytes() const;

  // A fresh cache for one sequence; capacity 0 = max_model_len().
  KvCache new_cache(int64_t capacity = 0) const;

  // Runs tokens[0, n) at positions cache.length() .. cache.length()+n-1, appends their K/V and
  // advances the cache. logits: LogitsMode::last -> [vocab] of the last token, all -> [n, vocab]
  // (float32; rounded to the activation dtype like the lm_head output). Error when the sequence
  // would exceed the cache's capacity, or on a token id outside the vocabulary.
  void forward(KvCache& cache, const int32_t* tokens, int64_t n, LogitsMode mode, float* logits) const;

 private:
  CausalLM() = default;
  struct Layer {
    RmsNorm input_norm, post_norm;
    std::unique_ptr<Attention> attn;
    std::unique_ptr<FeedForward> ffn;
  };
  void forward_chunk(KvCache& cache, const int32_t* tokens, int64_t m, LogitsMode mode, float* logits) const;

  std::shared_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<ModelLoader> loader_;
  DType dtype_ = DType::F32;
  int64_t max_model_len_ = 0, prefill_chunk_ = 256;
  std::vector<int64_t> eos_ids_;
  double load_seconds_ = 0;
  Rope rope_;
  Embedding embed_;
  std::vector<Layer> layers_;
  RmsNorm final_norm_;
  std::unique_ptr<Linear> lm_head_;
};

}  // namespace fp4lm::model
