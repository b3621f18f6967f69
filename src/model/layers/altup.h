#pragma once
// Gemma 3n's AltUp (alternating updates), as transformers' Gemma3nTextAltUp and Gemma3nTextModel
// compute it: the residual is n = altup_num_inputs streams per token, [m, n, hidden]; a layer runs
// on one of them (a = altup_active_idx) and AltUp carries its update to the others.
// - Entering layer 0 (AltUpStreams): stream 0 is the embedding e, stream k >= 1 is
//   altup_projections[k-1](e) rescaled to e's RMS (sqrt(mean(p²)) clamped below at sqrt(1e-5)).
// - In each layer (AltUp), with modalities(x) = tanh(modality_router(router_norm(x) / hidden)) [n]:
//   predict: p_c = h_c + Σ_r W[c, r]·h_r, W = prediction_coefs(modalities(h_a)) as [n, n];
//   correct (o: the layer's output from p_a): h_k = p_k + (o - p_a)·(1 + correction_coefs(
//   modalities(o)))_k. altup_coef_clip clamps the coefficient weights only while training.
// - After the last layer (AltUpHead): stream k >= 1 through altup_unembed_projections[k-1],
//   rescaled to stream 0's RMS, and the n streams averaged: the row the final norm reads.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/hyper_connection.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

class ModelLoader;
struct LayerSpec;

// Appends the model's AltUp Linears to a plan: altup_projections with layer 0,
// altup_unembed_projections with the last layer.
void plan_altup(int64_t streams, int64_t hidden, int64_t layer, int64_t num_layers, std::vector<LayerSpec>& out);

// A layer's predict / correct step (model.layers.<i>.altup.*).
class AltUp {
 public:
  AltUp(ModelLoader& l, int64_t layer);
  // h [m, n, hidden] -> p [m, n, hidden].
  void predict(const float* h, int64_t m, float* p, DType act) const;
  // p [m, n, hidden] and the layer's output o [m, hidden] -> h [m, n, hidden].
  void correct(const float* p, const float* o, int64_t m, float* h, DType act) const;
  // y = x · correct_output_scale, x [m, hidden].
  void scale_output(const float* x, int64_t m, float* y, DType act) const;
  size_t own_param_bytes() const;

 private:
  // tanh(modality_router(router_norm(x) / hidden)) for rows of `stride` floats -> [m, n].
  std::vector<float> modalities(const float* x, int64_t stride, int64_t m, DType act) const;

  int64_t n_, active_, hidden_;
  RmsNorm router_norm_;
  std::unique_ptr<Linear> router_;
  std::vector<float> prediction_coefs_;  // [n·n, n]
  std::vector<float> correction_coefs_;  // [n, n]
  std::vector<float> output_scale_;      // [hidden]
};

// The streams made from the embedding, by layer 0.
class AltUpStreams {
 public:
  explicit AltUpStreams(ModelLoader& l);
  // h [m, n, hidden] whose stream 0 holds the embeddings: streams 1..n-1 written.
  void expand(float* h, int64_t m, DType act) const;

 private:
  int64_t n_, hidden_;
  std::vector<std::unique_ptr<Linear>> projections_;
};

class AltUpHead final : public HyperHead {
 public:
  explicit AltUpHead(ModelLoader& l);
  void collapse(const float* h, int64_t m, float* out, DType act) const override;
  size_t param_bytes() const override { return 0; }  // Linears: counted with the loader's kernels

 private:
  int64_t n_, hidden_;
  std::vector<std::unique_ptr<Linear>> projections_;
};

}  // namespace fp4lm::model
