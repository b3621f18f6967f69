#include "vision/torch_resize_f32.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace fp4lm::vision {

namespace {

// Keys' cubic convolution kernel, a = -0.5, in float32 as ATen's aa_filter evaluates it. ATen's
// CPU kernels are built per instruction set with FMA enabled and the compiler fuses these
// multiply-adds: std::fma reproduces that (measured: without it 2 to 3 times more values differ
// from torch's).
float cubic_aa(float x) {
  constexpr float a = -0.5f;
  if (x < 0.0f) x = -x;
  if (x < 1.0f) return std::fma(std::fma(a + 2.0f, x, -(a + 3.0f)) * x, x, 1.0f);
  if (x < 2.0f) return std::fma(std::fma(std::fma(a, x, -5.0f * a), x, 8.0f * a), x, -4.0f * a);
  return 0.0f;
}

struct Taps {
  std::vector<int64_t> first, count;  // per output index: the first input index and the tap count
  std::vector<float> weights;         // per output index: `stride` weights
  int64_t stride = 0;
};

// ATen's _compute_indices_min_size_weights_aa, with its mixed float / double arithmetic.
Taps taps(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = static_cast<float>((4 * 0.5) * (scale >= 1.0f ? static_cast<double>(scale) : 1.0));
  const float invscale = scale >= 1.0f ? static_cast<float>(1.0 / static_cast<double>(scale)) : 1.0f;
  Taps t;
  t.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.weights.assign(static_cast<size_t>(out * t.stride), 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    const float center = static_cast<float>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5));
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
    int64_t n = std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in) - lo;
    n = std::clamp<int64_t>(n, 0, t.stride);
    float* w = t.weights.data() + i * t.stride;
    float total = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float d = static_cast<float>(j + lo) - center;
      w[j] = cubic_aa(static_cast<float>((static_cast<double>(d) + 0.5) * static_cast<double>(invscale)));
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < n; ++j) w[j] /= total;
    t.first[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = n;
  }
  return t;
}

// One output value: the weighted sum of `n` inputs `step` floats apart, accumulated in order.
// Measured against torch 2.9.1 (AVX512 build): when enlarging, fused multiply-adds reproduce it
// bit for bit; when shrinking, separate multiplies and adds come closest (about 1% of values one
// ulp off, against 30% fused). This library is built without -mfma, so the plain form is not fused.
float dot(const float* src, int64_t step, const float* w, int64_t n, bool fused) {
  float acc = src[0] * w[0];
  if (fused) {
    for (int64_t j = 1; j < n; ++j) acc = std::fma(src[j * step], w[j], acc);
  } else {
    for (int64_t j = 1; j < n; ++j) acc += src[j * step] * w[j];
  }
  return acc;
}

}  // namespace

std::vector<float> resize_bicubic_antialias_torch(const std::vector<float>& chw, int channels, int height, int width,
                                                  int out_height, int out_width) {
  if (channels <= 0 || height <= 0 || width <= 0 || out_height <= 0 || out_width <= 0)
    fail("bicubic resize: sizes must be positive, found {} x {} x {} -> {} x {}", channels, height, width, out_height,
         out_width);
  if (chw.size() != static_cast<size_t>(channels) * height * width)
    fail("bicubic resize: {} floats for a {} x {} x {} image", chw.size(), channels, height, width);
  std::vector<float> cur = chw;
  int64_t h = height, w = width;
  if (out_width != width) {
    const Taps t = taps(width, out_width);
    std::vector<float> next(static_cast<size_t>(channels * h * out_width));
    for (int64_t r = 0; r < channels * h; ++r)
      for (int64_t x = 0; x < out_width; ++x)
        next[static_cast<size_t>(r * out_width + x)] =
            dot(cur.data() + r * w + t.first[static_cast<size_t>(x)], 1, t.weights.data() + x * t.stride,
                t.count[static_cast<size_t>(x)], out_width > width);
    cur = std::move(next);
    w = out_width;
  }
  if (out_height != height) {
    const Taps t = taps(height, out_height);
    std::vector<float> next(static_cast<size_t>(channels * out_height * w));
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < out_height; ++y) {
        const float* src = cur.data() + (c * h + t.first[static_cast<size_t>(y)]) * w;
        const float* wt = t.weights.data() + y * t.stride;
        for (int64_t x = 0; x < w; ++x)
          next[static_cast<size_t>((c * out_height + y) * w + x)] = dot(src + x, w, wt, t.count[static_cast<size_t>(y)], out_height > height);
      }
    cur = std::move(next);
  }
  return cur;
}

}  // namespace fp4lm::vision
