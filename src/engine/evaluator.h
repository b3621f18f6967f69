#pragma once
// Teacher-forced scoring of token sequences: every position t >= 1 is predicted from tokens
// [0, t); NLL = -log softmax(logits_{t-1})[token_t], in float64 from the model's logits.
// The per-position hook exposes the full log-probability vector, so a comparison against a
// reference model (KL(R‖Q), top-1 agreement) can be built on the same pass.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/step_model.h"
#include "model/causal_lm.h"

namespace fp4lm::engine {

struct PositionScore {
  int64_t sequence = 0;  // index into the evaluated sequences
  int64_t position = 0;  // index of the predicted token in its sequence (>= 1)
  int32_t target = 0;    // that token
  double nll = 0;        // -log p(target)
  const float* logprobs = nullptr;  // log-softmax over the vocabulary, [vocab]
  int64_t vocab = 0;
};
using PositionCallback = std::function<void(const PositionScore&)>;

struct EvalResult {
  int64_t sequences = 0;
  int64_t tokens = 0;  // predicted positions
  double nll_sum = 0;
  double mean_nll() const { return tokens > 0 ? nll_sum / static_cast<double>(tokens) : 0.0; }
  double perplexity() const;
};

// Scores one sequence (index `seq` in callbacks); sequences of fewer than 2 tokens score nothing.
// Error when it is longer than the model's max_model_len. Through a StepModel, so a pipeline of
// MPI ranks (dist::PipelineStepModel) scores exactly as one process does.
EvalResult score_sequence(StepModel& model, const std::vector<int32_t>& ids, int64_t seq = 0,
                          const PositionCallback& on_position = {});
EvalResult evaluate(StepModel& model, const std::vector<std::vector<int32_t>>& sequences,
                    const PositionCallback& on_position = {});
// The same on one process's model (through a CausalLmStepModel).
EvalResult score_sequence(const model::CausalLM& lm, const std::vector<int32_t>& ids, int64_t seq = 0,
                          const PositionCallback& on_position = {});
EvalResult evaluate(const model::CausalLM& lm, const std::vector<std::vector<int32_t>>& sequences,
                    const PositionCallback& on_position = {});

// log-softmax of logits[0, n) in float64 into out (float32).
void log_softmax(const float* logits, int64_t n, float* out, double* logsumexp = nullptr);

}  // namespace fp4lm::engine
