#pragma once
// DiffusionGemma (transformers' DiffusionGemmaForBlockDiffusion): Gemma-4-MoE blocks used twice.
// The encoder is causal and writes the prompt's (and each accepted canvas's) K/V; the decoder
// reads that K/V without writing it and attends bidirectionally over it and a canvas of
// `canvas_length` tokens, whose input embeddings carry a self-conditioning signal from the
// previous denoising step's logits. Both share every weight but the encoder's own layer_scalar.
//
// It is not a CausalLM (no per-token decode step, no paged KV): its own float32 forwards, whose
// weights are Gemma 4's engine layers (model::Linear / FusedMoe, built by model::ModelLoader from
// the mapped checkpoint in any format the quant methods read: float, NVFP4, FP8, ...). Images and
// the encoder's use_bidirectional_attention "all" are refused by name.
// engine/diffusion_generator.h runs the block-diffusion loop over it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/engine_options.h"

namespace fp4lm::io {
class Checkpoint;
}

namespace fp4lm::model {

inline constexpr const char* kDiffusionGemmaArch = "DiffusionGemmaForBlockDiffusion";

struct DiffusionGemmaLayerConfig {
  bool sliding = false;
  int64_t head_dim = 0;
  int64_t kv_heads = 0;
  std::vector<float> inv_freq;  // head_dim / 2 entries (proportional RoPE: zeros past its angles)
};

struct DiffusionGemmaConfig {
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0;
  int64_t num_experts = 0, top_k_experts = 0, moe_intermediate_size = 0;
  int64_t sliding_window = 0, canvas_length = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double final_logit_softcapping = 0;  // 0: none
  int64_t pad_token_id = 0;
  std::vector<int64_t> eos_token_ids;
  bool tie_word_embeddings = true;
  std::vector<DiffusionGemmaLayerConfig> layers;
};

// config.json of a DiffusionGemmaForBlockDiffusion checkpoint: every key of the top level and of
// text_config read or refused by name (vision_config: the tower is not run, its keys not read).
// Error naming `path` and the field.
DiffusionGemmaConfig parse_diffusion_gemma_config(const nlohmann::json& config, const std::string& path);

// Whether config.json names this architecture (first `architectures` entry or model_type).
bool is_diffusion_gemma(const nlohmann::json& config);

// The encoder's K/V of one sequence, per layer: [positions][kv_heads * head_dim], post-norm and
// post-RoPE. Sliding layers keep their last sliding_window - 1 positions, as transformers'
// DynamicSlidingWindowLayer does; the decoder reads exactly what is kept.
struct DiffusionGemmaCache {
  struct Layer {
    std::vector<float> k, v;
    int64_t rows = 0;
  };
  std::vector<Layer> layers;
  int64_t length = 0;  // positions encoded so far (the next position)
};

class DiffusionGemma {
 public:
  // Error naming the directory / tensor / field on a bad checkpoint.
  // `opts`: the dtype the Linear layers round their activations to (auto: the checkpoint's),
  // backends and NVFP4 activation options, as for a CausalLM.
  static std::unique_ptr<DiffusionGemma> load(const std::string& dir, const EngineOptions& opts = {});
  ~DiffusionGemma();

  const DiffusionGemmaConfig& config() const { return cfg_; }
  double load_seconds() const { return load_seconds_; }
  // The Linear / MoE layers' resident weight bytes (NVFP4: ~4.5 bits a weight; the embedding read
  // in place is not counted).
  size_t weight_bytes() const { return weight_bytes_; }
  // The checkpoint's generation_config.json (nullopt without one): the diffusion schedule.
  const std::optional<nlohmann::json>& generation_config() const;
  DiffusionGemmaCache new_cache() const;

  // The causal encoder over `ids` at positions cache.length onwards; appends their K/V to cache.
  // Returns the softcapped logits [ids.size(), vocab] when `logits`, else empty.
  std::vector<float> encode(DiffusionGemmaCache& cache, std::span<const int32_t> ids, bool logits) const;
  // The decoder's softcapped logits [canvas.size(), vocab] for `canvas` at positions
  // cache.length onwards, reading (not writing) the cache. `self_conditioning`: the previous
  // step's processed logits [canvas.size(), vocab], or empty for none (the first step).
  std::vector<float> decode(const DiffusionGemmaCache& cache, std::span<const int32_t> canvas,
                            std::span<const float> self_conditioning) const;

  // Several sequences in one forward (the serving engine's batch): their rows go through every
  // Linear / MoE call together, attention stays within each sequence. Each result is bit-identical
  // to the single-sequence call (the kernels' batch invariance; --a16-max-tokens is decided per
  // sequence, as the causal forward does). Each item's cache appears once.
  struct EncodeItem {
    DiffusionGemmaCache* cache;
    std::span<const int32_t> ids;
  };
  struct DecodeItem {
    const DiffusionGemmaCache* cache;
    std::span<const int32_t> canvas;
    std::span<const float> self_conditioning;
  };
  // encode(cache, ids, false) of every item.
  void encode_batch(std::span<const EncodeItem> items) const;
  // decode(...) of every item, in order.
  std::vector<std::vector<float>> decode_batch(std::span<const DecodeItem> items) const;

  struct Weights;

 private:
  DiffusionGemma() = default;
  // A sequence's rows in a batched forward: `n` rows at positions pos0.., reading `read`'s K/V
  // (the decoder) or appending to `write` (the encoder).
  struct Segment {
    int64_t n = 0, pos0 = 0;
    const DiffusionGemmaCache* read = nullptr;
    DiffusionGemmaCache* write = nullptr;
  };
  std::vector<float> run_layers(std::vector<float> x, std::span<const Segment> segs, bool encoder) const;
  std::vector<float> logits_of(std::vector<float> x, int64_t n) const;
  std::vector<std::vector<float>> encode_group(std::span<const EncodeItem> items, bool logits) const;
  std::vector<std::vector<float>> decode_group(std::span<const DecodeItem> items) const;
  // Runs `group(indices)` over the items' indices: all together, or with --a16-max-tokens the
  // items of at most that many rows and the others as two groups, each under its A16Scope.
  template <class Rows, class Group>
  void by_a16_choice(size_t count, Rows rows, Group group) const;
  int64_t a16_max_tokens_ = 0;
  DiffusionGemmaConfig cfg_;
  std::shared_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<Weights> w_;
  double load_seconds_ = 0;
  size_t weight_bytes_ = 0;
};

}  // namespace fp4lm::model
