#include "model/sequence_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fp4lm::model {

SequenceState::SequenceState(KvCache kv, int64_t id, const std::vector<size_t>& recurrent_floats)
    : kv_(std::move(kv)), id_(id) {
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
}

void SequenceState::truncate(int64_t n) {
  if (n < 0 || n > length()) fail("sequence state: cannot truncate {} positions to {}", length(), n);
  if (has_recurrent() && n != length()) {
    if (n != 0)
      fail("sequence state: cannot truncate {} positions to {}: a recurrent state can only be reset to 0", length(),
           n);
    clear();
    return;
  }
  if (n == 0) lost_ = false;
  if (n > 0 && !kv_.can_rewind_to(n))
    fail("sequence state: cannot truncate {} positions to {}: a sliding-window layer no longer holds the window "
         "before position {}",
         length(), n, n);
  kv_.set_length(n);
}

void SequenceState::commit_recurrent() {
  if (staged_) cur_ = 1 - cur_;
  staged_ = false;
}

void SequenceState::abandon_forward(int64_t n) {
  staged_ = false;
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
  if (recurrent && half_ > 0) std::memcpy(buffer(cur_), recurrent, half_ * sizeof(float));
}

}  // namespace fp4lm::model
