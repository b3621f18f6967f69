// NVFP4 W4A4 on AVX2: x is quantized at run time by the W4A4 rule (docs/FORMAT.md), then every
// 16-element block dot product is computed exactly in integer SIMD (docs/KERNELS.md).
//
// Doubled E2M1 values are the integers {0,1,2,3,4,6,8,12}: weights decode by pshufb to signed
// int8 w, activations are kept as signed int8 2a, so vpmaddubsw(|w|, sign(w)·2a) forms pair
// sums ≤ 288 (no saturation); vpmaddwd with ones makes int32 partials of 8 products, each
// lane inside one block. Lane partial × (scale_a × scale_w) is exact in fp32 (11 × 8 significant
// bits), so the only roundings are the fp32 accumulations.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx2/common.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::hsum;
using avx2::round_up;
using avx2::store_act;

constexpr int64_t kRowBlock = kNvfp4RowBlock;
constexpr int kTokTile = 4;
constexpr uint8_t kDoubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};  // 2 × E2M1 magnitudes

using QuantizedActivations = W4a4Input;

// Quantizes one token row exactly as quant::quantize_activation (same float operations: the
// block amax, quant::activation_block_scale, q = (1/input_scale)/sf, y = x·q, thresholds).
// Writes the kernel layout, and the standard packed codes/scales when given.
void quantize_row(const float* x, int64_t k, float input_scale, int64_t token, int8_t* a2, float* sa,
                  uint8_t* codes, uint8_t* scales) {
  const float g = 1.0f / input_scale;
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
  const __m256 t025 = _mm256_set1_ps(0.25f), t075 = _mm256_set1_ps(0.75f),
               t125 = _mm256_set1_ps(1.25f), t175 = _mm256_set1_ps(1.75f),
               t25 = _mm256_set1_ps(2.5f), t35 = _mm256_set1_ps(3.5f), t5 = _mm256_set1_ps(5.0f);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 16; ++b) {
    const float* v = x + b * 16;
    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
    const __m256 a0 = _mm256_andnot_ps(sign_mask, v0), a1 = _mm256_andnot_ps(sign_mask, v1);
    // NaN and ±inf fail `|x| <= FLT_MAX`.
    const __m256 bad = _mm256_or_ps(_mm256_cmp_ps(a0, fmax, _CMP_NLE_UQ), _mm256_cmp_ps(a1, fmax, _CMP_NLE_UQ));
    if (_mm256_movemask_ps(bad)) {
      for (int e = 0; e < 16; ++e)
        if (!std::isfinite(v[e]))
          fail("NVFP4 W4A4 activation quantization: element [{}, {}] is {}, expected a finite value",
               token, b * 16 + e, v[e]);
    }
    __m256 mx = _mm256_max_ps(a0, a1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const uint8_t sb = quant::activation_block_scale(_mm_cvtss_f32(m4), input_scale);
    const float sf = e4m3_to_f32(sb);
    const int64_t c = b / 4, pos = b % 4;
    sa[c * 4 + pos] = sf;
    if (scales) scales[b] = sb;
    if (sf == 0.0f) {
      if (codes) std::memset(codes + b * 8, 0, 8);
      for (int e = 0; e < 16; ++e) {  // all codes 0
        const int pe = static_cast<int>(pos) * 16 + e;
        a2[c * 64 + (pe & 1) * 32 + (pe >> 1)] = 0;
      }
      continue;
    }
    const __m256 q = _mm256_set1_ps(g / sf);
    alignas(32) int32_t idx[16], neg[16];
    auto classify = [&](__m256 xv, int32_t* id, int32_t* ng) {
      const __m256 y = _mm256_mul_ps(xv, q);
      const __m256 a = _mm256_andnot_ps(sign_mask, y);
      __m256i cnt = _mm256_setzero_si256();
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t025, _CMP_GT_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t075, _CMP_GE_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t125, _CMP_GT_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t175, _CMP_GE_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t25, _CMP_GT_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t35, _CMP_GE_OQ)));
      cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, t5, _CMP_GT_OQ)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(id), cnt);
      _mm256_store_si256(reinterpret_cast<__m256i*>(ng), _mm256_castps_si256(_mm256_cmp_ps(y, zero, _CMP_LT_OQ)));
    };
    classify(v0, idx, neg);
    classify(v1, idx + 8, neg + 8);
    int8_t* cs = a2 + c * 64;
    for (int e = 0; e < 16; ++e) {
      const int pe = static_cast<int>(pos) * 16 + e;
      const int at = (pe & 1) * 32 + (pe >> 1);
      const uint8_t val = kDoubled[idx[e]];
      cs[at] = static_cast<int8_t>(neg[e] ? -val : val);
    }
    if (codes) {
      for (int j = 0; j < 8; ++j) {
        const int lo = idx[2 * j] | (neg[2 * j] ? 8 : 0), hi = idx[2 * j + 1] | (neg[2 * j + 1] ? 8 : 0);
        codes[b * 8 + j] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void check_quant_args(int64_t k, float input_scale) {
  if (k % 16 != 0) fail("NVFP4 W4A4 activation quantization: k = {} is not a multiple of 16", k);
  if (!(std::isfinite(input_scale) && input_scale > 0.0f) || !std::isfinite(1.0f / input_scale))
    fail("NVFP4 W4A4 activation quantization: input_scale = {}, expected a finite value > 0",
         input_scale);
}

}  // namespace

W4a4Input nvfp4_w4a4_input_avx2(const void* x, DType act, int64_t m, int64_t k, std::optional<float> input_scale,
                                ThreadPool& pool) {
  check_quant_args(k, input_scale.value_or(1.0f));
  QuantizedActivations qa;
  qa.m = m;
  qa.k64 = round_up(k, 64);
  qa.q.assign(static_cast<size_t>(m * qa.k64), 0);
  qa.sa.assign(static_cast<size_t>(m * (qa.k64 / 64) * 4), 0.0f);
  qa.token_scale.assign(static_cast<size_t>(m), input_scale.value_or(0.0f));
  const size_t esize = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * esize, act, row.data(), row.size());
      if (!input_scale) qa.token_scale[static_cast<size_t>(t)] = quant::dynamic_activation_scale(row.data(), k);
      quantize_row(row.data(), k, qa.token_scale[static_cast<size_t>(t)], t, qa.q.data() + t * qa.k64,
                   qa.sa.data() + t * (qa.k64 / 64) * 4, nullptr, nullptr);
    }
  });
  return qa;
}

namespace {

struct Decoder {
  __m256i low4 = _mm256_set1_epi8(0x0f);
  // 2 × E2M1 as int8, indexed by the 4-bit code (bit 3 = sign).
  __m256i lut = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
  __m256i ones = _mm256_set1_epi16(1);
  __m256i m7f = _mm256_set1_epi32(0x7f), m80 = _mm256_set1_epi32(0x80);
  __m256 two120 = _mm256_set1_ps(0x1p120f);
  __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);  // 4 block scales -> the lanes' pairs

  // 4 E4M3 bytes -> lanes [s0, s0, s1, s1, s2, s2, s3, s3] as fp32. Shifting the 7 magnitude
  // bits to fp32's exponent/mantissa position and multiplying by 2^120 rebases the exponent
  // bias 7 -> 127, exactly, subnormals included. (NaN bytes are rejected at load.)
  inline __m256 scales(uint32_t bytes) const {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bytes)), dup));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(v, m7f), 20),
                                         _mm256_slli_epi32(_mm256_and_si256(v, m80), 24));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), two120);
  }
};

// out[t] = Σ over blocks of (integer block dot) × scale_a × scale_w, for T tokens.
template <int T>
void dot_row(const Decoder& d, const uint8_t* codes, const uint8_t* sc, int64_t k,
             const QuantizedActivations& qa, int64_t t0, float* out) {
  const int64_t k64 = qa.k64, chunks = k64 / 64, full = k / 64;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    __m256i cv;
    uint32_t sbytes = 0;
    if (c < full) {
      cv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32));
      std::memcpy(&sbytes, sc + c * 4, 4);
    } else {  // 16, 32 or 48 elements left: zero-pad codes and scales (activations are padded)
      alignas(32) uint8_t tail[32] = {};
      const int64_t rem = k - c * 64;
      std::memcpy(tail, codes + c * 32, rem / 2);
      std::memcpy(&sbytes, sc + c * 4, rem / 16);
      cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
    const __m256i wlo = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(cv, d.low4));
    const __m256i whi = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(_mm256_srli_epi16(cv, 4), d.low4));
    const __m256i ulo = _mm256_abs_epi8(wlo), uhi = _mm256_abs_epi8(whi);
    const __m256 sw = d.scales(sbytes);
    for (int t = 0; t < T; ++t) {
      const size_t base = static_cast<size_t>((t0 + t) * k64 + c * 64);
      const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa.q.data() + base));
      const __m256i ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa.q.data() + base + 32));
      const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, _mm256_sign_epi8(alo, wlo)),
                                           _mm256_maddubs_epi16(uhi, _mm256_sign_epi8(ahi, whi)));
      const __m256i p32 = _mm256_madd_epi16(p16, d.ones);
      const __m128 sa4 = _mm_loadu_ps(qa.sa.data() + ((t0 + t) * chunks + c) * 4);
      const __m256 s = _mm256_mul_ps(sw, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sa4), d.pairs));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

using DotFn = void (*)(const Decoder&, const uint8_t*, const uint8_t*, int64_t,
                       const QuantizedActivations&, int64_t, float*);
constexpr DotFn kDot[kTokTile + 1] = {nullptr, dot_row<1>, dot_row<2>, dot_row<3>, dot_row<4>};

}  // namespace

void quantize_activation_nvfp4_avx2(const float* x, int64_t m, int64_t k, float input_scale,
                                    uint8_t* codes, uint8_t* scales) {
  check_quant_args(k, input_scale);
  const int64_t k64 = round_up(k, 64);
  std::vector<int8_t> a2(static_cast<size_t>(k64));
  std::vector<float> sa(static_cast<size_t>(k64 / 64 * 4));
  for (int64_t t = 0; t < m; ++t)
    quantize_row(x + t * k, k, input_scale, t, a2.data(), sa.data(), codes + t * (k / 2),
                 scales + t * (k / 16));
}

void nvfp4_w4a4_rows_avx2(const Nvfp4Matrix& w, const W4a4Input& qa, int64_t r0, int64_t r1, void* y,
                          DType act) {
  const int64_t n = w.n, k = w.k, m = qa.m;
  const Decoder dec;
  float out[kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = std::min(r1, b0 + kRowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1; ++r) {
        kDot[tt](dec, w.row_codes[r], w.row_scales[r], k, qa, t0, out);
        // 0.25: both operands were doubled. alpha = the token's input_scale × the row's
        // weight_scale_2 (the same product for every token under a static scale).
        const float bias = w.bias.empty() ? 0.0f : w.bias[r];
        for (int t = 0; t < tt; ++t) {
          const float alpha = qa.token_scale[static_cast<size_t>(t0 + t)] * w.row_global[r] * 0.25f;
          store_act(y, act, (t0 + t) * n + r, out[t] * alpha + bias);
        }
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu
