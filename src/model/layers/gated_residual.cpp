#include "model/layers/gated_residual.h"

#include <cmath>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// y [rows] = W [rows, cols] · x [cols].
void matvec(const std::vector<float>& w, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w.data() + r * cols;
    float acc = 0;
    for (int64_t k = 0; k < cols; ++k) acc += wr[k] * x[k];
    y[r] = acc;
  }
}

}  // namespace

GatedResidual::GatedResidual(const ModelLoader& l, const std::string& prefix, int64_t streams, int64_t hidden,
                             int64_t rank, bool inject)
    : n_(streams), hidden_(hidden), rank_(rank) {
  const int64_t w = n_ * hidden_;
  const RmsNorm norm = load_rms_norm(l, prefix + ".hc_norm.weight", w);  // zero-centered: 1 + w
  norm_ = norm.weight();
  eps_ = norm.eps();
  down_ = l.tensor_f32(prefix + ".input_mix_weight_down.weight", {rank_, w});
  up_ = l.tensor_f32(prefix + ".input_mix_weight_up.weight", {w, rank_});
  if (inject) inj_ = l.tensor_f32(prefix + ".block_inject_weight.weight", {n_, w});
}

void GatedResidual::weigh(const float* h, int64_t m, float* mixed, float* inject, DType act) const {
  const int64_t w = n_ * hidden_;
  const float inv_n = 1.0f / static_cast<float>(n_);
  std::vector<float> u(static_cast<size_t>(w)), low(static_cast<size_t>(rank_)), mix(static_cast<size_t>(w)),
      inj(static_cast<size_t>(n_));
  for (int64_t t = 0; t < m; ++t) {
    const float* x = h + t * w;
    for (int64_t k = 0; k < n_; ++k) {  // each stream normalized by itself
      const float* xs = x + k * hidden_;
      double ss = 0;
      for (int64_t d = 0; d < hidden_; ++d) ss += static_cast<double>(xs[d]) * xs[d];
      const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(hidden_)) + static_cast<float>(eps_));
      for (int64_t d = 0; d < hidden_; ++d)
        u[static_cast<size_t>(k * hidden_ + d)] = xs[d] * r * norm_[static_cast<size_t>(k * hidden_ + d)];
    }
    round_to_dtype(u.data(), u.size(), act);
    matvec(down_, rank_, w, u.data(), low.data());
    for (float& v : low) v = silu(v * inv_n);
    matvec(up_, w, rank_, low.data(), mix.data());
    float* o = mixed + t * hidden_;
    for (int64_t d = 0; d < hidden_; ++d) {
      float acc = 0;
      for (int64_t k = 0; k < n_; ++k) {
        const size_t e = static_cast<size_t>(k * hidden_ + d);
        acc += sigmoid(mix[e]) * u[e];
      }
      o[d] = acc * inv_n;
    }
    if (inject) {
      matvec(inj_, n_, w, u.data(), inj.data());
      for (int64_t k = 0; k < n_; ++k) inject[t * n_ + k] = 2.0f * sigmoid(inj[static_cast<size_t>(k)] * inv_n);
    }
  }
  round_to_dtype(mixed, static_cast<size_t>(m * hidden_), act);
}

void GatedResidual::add(float* h, int64_t m, const float* out, const float* inject, DType act) const {
  const int64_t w = n_ * hidden_;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t k = 0; k < n_; ++k) {
      float* x = h + t * w + k * hidden_;
      const float g = inject[t * n_ + k];
      for (int64_t d = 0; d < hidden_; ++d) x[d] += g * out[t * hidden_ + d];
    }
  round_to_dtype(h, static_cast<size_t>(m * w), act);
}

}  // namespace fp4lm::model
