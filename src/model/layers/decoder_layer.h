#pragma once
// One decoder layer as its architecture builds it (ArchDef::make_layer): it reads and updates the
// residual stream h of a forward step. The block shape is the layer's: the pre-norm block
// h += mixer(norm(h)); h += ffn(norm(h)) of Llama, Qwen, Mixtral and the Qwen3.5 hybrids is
// PreNormLayer; a layer of one mixer behind one norm (Nemotron-H), extra norms around each half
// (Gemma's sandwich norms), a per-layer input derived from the step's tokens (Gemma's PLE), or an
// attention that reads K/V another layer stored (AttentionLayout::reads_kv_of) are other
// DecoderLayers, built from the same mixers, feed-forward blocks and norms.
// Per-sequence state is not the layer's: its mixers declared their parts while loading
// (model/state/state_layout.h) and read/write them through the spans' SequenceStates.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "model/layers/activation.h"
#include "model/layers/feed_forward.h"
#include "model/layers/mixer.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

// One forward step as a layer sees it.
struct LayerStep {
  float* h = nullptr;  // [m, hidden] the residual stream, updated in place (rounded to act)
  int64_t m = 0;
  std::span<const SequenceSpan> spans;  // the sequences' rows of the step, in order
  const int32_t* tokens = nullptr;      // [m] the step's token ids (per-layer inputs derive from them)
  DType act = DType::F32;
  float* x = nullptr;  // [m, hidden] scratch
  float* y = nullptr;  // [m, hidden] scratch
};

class DecoderLayer {
 public:
  virtual ~DecoderLayer() = default;
  virtual void forward(const LayerStep& s) const = 0;
  // Bytes of the parameters it keeps outside the loader's kernels (norm weights copied to
  // float32, ...): CausalLM::weight_bytes adds them to the kernels' bytes.
  virtual size_t own_param_bytes() const = 0;
};

// The tensor names of a pre-norm block's two norms, the one place the loader and the synthetic
// writer (ArchDef::layer_params) take them from.
struct PreNormNames {
  std::string input, post;  // model.layers.<i>.{input_layernorm, post_attention_layernorm}.weight
};
PreNormNames pre_norm_names(int64_t layer);

// h += mixer(input_norm(h)); h += ffn(post_norm(h)), each sum rounded to the activation dtype.
class PreNormLayer final : public DecoderLayer {
 public:
  PreNormLayer(RmsNorm input_norm, std::unique_ptr<Mixer> mixer, RmsNorm post_norm, std::unique_ptr<FeedForward> ffn)
      : input_norm_(std::move(input_norm)), post_norm_(std::move(post_norm)), mixer_(std::move(mixer)),
        ffn_(std::move(ffn)) {}
  void forward(const LayerStep& s) const override;
  size_t own_param_bytes() const override;

 private:
  RmsNorm input_norm_, post_norm_;
  std::unique_ptr<Mixer> mixer_;
  std::unique_ptr<FeedForward> ffn_;
};

// h += a(norm(h)) for the residual stream s.h, rounded to s.act: the step both halves of the
// pre-norm block take (and a single-mixer layer's whole forward).
void add_residual(const LayerStep& s, const RmsNorm& norm, const auto& block) {
  const size_t size = static_cast<size_t>(s.m) * static_cast<size_t>(norm.dim());
  norm.forward(s.h, s.m, s.x, s.act);
  block(s.x, s.y);
  for (size_t i = 0; i < size; ++i) s.h[i] += s.y[i];
  round_to_dtype(s.h, size, s.act);
}

}  // namespace fp4lm::model
