#include "quant/nvfp4_scale_search.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant {

namespace {
constexpr uint8_t kMaxFiniteE4M3 = 0x7E;  // 448; 0x7F is NaN
}  // namespace

double block_error(const float* x, const float* importance, uint8_t scale, float s2) {
  const float den = e4m3_to_f32(scale) * s2;
  double err = 0.0;
  for (int i = 0; i < kNvfp4BlockSize; ++i) {
    const float q = e2m1_to_f32(f32_to_e2m1(x[i] / den)) * den;
    const double d = static_cast<double>(x[i]) - static_cast<double>(q);
    err += (importance ? static_cast<double>(importance[i]) : 1.0) * d * d;
  }
  return err;
}

uint8_t search_block_scale(const float* x, const float* importance, float s2) {
  const uint8_t rule = weight_block_scale(amax(x, kNvfp4BlockSize), s2);
  uint8_t best = rule;
  if (e4m3_to_f32(rule) * s2 == 0.0f) return best;  // quantize_weight names this failure
  double best_err = block_error(x, importance, rule, s2);
  const int lo = std::max(1, rule - kScaleSearchBelow), hi = std::min<int>(kMaxFiniteE4M3, rule + kScaleSearchAbove);
  for (int c = lo; c <= hi; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (code == rule || !(e4m3_to_f32(code) * s2 > 0.0f)) continue;
    const double e = block_error(x, importance, code, s2);
    if (e < best_err) best_err = e, best = code;
  }
  return best;
}

void quantize_block_codes(const float* x, uint8_t scale, float s2, uint8_t* dst) {
  const float den = e4m3_to_f32(scale) * s2;
  for (int j = 0; j < kNvfp4BlockSize / 2; ++j)
    dst[j] = static_cast<uint8_t>((f32_to_e2m1(x[2 * j] / den) & 0xf) | ((f32_to_e2m1(x[2 * j + 1] / den) & 0xf) << 4));
}

Nvfp4Weight quantize_weight_searched(const float* w, int64_t n, int64_t k, std::optional<float> group_amax,
                                     const float* importance) {
  // The rule's export first: its checks, its global scale, its all-zero case.
  Nvfp4Weight out = quantize_weight(w, n, k, group_amax);
  if (out.weight_scale_2 == 0.0f) return out;
  const float s2 = out.weight_scale_2;
  const int64_t blocks = k / kNvfp4BlockSize;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* x = w + r * k + b * kNvfp4BlockSize;
      const uint8_t sb = search_block_scale(x, importance ? importance + b * kNvfp4BlockSize : nullptr, s2);
      out.scales[static_cast<size_t>(r * blocks + b)] = sb;
      quantize_block_codes(x, sb, s2, out.codes.data() + r * (k / 2) + b * (kNvfp4BlockSize / 2));
    }
  return out;
}

}  // namespace fp4lm::quant
