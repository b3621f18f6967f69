#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace fp4lm::model {

Rope::Rope(int64_t head_dim, double theta, const RopeScaling& s) : head_dim_(head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0) fail("RoPE: head_dim must be positive and even, found {}", head_dim);
  const int64_t half = head_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  // float32 throughout, as HF computes it (so a float32 engine reproduces HF/llama2.c bit for bit).
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i)
    inv_freq_[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  if (s.type == "linear") {
    for (float& f : inv_freq_) f /= static_cast<float>(s.factor);
  } else if (s.type == "llama3") {
    // Wavelengths longer than original/low_freq_factor are slowed by `factor`, shorter than
    // original/high_freq_factor kept, and the band between interpolated smoothly.
    const float factor = static_cast<float>(s.factor), lo = static_cast<float>(s.low_freq_factor),
                hi = static_cast<float>(s.high_freq_factor);
    const float old_ctx = static_cast<float>(s.original_max_position_embeddings);
    const float low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    for (float& f : inv_freq_) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (hi > lo && wavelen >= high_freq_wavelen) {  // no band when hi == lo
        const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  } else if (s.type == "yarn") {
    // HF _compute_yarn_parameters: frequencies between the correction dims of beta_fast and
    // beta_slow rotations ramp from extrapolated (kept) to interpolated (/ factor).
    const double base = theta, dim = static_cast<double>(head_dim);
    const double orig = static_cast<double>(s.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    const float factor = static_cast<float>(s.factor);
    for (int64_t i = 0; i < half; ++i) {
      const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(head_dim));
      const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
      const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float keep = 1.0f - ramp;  // the extrapolation factor
      inv_freq_[i] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
    double af = s.attention_factor;
    if (af < 0)
      af = s.mscale != 0 && s.mscale_all_dim != 0 ? yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
                                                  : yarn_mscale(s.factor, 1.0);
    attention_scaling_ = static_cast<float>(af);
  } else if (s.type == "proportional") {
    // As transformers: int(partial_rotary_factor * head_dim // 2) rotated pairs.
    const auto rotated = static_cast<int64_t>(std::floor(s.partial_rotary_factor * static_cast<double>(head_dim) / 2));
    for (int64_t i = 0; i < half; ++i) {
      if (i >= rotated) inv_freq_[i] = 0.0f;
      inv_freq_[i] /= static_cast<float>(s.factor);
    }
  } else if (s.type == "longrope") {
    // HF: 1 / (factor[i] · base^(2i/d)), all in float32.
    if (static_cast<int64_t>(s.short_factor.size()) != half || static_cast<int64_t>(s.long_factor.size()) != half)
      fail("RoPE: longrope needs {} short and long factors, found {} and {}", half, s.short_factor.size(),
           s.long_factor.size());
    long_inv_freq_.resize(inv_freq_.size());
    for (int64_t i = 0; i < half; ++i) {
      const float freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
      inv_freq_[i] = 1.0f / (static_cast<float>(s.short_factor[i]) * freq);
      long_inv_freq_[i] = 1.0f / (static_cast<float>(s.long_factor[i]) * freq);
    }
    long_after_ = s.original_max_position_embeddings;
    attention_scaling_ = static_cast<float>(s.attention_factor);
  } else if (!s.type.empty()) {
    fail("RoPE: unsupported rope_scaling type '{}' (supported: linear, llama3, longrope, proportional, yarn)", s.type);
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

void Rope::cos_sin(int64_t pos, float* cos, float* sin, bool long_factors) const {
  const float p = static_cast<float>(pos);
  const std::vector<float>& inv_freq = long_factors && !long_inv_freq_.empty() ? long_inv_freq_ : inv_freq_;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = p * inv_freq[i];  // float32 product, as HF and llama2.c
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
  if (attention_scaling_ != 1.0f)
    for (size_t i = 0; i < inv_freq_.size(); ++i) {
      cos[i] *= attention_scaling_;
      sin[i] *= attention_scaling_;
    }
}

void Rope::set_mrope(std::vector<int64_t> section, bool interleaved) {
  mrope_section_ = std::move(section);
  mrope_axis_.assign(inv_freq_.size(), 0);
  if (mrope_section_.empty()) return;
  if (mrope_section_.size() != 3) fail("RoPE: mrope_section needs 3 counts (t, h, w), found {}", mrope_section_.size());
  const auto n = static_cast<int64_t>(inv_freq_.size());
  for (int64_t i = 0; i < n; ++i) {
    uint8_t axis = 0;
    if (interleaved) {
      if (i % 3 == 1 && i < 3 * mrope_section_[1]) axis = 1;
      else if (i % 3 == 2 && i < 3 * mrope_section_[2]) axis = 2;
    } else if (i >= mrope_section_[0]) {
      axis = i < mrope_section_[0] + mrope_section_[1] ? 1 : 2;
    }
    mrope_axis_[static_cast<size_t>(i)] = axis;
  }
}

void Rope::cos_sin_3d(const int64_t* thw, float* cos, float* sin) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float p = static_cast<float>(thw[mrope_axis_.empty() ? 0 : mrope_axis_[i]]);
    const float angle = p * inv_freq_[i];  // float32 product, as transformers
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling_;
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling_;
  }
}

void Rope::rotate(float* x, int64_t n_heads, const float* cos, const float* sin, int64_t stride) const {
  const int64_t half = head_dim_ / 2;
  if (stride == 0) stride = head_dim_;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * stride;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace fp4lm::model
