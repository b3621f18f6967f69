#include "model/state/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/nvfp4.h"

namespace fp4lm::model {

namespace {
constexpr int64_t kBlock = quant::kNvfp4BlockSize;

void check_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) fail("KV cache: K/V element {} is {}, which a quantized KV cache cannot store", i, x[i]);
}

// NVFP4 of one row (x already bias-free), the activation rule with input_scale = s.
void nvfp4_row(const float* x, int64_t hd, float s, uint8_t* dst) {
  uint8_t* codes = dst;
  uint8_t* scales = dst + hd / 2;
  const float g = 1.0f / s;
  for (int64_t b = 0; b < hd / kBlock; ++b) {
    const float* v = x + b * kBlock;
    const uint8_t sb = quant::activation_block_scale(quant::amax(v, kBlock), s);
    scales[b] = sb;
    const float sf = e4m3_to_f32(sb);
    uint8_t* c = codes + b * kBlock / 2;
    if (sf == 0.0f) {  // the block is below what an E4M3 scale reaches: codes 0
      std::fill_n(c, kBlock / 2, uint8_t{0});
      continue;
    }
    const float q = g / sf;
    for (int64_t j = 0; j < kBlock / 2; ++j)
      c[j] = static_cast<uint8_t>((f32_to_e2m1(v[2 * j] * q) & 0xf) | ((f32_to_e2m1(v[2 * j + 1] * q) & 0xf) << 4));
  }
}
}  // namespace

std::string_view kv_quant_name(KvQuant q) {
  switch (q) {
    case KvQuant::nvfp4: return "NVFP4";
    case KvQuant::nvfp4_affine: return "NVFP4_AFFINE";
    case KvQuant::int8: return "INT8";
    case KvQuant::none: break;
  }
  return "none";
}

std::optional<KvQuant> kv_quant_of(std::string_view declared) {
  if (declared == "NVFP4") return KvQuant::nvfp4;
  if (declared == "NVFP4_AFFINE") return KvQuant::nvfp4_affine;
  if (declared == "INT8") return KvQuant::int8;
  return std::nullopt;
}

size_t kv_quant_row_bytes(KvQuant q, int64_t hd) {
  if (q == KvQuant::int8) return static_cast<size_t>(hd);
  if (q == KvQuant::none) fail("KV cache: no quantized row format for an unquantized cache");
  if (hd <= 0 || hd % kBlock != 0)
    fail("KV cache: the {} format needs head_dim a multiple of {} (its block size), found {}", kv_quant_name(q), kBlock,
         hd);
  return static_cast<size_t>(hd / 2 + hd / kBlock);
}

void kv_quantize_row(KvQuant q, const float* x, int64_t hd, float s, const float* bias, uint8_t* dst) {
  check_finite(x, hd);
  if (q == KvQuant::int8) {
    for (int64_t i = 0; i < hd; ++i) {
      // nearbyint: round half to even in the default rounding mode.
      const float r = std::nearbyint(x[i] / s);
      dst[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f)));
    }
    return;
  }
  if (q == KvQuant::nvfp4_affine) {
    thread_local std::vector<float> shifted;
    shifted.resize(static_cast<size_t>(hd));
    for (int64_t i = 0; i < hd; ++i) shifted[static_cast<size_t>(i)] = x[i] - bias[i];
    nvfp4_row(shifted.data(), hd, s, dst);
    return;
  }
  nvfp4_row(x, hd, s, dst);
}

void kv_dequantize_row(KvQuant q, const uint8_t* src, int64_t hd, float s, const float* bias, float* dst) {
  if (q == KvQuant::int8) {
    for (int64_t i = 0; i < hd; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(src[i])) * s;
    return;
  }
  const uint8_t* scales = src + hd / 2;
  for (int64_t b = 0; b < hd / kBlock; ++b) {
    const float sf = e4m3_to_f32(scales[b]);
    for (int64_t i = b * kBlock; i < (b + 1) * kBlock; ++i) {
      const uint8_t byte = src[i / 2];
      dst[i] = e2m1_to_f32(i % 2 == 0 ? byte & 0xf : byte >> 4) * sf * s;
    }
  }
  if (q == KvQuant::nvfp4_affine)
    for (int64_t i = 0; i < hd; ++i) dst[i] += bias[i];
}

}  // namespace fp4lm::model
