#pragma once
// The routers of sparse MoE blocks, as HF computes them.
// - Softmax top-k (Qwen3-MoE, Mixtral, Qwen2-MoE): softmax over the router logits in float32,
//   the top_k largest probabilities (ties: the lower expert id first), renormalized to sum 1
//   when the architecture asks (norm_topk_prob; Mixtral always), then rounded to the
//   activation dtype.
// - DeepSeek-style sigmoid top-k (DeepSeek-V3, Kimi K2, GLM-4.x MoE, MiniMax-M2, Nemotron-H):
//   scores = sigmoid(logits); experts are chosen on scores + e_score_correction_bias, within the
//   topk_group groups (of n_group equal groups of consecutive experts) whose two best biased
//   scores sum highest; the weights are the unbiased scores of the chosen experts, divided by
//   their sum (+1e-20) when norm_topk_prob, times routed_scaling_factor.
#include <cstdint>

#include "core/dtype.h"

namespace fp4lm::model {

// logits [m, num_experts] -> ids [m, top_k], weights [m, top_k], each row by descending weight.
void route_topk(const float* logits, int64_t m, int64_t num_experts, int64_t top_k, bool renormalize,
                DType act, int32_t* ids, float* weights);

// The parameters of DeepSeek-style routing (HF keys in parentheses).
struct SigmoidRouting {
  int64_t n_group = 1;        // (n_group) experts split into this many groups; 1 = no group limit
  int64_t topk_group = 1;     // (topk_group) groups the top_k experts are chosen from
  bool renormalize = true;    // (norm_topk_prob)
  double scaling = 1.0;       // (routed_scaling_factor)
};

// logits [m, num_experts] (float32, as HF computes DeepSeek-style routers), bias [num_experts]
// (e_score_correction_bias; nullptr = zero) -> ids [m, top_k], weights [m, top_k], each row by
// descending biased score (ties: the lower expert id first). Weights are rounded to
// `weight_dtype` (F32: kept as computed, as DeepSeek-V3 and GLM do; MiniMax-M2 casts them to
// the logits' dtype). Error when the groups do not divide the experts, a group holds fewer
// than 2 experts (n_group > 1) or the chosen groups hold fewer than top_k experts.
void route_sigmoid_topk(const float* logits, const float* bias, int64_t m, int64_t num_experts, int64_t top_k,
                        const SigmoidRouting& rule, DType weight_dtype, int32_t* ids, float* weights);

}  // namespace fp4lm::model
