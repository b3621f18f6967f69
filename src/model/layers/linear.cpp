#include "model/layers/linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/load/finite_check.h"
#include "quant/fp8_tensor.h"
#include "quant/int8.h"
#include "quant/mxfp8.h"

namespace fp4lm::model {

namespace {
// Round-trips float32 activations through the layer's activation dtype around a kernel call.
template <typename Call>
void with_act_dtype(DType t, const float* x, size_t nx, float* y, size_t ny, Call call) {
  if (t == DType::F32) return call(static_cast<const void*>(x), static_cast<void*>(y));
  const size_t es = dtype_size(t);
  std::vector<uint8_t> xb(nx * es), yb(ny * es);
  from_f32_n(x, t, xb.data(), nx);
  call(static_cast<const void*>(xb.data()), static_cast<void*>(yb.data()));
  to_f32_n(yb.data(), t, y, ny);
}

// v rounded to the activation dtype t (F32: itself).
float round_to(DType t, float v) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}
}  // namespace

void Linear::set_pre_quant_scale(std::vector<float> s) {
  if (static_cast<int64_t>(s.size()) != spec_.in_features)
    fail("{}: pre_quant_scale has {} values, the layer {} inputs", spec_.name, s.size(), spec_.in_features);
  pre_quant_scale_ = std::move(s);
}

void Linear::set_fp8_input_scale(float s) {
  if (!(s > 0) || !std::isfinite(s))
    fail("{}: the FP8 activation scale must be finite and positive, found {}", spec_.name, s);
  fp8_input_scale_ = s;
}

void Linear::set_int8_input_scale(float s) {
  if (!(s > 0) || !std::isfinite(s))
    fail("{}: the int8 activation scale must be finite and positive, found {}", spec_.name, s);
  int8_input_scale_ = s;
}

void Linear::set_low_rank_branch(LowRankBranch b) {
  if (b.k != spec_.in_features || b.n != spec_.out_features)
    fail("{}: the low-rank branch maps {} -> {}, the layer {} -> {}", spec_.name, b.k, b.n, spec_.in_features,
         spec_.out_features);
  low_rank_ = std::move(b);
}

Linear::Linear(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::LinearKernel> kernel)
    : spec_(std::move(spec)), scheme_(scheme), backend_(std::move(backend)), kernel_(std::move(kernel)) {}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool& pool) const {
  // Before the kernel: every backend then fails the same way (W4A16 would compute NaN, the W4A4
  // quantizer would throw its own error, possibly on a worker thread).
  check_finite(x, m, spec_.in_features, "the input of ", spec_.name);
  if (observer_) observer_(x, m);
  std::vector<float> scaled;
  if (!pre_quant_scale_.empty()) {
    // One pass over the activation copy; the weight read that follows dominates (docs/BENCHMARKS.md).
    const int64_t k = spec_.in_features;
    scaled.resize(static_cast<size_t>(m * k));
    const DType t = scheme_.act_dtype;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float* sr = scaled.data() + i * k;
      for (int64_t j = 0; j < k; ++j) sr[j] = round_to(t, round_to(t, xr[j]) * pre_quant_scale_[j]);
    }
    x = scaled.data();
  }
  // The branch reads x' as it is now (ModelOpt: after pre_quant_scale, before the input quantizer).
  std::vector<float> branch_input;
  if (!low_rank_.empty()) {
    const int64_t k = spec_.in_features;
    branch_input.resize(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m * k; ++i) branch_input[i] = round_to(scheme_.act_dtype, x[i]);
  }
  if (fp8_input_scale_ > 0) {
    const int64_t k = spec_.in_features;
    if (scaled.empty()) scaled.assign(x, x + m * k);
    const DType t = scheme_.act_dtype;
    const float s = fp8_input_scale_;
    for (float& v : scaled) v = round_to(t, e4m3_to_f32(f32_to_e4m3(round_to(t, v) / s)) * s);
    x = scaled.data();
  }
  if (fp8_per_tensor_dynamic_) {
    // One scale for the whole call's input (ModelOpt's uncalibrated per-tensor FP8 quantizer).
    const int64_t k = spec_.in_features;
    if (scaled.empty()) scaled.assign(x, x + m * k);
    const DType t = scheme_.act_dtype;
    float amax = 0.0f;
    for (float& v : scaled) amax = std::max(amax, std::fabs(v = round_to(t, v)));
    quant::fp8_qdq_dynamic_tensor(scaled.data(), scaled.size(), amax);
    for (float& v : scaled) v = round_to(t, v);
    x = scaled.data();
  }
  if (fp8_per_token_) {
    const int64_t k = spec_.in_features;
    if (scaled.empty()) scaled.assign(x, x + m * k);
    const DType t = scheme_.act_dtype;
    for (int64_t i = 0; i < m; ++i) {
      float* r = scaled.data() + i * k;
      float amax = 0.0f;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(r[j] = round_to(t, r[j])));
      const float s = std::max(amax, 1e-10f) / 448.0f;
      for (int64_t j = 0; j < k; ++j)
        r[j] = round_to(t, e4m3_to_f32(f32_to_e4m3(std::clamp(r[j] / s, -448.0f, 448.0f))) * s);
    }
    x = scaled.data();
  }
  if (mxfp8_input_) {
    const int64_t k = spec_.in_features;
    if (scaled.empty()) scaled.assign(x, x + m * k);
    const DType t = scheme_.act_dtype;
    for (int64_t i = 0; i < m; ++i) {
      float* r = scaled.data() + i * k;
      for (int64_t j = 0; j < k; ++j) r[j] = round_to(t, r[j]);
      quant::mxfp8_qdq_row(r, k);
      for (int64_t j = 0; j < k; ++j) r[j] = round_to(t, r[j]);  // exact: E4M3 × 2^e fits bf16 / f16's mantissa
    }
    x = scaled.data();
  }
  if (int8_input_scale_ > 0) {
    const int64_t k = spec_.in_features;
    if (scaled.empty()) scaled.assign(x, x + m * k);
    const DType t = scheme_.act_dtype;
    const float s = int8_input_scale_;
    for (float& v : scaled) v = round_to(t, quant::int8_qdq(round_to(t, v), s));
    x = scaled.data();
  }
  with_act_dtype(scheme_.act_dtype, x, static_cast<size_t>(m * spec_.in_features), y,
                 static_cast<size_t>(m * spec_.out_features),
                 [&](const void* xb, void* yb) { kernel_->forward(xb, m, yb, pool); });
  if (!low_rank_.empty()) low_rank_.add_to(branch_input.data(), m, y, scheme_.act_dtype);
}

FusedMoe::FusedMoe(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::MoeKernel> kernel)
    : spec_(std::move(spec)), scheme_(scheme), backend_(std::move(backend)), kernel_(std::move(kernel)) {}

void FusedMoe::forward(const float* x, int64_t m, const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                       float* y, ThreadPool& pool) const {
  check_finite(x, m, spec_.hidden, "the input of ", spec_.name);
  if (observer_) observer_(x, m, topk_ids, top_k);
  const size_t count = static_cast<size_t>(m * spec_.hidden);
  with_act_dtype(scheme_.act_dtype, x, count, y, count, [&](const void* xb, void* yb) {
    kernel_->forward(xb, m, topk_ids, topk_weights, top_k, yb, pool);
  });
}

}  // namespace fp4lm::model
