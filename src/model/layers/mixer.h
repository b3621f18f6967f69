#pragma once
// The token-mixing part of a decoder layer — the part that reads other positions of the same
// sequence: attention (model/layers/attention.h), the gated delta-net (model/layers/gated_delta_net.h); a
// Mamba-2 or latent-attention layer implements the same interface. Which mixer decoder layer i
// has is its ArchDef's choice (ArchDef::make_layer / make_mixer), so the type can differ per layer.
//
// State: a mixer keeps nothing per sequence itself. While it loads it declares what it needs per
// sequence (a KV slot, a recurrent slot, a row alignment: model/state/state_layout.h) and keeps the slot
// numbers it was given; every sequence's state is engine-owned (SequenceState, allocated by a
// SequenceStore from those declarations), and a mixer reads and writes only its own slots at the
// span's new positions. The model advances the sequence lengths once every layer has run.
#include <cstddef>
#include <cstdint>
#include <span>

namespace fp4lm::model {

class SequenceState;

// The rows of one sequence inside a batched call: rows [row0, row0 + n) are its positions
// pos0 .. pos0 + n - 1. `rewindable`: its chunk may be cut back afterwards
// (SequenceChunk::rewindable): a recurrent mixer runs these rows in the recurrent form, one at a
// time as decode would, and logs each row for its RecurrentReplay (SequenceState::replay_log).
struct SequenceSpan {
  SequenceState* state = nullptr;
  int64_t row0 = 0, n = 0, pos0 = 0;
  bool rewindable = false;
  // The position after the last token of the forward call's chunk these rows belong to (a chunk
  // runs in steps of prefill_chunk rows); 0 = pos0 + n. LongRoPE picks its factors by it.
  int64_t chunk_end = 0;
  int64_t end() const { return chunk_end > 0 ? chunk_end : pos0 + n; }
  // Multimodal RoPE (model/layers/rope.h set_mrope): when set, row j's (t, h, w) rotary positions are
  // rope_pos[3j .. 3j+2] (SequenceChunk::positions); otherwise all three are its position plus
  // rope_delta (SequenceState::rope_delta: text after an image resumes past its largest position).
  const int64_t* rope_pos = nullptr;
  int64_t rope_delta = 0;
  // Bidirectional image blocks (SequenceChunk::bidir_end): when set, row j attends up to position
  // bidir_end[j] where that is past its own (attention only; other mixers take no such rows).
  const int64_t* bidir_end = nullptr;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // x [m, hidden] (the normed hidden states of every span's rows, in order) -> y [m, hidden].
  // A sequence's rows give the same results whatever else is in the batch.
  virtual void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const = 0;
  virtual size_t weight_bytes() const = 0;
  // Bytes of the parameters it copied outside the loader's kernels (norm weights, conv weights).
  virtual size_t own_param_bytes() const { return 0; }
};

}  // namespace fp4lm::model
