#include "model/state/sequence_state.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::model {

SequenceState::SequenceState(KvCache kv, int64_t id, const std::vector<size_t>& recurrent_floats,
                             std::vector<const RecurrentReplay*> replays)
    : kv_(std::move(kv)), id_(id), replays_(std::move(replays)), logs_(recurrent_floats.size()) {
  if (!replays_.empty() && replays_.size() != recurrent_floats.size())
    fail("sequence state: {} replayers for {} recurrent slots", replays_.size(), recurrent_floats.size());
  for (size_t n : recurrent_floats) {
    offsets_.push_back(half_);
    half_ += n;
  }
  recurrent_.assign(2 * half_, 0.0f);
}

void SequenceState::clear() {
  kv_.clear();
  std::fill(recurrent_.begin(), recurrent_.end(), 0.0f);
  cur_ = 0;
  staged_ = false;
  lost_ = false;
  rope_delta_ = 0;
  rewindable_ = false;
}

void SequenceState::truncate(int64_t n) {
  if (n < 0 || n > length()) fail("sequence state: cannot truncate {} positions to {}", length(), n);
  if (has_recurrent() && n != length()) {
    if (n == 0) clear();
    else rewind_recurrent(n);
    return;
  }
  if (n == 0) lost_ = false;
  if (n > 0 && !kv_.can_rewind_to(n))
    fail("sequence state: cannot truncate {} positions to {}: a sliding-window layer no longer holds the window "
         "before position {}",
         length(), n, n);
  kv_.set_length(n);
}

void SequenceState::rewind_recurrent(int64_t n) {
  if (!rewindable_ || n < length0_)
    fail("sequence state {}: cannot truncate {} positions to {}: a recurrent state can only be reset to 0 or cut "
         "back inside its last forward call when that call was rewindable ({})",
         id_, length(), n,
         rewindable_ ? fmt::format("the last call began at position {}", length0_) : "the last call was not");
  for (size_t slot = 0; slot < offsets_.size(); ++slot)
    if (replays_.empty() || !replays_[slot])
      fail("sequence state {}: cannot truncate {} positions to {}: recurrent slot {} cannot be replayed", id_,
           length(), n, slot);
  if (!kv_.can_rewind_to(n))
    fail("sequence state {}: cannot truncate {} positions to {}: a sliding-window layer no longer holds the window "
         "before position {}",
         id_, length(), n, n);
  // The other buffer holds the state before the call (see the header): it is the committed one
  // again, and the rows kept are replayed on top of it into the buffer the call had written.
  cur_ = 1 - cur_;
  staged_ = false;
  kv_.set_length(length0_);
  if (n > length0_) {
    try {
      for (const RecurrentReplay* r : replays_) r->replay(*this, n - length0_);
    } catch (...) {
      rewindable_ = false;  // the state is the one before the call, at its length; the log is spent
      throw;
    }
    stage_recurrent();
    commit_recurrent();
  }
  kv_.set_length(n);
}

void SequenceState::begin_forward(bool rewindable) {
  rewindable_ = rewindable;
  length0_ = length();
}

float* SequenceState::replay_log(int64_t slot, int64_t pos, int64_t n, size_t row_floats) {
  if (!rewindable_ || pos < length0_)
    fail("sequence state {}: position {} is not in a rewindable forward call", id_, pos);
  std::vector<float>& log = logs_[static_cast<size_t>(slot)];
  const size_t end = static_cast<size_t>(pos + n - length0_) * row_floats;
  if (log.size() < end) log.resize(end);
  return log.data() + static_cast<size_t>(pos - length0_) * row_floats;
}

size_t SequenceState::replay_log_bytes() const {
  size_t b = 0;
  for (const std::vector<float>& log : logs_) b += log.size() * sizeof(float);
  return b;
}

void SequenceState::commit_recurrent() {
  if (staged_) cur_ = 1 - cur_;
  staged_ = false;
}

void SequenceState::abandon_forward(int64_t n) {
  staged_ = false;
  rewindable_ = false;
  lost_ = lost_ || !kv_.can_rewind_to(n);
  kv_.set_length(n);
}

void SequenceState::save_recurrent(void* dst) const {
  if (half_ > 0) std::memcpy(dst, buffer(cur_), half_ * sizeof(float));
}

void SequenceState::resume_at(int64_t length, const void* recurrent) {
  if (kv_.length() != 0 || lost_) fail("sequence state {}: can resume only an empty sequence", id_);
  if (has_recurrent() && !recurrent && length > 0)
    fail("sequence state {}: resuming at {} positions needs the recurrent state there", id_, length);
  kv_.set_length(length);
  staged_ = false;
  rewindable_ = false;
  if (recurrent && half_ > 0) std::memcpy(buffer(cur_), recurrent, half_ * sizeof(float));
}

}  // namespace fp4lm::model
