#pragma once
// The multi-token-prediction (MTP) head of the Qwen3.5 / Qwen3.6 / Qwen3-Next checkpoints
// (`mtp.*`, left unquantized in NVIDIA's NVFP4 files): the draft model of speculative decoding
// with method "mtp" (engine/speculative.h). For a position q of the target, with h_q the
// target's final normed hidden state there and x_{q+1} the token after it:
//   u = fc([norm_e(embed(x_{q+1})); norm_h(h_q)])   fc: mtp.fc [hidden, 2·hidden], no bias
//   u = layer(u) at position q                       mtp.layers.0: a full-attention decoder layer
//   g = norm(u);  logits = lm_head(g)                 the target's embedding table and lm_head
// A second draft feeds g back as h with the first draft as the token (vLLM's MTP proposer does
// the same). The norms are the target's kind (zero-centered for these models). The head's layer
// keeps its own K/V: a KvCache of one slot in the head's own StateLayout, so a sequence has a
// second, small SequenceState for it (CausalLM::new_mtp_sequence).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

class ModelLoader;
class Rope;

class MtpHead {
 public:
  // Loads mtp.* (ModelLoader::plan_mtp_head; Error naming what is missing).
  MtpHead(ModelLoader& l, const Rope& rope, DType kv_dtype, KvQuant kv_quant = KvQuant::none);
  ~MtpHead();

  const StateLayout& state_layout() const { return state_; }
  size_t own_param_bytes() const;

  // One step: e [m, hidden] the embedded tokens x_{q+1}, h [m, hidden] the hidden states fed in,
  // each span's rows at the next positions of the head's own sequence state (advanced by the
  // caller); writes g [m, hidden] (the normed output, in the activation dtype) to out.
  void forward(const float* e, const float* h, int64_t m, std::span<const SequenceSpan> spans,
               const int32_t* tokens, float* out) const;

 private:
  StateLayout state_;
  DType act_ = DType::F32;
  RmsNorm norm_e_, norm_h_, norm_;
  std::unique_ptr<Linear> fc_;
  std::unique_ptr<DecoderLayer> layer_;
};

}  // namespace fp4lm::model
