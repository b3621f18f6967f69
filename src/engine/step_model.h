#pragma once
// What the serving scheduler needs from a model: sequence state it can allocate and release by
// id, the bytes a sequence of a given capacity reserves (admission control), and one forward
// over a batch of chunks of different sequences. Kept this small so the scheduler is tested
// against a fake model; engine/causal_lm_step_model.h binds it to model::CausalLM.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fp4lm::engine {

struct StepChunk {
  int64_t seq = -1;                 // an id from StepModel::allocate
  const int32_t* tokens = nullptr;  // the sequence's next n tokens
  int64_t n = 0;
  float* logits = nullptr;          // nullptr: none; else [vocab] logits of the chunk's last token
};

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual std::vector<int64_t> eos_ids() const = 0;
  // Bytes a sequence of `capacity` positions reserves.
  virtual size_t bytes_for(int64_t capacity) const = 0;
  virtual int64_t allocate(int64_t capacity) = 0;
  virtual void release(int64_t seq) = 0;  // frees its memory at once
  // Runs every chunk (each sequence at most once per call); a sequence's logits must not depend
  // on the other chunks of the call.
  virtual void forward(std::span<const StepChunk> chunks) = 0;
};

}  // namespace fp4lm::engine
