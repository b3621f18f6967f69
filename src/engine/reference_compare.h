#pragma once
// How far a (quantized) model's next-token distributions are from a reference model's on the
// same teacher-forced sequences: per predicted token, KL(R‖Q) = Σ_v p_R(v)·(log p_R(v) − log p_Q(v))
// and whether both rank the same token first. `fp4lm eval --reference DIR` prints it.
#include <cstdint>
#include <vector>

#include "engine/evaluator.h"
#include "model/causal_lm.h"

namespace fp4lm::engine {

struct ReferenceComparison {
  EvalResult model, reference;  // each one's own NLL / perplexity on the same positions
  double kl_sum = 0;            // Σ over positions of KL(R‖Q), nats, float64
  int64_t top1_agree = 0;       // positions where argmax Q == argmax R
  double mean_kl() const { return model.tokens > 0 ? kl_sum / static_cast<double>(model.tokens) : 0.0; }
  double top1_agreement() const {
    return model.tokens > 0 ? static_cast<double>(top1_agree) / static_cast<double>(model.tokens) : 0.0;
  }
};

// Runs both models over every sequence in lockstep (64 positions at a time, so memory stays at
// two 64 × vocab logit blocks). Error when the vocabularies differ or a sequence is too long or
// holds an id outside the vocabulary.
ReferenceComparison compare_to_reference(const model::CausalLM& q, const model::CausalLM& r,
                                         const std::vector<std::vector<int32_t>>& sequences);

}  // namespace fp4lm::engine
