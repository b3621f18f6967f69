#include "engine/evaluator.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/error.h"
#include "engine/causal_lm_step_model.h"

namespace fp4lm::engine {

double EvalResult::perplexity() const { return std::exp(mean_nll()); }

void log_softmax(const float* logits, int64_t n, float* out, double* lse_out) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  if (out)
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
  if (lse_out) *lse_out = lse;
}

EvalResult score_sequence(StepModel& model, const std::vector<int32_t>& ids, int64_t seq,
                          const PositionCallback& on_position) {
  EvalResult r;
  r.sequences = 1;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) return r;
  if (n > model.max_model_len())
    fail("sequence {} has {} tokens, more than the maximum model length {} (max_model_len)", seq, n,
         model.max_model_len());
  const int64_t vocab = model.vocab_size();
  // The last token is only a target, never an input.
  const int64_t inputs = n - 1;
  constexpr int64_t kChunk = 64;  // bounds the logits buffer at 64 x vocab floats
  const ScopedSequence scoped(model, inputs);  // released on every exit
  const int64_t id = scoped.id();
  std::vector<float> logits(static_cast<size_t>(std::min(kChunk, inputs) * vocab)), lp;
  if (on_position) lp.resize(static_cast<size_t>(vocab));
  for (int64_t s = 0; s < inputs; s += kChunk) {
    const int64_t m = std::min(kChunk, inputs - s);
    const StepChunk chunk{id, ids.data() + s, m, logits.data(), /*all_logits=*/true};
    model.forward(std::span<const StepChunk>(&chunk, 1));
    for (int64_t i = 0; i < m; ++i) {
      const float* row = logits.data() + i * vocab;
      const int32_t target = ids[s + i + 1];
      if (target < 0 || target >= vocab)
        fail("sequence {}: token id {} at position {} is outside the vocabulary [0, {})", seq, target, s + i + 1,
             vocab);
      double lse = 0;
      log_softmax(row, vocab, on_position ? lp.data() : nullptr, &lse);
      const double nll = lse - static_cast<double>(row[target]);
      r.nll_sum += nll;
      ++r.tokens;
      if (on_position) on_position({seq, s + i + 1, target, nll, lp.data(), vocab});
    }
  }
  return r;
}

EvalResult evaluate(StepModel& model, const std::vector<std::vector<int32_t>>& sequences,
                    const PositionCallback& on_position) {
  EvalResult total;
  for (size_t i = 0; i < sequences.size(); ++i) {
    EvalResult r = score_sequence(model, sequences[i], static_cast<int64_t>(i), on_position);
    total.sequences += 1;
    total.tokens += r.tokens;
    total.nll_sum += r.nll_sum;
  }
  return total;
}

EvalResult score_sequence(const model::CausalLM& lm, const std::vector<int32_t>& ids, int64_t seq,
                          const PositionCallback& on_position) {
  CausalLmStepModel model(lm);
  return score_sequence(model, ids, seq, on_position);
}

EvalResult evaluate(const model::CausalLM& lm, const std::vector<std::vector<int32_t>>& sequences,
                    const PositionCallback& on_position) {
  CausalLmStepModel model(lm);
  return evaluate(model, sequences, on_position);
}

}  // namespace fp4lm::engine
