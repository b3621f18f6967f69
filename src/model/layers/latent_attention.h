#pragma once
// Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2, GLM-4.7-Flash), transformers' semantics:
//   q   = q_b_proj(q_a_layernorm(q_a_proj(x)))   (or q_proj(x) when q_lora_rank is null)
//         per head [q_nope (qk_nope_head_dim) | q_rope (qk_rope_head_dim)]
//   kv  = kv_a_proj_with_mqa(x) = [c (kv_lora_rank) | k_rope (qk_rope_head_dim, one head shared)]
//   c   = kv_a_layernorm(c);  q_rope, k_rope rotated (interleaved pairs when rope_interleave)
//   per head h: k = [W_kb[h] c | k_rope], v = W_vb[h] c, with kv_b_proj = [W_kb[h]; W_vb[h]] per head
//   softmax(q·k × scale) with scale = qk_head_dim^-0.5 × yarn mscale(factor, mscale_all_dim)²
//   y = o_proj(attention output [num_heads × v_head_dim])
// The cache holds the latent [c | k_rope] of each position (one key-only KV slot of
// kv_lora_rank + qk_rope_head_dim values), not per-head K/V. Two forms of the same attention:
// "absorbed" (W_kb folded into the query: q_lat = W_kb[h]ᵀ q_nope, scores q_lat·c + q_rope·k_rope;
// W_vb applied once to the weighted sum of latents) reads the latent cache once per step and is
// what runs; "expanded" (K/V rebuilt from the latents with kv_b_proj, as HF computes it) is the
// check, chosen by FP4LM_MLA_FORM=expanded. kv_b_proj is kept dequantized in float32 for both.
// DeepSeek Sparse Attention (ModelConfig::dsa, DeepSeek-V3.2 / GLM-5): each query attends only
// to the positions its layer's indexer selected (model/layers/dsa_indexer.h), or, on a GLM-5 "shared"
// layer, those the previous full layer selected in the same step.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "model/layers/dsa_indexer.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

enum class MlaForm { absorbed, expanded };
// The form FP4LM_MLA_FORM asks for ("absorbed" or unset: absorbed; "expanded"); Error otherwise.
MlaForm mla_form_from_env();

class LatentAttention final : public Mixer {
 public:
  // Loads model.layers.<layer>.self_attn.* and declares its latent KV slot in b.state (FP8
  // cache: scale self_attn.k_scale, k_proj.k_scale or kv_a_proj_with_mqa.k_scale, 1.0 when absent).
  LatentAttention(const LayerBuild& b, int64_t layer, MlaForm form = mla_form_from_env());
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;
  size_t weight_bytes() const override;
  size_t own_param_bytes() const override;
  int64_t kv_slot() const { return kv_slot_; }
  MlaForm form() const { return form_; }

 private:
  int64_t layer_, kv_slot_, heads_, q_lora_, kv_lora_, dn_, dr_, dv_;
  bool interleave_;
  double scale_;
  MlaForm form_;
  DType act_;
  const Rope& rope_;
  std::unique_ptr<Linear> q_a_, q_b_, q_, kv_a_, o_;
  RmsNorm q_a_norm_, kv_a_norm_;
  std::vector<float> kv_b_;  // [heads × (dn + dv), kv_lora] dequantized kv_b_proj
  std::unique_ptr<DsaIndexer> indexer_;     // a DSA layer that selects (null: dense, or a shared layer)
  std::shared_ptr<DsaSelection> selection_;  // a DSA layer: the step's selections (null: dense)
};

}  // namespace fp4lm::model
