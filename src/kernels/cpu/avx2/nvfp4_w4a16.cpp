// NVFP4 W4A16 on AVX2 in integers (docs/KERNELS.md, "W4A16 inner loop"): per 16-element block
// the activations become int16 with a shared power-of-two exponent (exact for every bf16 value
// within 2^7 of the block's largest), the weights the small integers 2 × E2M1 (× 256, in the
// high byte of each word), and vpmaddwd forms exact int32 sums of 8 products per lane, every
// lane inside one block. The two block scales (weight E4M3 × activation exponent, an exact fp32
// product) are applied once per block sum by one FMA into the fp32 accumulator of the (row,
// token). The same instruction sequence runs per (row, token) for every tile, so a token's
// result never depends on the other tokens of the call or on the row split.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/avx2/common.h"
#include "kernels/cpu/avx2/nvfp4.h"
#define FP4LM_W4A16_DOT 0
#include "kernels/cpu/avx2/nvfp4_w4a16_rows.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::round_up;

// Word position of element e (0..63) of a chunk in the kernel's activation layout: vector
// v = 0..3 of 16 words holds elements 4i + {0, 2, 1, 3}[v] (what the weight decoder pairs with).
inline int permuted_word(int e) {
  const int o = e & 3;
  return (((o & 1) << 1) | (o >> 1)) * 16 + (e >> 2);
}

// Quantizes one token row (fp32, k values) to the kernel layout: q [pieces × k64] int16 (per
// chunk: piece 0's 64 words, then piece 1's; permuted, zero-padded) and sa [k64 / 64 × 8] fp32,
// lane d of chunk c = the activation factor of block 4c + d/2 (see kW4a16ExpMin in
// nvfp4.h). Piece 1 (float32 x) is the remainder x · 2^(14 - e) - q0, × 2^15, rounded.
// A block holding NaN or ±inf gets q = 0 and factor NaN, so the token's outputs become NaN.
void quantize_token(const float* x, int64_t k, int64_t k64, int pieces, int16_t* q, float* sa) {
  static const auto perm = [] {
    std::vector<int> p(kChunk);
    for (int e = 0; e < kChunk; ++e) p[e] = permuted_word(e);
    return p;
  }();
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  alignas(32) int32_t qi[kChunk], ql[kChunk];
  const __m256 two15 = _mm256_set1_ps(32768.0f);
  for (int64_t c = 0; c < k64 / kChunk; ++c) {
    std::memset(qi, 0, sizeof(qi));
    std::memset(ql, 0, sizeof(ql));
    for (int b = 0; b < 4; ++b) {
      const int64_t j0 = c * kChunk + b * 16;
      float* fa = sa + c * 8 + 2 * b;
      if (j0 >= k) {  // padding (k is a multiple of 16)
        fa[0] = fa[1] = 0.0f;
        continue;
      }
      const __m256 v0 = _mm256_loadu_ps(x + j0), v1 = _mm256_loadu_ps(x + j0 + 8);
      const __m256 mx = _mm256_max_ps(_mm256_andnot_ps(sign_mask, v0), _mm256_andnot_ps(sign_mask, v1));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      // max_ps drops a NaN operand in one position, so test every element for non-finite values.
      const __m256 big = _mm256_set1_ps(3.4028234663852886e38f);
      const int bad = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_mask, v0), big, _CMP_NLE_UQ)) |
                      _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_mask, v1), big, _CMP_NLE_UQ));
      if (bad) {
        fa[0] = fa[1] = std::numeric_limits<float>::quiet_NaN();
        continue;  // q stays 0
      }
      uint32_t abits;
      const float amax = _mm_cvtss_f32(m4);
      std::memcpy(&abits, &amax, 4);
      const int e = std::max(static_cast<int>(abits >> 23) - 127, kW4a16ExpMin);  // 2^e <= amax < 2^(e+1)
      // x · 2^(14 - e) lies in (-2^15, 2^15); both factors are normal powers of two (e in [-75, 127]).
      const uint32_t up = static_cast<uint32_t>(127 + 14 - e) << 23, down = static_cast<uint32_t>(127 + e - 15) << 23;
      float f, g;
      std::memcpy(&f, &up, 4);
      std::memcpy(&g, &down, 4);
      fa[0] = fa[1] = g;
      const __m256 fv = _mm256_set1_ps(f);
      // Round to nearest even (MXCSR default); only +32768 can leave int16: saturated below.
      // The remainder y - q0 is exact in fp32 and below 1 in magnitude (0.5 unless saturated).
      for (int h = 0; h < 2; ++h) {
        const __m256 yv = _mm256_mul_ps(h == 0 ? v0 : v1, fv);
        const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(yv), _mm256_set1_epi32(32767));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qi + b * 16 + h * 8), q0);
        if (pieces == 2)
          _mm256_store_si256(reinterpret_cast<__m256i*>(ql + b * 16 + h * 8),
                             _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(yv, _mm256_cvtepi32_ps(q0)), two15)));
      }
    }
    int16_t* qc = q + c * kChunk * pieces;
    for (int e = 0; e < kChunk; ++e) qc[perm[e]] = static_cast<int16_t>(qi[e]);
    if (pieces == 2)
      for (int e = 0; e < kChunk; ++e) qc[kChunk + perm[e]] = static_cast<int16_t>(ql[e]);
  }
}

}  // namespace

W4a16Input nvfp4_w4a16_input_avx2(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool) {
  W4a16Input in;
  in.m = m;
  in.k64 = round_up(k, kChunk);
  in.pieces = act == DType::F32 ? 2 : 1;
  in.q.assign(static_cast<size_t>(m * in.k64 * in.pieces), 0);
  in.sa.assign(static_cast<size_t>(m * in.k64 / 8), 0.0f);
  const size_t esize = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * esize, act, row.data(), row.size());
      quantize_token(row.data(), k, in.k64, in.pieces, in.q.data() + t * in.k64 * in.pieces,
                     in.sa.data() + t * in.k64 / 8);
    }
  });
  return in;
}

int64_t nvfp4_w4a16_row_block_avx2(int64_t, int64_t) { return kNvfp4RowBlock; }

void nvfp4_w4a16_rows_avx2(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a16_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
