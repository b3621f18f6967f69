#include "model/layers/hyper_connection.h"

#include <cmath>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"
#include "model/layers/row_ops.h"

namespace fp4lm::model {

namespace {

// mixes[r] = fn[r] · (x / rms(x)) for the n·hidden values x of one token (HF: the unweighted
// RMSNorm in float32, then F.linear): each row a dot_lanes (vectorized, its order fixed by the
// width; the double sum was a scalar chain, 5% of a V4 decode step's samples).
void project(const float* x, int64_t width, const std::vector<float>& fn, int64_t rows, double eps, float* mixes) {
  double ss = 0;
  for (int64_t k = 0; k < width; ++k) ss += static_cast<double>(x[k]) * x[k];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(width)) + static_cast<float>(eps));
  std::vector<float> xn(static_cast<size_t>(width));
  for (int64_t k = 0; k < width; ++k) xn[static_cast<size_t>(k)] = x[k] * inv;
  for (int64_t r = 0; r < rows; ++r) mixes[r] = dot_lanes(fn.data() + r * width, xn.data(), width);
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

HyperConnection::HyperConnection(const ModelLoader& l, const std::string& prefix, int64_t streams, int64_t hidden,
                                 int64_t iters, double hc_eps, double norm_eps)
    : n_(streams), hidden_(hidden), iters_(iters), hc_eps_(hc_eps), norm_eps_(norm_eps) {
  const int64_t rows = (2 + n_) * n_;
  fn_ = l.tensor_f32(prefix + "_fn", {rows, n_ * hidden_});
  base_ = l.tensor_f32(prefix + "_base", {rows});
  const std::vector<float> s = l.tensor_f32(prefix + "_scale", {3});
  for (int i = 0; i < 3; ++i) scale_[i] = s[static_cast<size_t>(i)];
}

void HyperConnection::weigh(const float* h, int64_t m, float* collapsed, float* post, float* comb, DType act) const {
  const int64_t n = n_, rows = (2 + n) * n, width = n * hidden_;
  const float eps = static_cast<float>(hc_eps_);
  std::vector<float> mixes(static_cast<size_t>(rows)), pre(static_cast<size_t>(n));
  for (int64_t t = 0; t < m; ++t) {
    const float* x = h + t * width;
    project(x, width, fn_, rows, norm_eps_, mixes.data());
    float* po = post + t * n;
    float* c = comb + t * n * n;
    for (int64_t k = 0; k < n; ++k) {
      pre[static_cast<size_t>(k)] = sigmoid(mixes[k] * scale_[0] + base_[k]) + eps;
      po[k] = 2.0f * sigmoid(mixes[n + k] * scale_[1] + base_[n + k]);
    }
    // comb: row softmax of (w·scale + base), + eps, then Sinkhorn (columns, then rows / columns).
    for (int64_t i = 0; i < n; ++i) {
      float* row = c + i * n;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = mixes[2 * n + i * n + j] * scale_[2] + base_[2 * n + i * n + j];
        mx = std::max(mx, row[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += row[j] = std::exp(row[j] - mx);
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] / sum + eps;
    }
    auto norm_cols = [&] {
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t i = 0; i < n; ++i) s += c[i * n + j];
        for (int64_t i = 0; i < n; ++i) c[i * n + j] /= s + eps;
      }
    };
    auto norm_rows = [&] {
      for (int64_t i = 0; i < n; ++i) {
        float s = 0;
        for (int64_t j = 0; j < n; ++j) s += c[i * n + j];
        for (int64_t j = 0; j < n; ++j) c[i * n + j] /= s + eps;
      }
    };
    norm_cols();
    for (int64_t it = 1; it < iters_; ++it) {
      norm_rows();
      norm_cols();
    }
    float* out = collapsed + t * hidden_;
    for (int64_t d = 0; d < hidden_; ++d) {
      float acc = 0;
      for (int64_t k = 0; k < n; ++k) acc += pre[static_cast<size_t>(k)] * x[k * hidden_ + d];
      out[d] = acc;
    }
  }
  round_to_dtype(collapsed, static_cast<size_t>(m * hidden_), act);
}

void HyperConnection::mix(float* h, int64_t m, const float* out, const float* post, const float* comb,
                          DType act) const {
  const int64_t n = n_, width = n * hidden_;
  std::vector<float> next(static_cast<size_t>(width));
  for (int64_t t = 0; t < m; ++t) {
    float* x = h + t * width;
    const float* po = post + t * n;
    const float* c = comb + t * n * n;
    const float* o = out + t * hidden_;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t d = 0; d < hidden_; ++d) {
        float acc = po[k] * o[d];
        for (int64_t j = 0; j < n; ++j) acc += c[j * n + k] * x[j * hidden_ + d];
        next[static_cast<size_t>(k * hidden_ + d)] = acc;
      }
    std::copy(next.begin(), next.end(), x);
  }
  round_to_dtype(h, static_cast<size_t>(m * width), act);
}

HyperHead::HyperHead(const ModelLoader& l, int64_t streams, int64_t hidden, double hc_eps, double norm_eps)
    : n_(streams), hidden_(hidden), hc_eps_(hc_eps), norm_eps_(norm_eps) {
  fn_ = l.tensor_f32("model.hc_head_fn", {n_, n_ * hidden_});
  base_ = l.tensor_f32("model.hc_head_base", {n_});
  scale_ = l.tensor_f32("model.hc_head_scale", {1})[0];
}

void HyperHead::collapse(const float* h, int64_t m, float* out, DType act) const {
  const int64_t n = n_, width = n * hidden_;
  std::vector<float> mixes(static_cast<size_t>(n));
  for (int64_t t = 0; t < m; ++t) {
    const float* x = h + t * width;
    project(x, width, fn_, n, norm_eps_, mixes.data());
    float* o = out + t * hidden_;
    for (int64_t d = 0; d < hidden_; ++d) o[d] = 0;
    for (int64_t k = 0; k < n; ++k) {
      const float pre = sigmoid(mixes[static_cast<size_t>(k)] * scale_ + base_[static_cast<size_t>(k)]) +
                        static_cast<float>(hc_eps_);
      for (int64_t d = 0; d < hidden_; ++d) o[d] += pre * x[k * hidden_ + d];
    }
  }
  round_to_dtype(out, static_cast<size_t>(m * hidden_), act);
}

}  // namespace fp4lm::model
