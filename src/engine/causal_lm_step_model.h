#pragma once
// StepModel over a loaded model::CausalLM: sequence states in a model::SequenceStore (each
// reserved for its capacity, touched only as it fills, returned to the OS on release), and one
// batched CausalLM::forward per engine step.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/mtp_drafter.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "model/state/sequence_store.h"

namespace fp4lm::engine {

class CausalLmStepModel : public StepModel {
 public:
  explicit CausalLmStepModel(const model::CausalLM& lm)
      : lm_(lm), store_(lm), mtp_(lm.has_mtp() ? std::make_unique<MtpDrafter>(lm) : nullptr) {}
  int64_t vocab_size() const override { return lm_.vocab_size(); }
  int64_t max_model_len() const override { return lm_.max_model_len(); }
  std::vector<int64_t> eos_ids() const override { return lm_.eos_ids(); }
  size_t bytes_for(int64_t capacity) const override { return lm_.sequence_bytes(capacity); }
  int64_t allocate(int64_t capacity) override;
  void release(int64_t seq) override;
  void forward(std::span<const StepChunk> chunks) override;
  // A recurrent state is cut back by replaying the kept rows of a verify chunk
  // (model/state/sequence_state.h): every recurrent slot must have a replayer.
  bool can_rewind() const override { return lm_.state_layout().can_rewind(); }
  void rewind(int64_t seq, int64_t length) override;
  // The replay log of a (k + 1)-row verify chunk, computed from the layout (what the recurrent
  // mixers log per row), not measured; with the MTP head, the target's hidden rows the drafter
  // holds (MtpDrafter::held_bytes).
  size_t speculation_bytes(int64_t k) const override;
  // What sequence `seq`'s replay log holds now (tests: never more than speculation_bytes).
  size_t replay_log_bytes(int64_t seq) const { return store_.get(seq).replay_log_bytes(); }
  bool can_draft() const override { return mtp_ != nullptr; }
  const MtpDrafter* drafter() const { return mtp_.get(); }  // null without the MTP head
  std::vector<std::vector<int32_t>> draft(std::span<const DraftAsk> asks) override;
  PrefixSupport prefix_support(int64_t block_size) const override;
  void save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                      std::vector<uint8_t>* state) override;
  void load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks, int64_t block_size,
                      const std::vector<uint8_t>* state) override;

 private:
  const model::CausalLM& lm_;
  model::SequenceStore store_;
  std::vector<model::SequenceChunk> batch_;
  std::unique_ptr<MtpDrafter> mtp_;  // the model's MTP head drafts (LoadOptions::mtp)
};

}  // namespace fp4lm::engine
