// NVFP4 W4A4 on AVX2: x is quantized at run time by the W4A4 rule (docs/FORMAT.md), then every
// 16-element block dot product is computed exactly in integer SIMD (docs/KERNELS.md).
//
// Doubled E2M1 values are the integers {0,1,2,3,4,6,8,12}: weights decode by pshufb to the
// unsigned 2w + 12 (0..24), activations are kept as signed int8 2a, so vpmaddubsw(2w + 12, 2a)
// forms pair sums ≤ 576 (no saturation); vpmaddwd with ones makes int32 partials of 8 products,
// each lane inside one block, and the stored -12 × Σ 2a of the lane leaves Σ 2w × 2a, exactly.
// Lane partial × (scale_a × scale_w) is exact in fp32 (11 × 8 significant bits), so the only
// roundings are the fp32 accumulations.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx2/common.h"
#include "quant/nvfp4.h"
#define FP4LM_W4A4_DOT 0
#include "kernels/cpu/avx2/nvfp4_w4a4_rows.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::round_up;
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
    sa[c * 8 + pos * 2] = sa[c * 8 + pos * 2 + 1] = sf;  // the lane pair of block pos
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

// The loop's correction for one token (nvfp4.h, W4a4Input::corr): lane d of chunk c = -12 × Σ of
// 2a over the chunk's elements 8d..8d+7 (element e of a chunk is byte (e & 1) × 32 + e / 2).
void correction_row(const int8_t* a2, int64_t k64, int16_t* corr) {
  for (int64_t c = 0; c < k64 / 64; ++c)
    for (int d = 0; d < 8; ++d) {
      int32_t s = 0;
      for (int e = 8 * d; e < 8 * d + 8; ++e) s += a2[c * 64 + (e & 1) * 32 + (e >> 1)];
      corr[c * 8 + d] = static_cast<int16_t>(-12 * s);
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
  qa.sa.assign(static_cast<size_t>(m * (qa.k64 / 64) * 8), 0.0f);
  qa.corr.assign(static_cast<size_t>(m * (qa.k64 / 64) * 8), 0);
  qa.token_scale.assign(static_cast<size_t>(m), input_scale.value_or(0.0f));
  const size_t esize = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * esize, act, row.data(), row.size());
      if (!input_scale) qa.token_scale[static_cast<size_t>(t)] = quant::dynamic_activation_scale(row.data(), k);
      quantize_row(row.data(), k, qa.token_scale[static_cast<size_t>(t)], t, qa.q.data() + t * qa.k64,
                   qa.sa.data() + t * (qa.k64 / 64) * 8, nullptr, nullptr);
      correction_row(qa.q.data() + t * qa.k64, qa.k64, qa.corr.data() + t * (qa.k64 / 64) * 8);
    }
  });
  return qa;
}

void quantize_activation_nvfp4_avx2(const float* x, int64_t m, int64_t k, float input_scale,
                                    uint8_t* codes, uint8_t* scales) {
  check_quant_args(k, input_scale);
  const int64_t k64 = round_up(k, 64);
  std::vector<int8_t> a2(static_cast<size_t>(k64));
  std::vector<float> sa(static_cast<size_t>(k64 / 64 * 8));
  for (int64_t t = 0; t < m; ++t)
    quantize_row(x + t * k, k, input_scale, t, a2.data(), sa.data(), codes + t * (k / 2),
                 scales + t * (k / 16));
}

void nvfp4_w4a4_rows_avx2(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a4_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
