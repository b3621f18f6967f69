#pragma once
// Softmax top-k routing of sparse MoE blocks (Qwen3-MoE, Mixtral, Qwen2-MoE), as HF computes it:
// softmax over the router logits in float32, the top_k largest probabilities (ties: the lower
// expert id first), renormalized to sum 1 when the architecture asks (norm_topk_prob; Mixtral
// always), then rounded to the activation dtype.
#include <cstdint>

#include "core/dtype.h"

namespace fp4lm::model {

// logits [m, num_experts] -> ids [m, top_k], weights [m, top_k], each row by descending weight.
void route_topk(const float* logits, int64_t m, int64_t num_experts, int64_t top_k, bool renormalize,
                DType act, int32_t* ids, float* weights);

}  // namespace fp4lm::model
