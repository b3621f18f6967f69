#include "model/layers/altup.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/layers/activation.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

std::string projection_name(bool unembed, int64_t k) {
  return fmt::format("model.altup_{}projections.{}", unembed ? "unembed_" : "", k);
}

double mean_square(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s / static_cast<double>(n);
}

// Stream k >= 1 of each row of `out` (rows of `n` streams): projection k-1 of the source row,
// rescaled to the RMS of stream 0 of `ref` (transformers: p · target / sqrt(clamp(mean(p²), 1e-5))).
// The source row is `src`'s stream k (per_stream: the streams after the last layer) or its one
// row of `hidden` (the embedding, the source of every stream).
void project_rescaled(const std::vector<std::unique_ptr<Linear>>& projections, const float* src, bool per_stream,
                      const float* ref, int64_t ref_stride, int64_t m, int64_t hidden, float* out, DType act) {
  const int64_t n = static_cast<int64_t>(projections.size()) + 1, out_stride = n * hidden;
  std::vector<float> in(static_cast<size_t>(m * hidden)), p(in.size());
  for (size_t k = 0; k < projections.size(); ++k) {
    const int64_t stream = static_cast<int64_t>(k) + 1;
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(per_stream ? src + r * out_stride + stream * hidden : src + r * hidden, hidden,
                  in.data() + r * hidden);
    projections[k]->forward(in.data(), m, p.data());
    round_to_dtype(p.data(), p.size(), act);
    for (int64_t r = 0; r < m; ++r) {
      float* pr = p.data() + r * hidden;
      const double target = std::sqrt(mean_square(ref + r * ref_stride, hidden));
      const double now = std::sqrt(std::max(mean_square(pr, hidden), 1e-5));
      float* o = out + r * out_stride + stream * hidden;
      for (int64_t i = 0; i < hidden; ++i) o[i] = static_cast<float>(pr[i] * target / now);
      round_to_dtype(o, static_cast<size_t>(hidden), act);
    }
  }
}

}  // namespace

void plan_altup(int64_t streams, int64_t hidden, int64_t layer, int64_t num_layers, std::vector<LayerSpec>& out) {
  for (int64_t k = 0; k + 1 < streams; ++k) {
    if (layer == 0) out.push_back(plan_linear(projection_name(false, k), 0, {projection_name(false, k)}, {hidden}, hidden));
    if (layer == num_layers - 1)
      out.push_back(plan_linear(projection_name(true, k), layer, {projection_name(true, k)}, {hidden}, hidden));
  }
}

AltUp::AltUp(ModelLoader& l, int64_t layer) {
  const ModelConfig& c = l.config();
  n_ = c.gemma3n.altup_inputs;
  active_ = c.gemma3n.altup_active;
  hidden_ = c.hidden_size;
  const std::string p = fmt::format("model.layers.{}.altup.", layer);
  router_norm_ = load_rms_norm(l, p + "router_norm.weight", hidden_);
  router_ = l.load_linear(p + "modality_router");
  prediction_coefs_ = l.tensor_f32(p + "prediction_coefs.weight", {n_ * n_, n_});
  correction_coefs_ = l.tensor_f32(p + "correction_coefs.weight", {n_, n_});
  output_scale_ = l.tensor_f32(p + "correct_output_scale", {hidden_});
}

size_t AltUp::own_param_bytes() const {
  return (prediction_coefs_.size() + correction_coefs_.size() + output_scale_.size() + static_cast<size_t>(hidden_)) *
         sizeof(float);
}

std::vector<float> AltUp::modalities(const float* x, int64_t stride, int64_t m, DType act) const {
  std::vector<float> normed(static_cast<size_t>(m * hidden_)), out(static_cast<size_t>(m * n_));
  for (int64_t r = 0; r < m; ++r) std::copy_n(x + r * stride, hidden_, normed.data() + r * hidden_);
  router_norm_.forward(normed.data(), m, normed.data(), act);
  // × router_input_scale (hidden^-1, a float32 buffer)
  const float scale = static_cast<float>(1.0 / static_cast<double>(hidden_));
  for (float& v : normed) v *= scale;
  round_to_dtype(normed.data(), normed.size(), act);
  router_->forward(normed.data(), m, out.data());
  round_to_dtype(out.data(), out.size(), act);
  for (float& v : out) v = std::tanh(v);
  round_to_dtype(out.data(), out.size(), act);
  return out;
}

void AltUp::predict(const float* h, int64_t m, float* p, DType act) const {
  const int64_t width = n_ * hidden_;
  const std::vector<float> mod = modalities(h + active_ * hidden_, width, m, act);
  std::vector<float> w(static_cast<size_t>(n_ * n_));
  for (int64_t r = 0; r < m; ++r) {
    // W [n, n] = prediction_coefs · modalities; p_c = h_c + Σ_j W[c, j] h_j.
    const float* mr = mod.data() + r * n_;
    for (int64_t o = 0; o < n_ * n_; ++o) {
      float s = 0;
      for (int64_t j = 0; j < n_; ++j) s += prediction_coefs_[static_cast<size_t>(o * n_ + j)] * mr[j];
      w[static_cast<size_t>(o)] = s;
    }
    round_to_dtype(w.data(), w.size(), act);
    const float* hr = h + r * width;
    float* pr = p + r * width;
    for (int64_t c = 0; c < n_; ++c) {
      float* pc = pr + c * hidden_;
      for (int64_t i = 0; i < hidden_; ++i) {
        float s = 0;
        for (int64_t j = 0; j < n_; ++j) s += hr[j * hidden_ + i] * w[static_cast<size_t>(c * n_ + j)];
        pc[i] = s;
      }
      round_to_dtype(pc, static_cast<size_t>(hidden_), act);
      for (int64_t i = 0; i < hidden_; ++i) pc[i] += hr[c * hidden_ + i];
      round_to_dtype(pc, static_cast<size_t>(hidden_), act);
    }
  }
}

void AltUp::correct(const float* p, const float* o, int64_t m, float* h, DType act) const {
  const int64_t width = n_ * hidden_;
  const std::vector<float> mod = modalities(o, hidden_, m, act);
  std::vector<float> coef(static_cast<size_t>(n_)), innovation(static_cast<size_t>(hidden_));
  for (int64_t r = 0; r < m; ++r) {
    const float* mr = mod.data() + r * n_;
    for (int64_t k = 0; k < n_; ++k) {
      float s = 0;
      for (int64_t j = 0; j < n_; ++j) s += correction_coefs_[static_cast<size_t>(k * n_ + j)] * mr[j];
      coef[static_cast<size_t>(k)] = s;
    }
    round_to_dtype(coef.data(), coef.size(), act);
    for (float& v : coef) v += 1.0f;
    round_to_dtype(coef.data(), coef.size(), act);
    const float* pr = p + r * width;
    for (int64_t i = 0; i < hidden_; ++i) innovation[static_cast<size_t>(i)] = o[r * hidden_ + i] - pr[active_ * hidden_ + i];
    round_to_dtype(innovation.data(), innovation.size(), act);
    float* hr = h + r * width;
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t i = 0; i < hidden_; ++i) hr[k * hidden_ + i] = innovation[static_cast<size_t>(i)] * coef[static_cast<size_t>(k)];
      round_to_dtype(hr + k * hidden_, static_cast<size_t>(hidden_), act);
      for (int64_t i = 0; i < hidden_; ++i) hr[k * hidden_ + i] += pr[k * hidden_ + i];
      round_to_dtype(hr + k * hidden_, static_cast<size_t>(hidden_), act);
    }
  }
}

void AltUp::scale_output(const float* x, int64_t m, float* y, DType act) const {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < hidden_; ++i) y[r * hidden_ + i] = x[r * hidden_ + i] * output_scale_[static_cast<size_t>(i)];
  round_to_dtype(y, static_cast<size_t>(m * hidden_), act);
}

AltUpStreams::AltUpStreams(ModelLoader& l) {
  n_ = l.config().gemma3n.altup_inputs;
  hidden_ = l.config().hidden_size;
  for (int64_t k = 0; k + 1 < n_; ++k) projections_.push_back(l.load_linear(projection_name(false, k)));
}

void AltUpStreams::expand(float* h, int64_t m, DType act) const {
  std::vector<float> e(static_cast<size_t>(m * hidden_));
  for (int64_t r = 0; r < m; ++r) std::copy_n(h + r * n_ * hidden_, hidden_, e.data() + r * hidden_);
  project_rescaled(projections_, e.data(), false, e.data(), hidden_, m, hidden_, h, act);
}

AltUpHead::AltUpHead(ModelLoader& l)
    : HyperHead(l.config().gemma3n.altup_inputs, l.config().hidden_size), n_(l.config().gemma3n.altup_inputs),
      hidden_(l.config().hidden_size) {
  for (int64_t k = 0; k + 1 < n_; ++k) projections_.push_back(l.load_linear(projection_name(true, k)));
}

void AltUpHead::collapse(const float* h, int64_t m, float* out, DType act) const {
  const int64_t width = n_ * hidden_;
  std::vector<float> streams(static_cast<size_t>(m * width));
  for (int64_t r = 0; r < m; ++r) std::copy_n(h + r * width, hidden_, streams.data() + r * width);
  project_rescaled(projections_, h, true, h, width, m, hidden_, streams.data(), act);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < hidden_; ++i) {
      float s = 0;
      for (int64_t k = 0; k < n_; ++k) s += streams[static_cast<size_t>(r * width + k * hidden_ + i)];
      out[r * hidden_ + i] = s / static_cast<float>(n_);
    }
  round_to_dtype(out, static_cast<size_t>(m * hidden_), act);
}

}  // namespace fp4lm::model
