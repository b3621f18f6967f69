#include "model/layers/recurrent_mixer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

RecurrentMixer::RecurrentMixer(StateLayout& layout, int64_t kernel, int64_t conv_dim, int64_t gate_floats,
                               size_t recurrence_floats)
    : kernel_(kernel),
      conv_dim_(conv_dim),
      gate_floats_(gate_floats),
      state_floats_(static_cast<size_t>((kernel - 1) * conv_dim) + recurrence_floats) {
  slot_ = layout.add_recurrent(state_floats_, this);
}

int64_t RecurrentMixer::span_rows(std::span<const SequenceSpan> spans, const char* who) {
  int64_t m = 0;
  for (const SequenceSpan& s : spans) {
    if (s.row0 != m) fail("{}: batch spans must cover the rows in order", who);
    m += s.n;
  }
  return m;
}

float* RecurrentMixer::carry(SequenceState& state) const {
  const float* in = state.recurrent_in(slot_);
  float* out = state.recurrent_out(slot_);
  if (in != out) std::memcpy(out, in, state_floats_ * sizeof(float));
  return out;
}

void RecurrentMixer::log_row_of(const float* pre, const float* gates, float* row) const {
  std::copy_n(pre, conv_dim_, row);
  std::copy_n(gates, gate_floats_, row + conv_dim_);
}

float* RecurrentMixer::recurrence(SequenceState& state) const {
  return state.recurrent_out(slot_) + (kernel_ - 1) * conv_dim_;
}

void RecurrentMixer::replay(SequenceState& state, int64_t rows) const {
  float* window = carry(state);
  rerun(state, window, state.replay_log(slot_), rows);
}

}  // namespace fp4lm::model
