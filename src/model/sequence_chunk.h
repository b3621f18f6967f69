#pragma once
// One entry of a batched forward: the next n tokens of one sequence, and which logits to return.
#include <cstdint>

namespace fp4lm::model {

class SequenceState;

// Which logits forward() produces for a chunk.
enum class LogitsMode { none, last, all };

struct SequenceChunk {
  SequenceState* state = nullptr;  // its next n positions are filled; length() advances by n
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  LogitsMode logits = LogitsMode::none;  // none | last -> out [vocab] | all -> out [n, vocab]
  float* out = nullptr;                  // float32, rounded to the activation dtype
  // When set: [n, hidden] the final normed hidden state of every row (what lm_head reads; the
  // MTP head's input, model/layers/mtp_head.h).
  float* hidden = nullptr;
  // The state may be cut back inside this chunk afterwards (SequenceState::truncate; a speculative
  // verify chunk): recurrent mixers run its rows one at a time, exactly as decoding them would,
  // and log what replaying them needs.
  bool rewindable = false;
  // Images (model/image_encoder.h): when set, row i's input is embeds[i] ([hidden] floats) instead
  // of its token's embedding where embeds[i] is not null (an image placeholder's encoder row). With
  // DeepStack (CausalLM::deepstack_levels() L > 0) each such row is followed by its L level rows
  // ([hidden] each), level l added to the row's hidden state after decoder layer l.
  const float* const* embeds = nullptr;
  // Multimodal RoPE: the (t, h, w) rotary positions of the n rows, 3 each (model/layers/mrope_positions.h).
  // After the call the state's rope_delta is the largest of them + 1 - its new length, so the
  // text after continues there (transformers' rope_deltas). Null: positions are length() + i +
  // the state's rope_delta.
  const int64_t* positions = nullptr;
  // Bidirectional attention among an image's tokens (Gemma 3: transformers' token_type_ids
  // blocks): when set, row i's attention reads positions up to bidir_end[i] where that lies past
  // its own position (the last token of its image block), up to its own otherwise. A forward step
  // is never cut inside such a block (the cut moves to the block's start), and a block must end
  // inside the chunk: its rows need every key of the block (an Error otherwise).
  const int64_t* bidir_end = nullptr;
};

}  // namespace fp4lm::model
