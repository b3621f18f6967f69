#pragma once
// The token-mixing half of a decoder layer — the part that reads other positions of the same
// sequence: attention today (model/attention.h); a layer type with a recurrent state, such as a
// gated delta-net, implements the same interface. Which mixer decoder layer i has is its
// ArchDef's choice (ArchDef::make_mixer), so the type can differ per layer index.
//
// State: a mixer keeps nothing per sequence itself. Every sequence's state is engine-owned
// (SequenceState, allocated by a SequenceStore); a mixer reads and writes only its own part of
// it (attention: its layer of the KV cache) at the span's new positions. The model advances
// the sequence lengths once every layer has run.
#include <cstddef>
#include <cstdint>
#include <span>

namespace fp4lm::model {

class SequenceState;

// The rows of one sequence inside a batched call: rows [row0, row0 + n) are its positions
// pos0 .. pos0 + n - 1.
struct SequenceSpan {
  SequenceState* state = nullptr;
  int64_t row0 = 0, n = 0, pos0 = 0;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // x [m, hidden] (the normed hidden states of every span's rows, in order) -> y [m, hidden].
  // A sequence's rows give the same results whatever else is in the batch.
  virtual void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const = 0;
  virtual size_t weight_bytes() const = 0;
};

}  // namespace fp4lm::model
