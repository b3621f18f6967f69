#include "model/layers/mamba2_mixer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ssm_scan.h"
#include "model/layers/activation.h"
#include "model/layers/mamba_timing.h"
#include "model/load/model_loader.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

namespace {
// torch.nn.functional.softplus (beta 1, threshold 20).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

Mamba2Mixer::Mamba2Mixer(const LayerBuild& b, int64_t layer)
    : RecurrentMixer(b.state, b.loader.config().mamba.conv_kernel, b.loader.config().mamba.conv_dim(),
                     b.loader.config().mamba.num_heads,
                     static_cast<size_t>(b.loader.config().mamba.num_heads * b.loader.config().mamba.head_dim *
                                         b.loader.config().mamba.state_size)) {
  ModelLoader& loader = b.loader;
  const ModelConfig& c = loader.config();
  const MambaConfig& mc = c.mamba;
  heads_ = mc.num_heads;
  head_dim_ = mc.head_dim;
  state_ = mc.state_size;
  groups_ = mc.n_groups;
  chunk_ = mc.chunk_size;
  inter_ = mc.intermediate();
  // A bound past float's range (time_step_limit's Infinity, read as the largest double) is none.
  auto to_float = [](double v) {
    return v >= std::numeric_limits<float>::max() ? std::numeric_limits<float>::infinity() : static_cast<float>(v);
  };
  dt_min_ = to_float(mc.dt_min);
  dt_max_ = to_float(mc.dt_max);
  eps_ = c.rms_norm_eps;
  act_ = loader.dtype();
  ssm_dtype_ = mc.ssm_cache_dtype == "bfloat16" ? DType::BF16
               : mc.ssm_cache_dtype == "float16" ? DType::F16
                                                 : DType::F32;
  const std::string p = fmt::format("model.layers.{}.mixer", layer);
  in_ = loader.load_linear(p + ".in_proj");
  out_ = loader.load_linear(p + ".out_proj");
  conv_w_ = loader.tensor_f32(p + ".conv1d.weight", {conv_dim_, 1, kernel_});
  conv_b_ = mc.conv_bias ? loader.tensor_f32(p + ".conv1d.bias", {conv_dim_})
                         : std::vector<float>(static_cast<size_t>(conv_dim_), 0.0f);
  a_ = loader.tensor_f32(p + ".A_log", {heads_});
  for (float& a : a_) a = -std::exp(a);
  d_ = loader.tensor_f32(p + ".D", {heads_});
  dt_bias_ = loader.tensor_f32(p + ".dt_bias", {heads_});
  norm_w_ = loader.tensor_f32(p + ".norm.weight", {inter_});
}

size_t Mamba2Mixer::weight_bytes() const { return in_->weight_bytes() + out_->weight_bytes() + own_param_bytes(); }

size_t Mamba2Mixer::own_param_bytes() const {
  return (conv_w_.size() + conv_b_.size() + a_.size() + d_.size() + dt_bias_.size() + norm_w_.size()) *
         sizeof(float);
}

void Mamba2Mixer::prepare_row(float* window, const float* pre, const float* dr, float* out, float* dt) const {
  const int64_t hist = kernel_ - 1;
  for (int64_t ch = 0; ch < conv_dim_; ++ch) {
    const float* w = conv_w_.data() + ch * kernel_;
    float acc = conv_b_[ch];
    for (int64_t j = 0; j < hist; ++j) acc += w[j] * window[j * conv_dim_ + ch];
    acc += w[hist] * pre[ch];
    out[ch] = silu(acc);
  }
  if (hist > 0) {
    std::memmove(window, window + conv_dim_, static_cast<size_t>((hist - 1) * conv_dim_) * sizeof(float));
    std::copy_n(pre, conv_dim_, window + (hist - 1) * conv_dim_);
  }
  round_to_dtype(out, static_cast<size_t>(conv_dim_), act_);
  for (int64_t j = 0; j < heads_; ++j) dt[j] = std::clamp(softplus(dr[j] + dt_bias_[j]), dt_min_, dt_max_);
}

kernels::SsmScanRows Mamba2Mixer::scan_rows(const float* xbc, const float* dt, float* y, int64_t n, int64_t j) const {
  const int64_t g = j / (heads_ / groups_);
  kernels::SsmScanRows r;
  r.n = n;
  r.head_dim = head_dim_, r.state = state_;
  r.x = xbc + j * head_dim_, r.x_stride = conv_dim_;
  r.b = xbc + inter_ + g * state_, r.c = xbc + inter_ + groups_ * state_ + g * state_, r.bc_stride = conv_dim_;
  r.dt = dt + j, r.dt_stride = heads_;
  r.a = a_[j], r.d = d_[j];
  r.y = y + j * head_dim_, r.y_stride = inter_;
  return r;
}

kernels::SsdRows Mamba2Mixer::ssd_rows(const float* xbc, const float* dt, float* y, int64_t n, int64_t pos0,
                                       int64_t j) const {
  const int64_t g = j / (heads_ / groups_);
  kernels::SsdRows r;
  r.n = n, r.pos0 = pos0, r.chunk = chunk_;
  r.heads = heads_ / groups_, r.head_dim = head_dim_, r.state = state_;
  r.x = xbc + j * head_dim_, r.x_stride = conv_dim_;
  r.b = xbc + inter_ + g * state_, r.c = xbc + inter_ + groups_ * state_ + g * state_, r.bc_stride = conv_dim_;
  r.dt = dt + j, r.dt_stride = heads_;
  r.a = a_.data() + j, r.d = d_.data() + j;
  r.y = y + j * head_dim_, r.y_stride = inter_;
  return r;
}

void Mamba2Mixer::scan_head(const kernels::SsmScanRows& r, float* S, bool as_decode) const {
  const size_t floats = static_cast<size_t>(head_dim_ * state_);
  if (ssm_dtype_ == DType::F32 || !as_decode) {
    kernels::ssm_scan(r, S);
    if (ssm_dtype_ != DType::F32) round_to_dtype(S, floats, ssm_dtype_);
    return;
  }
  // Decode rounds S to the cache dtype after every row: so does a row-by-row scan.
  for (int64_t t = 0; t < r.n; ++t) {
    kernels::SsmScanRows one = r;
    one.n = 1;
    one.x += t * r.x_stride, one.b += t * r.bc_stride, one.c += t * r.bc_stride;
    one.dt += t * r.dt_stride, one.y += t * r.y_stride;
    kernels::ssm_scan(one, S);
    round_to_dtype(S, floats, ssm_dtype_);
  }
}

void Mamba2Mixer::rerun(SequenceState& state, float* window, const float* log, int64_t rows) const {
  const size_t log_row = log_row_floats();
  std::vector<float> xbc(static_cast<size_t>(rows * conv_dim_)), dt(static_cast<size_t>(rows * heads_)),
      y(static_cast<size_t>(rows * inter_));
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = log + static_cast<size_t>(t) * log_row;
    prepare_row(window, row, row + conv_dim_, xbc.data() + t * conv_dim_, dt.data() + t * heads_);
  }
  float* S0 = recurrence(state);
  ThreadPool::global().parallel_for(heads_, [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j)
      scan_head(scan_rows(xbc.data(), dt.data(), y.data(), rows, j), S0 + j * head_dim_ * state_, true);
  });
}

void Mamba2Mixer::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const int64_t m = span_rows(spans, "mamba2 mixer");
  const bool timed = mamba::timer().enabled();
  const auto t_start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const int64_t width = inter_ + conv_dim_ + heads_;
  std::vector<float> proj(static_cast<size_t>(m * width));
  in_->forward(x, m, proj.data());
  const auto t_state = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};

  // The causal conv over each span's rows (its window first), SiLU; dt per row and head. A
  // rewindable span logs each row's conv input and raw dt first (what replay() needs).
  std::vector<float> xbc(static_cast<size_t>(m * conv_dim_)), dt(static_cast<size_t>(m * heads_));
  const float* pre = proj.data() + inter_;  // per row: xBC, then dt
  conv_steps(spans, pre, width, pre + conv_dim_, width, [&](float* window, const float* xt, const float* dr, int64_t r) {
    prepare_row(window, xt, dr, xbc.data() + r * conv_dim_, dt.data() + r * heads_);
  });

  // The scan: every (span, head) is independent. A span of one row (decode) runs the recurrent
  // form; longer ones the chunked SSD form when mamba::prefill_form() says so (not a rewindable
  // one), one unit per (span, group) — the first head's index — as its heads share C·Bᵀ.
  std::vector<float> core(static_cast<size_t>(m * inter_));
  const int64_t per_group = heads_ / groups_;
  const bool chunked = mamba::prefill_form() == mamba::PrefillForm::chunked;
  ThreadPool::global().parallel_for(static_cast<int64_t>(spans.size()) * heads_, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const SequenceSpan& s = spans[static_cast<size_t>(i / heads_)];
      const int64_t j = i % heads_;
      const float* row = xbc.data() + s.row0 * conv_dim_;
      float* S = recurrence(*s.state) + j * head_dim_ * state_;
      const float* dts = dt.data() + s.row0 * heads_;
      float* ys = core.data() + s.row0 * inter_;
      if (chunked && s.n > 1 && !s.rewindable) {
        if (j % per_group != 0) continue;
        kernels::ssm_scan_chunked(ssd_rows(row, dts, ys, s.n, s.pos0, j), S);
        if (ssm_dtype_ != DType::F32)
          round_to_dtype(S, static_cast<size_t>(per_group * head_dim_ * state_), ssm_dtype_);
        continue;
      }
      scan_head(scan_rows(row, dts, ys, s.n, j), S, s.rewindable);
    }
  });

  const auto t_scanned = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};

  // Gated RMSNorm per group: rms(y·silu(z))·w.
  const int64_t gs = inter_ / groups_;
  for (int64_t r = 0; r < m; ++r) {
    float* o = core.data() + r * inter_;
    const float* z = proj.data() + r * width;
    for (int64_t k = 0; k < inter_; ++k) o[k] *= silu(z[k]);
    for (int64_t g = 0; g < groups_; ++g) {
      float* og = o + g * gs;
      double ss = 0;
      for (int64_t k = 0; k < gs; ++k) ss += static_cast<double>(og[k]) * og[k];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(gs) + eps_));
      for (int64_t k = 0; k < gs; ++k) og[k] = norm_w_[g * gs + k] * (og[k] * inv);
    }
  }
  round_to_dtype(core.data(), core.size(), act_);
  out_->forward(core.data(), m, y);
  if (timed) {
    using secs = std::chrono::duration<double>;
    mamba::timer().add(secs(t_scanned - t_state).count(), secs(std::chrono::steady_clock::now() - t_start).count());
  }
}

}  // namespace fp4lm::model
