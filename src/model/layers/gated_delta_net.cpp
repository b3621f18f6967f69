#include "model/layers/gated_delta_net.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/layers/gated_delta_rule.h"
#include "model/load/model_loader.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

GatedDeltaNet::GatedDeltaNet(const LayerBuild& b, int64_t layer)
    : RecurrentMixer(b.state, b.loader.config().gdn.linear_conv_kernel, b.loader.config().gdn.conv_dim(),
                     2 * b.loader.config().gdn.linear_num_value_heads,
                     static_cast<size_t>(b.loader.config().gdn.linear_num_value_heads *
                                         b.loader.config().gdn.linear_key_head_dim *
                                         b.loader.config().gdn.linear_value_head_dim)) {
  ModelLoader& loader = b.loader;
  const ModelConfig& c = loader.config();
  nk_ = c.gdn.linear_num_key_heads;
  nv_ = c.gdn.linear_num_value_heads;
  dk_ = c.gdn.linear_key_head_dim;
  dv_ = c.gdn.linear_value_head_dim;
  b.state.align_rows(gdn::kChunk);
  eps_ = c.rms_norm_eps;
  sigmoid_gate_ = c.gdn.sigmoid_gate;
  act_ = loader.dtype();
  const std::string p = fmt::format("model.layers.{}.linear_attn", layer);
  if (c.gdn.fused_qkvz) {
    in_qkvz_ = loader.load_linear(p + ".in_proj_qkvz");
  } else {
    in_qkv_ = loader.load_linear(p + ".in_proj_qkv");
    in_z_ = loader.load_linear(p + ".in_proj_z");
  }
  in_ba_ = loader.load_linear(p + ".in_proj_ba");
  out_ = loader.load_linear(p + ".out_proj");
  conv_w_ = loader.tensor_f32(p + ".conv1d.weight", {conv_dim_, 1, kernel_});
  a_log_ = loader.tensor_f32(p + ".A_log", {nv_});
  dt_bias_ = loader.tensor_f32(p + ".dt_bias", {nv_});
  norm_w_ = loader.tensor_f32(p + ".norm.weight", {dv_});
}

size_t GatedDeltaNet::weight_bytes() const {
  const size_t in = in_qkvz_ ? in_qkvz_->weight_bytes() : in_qkv_->weight_bytes() + in_z_->weight_bytes();
  return in + in_ba_->weight_bytes() + out_->weight_bytes() + own_param_bytes();
}

size_t GatedDeltaNet::own_param_bytes() const {
  return (conv_w_.size() + a_log_.size() + dt_bias_.size() + norm_w_.size()) * sizeof(float);
}

void GatedDeltaNet::project(const float* x, int64_t m, float* qkv, float* z, float* ba) const {
  if (!in_qkvz_) {
    in_qkv_->forward(x, m, qkv);
    in_z_->forward(x, m, z);
    in_ba_->forward(x, m, ba);
    return;
  }
  // Qwen3-Next: per key head h, in_proj_qkvz holds [q_h, k_h, v and z of its r = NV/NK value
  // heads] and in_proj_ba [b, a of its r value heads].
  const int64_t r = nv_ / nk_, kd = nk_ * dk_, vd = nv_ * dv_, group = 2 * dk_ + 2 * r * dv_;
  std::vector<float> fused(static_cast<size_t>(m * (conv_dim_ + vd))), fba(static_cast<size_t>(m * 2 * nv_));
  in_qkvz_->forward(x, m, fused.data());
  in_ba_->forward(x, m, fba.data());
  for (int64_t row = 0; row < m; ++row) {
    const float* src = fused.data() + row * (conv_dim_ + vd);
    float *q = qkv + row * conv_dim_, *zr = z + row * vd;
    const float* bsrc = fba.data() + row * 2 * nv_;
    float* br = ba + row * 2 * nv_;
    for (int64_t h = 0; h < nk_; ++h) {
      const float* g = src + h * group;
      std::copy_n(g, dk_, q + h * dk_);
      std::copy_n(g + dk_, dk_, q + kd + h * dk_);
      std::copy_n(g + 2 * dk_, r * dv_, q + 2 * kd + h * r * dv_);
      std::copy_n(g + 2 * dk_ + r * dv_, r * dv_, zr + h * r * dv_);
      std::copy_n(bsrc + h * 2 * r, r, br + h * r);
      std::copy_n(bsrc + h * 2 * r + r, r, br + nv_ + h * r);
    }
  }
}

void GatedDeltaNet::prepare_row(float* window, const float* xt, const float* bt, float* mt, float* g,
                                float* beta) const {
  const int64_t hist = kernel_ - 1, kd = nk_ * dk_;
  for (int64_t ch = 0; ch < conv_dim_; ++ch) {
    const float* w = conv_w_.data() + ch * kernel_;
    float acc = w[hist] * xt[ch];
    for (int64_t j = 0; j < hist; ++j) acc += w[j] * window[j * conv_dim_ + ch];
    mt[ch] = silu(acc);
  }
  if (hist > 0) {
    std::memmove(window, window + conv_dim_, static_cast<size_t>((hist - 1) * conv_dim_) * sizeof(float));
    std::copy_n(xt, conv_dim_, window + (hist - 1) * conv_dim_);
  }
  round_to_dtype(mt, static_cast<size_t>(conv_dim_), act_);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk_));
  for (int64_t part = 0; part < 2; ++part)  // q then k: L2 norm per key head
    for (int64_t h = 0; h < nk_; ++h) {
      float* v = mt + part * kd + h * dk_;
      double ss = 0;
      for (int64_t i = 0; i < dk_; ++i) ss += static_cast<double>(v[i]) * v[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) * (part == 0 ? qscale : 1.0f);
      for (int64_t i = 0; i < dk_; ++i) v[i] *= inv;
    }
  for (int64_t j = 0; j < nv_; ++j) {
    beta[j] = sigmoid(bt[j]);
    g[j] = -std::exp(a_log_[j]) * softplus(bt[nv_ + j] + dt_bias_[j]);
  }
}

kernels::DeltaRuleRows GatedDeltaNet::rule_rows(const float* mixed, const float* g, const float* beta, float* o,
                                                int64_t n, int64_t pos0, int64_t kh) const {
  const int64_t kd = nk_ * dk_, j0 = kh * (nv_ / nk_);
  kernels::DeltaRuleRows r;
  r.n = n;
  r.pos0 = pos0;
  r.dk = dk_, r.dv = dv_, r.nv = nv_ / nk_;
  r.q = mixed + kh * dk_, r.k = mixed + kd + kh * dk_, r.qk_stride = conv_dim_;
  r.v = mixed + 2 * kd + j0 * dv_, r.v_stride = conv_dim_;
  r.g = g + j0, r.beta = beta + j0, r.gb_stride = nv_;
  r.o = o + j0 * dv_, r.o_stride = nv_ * dv_;
  return r;
}

void GatedDeltaNet::rerun(SequenceState& state, float* window, const float* log, int64_t rows) const {
  const size_t log_row = log_row_floats();
  std::vector<float> mixed(static_cast<size_t>(rows * conv_dim_)), g(static_cast<size_t>(rows * nv_)),
      beta(g.size()), o(static_cast<size_t>(rows * nv_ * dv_));
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = log + static_cast<size_t>(t) * log_row;
    prepare_row(window, row, row + conv_dim_, mixed.data() + t * conv_dim_, g.data() + t * nv_, beta.data() + t * nv_);
  }
  const int64_t pos0 = state.length();  // (the state is back at the call's first position)
  ThreadPool::global().parallel_for(nk_, [&](int64_t k0, int64_t k1, int) {
    for (int64_t kh = k0; kh < k1; ++kh)
      kernels::delta_rule_recurrent(rule_rows(mixed.data(), g.data(), beta.data(), o.data(), rows, pos0, kh),
                                    recurrence(state) + kh * (nv_ / nk_) * dk_ * dv_);
  });
}

void GatedDeltaNet::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const bool timed = gdn::timer().enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const int64_t m = span_rows(spans, "gated delta-net");
  const int64_t vd = nv_ * dv_, ratio = nv_ / nk_;
  std::vector<float> qkv(static_cast<size_t>(m * conv_dim_)), z(static_cast<size_t>(m * vd)),
      ba(static_cast<size_t>(m * 2 * nv_));
  project(x, m, qkv.data(), z.data(), ba.data());

  // Per row: conv output (q, k, v) with q, k normalized; decay e^g and β per value head. A
  // rewindable span logs each row's conv input and [b a] first (what replay() needs).
  std::vector<float> mixed(static_cast<size_t>(m * conv_dim_)), log_decay(static_cast<size_t>(m * nv_)),
      beta(log_decay.size()), core(static_cast<size_t>(m * vd));
  conv_steps(spans, qkv.data(), conv_dim_, ba.data(), 2 * nv_,
             [&](float* window, const float* xt, const float* bt, int64_t r) {
               prepare_row(window, xt, bt, mixed.data() + r * conv_dim_, log_decay.data() + r * nv_,
                           beta.data() + r * nv_);
             });

  // The delta rule (kernels/delta_rule.h): key heads (each with its value heads) of every
  // span are independent; a span of one row (decode) runs the recurrent form, longer ones the
  // chunked form unless gdn::prefill_form() says otherwise or the span is rewindable (then row
  // by row, as decode: what replay() repeats).
  const auto rule_t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const bool chunked = gdn::prefill_form() == gdn::PrefillForm::chunked;
  ThreadPool::global().parallel_for(static_cast<int64_t>(spans.size()) * nk_, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const SequenceSpan& s = spans[static_cast<size_t>(i / nk_)];
      const int64_t kh = i % nk_;
      const kernels::DeltaRuleRows r =
          rule_rows(mixed.data() + s.row0 * conv_dim_, log_decay.data() + s.row0 * nv_, beta.data() + s.row0 * nv_,
                    core.data() + s.row0 * vd, s.n, s.pos0, kh);
      float* S = recurrence(*s.state) + kh * ratio * dk_ * dv_;
      if (s.n > 1 && chunked && !s.rewindable) kernels::delta_rule_chunked(r, S);
      else kernels::delta_rule_recurrent(r, S);
    }
  });
  const double rule_s =
      timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - rule_t0).count() : 0.0;

  // Gated RMSNorm per value head: rms(o)·w·silu(z), plain weight.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < nv_; ++j) {
      float* o = core.data() + r * vd + j * dv_;
      const float* zr = z.data() + r * vd + j * dv_;
      double ss = 0;
      for (int64_t c = 0; c < dv_; ++c) ss += static_cast<double>(o[c]) * o[c];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dv_) + eps_));
      if (sigmoid_gate_)
        for (int64_t c = 0; c < dv_; ++c) o[c] = norm_w_[c] * (o[c] * inv) * sigmoid(zr[c]);
      else
        for (int64_t c = 0; c < dv_; ++c) o[c] = norm_w_[c] * (o[c] * inv) * silu(zr[c]);
    }
  round_to_dtype(core.data(), core.size(), act_);
  out_->forward(core.data(), m, y);
  if (timed) gdn::timer().add(rule_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace fp4lm::model
