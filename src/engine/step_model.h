#pragma once
// What the serving scheduler needs from a model: sequence state it can allocate and release by
// id, the bytes a sequence of a given capacity reserves (admission control), and one forward
// over a batch of chunks of different sequences (pipelined: several such forwards in flight).
// Kept this small so the scheduler is tested against a fake model; engine/causal_lm_step_model.h
// binds it to model::CausalLM.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace fp4lm::engine {

struct StepChunk {
  int64_t seq = -1;                 // an id from StepModel::allocate
  const int32_t* tokens = nullptr;  // the sequence's next n tokens
  int64_t n = 0;
  float* logits = nullptr;          // nullptr: none; else [vocab] logits of the chunk's last token
  bool all_logits = false;          // logits is [n, vocab]: every token's (speculative verify)
  bool rewindable = false;          // rewind() may cut the sequence back inside this chunk (verify)
  // A prompt chunk with images (engine/prompt_images.h): per token its encoder row or null, and
  // 3 M-RoPE positions per token (model::SequenceChunk::embeds / positions); null: text only.
  const float* const* embeds = nullptr;
  const int64_t* positions = nullptr;
  // Gemma 3: per token the last position of its bidirectional image block, -1 for text
  // (model::SequenceChunk::bidir_end); null: causal.
  const int64_t* bidir_end = nullptr;
};

// What prefix caching (engine/prefix_cache.h) needs to know about a model's state.
struct PrefixSupport {
  // Non-empty: why this model's state cannot be cached (prefix caching stays off, said once).
  std::string unsupported;
  // > 0: the model keeps a recurrent state, so a cached prefix can resume only at a block end
  // that is a multiple of this and where the state was saved (after a forward call that ended
  // there); a multiple of the layout's row alignment, so cutting a call there changes no result.
  int64_t snapshot_grid = 0;
  // > 0: a sliding-window ring keeps only its last positions, so a prefill chunk may be at most
  // this long for every block it completes (from its first position on) to be readable after
  // the forward: the ring's rows - block_size + 1.
  int64_t max_chunk = 0;
  size_t block_bytes = 0;  // what save_positions writes for block_size positions
  size_t state_bytes = 0;  // and for the recurrent state (0: none)
};

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual std::vector<int64_t> eos_ids() const = 0;
  // Bytes a sequence of `capacity` positions reserves.
  virtual size_t bytes_for(int64_t capacity) const = 0;
  virtual int64_t allocate(int64_t capacity) = 0;
  virtual void release(int64_t seq) = 0;  // frees its memory at once
  // Runs every chunk (each sequence at most once per call); a sequence's logits must not depend
  // on the other chunks of the call.
  virtual void forward(std::span<const StepChunk> chunks) = 0;

  // ---- pipelining (dist/pipeline_step_model.h): forwards that overlap across stages ----
  // How many forwards may be submitted before the oldest is collected (1: none overlap).
  virtual int64_t max_in_flight() const { return 1; }
  // Starts a forward over `chunks`, with forward()'s contract; no sequence may be in two forwards
  // in flight, and the chunks' logits buffers must stay valid until the forward is collected.
  // Forwards complete in submission order. A model without pipelining runs it at once.
  virtual void submit(std::span<const StepChunk> chunks) { forward(chunks); }
  // Waits for the oldest submitted forward: its logits are written, or its error is thrown.
  virtual void collect() {}

  // Speculative decoding: whether a sequence can be cut back (rewind) after a verify step whose
  // last drafts were rejected.
  virtual bool can_rewind() const { return false; }
  // Bytes a sequence holds besides bytes_for() while speculation runs verify chunks of up to
  // k + 1 rows: the replay log of its recurrent layers (model/state/sequence_state.h) and what a
  // drafter keeps for it. The scheduler reserves them with the sequence.
  virtual size_t speculation_bytes(int64_t k) const {
    (void)k;
    return 0;
  }
  // Drops positions from `length` on (length <= the sequence's length). A model with a recurrent
  // state can cut it back only inside the sequence's last chunk, when that was rewindable.
  virtual void rewind(int64_t seq, int64_t length) {
    (void)seq;
    (void)length;
  }

  // Speculative method "mtp": whether the model drafts with its own MTP head, and the drafts of
  // several sequences at once (one batched pass of the head per draft position): up to `k` for
  // `seq`, whose tokens so far are `history` (prompt + output; its state holds all but the last).
  struct DraftAsk {
    int64_t seq = -1;
    std::span<const int32_t> history;
    int64_t k = 0;
  };
  virtual bool can_draft() const { return false; }
  virtual std::vector<std::vector<int32_t>> draft(std::span<const DraftAsk> asks) {
    return std::vector<std::vector<int32_t>>(asks.size());
  }

  // ---- prefix caching: the state of positions as opaque bytes (engine/prefix_cache.h) ----
  virtual PrefixSupport prefix_support(int64_t block_size) const {
    (void)block_size;
    return {};
  }
  // Positions [pos0, pos0 + n) of `seq` (already computed and still held) into `kv`; with
  // `state`, also its recurrent state, which must be the state at pos0 + n == its length.
  virtual void save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                              std::vector<uint8_t>* state) = 0;
  // An empty `seq` resumes after the cached blocks (each `block_size` positions, in order;
  // `state`: the recurrent state at their end, null for a model without one).
  virtual void load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks, int64_t block_size,
                              const std::vector<uint8_t>* state) = 0;
};

// A sequence allocated for one scope (teacher-forced scoring, logit dumps) and released on every
// exit; a failing release (a lost pipeline) is swallowed so it cannot hide the error in flight.
class ScopedSequence {
 public:
  ScopedSequence(StepModel& model, int64_t capacity) : model_(model), id_(model.allocate(capacity)) {}
  ~ScopedSequence() {
    try {
      model_.release(id_);
    } catch (const std::exception&) {
    }
  }
  ScopedSequence(const ScopedSequence&) = delete;
  ScopedSequence& operator=(const ScopedSequence&) = delete;
  int64_t id() const { return id_; }

 private:
  StepModel& model_;
  int64_t id_;
};

}  // namespace fp4lm::engine
