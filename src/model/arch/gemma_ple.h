#pragma once
// Gemma 4's per-layer input embeddings (PLE: hidden_size_per_layer_input P > 0, the E2B / E4B
// models), as transformers' Gemma4TextModel (get_per_layer_inputs, project_per_layer_inputs) and
// Gemma4TextDecoderLayer compute them. Once per step, for every token, with e its scaled
// embedding (the residual stream entering layer 0):
//   t = embed_tokens_per_layer[id] × sqrt(P)                                   [L, P]
//   p = per_layer_projection_norm(per_layer_model_projection(e) × hidden^-1/2)  (per layer's P)
//   input = (p + t) × 2^-1/2
// and in layer i, after its feed-forward half (before its layer_scalar):
//   h += post_per_layer_input_norm(per_layer_projection(gelu_tanh(per_layer_input_gate(h)) × input[i]))
// The inputs are computed by layer 0 for all layers; in a pipeline the stage with layer 0 sends
// them on with the residual stream (model/state/stage_carried.h), the later stages receive them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/embedding.h"
#include "model/layers/linear.h"
#include "model/model_config.h"
#include "model/layers/rms_norm.h"
#include "model/state/stage_carried.h"

namespace fp4lm::model {

class ModelLoader;
struct LayerSpec;

struct GemmaPleNames {
  std::string table, model_projection, projection_norm;  // the model's (layer 0 lists them)
  std::string gate, projection, post_norm;               // layer i's
};
GemmaPleNames gemma_ple_names(int64_t layer);

// Appends layer i's two Linears (and, for layer 0, per_layer_model_projection) to a plan.
void plan_gemma_ple(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out);

// Every layer's input of one step [m, L, P].
class GemmaPleInputs final : public StageCarried {
 public:
  // With the tensors that compute them (the stage holding layer 0)...
  explicit GemmaPleInputs(ModelLoader& l);
  // ...or received from the stage before (a later pipeline stage).
  struct Received {};
  GemmaPleInputs(ModelLoader& l, Received);
  // From the step's tokens and its residual stream at layer 0's entry.
  void compute(const LayerStep& s) const;
  const float* of(int64_t layer, int64_t row) const { return buf_.data() + (row * layers_ + layer) * dim_; }
  size_t own_param_bytes() const;  // asked of layer 0's, the computing one

  const char* what() const override { return "Gemma 4's per-layer inputs"; }
  std::span<const uint8_t> carried(int64_t rows) const override;
  void receive(std::span<const uint8_t> bytes, int64_t rows) override;

 private:
  size_t step_bytes(int64_t rows) const;  // [rows, L, P] float32

  Embedding table_;
  size_t table_bytes_ = 0;
  std::unique_ptr<Linear> projection_;
  RmsNorm norm_;
  int64_t layers_, dim_, hidden_;
  DType act_;
  // Gemma4ForConditionalGeneration: the image / video / audio token ids, looked up as pad_token_id
  // (Gemma4Model.forward's multimodal mask; their embeddings are replaced by the encoders' rows).
  std::vector<int32_t> multimodal_ids_;
  int32_t pad_id_ = 0;
  // Gemma 3n (get_per_layer_inputs): ids outside [0, vocab_size_per_layer_input) look up row 0.
  bool out_of_table_to_zero_ = false;
  int64_t table_rows_ = 0;
  mutable std::vector<float> buf_;  // the step's inputs, written by layer 0, read by every layer
};

// Layer i's part.
class GemmaPleBlock {
 public:
  GemmaPleBlock(ModelLoader& l, int64_t layer);
  // At the layer's start: layer 0 computes every layer's inputs.
  void begin(const LayerStep& s) const {
    if (layer_ == 0) inputs_->compute(s);
  }
  // After its feed-forward half: h += the per-layer term.
  void forward(const LayerStep& s) const;
  // The per-layer term of x [m, hidden] into y [m, hidden]: post_per_layer_input_norm(
  // per_layer_projection(gelu_tanh(per_layer_input_gate(x)) × input[i])) (Gemma 3n adds it to
  // its AltUp streams, arch/gemma3n.cpp).
  void term(const float* x, int64_t m, float* y, DType act) const;
  size_t own_param_bytes() const;

 private:
  std::shared_ptr<const GemmaPleInputs> inputs_;
  std::unique_ptr<Linear> gate_, projection_;
  RmsNorm post_;
  int64_t layer_, dim_, hidden_;
  DType act_;
};

}  // namespace fp4lm::model
