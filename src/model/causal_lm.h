#pragma once
// A loaded decoder-only language model: embedding, decoder layers (each built by the
// architecture's ArchDef::make_layer, model/layers/decoder_layer.h), final norm and lm_head. forward()
// runs a batch of chunks of several sequences, each at the next positions of its own
// engine-owned SequenceState: every Linear/MoE layer sees all rows of the batch at once (weights
// are read once per step for all sequences), RoPE and attention work per row / per sequence. A
// prompt is one chunk (split into steps of prefill_chunk rows), a decode step one token per
// sequence. What a sequence's state holds is what the layers' mixers declared while loading
// (model/state/state_layout.h); the model only adds it up.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/embedding.h"
#include "model/image_encoder.h"
#include "model/engine_options.h"
#include "model/layers/hyper_connection.h"
#include "model/state/kv_cache.h"
#include "model/layers/linear.h"
#include "model/model_config.h"
#include "model/layers/mtp_head.h"
#include "model/load/tensor_usage.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"
#include "model/sequence_chunk.h"
#include "model/state/sequence_state.h"
#include "model/state/stage_kv.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

class ModelLoader;

struct LoadOptions {
  // Capacity of new sequences; 0 = min(max_position_embeddings, 8192). Must not exceed
  // max_position_embeddings.
  int64_t max_model_len = 0;
  int64_t prefill_chunk = 256;  // rows (tokens of all sequences) per forward step
  bool progress = true;         // a progress line on stderr when it is a terminal
  // A pipeline stage (dist/): only decoder layers [first_layer, end_layer) are loaded (-1 = to
  // the last), the embedding only when first_layer is 0, the final norm and lm_head only when
  // end_layer is the last; no other tensor is read, so the stage's weights alone become resident.
  int64_t first_layer = 0, end_layer = -1;
  // The RAM the weights must fit in (model/load/memory_fit.h); 0 = this machine's MemTotal.
  size_t ram_bytes = 0;
  // Also load the MTP head (model/layers/mtp_head.h), the draft model of speculative method "mtp";
  // whole models only (not a pipeline stage).
  bool mtp = false;
  // The load rule (model/load/tensor_usage.h) on a whole model: Error on an unconsumed quantization
  // tensor, one WARN line for unconsumed model tensors. `fp4lm inspect` turns it off and shows
  // tensor_usage() instead. Pipeline stages read part of the files and do not check.
  bool enforce_tensor_usage = true;
};

// A pipeline stage's neighbours: a stage without the embedding receives each forward step's
// residual stream [rows, hidden] from the stage before it, one without lm_head sends it on
// (dist/ binds this to MPI). Float32 both ways, so the cut changes no value. With it, `extra`: the
// K/V rows of the step that layers of later stages read and the values carried across the cuts
// (model/state/stage_carried.h frames them).
class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual void receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& extra) = 0;
  virtual void send(const float* h, int64_t rows, int64_t hidden, std::span<const uint8_t> extra) = 0;
};

class CausalLM {
 public:
  static std::unique_ptr<CausalLM> load(const std::string& dir, const EngineOptions& opts,
                                        const LoadOptions& load = {});
  static std::unique_ptr<CausalLM> load(std::shared_ptr<io::Checkpoint> ckpt, const EngineOptions& opts,
                                        const LoadOptions& load = {});
  ~CausalLM();

  const ModelConfig& config() const;
  const ModelLoader& loader() const { return *loader_; }
  const io::Checkpoint& checkpoint() const { return *ckpt_; }
  DType dtype() const { return dtype_; }        // activation dtype
  DType kv_dtype() const { return kv_dtype_; }  // KV cache dtype (--kv-cache-dtype)
  // The KV cache's quantized format, declared by the checkpoint (none: K/V in kv_dtype()).
  KvQuant kv_quant() const { return kv_quant_; }
  // "bfloat16", "fp8", "NVFP4", ...: what the load line and inspect call the KV cache.
  std::string kv_format_name() const;
  int64_t vocab_size() const { return config().vocab_size; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t prefill_chunk() const { return prefill_chunk_; }  // rows per forward step
  // EOS ids from config.json and generation_config.json (deduplicated).
  const std::vector<int64_t>& eos_ids() const { return eos_ids_; }
  double load_seconds() const { return load_seconds_; }
  // Resident weight bytes: every kernel's weights, the norms and the embedding table.
  size_t weight_bytes() const;

  // A fresh empty sequence state; capacity 0 = max_model_len() (Error beyond it). Its memory is
  // reserved, not touched. `id` is what error messages call it (SequenceStore passes its id).
  SequenceState new_sequence(int64_t capacity = 0, int64_t id = -1) const;
  // Bytes a sequence of `capacity` positions reserves (0 = max_model_len()).
  size_t sequence_bytes(int64_t capacity = 0) const;
  // What a sequence's state is made of, as the layers declared it.
  const StateLayout& state_layout() const { return state_; }
  // Pipeline stages: the decoder layers [first_layer(), end_layer()) this object holds, and
  // whether it holds the embedding / the final norm and lm_head.
  int64_t first_layer() const { return first_layer_; }
  int64_t end_layer() const { return first_layer_ + static_cast<int64_t>(layers_.size()); }
  // The layers of earlier stages whose K/V this stage receives, and the layers whose K/V it sends
  // on (shared K/V across the cuts, model/state/stage_kv.h).
  const StageKv& stage_kv() const { return stage_kv_; }
  bool has_embedding() const { return first_layer_ == 0; }
  bool has_lm_head() const { return lm_head_ != nullptr; }
  // Forward steps cut sequences only at multiples of `rows` too: every stage of a pipeline must
  // cut where the whole model would (its row alignment is the lcm of all stages').
  void align_rows(int64_t rows) { state_.align_rows(rows); }

  // Runs every chunk of the batch: chunk c's tokens[0, n) at positions state.length() ..
  // state.length()+n-1 of its own sequence, appending its K/V and advancing its state by n.
  // Logits per chunk: LogitsMode::last -> out [vocab] of its last token, all -> out [n, vocab]
  // (float32, rounded to the activation dtype like the lm_head output), none -> nothing.
  // The rows of all chunks go through each Linear/MoE layer together, in steps of at most
  // prefill_chunk rows. A chunk's results are bit-identical to running it alone (the kernels'
  // per-row results do not depend on the other rows); --a16-max-tokens N is decided per chunk
  // (n <= N: W4A4 layers at W4A16), so it keeps that guarantee.
  // Errors (one line, naming the sequence): a chunk passing its state's capacity, a token id
  // outside the vocabulary, a state twice in one batch, a non-finite value (NonFiniteError).
  // On error every state of the batch is left as it was before the call.
  // A pipeline stage (LoadOptions::first_layer / end_layer) runs only its layers and needs
  // `link`; logits come only from the last stage.
  void forward(std::span<const SequenceChunk> batch, StageLink* link = nullptr) const;
  // One sequence: a batch of one.
  void forward(SequenceState& state, const int32_t* tokens, int64_t n, LogitsMode mode, float* logits) const;

  // The checkpoint's vision tower (ArchDef::load_image_encoder), or null: a text-only model.
  const ImageEncoder* image_encoder() const { return image_encoder_.get(); }
  // The vision tower's DeepStack levels (SequenceChunk::embeds), 0 without a tower or DeepStack.
  int64_t deepstack_levels() const { return image_encoder_ ? image_encoder_->deepstack_levels() : 0; }

  // ---- the MTP head (LoadOptions::mtp) ----
  bool has_mtp() const { return mtp_ != nullptr; }
  // What the load did not consume (model/load/tensor_usage.h); empty for a pipeline stage.
  const TensorUsage& tensor_usage() const { return tensor_usage_; }
  // A sequence's state for the head's own layer (its K/V only), and its bytes.
  SequenceState new_mtp_sequence(int64_t capacity = 0, int64_t id = -1) const;
  size_t mtp_sequence_bytes(int64_t capacity = 0) const;
  // Rows i = 0..n-1 at positions state.length() + i of the head's state: tokens[i] is the token
  // after that position, hidden[i] the target's final normed hidden state there (or the head's
  // own output of the row before, for a second draft). Writes the logits of the last row
  // [vocab] (unless logits is null: the head only reads the rows, its K/V grows) and, when
  // out_hidden is given, the head's normed output of every row [n, hidden].
  struct MtpRows {
    SequenceState* state = nullptr;
    const int32_t* tokens = nullptr;
    const float* hidden = nullptr;
    int64_t n = 0;
    float* logits = nullptr;
    float* out_hidden = nullptr;
  };
  // Several sequences' rows go through the head together, in steps of at most prefill_chunk
  // rows (a sequence with more rows runs alone); on error every state is left as it was.
  void mtp_forward(std::span<const MtpRows> batch) const;
  void mtp_forward(SequenceState& state, const int32_t* tokens, const float* hidden, int64_t n, float* logits,
                   float* out_hidden = nullptr) const;

 private:
  CausalLM() = default;
  struct Piece;  // rows of one chunk inside one forward step
  void forward_step(std::span<const SequenceChunk> batch, const std::vector<Piece>& pieces, StageLink* link) const;
  // The end of a step on the last stage: the MTP head's input rows (final-normed) and the logits
  // asked for, from the step's residual stream h [rows, hidden] (x: scratch of the same size).
  void step_logits(std::span<const SequenceChunk> batch, const std::vector<Piece>& pieces, const float* h,
                   float* x) const;
  // The final norm of n rows before lm_head (a copy where the hyper-connection head replaced it).
  void head_norm(const float* h, int64_t n, float* out) const;
  // DeepStack level `level` of every image row of the step added to h [rows, hidden] (SequenceChunk::embeds).
  void add_deepstack(std::span<const SequenceChunk> batch, const std::vector<Piece>& pieces, int64_t level,
                     float* h) const;
  // Step row -> (batch entry, position, sequence id), for error messages.
  static std::tuple<int64_t, int64_t, int64_t> locate_row(std::span<const SequenceChunk> batch,
                                                          const std::vector<Piece>& pieces, int64_t row);
  // One step of the MTP head over whole entries of `batch` (rows within prefill_chunk), or rows
  // [r0, r0 + m) of a single entry.
  void mtp_step(std::span<const MtpRows> batch, int64_t r0, int64_t m) const;

  std::shared_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<ModelLoader> loader_;
  DType dtype_ = DType::F32, kv_dtype_ = DType::F32;
  KvQuant kv_quant_ = KvQuant::none;
  int64_t max_model_len_ = 0, prefill_chunk_ = 256, a16_max_tokens_ = 0, first_layer_ = 0;
  std::vector<int64_t> eos_ids_;
  double load_seconds_ = 0;
  Rope rope_;
  Embedding embed_;
  StateLayout state_;
  StageKv stage_kv_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  RmsNorm final_norm_;
  // Several residual streams per token (ArchDef::load_hyper_head): the layers see [m, streams, hidden];
  // the head (last stage only) collapses them before final_norm_.
  int64_t residual_streams_ = 1;
  std::unique_ptr<HyperHead> hyper_head_;
  std::unique_ptr<Linear> lm_head_;
  std::unique_ptr<MtpHead> mtp_;
  std::unique_ptr<ImageEncoder> image_encoder_;
  TensorUsage tensor_usage_;
};

}  // namespace fp4lm::model
