#pragma once
// StepModel over a loaded model::CausalLM: one KV cache per sequence, reserved for its capacity
// and touched only as it fills.
#include <cstdint>
#include <map>

#include "engine/step_model.h"
#include "model/causal_lm.h"

namespace fp4lm::engine {

class CausalLmStepModel : public StepModel {
 public:
  explicit CausalLmStepModel(const model::CausalLM& lm);
  int64_t vocab_size() const override { return lm_.vocab_size(); }
  int64_t max_model_len() const override { return lm_.max_model_len(); }
  std::vector<int64_t> eos_ids() const override { return lm_.eos_ids(); }
  size_t bytes_for(int64_t capacity) const override { return bytes_per_position_ * static_cast<size_t>(capacity); }
  int64_t allocate(int64_t capacity) override;
  void release(int64_t seq) override;
  void forward(std::span<const StepChunk> chunks) override;

 private:
  const model::CausalLM& lm_;
  size_t bytes_per_position_;
  std::map<int64_t, model::KvCache> caches_;
  int64_t next_ = 0;
};

}  // namespace fp4lm::engine
