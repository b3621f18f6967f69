#include "engine/causal_lm_step_model.h"

namespace fp4lm::engine {

void CausalLmStepModel::forward(std::span<const StepChunk> chunks) {
  batch_.clear();
  for (const StepChunk& c : chunks) {
    model::SequenceChunk s;
    s.state = &store_.get(c.seq);
    s.tokens = c.tokens;
    s.n = c.n;
    s.logits = c.logits ? model::LogitsMode::last : model::LogitsMode::none;
    s.out = c.logits;
    batch_.push_back(s);
  }
  lm_.forward(batch_);  // every sequence of the step in one pass over the weights
}

}  // namespace fp4lm::engine
