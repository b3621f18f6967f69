#include "quant/nvfp4.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant {

namespace {

constexpr float kMinBlockScale = 0x1p-9f;  // smallest E4M3 subnormal
constexpr float kMaxBlockScale = 448.0f;   // largest finite E4M3

void check_shape(const char* what, int64_t rows, int64_t k) {
  if (rows < 0 || k < 0) fail("{}: negative shape [{}, {}]", what, rows, k);
  if (k % kNvfp4BlockSize != 0)
    fail("{}: k = {} is not a multiple of the NVFP4 block size {}", what, k, kNvfp4BlockSize);
}

void check_finite(const char* what, const float* x, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      float v = x[r * k + c];
      if (!std::isfinite(v)) fail("{}: element [{}, {}] of [{}, {}] is {}, expected a finite value",
                                  what, r, c, rows, k, v);
    }
}

// Packs 16-element blocks of E2M1 codes two per byte: element 2j low nibble, 2j+1 high.
void pack_pair(uint8_t* dst, int64_t j, uint8_t lo, uint8_t hi) {
  dst[j] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
}

uint8_t nibble(const uint8_t* codes, size_t i) {
  uint8_t b = codes[i / 2];
  return (i % 2 == 0) ? (b & 0xf) : (b >> 4);
}

float block_amax(const float* x) { return amax(x, kNvfp4BlockSize); }

}  // namespace

float amax(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

uint8_t weight_block_scale(float block_amax, float weight_scale_2) {
  if (!(weight_scale_2 > 0.0f) || !std::isfinite(weight_scale_2))
    fail("weight_block_scale: weight_scale_2 = {}, expected a finite value > 0", weight_scale_2);
  if (!(block_amax >= 0.0f) || !std::isfinite(block_amax))
    fail("weight_block_scale: block amax = {}, expected a finite value >= 0", block_amax);
  float s = block_amax / (6.0f * weight_scale_2);
  if (s == 0.0f) s = 1.0f;
  s = std::clamp(s, kMinBlockScale, kMaxBlockScale);
  return f32_to_e4m3(s);
}

uint8_t activation_block_scale(float block_amax, float input_scale) {
  if (!(input_scale > 0.0f) || !std::isfinite(input_scale))
    fail("activation_block_scale: input_scale = {}, expected a finite value > 0", input_scale);
  if (!(block_amax >= 0.0f) || !std::isfinite(block_amax))
    fail("activation_block_scale: block amax = {}, expected a finite value >= 0", block_amax);
  float g = 1.0f / input_scale;
  if (!std::isfinite(g)) fail("activation_block_scale: 1/input_scale overflows (input_scale = {})", input_scale);
  float v = g * block_amax / 6.0f;
  return f32_to_e4m3(std::min(v, kMaxBlockScale));
}

Nvfp4Weight quantize_weight(const float* w, int64_t n, int64_t k, std::optional<float> group_amax) {
  check_shape("quantize_weight", n, k);
  check_finite("quantize_weight", w, n, k);
  const float own = amax(w, static_cast<size_t>(n * k));
  const float a = group_amax.value_or(own);
  if (!(a >= 0.0f) || !std::isfinite(a))
    fail("quantize_weight: group amax = {}, expected a finite value >= 0", a);

  Nvfp4Weight out;
  out.n = n;
  out.k = k;
  out.codes.assign(static_cast<size_t>(n * k / 2), 0);
  out.scales.assign(static_cast<size_t>(n * k / kNvfp4BlockSize), kE4M3One);
  if (a == 0.0f) {
    // §3 would compute 0/0 here. A zero amax is only consistent with an all-zero tensor, which
    // gets codes 0, scales 1.0 and weight_scale_2 = 0: it dequantizes to exact zeros.
    if (own != 0.0f)
      fail("quantize_weight: group amax is 0 but the tensor's own amax is {}", own);
    out.weight_scale_2 = 0.0f;
    return out;
  }
  const float s2 = a / kNvfp4GlobalDivisor;
  if (s2 == 0.0f) fail("quantize_weight: amax {} is too small: amax/2688 underflows float32", a);
  out.weight_scale_2 = s2;

  const int64_t blocks = k / kNvfp4BlockSize;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* x = w + r * k + b * kNvfp4BlockSize;
      const uint8_t sb = weight_block_scale(block_amax(x), s2);
      const float den = e4m3_to_f32(sb) * s2;
      if (!(den > 0.0f))
        fail("quantize_weight: block [{}, {}] scale {} * weight_scale_2 {} underflows float32",
             r, b, e4m3_to_f32(sb), s2);
      out.scales[static_cast<size_t>(r * blocks + b)] = sb;
      uint8_t* dst = out.codes.data() + r * (k / 2) + b * (kNvfp4BlockSize / 2);
      for (int j = 0; j < kNvfp4BlockSize / 2; ++j)
        pack_pair(dst, j, f32_to_e2m1(x[2 * j] / den), f32_to_e2m1(x[2 * j + 1] / den));
    }
  }
  return out;
}

std::vector<float> dequantize_weight(const uint8_t* codes, const uint8_t* scales, int64_t n,
                                     int64_t k, float weight_scale_2, const float* row_scale) {
  check_shape("dequantize_weight", n, k);
  const int64_t blocks = k / kNvfp4BlockSize;
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const float global = row_scale ? row_scale[r] : weight_scale_2;
    if (!std::isfinite(global))
      fail("dequantize_weight: global scale of row {} is {}, expected a finite value", r, global);
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t sb = scales[r * blocks + b];
      const float s = e4m3_to_f32(sb);
      if (std::isnan(s))
        fail("dequantize_weight: block scale [{}, {}] is the E4M3 NaN byte 0x{:02X}", r, b, sb);
      for (int64_t c = b * kNvfp4BlockSize; c < (b + 1) * kNvfp4BlockSize; ++c) {
        const size_t i = static_cast<size_t>(r * k + c);
        out[i] = e2m1_to_f32(nibble(codes, i)) * s * global;
      }
    }
  }
  return out;
}

std::vector<float> dequantize_weight(const Nvfp4Weight& w) {
  check_shape("dequantize_weight", w.n, w.k);
  if (w.codes.size() != static_cast<size_t>(w.n * w.k / 2) ||
      w.scales.size() != static_cast<size_t>(w.n * w.k / kNvfp4BlockSize))
    fail("dequantize_weight: [{}, {}] weight needs {} code bytes and {} scales, found {} and {}",
         w.n, w.k, w.n * w.k / 2, w.n * w.k / kNvfp4BlockSize, w.codes.size(), w.scales.size());
  return dequantize_weight(w.codes.data(), w.scales.data(), w.n, w.k, w.weight_scale_2);
}

Nvfp4Activation quantize_activation(const float* x, int64_t m, int64_t k, float input_scale) {
  check_shape("quantize_activation", m, k);
  check_finite("quantize_activation", x, m, k);
  if (!(input_scale > 0.0f) || !std::isfinite(input_scale))
    fail("quantize_activation: input_scale = {}, expected a finite value > 0", input_scale);
  const float g = 1.0f / input_scale;
  if (!std::isfinite(g)) fail("quantize_activation: 1/input_scale overflows (input_scale = {})", input_scale);
  Nvfp4Activation out;
  out.m = m;
  out.k = k;
  out.codes.assign(static_cast<size_t>(m * k / 2), 0);
  out.scales.assign(static_cast<size_t>(m * k / kNvfp4BlockSize), 0);
  const int64_t blocks = k / kNvfp4BlockSize;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* v = x + r * k + b * kNvfp4BlockSize;
      const uint8_t sb = activation_block_scale(block_amax(v), input_scale);
      out.scales[static_cast<size_t>(r * blocks + b)] = sb;
      const float sf = e4m3_to_f32(sb);
      if (sf == 0.0f) continue;  // the block is too small to represent: codes stay 0
      const float q = g / sf;
      uint8_t* dst = out.codes.data() + r * (k / 2) + b * (kNvfp4BlockSize / 2);
      for (int j = 0; j < kNvfp4BlockSize / 2; ++j)
        pack_pair(dst, j, f32_to_e2m1(v[2 * j] * q), f32_to_e2m1(v[2 * j + 1] * q));
    }
  }
  return out;
}

std::vector<float> dequantize_activation(const Nvfp4Activation& a, float input_scale) {
  check_shape("dequantize_activation", a.m, a.k);
  if (a.codes.size() != static_cast<size_t>(a.m * a.k / 2) ||
      a.scales.size() != static_cast<size_t>(a.m * a.k / kNvfp4BlockSize))
    fail("dequantize_activation: [{}, {}] activation needs {} code bytes and {} scales, found {} and {}",
         a.m, a.k, a.m * a.k / 2, a.m * a.k / kNvfp4BlockSize, a.codes.size(), a.scales.size());
  const int64_t blocks = a.k / kNvfp4BlockSize;
  std::vector<float> out(static_cast<size_t>(a.m * a.k));
  for (int64_t r = 0; r < a.m; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t sb = a.scales[static_cast<size_t>(r * blocks + b)];
      const float sf = e4m3_to_f32(sb);
      if (std::isnan(sf))
        fail("dequantize_activation: block scale [{}, {}] is the E4M3 NaN byte 0x{:02X}", r, b, sb);
      for (int64_t c = b * kNvfp4BlockSize; c < (b + 1) * kNvfp4BlockSize; ++c) {
        const size_t i = static_cast<size_t>(r * a.k + c);
        out[i] = e2m1_to_f32(nibble(a.codes.data(), i)) * sf * input_scale;
      }
    }
  }
  return out;
}

std::vector<float> qdq_activation(const float* x, int64_t m, int64_t k, float input_scale) {
  return dequantize_activation(quantize_activation(x, m, k, input_scale), input_scale);
}

float dynamic_activation_scale(const float* x, int64_t k) {
  float a = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    if (!std::isfinite(x[j])) return 1.0f;
    a = std::max(a, std::fabs(x[j]));
  }
  return std::max(a / kNvfp4GlobalDivisor, std::numeric_limits<float>::min());
}

std::vector<float> qdq_activation_per_token(const float* x, int64_t m, int64_t k) {
  check_shape("qdq_activation_per_token", m, k);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t) {
    const float s = dynamic_activation_scale(x + t * k, k);
    const std::vector<float> row = qdq_activation(x + t * k, 1, k, s);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace fp4lm::quant
