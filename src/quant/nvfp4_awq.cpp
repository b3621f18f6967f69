#include "quant/nvfp4_awq.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/nvfp4.h"

namespace fp4lm::quant {

std::vector<float> awq_weight_magnitude(const float* w, int64_t n, int64_t k) {
  if (k % kNvfp4BlockSize != 0) fail("awq: in_features {} is not a multiple of {}", k, kNvfp4BlockSize);
  std::vector<double> sum(static_cast<size_t>(k), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k; b += kNvfp4BlockSize) {
      const float* x = w + r * k + b;
      const float den = amax(x, kNvfp4BlockSize) + FLT_MIN;
      for (int i = 0; i < kNvfp4BlockSize; ++i) sum[static_cast<size_t>(b + i)] += std::fabs(x[i]) / den;
    }
  std::vector<float> out(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) out[static_cast<size_t>(c)] = static_cast<float>(sum[static_cast<size_t>(c)] / static_cast<double>(n));
  return out;
}

std::vector<float> awq_scale(const float* act_mean, const float* weight_mag, int64_t k, float alpha) {
  std::vector<float> s(static_cast<size_t>(k));
  float mx = 0.0f, mn = 0.0f;
  for (int64_t c = 0; c < k; ++c) {
    const float v = std::pow(act_mean[c], alpha) / (std::pow(weight_mag[c], 1.0f - alpha) + FLT_MIN);
    const float cl = std::clamp(v, 1e-4f, 1e4f);
    s[static_cast<size_t>(c)] = cl;
    mx = c == 0 ? cl : std::max(mx, cl);
    mn = c == 0 ? cl : std::min(mn, cl);
  }
  const float norm = std::sqrt(mx * mn);
  for (float& v : s) v /= norm;
  return s;
}

namespace {

// sum over four rows d_i (each [k], k % 16 == 0) of d_i H d_i^T, H full symmetric k x k: for each
// 16-column slice j of H, t_i[j] = sum_c d_i[c] H[c, j] kept in registers (4 x 16 accumulators),
// then dotted with d_i[j]. The inner step is 8 fused multiply-adds per 16 floats of H; built for
// x86-64-v3 (AVX2 + FMA) beside the baseline and chosen at run time.
typedef float V8 __attribute__((vector_size(32)));
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
double error_rows(const float* d, const float* h, int64_t k) {
  double total = 0.0;
  for (int64_t j = 0; j < k; j += 16) {
    V8 a0 = {}, a1 = {}, b0 = {}, b1 = {}, c0 = {}, c1 = {}, e0 = {}, e1 = {};
    for (int64_t c = 0; c < k; ++c) {
      V8 h0, h1;
      std::memcpy(&h0, h + c * k + j, sizeof(V8));
      std::memcpy(&h1, h + c * k + j + 8, sizeof(V8));
      const float x0 = d[c], x1 = d[k + c], x2 = d[2 * k + c], x3 = d[3 * k + c];
      a0 += x0 * h0; a1 += x0 * h1;
      b0 += x1 * h0; b1 += x1 * h1;
      c0 += x2 * h0; c1 += x2 * h1;
      e0 += x3 * h0; e1 += x3 * h1;
    }
    const V8* acc[4][2] = {{&a0, &a1}, {&b0, &b1}, {&c0, &c1}, {&e0, &e1}};
    for (int i = 0; i < 4; ++i)
      for (int half = 0; half < 2; ++half)
        for (int l = 0; l < 8; ++l)
          total += static_cast<double>(d[i * k + j + half * 8 + l]) * (*acc[i][half])[l];
  }
  return total;
}

}  // namespace

double awq_output_error(const float* w, int64_t n, int64_t k, const float* s, const float* h) {
  std::vector<float> ws(w, w + n * k);
  if (s)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) ws[static_cast<size_t>(r * k + c)] *= s[c];
  const Nvfp4Weight q = quantize_weight(ws.data(), n, k);
  const std::vector<float> deq = dequantize_weight(q);
  // d = deq / s - w, then sum_r d_r H d_r^T in four-row blocks (error_rows).
  std::vector<double> part(static_cast<size_t>(ThreadPool::global().size()) + 1, 0.0);
  constexpr int64_t R = 4;
  ThreadPool::global().parallel_for((n + R - 1) / R, [&](int64_t b0, int64_t b1, int tid) {
    std::vector<float> d(static_cast<size_t>(R * k));
    double acc = 0.0;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * R, rows = std::min(R, n - r0);
      std::fill(d.begin(), d.end(), 0.0f);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < k; ++c) {
          const size_t e = static_cast<size_t>((r0 + i) * k + c);
          d[static_cast<size_t>(i * k + c)] = (s ? deq[e] / s[c] : deq[e]) - w[e];
        }
      acc += error_rows(d.data(), h, k);
    }
    part[static_cast<size_t>(tid)] += acc;
  });
  double total = 0.0;
  for (double p : part) total += p;
  return total;
}

AwqSearch awq_search(const float* w, int64_t n, int64_t k, const float* act_mean, const double* h_upper) {
  if (k % kNvfp4BlockSize != 0) fail("awq: in_features {} is not a multiple of {}", k, kNvfp4BlockSize);
  for (int64_t c = 0; c < k; ++c)
    if (!std::isfinite(act_mean[c]) || act_mean[c] < 0.0f) fail("awq: input channel {} has mean |x| = {}", c, act_mean[c]);
  std::vector<float> h(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i; j < k; ++j) {
      const double v = h_upper[i * k + j];
      if (!std::isfinite(v)) fail("awq: the input's x^T x is not finite at [{}, {}]", i, j);
      h[static_cast<size_t>(i * k + j)] = h[static_cast<size_t>(j * k + i)] = static_cast<float>(v);
    }
  const std::vector<float> wmag = awq_weight_magnitude(w, n, k);
  AwqSearch r;
  r.error_unscaled = awq_output_error(w, n, k, nullptr, h.data());
  double best = 0.0;
  for (int i = 0; i <= kAwqAlphaSteps; ++i) {
    const float alpha = static_cast<float>(i) / static_cast<float>(kAwqAlphaSteps);
    std::vector<float> s = awq_scale(act_mean, wmag.data(), k, alpha);
    const double e = awq_output_error(w, n, k, s.data(), h.data());
    r.error.push_back(e);
    if (i == 0 || e < best) best = e, r.alpha = alpha, r.scale = std::move(s);
  }
  return r;
}

}  // namespace fp4lm::quant
