#pragma once
// Speculative method "mtp": drafts from the checkpoint's own MTP head (model/layers/mtp_head.h). Per
// sequence it keeps the head's state (the K/V of its one layer) and the target's final normed
// hidden states of the positions the head has not read yet. The head needs, for position q, the
// token at q + 1, so it runs behind the target: a draft call first catches up over every position
// the target has computed (the whole prompt on the first call; after a verify step, the last token
// and the accepted drafts), whose last row gives draft 1, then one row per further draft, fed its
// own output. Those further rows are speculative and cut off at the next call. Drafts are the
// head's argmax (a deterministic draft: Sampler::verify's rejection sampling stays exact).
// The head reads every position's row once, in order, so a sequence that is not drafting (no
// draft budget for it, a long prompt prefilled in chunks) would hold a row per position until its
// next draft: after a forward that cannot be cut back, a sequence holding more than
// kMaxUnreadRows rows has the head read all but the last (the last needs the next token) in one
// batched pass without logits. The head's K/V, and so every draft, are the same bits as reading
// them all at the next draft (its rows' results do not depend on how they are cut into steps).
// Between forwards a sequence so holds at most max(kMaxUnreadRows, k + 1) rows (a verify chunk
// of k drafts adds k + 1 to none, since its draft call read them all).
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "model/state/sequence_state.h"

namespace fp4lm::engine {

class MtpDrafter {
 public:
  static constexpr int64_t kMaxUnreadRows = 16;

  explicit MtpDrafter(const model::CausalLM& lm) : lm_(lm) {}

  void allocate(int64_t seq, int64_t capacity);
  void release(int64_t seq) { seqs_.erase(seq); }
  // Where the target's forward writes the hidden states of `n` new positions of `seq` starting at
  // `pos0`, whose tokens are tokens[0, n); they become the sequence's unread rows.
  float* hidden_rows(int64_t seq, int64_t pos0, int64_t n, const int32_t* tokens);
  // After the target's forward over `chunks` succeeded: the head reads the rows of each sequence
  // whose chunk was not rewindable and which holds more than kMaxUnreadRows (see above).
  void settle(std::span<const StepChunk> chunks);
  // The target was cut back to `length` positions (speculative verify): unread rows past it go.
  void rewind(int64_t seq, int64_t length);
  // Up to ask.k drafts after ask.history (prompt + output; the target holds all but its last
  // token) for each ask: one batched pass of the head per draft position.
  std::vector<std::vector<int32_t>> draft(std::span<const StepModel::DraftAsk> asks);

  // The target's hidden rows `seq` holds now, and the head's state (tests).
  int64_t held_rows(int64_t seq) const { return static_cast<int64_t>(get(seq).tokens.size()); }
  const model::SequenceState& head_state(int64_t seq) const { return get(seq).state; }
  // The most a sequence holds between forwards while speculation drafts up to k tokens a step:
  // max(kMaxUnreadRows, k + 1) rows of hidden floats and their tokens.
  size_t held_bytes(int64_t k) const;

 private:
  struct Seq {
    model::SequenceState state;  // the head's K/V; positions [0, read) are final
    int64_t read = 0;            // positions the head has read for good
    std::vector<float> rows;     // the target's hidden states of positions [read, read + rows / hidden)
    std::vector<int32_t> tokens;  // the target's tokens at those positions
  };
  Seq& get(int64_t seq) { return const_cast<Seq&>(std::as_const(*this).get(seq)); }
  const Seq& get(int64_t seq) const;
  void release_spare(Seq& s) const;
  const model::CausalLM& lm_;
  std::map<int64_t, Seq> seqs_;
};

}  // namespace fp4lm::engine
