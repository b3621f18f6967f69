#pragma once
// Qwen4-Exp's gated hyper-connection residual (transformers' Qwen4ExpTextGatedResidual): the
// residual is n streams per token, [m, n, hidden] (the embedding copied into each). Before a
// sub-layer: u = hc_norm(streams) (each stream RMS-normalized by itself, weight 1 + w of the
// n·hidden values); mix = sigmoid(up(silu(down(u) / n))) [n·hidden]; the sub-layer reads
// mean_k(mix_k ⊙ u_k) [hidden] (no further norm); inject = 2·sigmoid(block_inject(u) / n) [n];
// afterwards stream_k += inject_k · out. The model's last one (hyper_connection_mixer, no
// block_inject) collapses the streams for lm_head in place of a final norm (GatedResidualHead).
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/hyper_connection.h"

namespace fp4lm::model {

class ModelLoader;

class GatedResidual {
 public:
  GatedResidual() = default;
  // `prefix`: "model.layers.3.attn_hyper_connection" reads hc_norm.weight [n·hidden],
  // input_mix_weight_down.weight [rank, n·hidden], input_mix_weight_up.weight [n·hidden, rank] and,
  // with `inject`, block_inject_weight.weight [n, n·hidden].
  GatedResidual(const ModelLoader& l, const std::string& prefix, int64_t streams, int64_t hidden, int64_t rank,
                bool inject);
  // h [m, n·hidden] -> mixed [m, hidden] (rounded to act), inject [m, n] (with `inject` only).
  void weigh(const float* h, int64_t m, float* mixed, float* inject, DType act) const;
  // stream_k += inject_k · out per row (rounded to act).
  void add(float* h, int64_t m, const float* out, const float* inject, DType act) const;
  size_t param_bytes() const { return (norm_.size() + down_.size() + up_.size() + inj_.size()) * sizeof(float); }

 private:
  int64_t n_ = 0, hidden_ = 0, rank_ = 0;
  double eps_ = 1e-6;
  std::vector<float> norm_, down_, up_, inj_;  // norm_: 1 + w
};

// The hyper_connection_mixer as the model's head: the mixed row goes to lm_head as it is.
class GatedResidualHead final : public HyperHead {
 public:
  GatedResidualHead(const ModelLoader& l, const std::string& prefix, int64_t streams, int64_t hidden, int64_t rank)
      : HyperHead(streams, hidden), mixer_(l, prefix, streams, hidden, rank, false) {}
  void collapse(const float* h, int64_t m, float* out, DType act) const override {
    mixer_.weigh(h, m, out, nullptr, act);
  }
  size_t param_bytes() const override { return mixer_.param_bytes(); }
  bool final_norm() const override { return false; }

 private:
  GatedResidual mixer_;
};

}  // namespace fp4lm::model
