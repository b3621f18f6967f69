#include "engine/causal_lm_step_model.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::engine {

void CausalLmStepModel::forward(std::span<const StepChunk> chunks) {
  batch_.clear();
  for (const StepChunk& c : chunks) {
    model::SequenceChunk s;
    s.state = &store_.get(c.seq);
    s.tokens = c.tokens;
    s.n = c.n;
    s.logits = !c.logits ? model::LogitsMode::none : c.all_logits ? model::LogitsMode::all : model::LogitsMode::last;
    s.out = c.logits;
    if (mtp_) s.hidden = mtp_->hidden_rows(c.seq, s.state->length(), c.n, c.tokens);
    s.rewindable = c.rewindable;
    s.embeds = c.embeds;
    s.positions = c.positions;
    s.bidir_end = c.bidir_end;
    batch_.push_back(s);
  }
  try {
    lm_.forward(batch_);  // every sequence of the step in one pass over the weights
  } catch (...) {
    if (mtp_)  // the states are as before the call; so are the head's unread rows
      for (size_t i = 0; i < chunks.size(); ++i) mtp_->rewind(chunks[i].seq, batch_[i].state->length());
    throw;
  }
  if (mtp_) mtp_->settle(chunks);  // sequences not drafting: the head reads their rows (bounded)
}

int64_t CausalLmStepModel::allocate(int64_t capacity) {
  const int64_t seq = store_.allocate(capacity);
  try {
    if (mtp_) mtp_->allocate(seq, capacity);
  } catch (...) {
    store_.release(seq);
    throw;
  }
  return seq;
}

void CausalLmStepModel::release(int64_t seq) {
  if (mtp_) mtp_->release(seq);
  store_.release(seq);
}

void CausalLmStepModel::rewind(int64_t seq, int64_t length) {
  store_.get(seq).truncate(length);
  if (mtp_) mtp_->rewind(seq, length);
}

size_t CausalLmStepModel::speculation_bytes(int64_t k) const {
  return lm_.state_layout().replay_log_bytes(k + 1) + (mtp_ ? mtp_->held_bytes(k) : 0);
}

std::vector<std::vector<int32_t>> CausalLmStepModel::draft(std::span<const DraftAsk> asks) {
  if (!mtp_) return std::vector<std::vector<int32_t>>(asks.size());
  return mtp_->draft(asks);
}

PrefixSupport CausalLmStepModel::prefix_support(int64_t block_size) const {
  PrefixSupport s;
  if (mtp_) {  // the head reads the target's hidden state of every position, which is not cached
    s.unsupported = "speculative method 'mtp' keeps the MTP head's own K/V, which is not cached";
    return s;
  }
  const model::StateLayout& layout = lm_.state_layout();
  s.block_bytes = model::KvCache::reserved_bytes(layout.kv_slots(), block_size, block_size, lm_.kv_dtype());
  if (!layout.recurrent_slots().empty()) {
    s.snapshot_grid = std::lcm(block_size, layout.row_alignment());
    for (size_t f : layout.recurrent_slots()) s.state_bytes += f * sizeof(float);
  }
  for (const model::KvSlotShape& slot : layout.kv_slots())
    if (slot.window > 0) {
      const int64_t rows = model::KvCache::slot_rows(slot, lm_.max_model_len(), lm_.prefill_chunk());
      if (rows >= lm_.max_model_len()) continue;  // the ring never wraps
      const int64_t most = rows - block_size + 1;
      if (most < 1) {
        s.unsupported = fmt::format("a sliding-window ring of {} rows is shorter than a block of {} tokens", rows,
                                    block_size);
        return s;
      }
      s.max_chunk = s.max_chunk > 0 ? std::min(s.max_chunk, most) : most;
    }
  return s;
}

void CausalLmStepModel::save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                                       std::vector<uint8_t>* state) {
  const model::SequenceState& st = store_.get(seq);
  kv.resize(st.kv().block_bytes(n));
  st.kv().save_rows(pos0, n, kv.data());
  if (!state) return;
  if (pos0 + n != st.length())
    fail("prefix cache: the recurrent state of sequence {} is at {} positions, not {}", seq, st.length(), pos0 + n);
  state->resize(st.recurrent_floats() * sizeof(float));
  st.save_recurrent(state->data());
}

void CausalLmStepModel::load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks,
                                       int64_t block_size, const std::vector<uint8_t>* state) {
  model::SequenceState& st = store_.get(seq);
  const int64_t length = static_cast<int64_t>(blocks.size()) * block_size;
  const size_t want = st.kv().block_bytes(block_size);
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b]->size() != want)
      fail("prefix cache: block {} holds {} bytes, the model's blocks {}", b, blocks[b]->size(), want);
    st.kv().load_rows(static_cast<int64_t>(b) * block_size, block_size, blocks[b]->data(), length);
  }
  if (state && state->size() != st.recurrent_floats() * sizeof(float))
    fail("prefix cache: a state snapshot of {} bytes, the model's is {}", state->size(),
         st.recurrent_floats() * sizeof(float));
  st.resume_at(length, state ? state->data() : nullptr);
}

}  // namespace fp4lm::engine
