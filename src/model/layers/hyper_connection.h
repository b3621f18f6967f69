#pragma once
// DeepSeek-V4's manifold-constrained hyper-connections (mHC, HF DeepseekV4HyperConnection /
// DeepseekV4HyperHead): the residual is n parallel streams per token, [m, n, hidden]. Before a
// sub-layer, its HyperConnection derives from the streams (flattened, RMS-normalized without a
// weight, projected by `fn`) the weights pre [n], post [n] and comb [n, n] (comb projected onto
// doubly-stochastic matrices by Sinkhorn iterations); the sub-layer reads Σ_j pre_j·stream_j and
// the streams become post_k·out + Σ_j comb[j, k]·stream_j. The HyperHead collapses the streams
// after the last layer (pre only). All in float32, as transformers keeps these modules.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp4lm::model {

class ModelLoader;

class HyperConnection {
 public:
  HyperConnection() = default;
  // `prefix`: "model.layers.3.hc_attn" reads <prefix>_fn [(2+n)·n, n·hidden], _base [(2+n)·n], _scale [3].
  HyperConnection(const ModelLoader& l, const std::string& prefix, int64_t streams, int64_t hidden, int64_t iters,
                  double hc_eps, double norm_eps);
  // h [m, n, hidden] -> collapsed [m, hidden] (rounded to act), post [m, n], comb [m, n, n].
  void weigh(const float* h, int64_t m, float* collapsed, float* post, float* comb, DType act) const;
  // h <- post·out + combᵀ·h per row (rounded to act).
  void mix(float* h, int64_t m, const float* out, const float* post, const float* comb, DType act) const;
  size_t param_bytes() const { return (fn_.size() + base_.size() + 3) * sizeof(float); }

 private:
  int64_t n_ = 0, hidden_ = 0, iters_ = 0;
  double hc_eps_ = 1e-6, norm_eps_ = 1e-6;
  std::vector<float> fn_, base_;
  float scale_[3] = {1, 1, 1};
};

// Another architecture's multi-stream residual collapses its own way by overriding collapse
// (Gemma 3n's AltUp, model/layers/altup.h; Qwen4-Exp's mixer, model/layers/gated_residual.h).
class HyperHead {
 public:
  // hc_head_fn [n, n·hidden], hc_head_base [n], hc_head_scale [1] (engine names model.hc_head_*).
  HyperHead(const ModelLoader& l, int64_t streams, int64_t hidden, double hc_eps, double norm_eps);
  virtual ~HyperHead() = default;
  int64_t streams() const { return n_; }
  // h [m, n, hidden] -> out [m, hidden] (rounded to act).
  virtual void collapse(const float* h, int64_t m, float* out, DType act) const;
  virtual size_t param_bytes() const { return (fn_.size() + base_.size() + 1) * sizeof(float); }
  // Whether the collapsed row goes through the final norm (model.norm) before lm_head; false: the
  // head's own normalization replaces it (Qwen4-Exp's hyper_connection_mixer, model/layers/gated_residual.h).
  virtual bool final_norm() const { return true; }

 protected:
  HyperHead(int64_t streams, int64_t hidden) : n_(streams), hidden_(hidden) {}

 private:
  int64_t n_ = 0, hidden_ = 0;
  double hc_eps_ = 1e-6, norm_eps_ = 1e-6;
  std::vector<float> fn_, base_;
  float scale_ = 1;
};

}  // namespace fp4lm::model
