#pragma once
// Speculative method "mtp": drafts from the checkpoint's own MTP head (model/mtp_head.h). Per
// sequence it keeps the head's state (the K/V of its one layer) and the target's final normed
// hidden states of the positions the head has not read yet. The head needs, for position q, the
// token at q + 1, so it runs behind the target: a draft call first catches up over every position
// the target has computed (the whole prompt on the first call; after a verify step, the last token
// and the accepted drafts), whose last row gives draft 1, then one row per further draft, fed its
// own output. Those further rows are speculative and cut off at the next call. Drafts are the
// head's argmax (a deterministic draft: Sampler::verify's rejection sampling stays exact).
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "model/sequence_state.h"

namespace fp4lm::engine {

class MtpDrafter {
 public:
  explicit MtpDrafter(const model::CausalLM& lm) : lm_(lm) {}

  void allocate(int64_t seq, int64_t capacity);
  void release(int64_t seq) { seqs_.erase(seq); }
  // Where the target's forward writes the hidden states of `n` new positions of `seq` starting at
  // `pos0`; they become the sequence's unread rows.
  float* hidden_rows(int64_t seq, int64_t pos0, int64_t n);
  // The target was cut back to `length` positions (speculative verify): unread rows past it go.
  void rewind(int64_t seq, int64_t length);
  // Up to ask.k drafts after ask.history (prompt + output; the target holds all but its last
  // token) for each ask: one batched pass of the head per draft position.
  std::vector<std::vector<int32_t>> draft(std::span<const StepModel::DraftAsk> asks);

 private:
  struct Seq {
    model::SequenceState state;  // the head's K/V; positions [0, read) are final
    int64_t read = 0;            // positions the head has read for good
    std::vector<float> rows;     // the target's hidden states of positions [read, read + rows / hidden)
  };
  Seq& get(int64_t seq);
  const model::CausalLM& lm_;
  std::map<int64_t, Seq> seqs_;
};

}  // namespace fp4lm::engine
