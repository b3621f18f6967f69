#include "quant/nvfp4_gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/nvfp4_scale_search.h"

namespace fp4lm::quant {

namespace {

// V upper with A = V V^T (a Cholesky factorization run from the last index back), in place of a
// copy of A's upper triangle; false when a pivot is not positive.
bool reverse_cholesky(std::vector<double>& a, int64_t k) {
  for (int64_t j = k - 1; j >= 0; --j) {
    double* rj = a.data() + j * k;
    double d = rj[j];
    for (int64_t l = j + 1; l < k; ++l) d -= rj[l] * rj[l];
    if (!(d > 0.0) || !std::isfinite(d)) return false;
    const double vjj = std::sqrt(d);
    rj[j] = vjj;
    for (int64_t i = 0; i < j; ++i) {
      double* ri = a.data() + i * k;
      double s = ri[j];
      for (int64_t l = j + 1; l < k; ++l) s -= ri[l] * rj[l];
      ri[j] = s / vjj;
    }
  }
  return true;
}

// U = V^-1 (upper), column by column by back substitution.
std::vector<double> upper_inverse(const std::vector<double>& v, int64_t k) {
  std::vector<double> u(static_cast<size_t>(k * k), 0.0), col(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    col[static_cast<size_t>(j)] = 1.0 / v[static_cast<size_t>(j * k + j)];
    for (int64_t i = j - 1; i >= 0; --i) {
      const double* vi = v.data() + i * k;
      double s = 0.0;
      for (int64_t l = i + 1; l <= j; ++l) s += vi[l] * col[static_cast<size_t>(l)];
      col[static_cast<size_t>(i)] = -s / vi[i];
    }
    for (int64_t i = 0; i <= j; ++i) u[static_cast<size_t>(i * k + j)] = col[static_cast<size_t>(i)];
  }
  return u;
}

}  // namespace

GptqFactor gptq_factor(const double* h, int64_t k, double rel_damp, bool act_order) {
  if (k <= 0) fail("gptq_factor: k = {}, expected > 0", k);
  double mean_diag = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = i; j < k; ++j)
      if (!std::isfinite(h[i * k + j])) fail("gptq_factor: H[{}, {}] = {}, expected a finite value", i, j, h[i * k + j]);
    mean_diag += h[i * k + i];
  }
  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h[a * k + a] > h[b * k + b]; });
  auto hs = [&](int64_t a, int64_t b) { return a <= b ? h[a * k + b] : h[b * k + a]; };
  mean_diag /= static_cast<double>(k);
  if (!(mean_diag > 0.0)) mean_diag = 1.0;  // no signal at all: U is the damping's, i.e. plain rounding
  double damp = rel_damp * mean_diag;
  for (int attempt = 0; attempt < 5; ++attempt, damp *= 10.0) {
    std::vector<double> a(static_cast<size_t>(k * k), 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = i; j < k; ++j) a[static_cast<size_t>(i * k + j)] = hs(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    for (int64_t i = 0; i < k; ++i) a[static_cast<size_t>(i * k + i)] += damp;
    if (!reverse_cholesky(a, k)) continue;
    GptqFactor f;
    f.k = k;
    f.u = upper_inverse(a, k);
    f.uf.assign(f.u.begin(), f.u.end());
    f.damp = damp;
    if (act_order) f.perm = std::move(perm);
    return f;
  }
  fail("gptq_factor: H ({} x {}) is not positive definite even with damping {}", k, k, damp / 10.0);
}

Nvfp4Weight gptq_quantize_rows(const float* w, int64_t n, int64_t k, const GptqFactor& f, float s2,
                               const GptqOptions& opt) {
  if (f.k != k) fail("gptq_quantize_rows: factor is {} x {}, the weight has k = {}", f.k, f.k, k);
  if (k % kNvfp4BlockSize != 0) fail("gptq_quantize_rows: k = {} is not a multiple of {}", k, kNvfp4BlockSize);
  if (!(s2 > 0.0f) || !std::isfinite(s2)) fail("gptq_quantize_rows: weight_scale_2 = {}, expected > 0", s2);
  Nvfp4Weight out;
  out.n = n;
  out.k = k;
  out.weight_scale_2 = s2;
  out.codes.assign(static_cast<size_t>(n * k / 2), 0);
  out.scales.assign(static_cast<size_t>(n * k / kNvfp4BlockSize), kE4M3One);
  const int64_t blocks = k / kNvfp4BlockSize;
  std::vector<float> row(static_cast<size_t>(k));
  float blk[kNvfp4BlockSize];
  if (!f.perm.empty()) {
    if (static_cast<int64_t>(f.perm.size()) != k) fail("gptq_quantize_rows: permutation of {} columns, k = {}", f.perm.size(), k);
    std::vector<float> den(static_cast<size_t>(blocks));
    for (int64_t r = 0; r < n; ++r) {
      const float* wr = w + r * k;
      for (int64_t b = 0; b < blocks; ++b) {
        const float* x = wr + b * kNvfp4BlockSize;
        const float* imp = opt.importance ? opt.importance + b * kNvfp4BlockSize : nullptr;
        const uint8_t sb = opt.scale_search ? search_block_scale(x, imp, s2) : weight_block_scale(amax(x, kNvfp4BlockSize), s2);
        out.scales[static_cast<size_t>(r * blocks + b)] = sb;
        den[static_cast<size_t>(b)] = e4m3_to_f32(sb) * s2;
        if (!(den[static_cast<size_t>(b)] > 0.0f)) fail("gptq_quantize_rows: block [{}, {}] scale underflows float32", r, b);
      }
      for (int64_t i = 0; i < k; ++i) row[static_cast<size_t>(i)] = wr[f.perm[static_cast<size_t>(i)]];
      uint8_t* dst = out.codes.data() + r * (k / 2);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t c = f.perm[static_cast<size_t>(i)];
        const float d = den[static_cast<size_t>(c / kNvfp4BlockSize)];
        const float x = std::clamp(row[static_cast<size_t>(i)], -3.0e38f, 3.0e38f);
        const uint8_t code = f32_to_e2m1(x / d);
        dst[c / 2] = static_cast<uint8_t>(c % 2 == 0 ? (dst[c / 2] & 0xf0) | (code & 0xf) : (dst[c / 2] & 0x0f) | ((code & 0xf) << 4));
        const float q = e2m1_to_f32(code) * d;
        const float* ui = f.uf.data() + i * k;
        const float e = (x - q) / ui[i];
        float* rw = row.data();
        for (int64_t l = i + 1; l < k; ++l) rw[l] -= e * ui[l];
      }
    }
    return out;
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) row[static_cast<size_t>(c)] = w[r * k + c];
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kNvfp4BlockSize;
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        // The error feedback can push a weight past float's range only on a broken H; clamp so the
        // scale rule stays finite (the value saturates to ±6 codes anyway).
        blk[i] = std::clamp(row[static_cast<size_t>(c0 + i)], -3.0e38f, 3.0e38f);
      }
      const uint8_t sb = opt.scale_search ? search_block_scale(blk, nullptr, s2)
                                          : weight_block_scale(amax(blk, kNvfp4BlockSize), s2);
      out.scales[static_cast<size_t>(r * blocks + b)] = sb;
      const float den = e4m3_to_f32(sb) * s2;
      if (!(den > 0.0f)) fail("gptq_quantize_rows: block [{}, {}] scale underflows float32", r, b);
      uint8_t* dst = out.codes.data() + r * (k / 2) + c0 / 2;
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        const int64_t c = c0 + i;
        const float x = std::clamp(row[static_cast<size_t>(c)], -3.0e38f, 3.0e38f);  // updated by the block's earlier columns
        const uint8_t code = f32_to_e2m1(x / den);
        if (i % 2 == 0) dst[i / 2] = code & 0xf;
        else dst[i / 2] = static_cast<uint8_t>(dst[i / 2] | ((code & 0xf) << 4));
        const float q = e2m1_to_f32(code) * den;
        const float* uc = f.uf.data() + c * k;
        const float e = (x - q) / uc[c];
        float* rw = row.data();
        for (int64_t l = c + 1; l < k; ++l) rw[l] -= e * uc[l];
      }
    }
  }
  return out;
}

Nvfp4Weight gptq_quantize_weight(const float* w, int64_t n, int64_t k, const double* h, std::optional<float> group_amax,
                                 const GptqOptions& opt) {
  Nvfp4Weight rtn = quantize_weight(w, n, k, group_amax);  // checks, global scale, the all-zero case
  if (rtn.weight_scale_2 == 0.0f) return rtn;
  const GptqFactor f = gptq_factor(h, k, 0.01, opt.act_order);
  return gptq_quantize_rows(w, n, k, f, rtn.weight_scale_2, opt);
}

}  // namespace fp4lm::quant
