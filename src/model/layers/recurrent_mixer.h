#pragma once
// The state protocol the recurrent mixers share (the gated delta-net, Mamba-2). Each sequence has
// one recurrent slot (model/state/state_layout.h), a fixed size whatever its length: the causal
// conv's last K-1 input rows [K-1, conv_dim] followed by the recurrence's own state. A forward call
// carries each span's slot forward (SequenceState::recurrent_in -> recurrent_out), runs every row's
// conv step over that window, and logs the rows of a rewindable span (a speculative verify chunk:
// per row its conv input, then its raw gates). replay() re-runs the first logged rows from the
// state before that call through the same row step, so a rewound sequence holds exactly what
// decoding those rows one at a time would have left.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/layers/mixer.h"
#include "model/state/sequence_state.h"

namespace fp4lm::model {

class StateLayout;

class RecurrentMixer : public Mixer, public RecurrentReplay {
 public:
  RecurrentMixer(const RecurrentMixer&) = delete;  // its slot's replayer is `this`
  RecurrentMixer& operator=(const RecurrentMixer&) = delete;

  // Speculative decoding's rewind (SequenceState::truncate): carries the slot from the state
  // before the logged call and hands the log to rerun().
  void replay(SequenceState& state, int64_t rows) const final;
  size_t log_row_floats() const final { return static_cast<size_t>(conv_dim_ + gate_floats_); }
  // Floats of its slot: (K-1)·conv_dim + the recurrence's.
  size_t state_floats() const { return state_floats_; }

 protected:
  // Declares the slot in `layout` (conv kernel K, conv_dim conv channels, gate_floats raw gate
  // values logged per row beside the conv input, recurrence_floats of recurrent state).
  RecurrentMixer(StateLayout& layout, int64_t kernel, int64_t conv_dim, int64_t gate_floats,
                 size_t recurrence_floats);

  // The rows the spans cover, checked to be in order; `who` names the mixer in the error.
  static int64_t span_rows(std::span<const SequenceSpan> spans, const char* who);

  // Every span's rows in order: carries the span's slot forward, logs a rewindable span's rows,
  // and calls step(window, pre, gates, r) for row r (conv input pre = conv_in + r·conv_stride,
  // its gates = gates + r·gate_stride, window = the slot's conv history, which step shifts).
  template <class Step>
  void conv_steps(std::span<const SequenceSpan> spans, const float* conv_in, int64_t conv_stride,
                  const float* gates, int64_t gate_stride, Step&& step) const {
    const size_t log_row = log_row_floats();
    for (const SequenceSpan& s : spans) {
      float* window = carry(*s.state);
      float* log = s.rewindable ? s.state->replay_log(slot_, s.pos0, s.n, log_row) : nullptr;
      for (int64_t t = 0; t < s.n; ++t) {
        const int64_t r = s.row0 + t;
        const float *pre = conv_in + r * conv_stride, *g = gates + r * gate_stride;
        if (log) log_row_of(pre, g, log + static_cast<size_t>(t) * log_row);
        step(window, pre, g, r);
      }
    }
  }

  // The logged rows again: `window` is the carried slot, `log` the rows (conv input, then gates),
  // each log_row_floats() apart. The mixer runs each through its row step and then its
  // recurrence row by row, as forward ran the rewindable span.
  virtual void rerun(SequenceState& state, float* window, const float* log, int64_t rows) const = 0;

  // The recurrence's state in the slot a call writes (past the conv window).
  float* recurrence(SequenceState& state) const;

  int64_t kernel_, conv_dim_;

 private:
  float* carry(SequenceState& state) const;
  void log_row_of(const float* pre, const float* gates, float* row) const;
  int64_t gate_floats_, slot_;
  size_t state_floats_;
};

}  // namespace fp4lm::model
