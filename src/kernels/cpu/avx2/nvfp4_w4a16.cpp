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

namespace fp4lm::kernels::cpu {

namespace {

using avx2::hsum;
using avx2::round_up;
using avx2::store_act;

constexpr int64_t kChunk = 64;                 // elements per step: 32 code bytes, 4 blocks
constexpr int64_t kRowBlock = kNvfp4RowBlock;  // rows whose codes stay in L1/L2 while all token tiles pass
constexpr int kTokTile = 4;                    // tokens sharing one decoded chunk in registers

// Word position of element e (0..63) of a chunk in the kernel's activation layout: vector
// v = 0..3 of 16 words holds elements 4i + {0, 2, 1, 3}[v] (what the weight decoder pairs with).
inline int permuted_word(int e) {
  const int o = e & 3;
  return (((o & 1) << 1) | (o >> 1)) * 16 + (e >> 2);
}

// Quantizes one token row (fp32, k values) to the kernel layout: q [pieces × k64] int16 (per
// chunk: piece 0's 64 words, then piece 1's; permuted, zero-padded) and sa [k64 / 64 × 8] fp32,
// lane d of chunk c = the activation factor of block 4c + d/2 (see kW4a16ExpMin in
// nvfp4_avx2.h). Piece 1 (float32 x) is the remainder x · 2^(14 - e) - q0, × 2^15, rounded.
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

// Per 64-element chunk of a row: 4 vectors of 16 int16 weights (2 × E2M1 × 256), vector v word
// i = element 4i + {0, 2, 1, 3}[v], and the block scales lane d = E4M3 scale of block d/2 × 2^-8.
struct Decoder {
  __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i high8 = _mm256_set1_epi16(static_cast<short>(0xFF00));
  // 2 × E2M1 as int8, indexed by the 4-bit code (bit 3 = sign).
  __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  // 4 scale bytes -> words [b0, b0, b1, b1, b2, b2, b3, b3].
  __m128i dup = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
  __m128i bit14 = _mm_set1_epi16(0x4000);

  // 32 code bytes (element 2j in byte j's low nibble) -> w[0..3]. Byte j of `lo` is element 2j,
  // of `hi` element 2j + 1; shifting a word left by 8 keeps its even byte, masking keeps its odd
  // one, each as a signed value × 256 (exact products; int32 sums of 8 stay below 2^30).
  inline void weights(const uint8_t* p, __m256i w[4]) const {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(c, low4));
    const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(c, 4), low4));
    w[0] = _mm256_slli_epi16(lo, 8);
    w[1] = _mm256_and_si256(lo, high8);
    w[2] = _mm256_slli_epi16(hi, 8);
    w[3] = _mm256_and_si256(hi, high8);
  }
  // 4 E4M3 bytes -> 8 fp32 lanes, lane d = scale of block d/2 × 2^-8, exactly: shifted left by 7
  // (sign moved from bit 14 to 15) an E4M3 byte is the binary16 of scale × 2^-8 (same exponent
  // field, bias 7 vs 15; subnormals too), and vcvtph2ps is exact. NaN bytes are rejected at load.
  inline __m256 scales(uint32_t bytes) const {
    const __m128i wv = _mm_slli_epi16(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bytes)), dup), 7);
    return _mm256_cvtph_ps(_mm_add_epi16(wv, _mm_and_si128(wv, bit14)));
  }
  // The same for two chunks (8 bytes): s0 for bytes 0-3, s1 for bytes 4-7 (8 ops instead of 12).
  inline void scales2(const uint8_t* p, __m256& s0, __m256& s1) const {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b)), 7);
    const __m256i h = _mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x4000)));
    s0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    s1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
};

// The exact int32 sums of one (row, token) chunk: lane d = Σ over elements 8d..8d+7 of
// (2 × E2M1 × 256) × q, then acc += float(sum) × (sw × sa). float(sum) is exact (a multiple of
// 256 below 2^30), sw × sa is exact (4 significant bits × a power of two, normal), so the FMA is
// the only rounding. Two pieces (float32 x): the second piece's sum joins the first as
// float(sum0) + float(sum1) × 2^-15 (one more rounding) before the same FMA.
inline __m256i piece_sum(const __m256i w[4], const int16_t* q) {
  const __m256i* x = reinterpret_cast<const __m256i*>(q);
  __m256i s = _mm256_madd_epi16(w[0], _mm256_loadu_si256(x));
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[1], _mm256_loadu_si256(x + 1)));
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[2], _mm256_loadu_si256(x + 2)));
  return _mm256_add_epi32(s, _mm256_madd_epi16(w[3], _mm256_loadu_si256(x + 3)));
}
template <int P>
inline __m256 chunk_step(const __m256i w[4], __m256 sw, const int16_t* q, const float* sa, __m256 acc) {
  __m256 f = _mm256_cvtepi32_ps(piece_sum(w, q));
  if constexpr (P == 2) f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(piece_sum(w, q + kChunk)), _mm256_set1_ps(0x1p-15f), f);
  return _mm256_fmadd_ps(f, _mm256_mul_ps(sw, _mm256_loadu_ps(sa)), acc);
}

// Software prefetch of a row's codes 2 KiB ahead (into the next rows once a row ends: a shard's
// rows are contiguous; past the end it never faults), into L2: the hardware prefetcher ramps
// up slowly on short row streams (as in the AVX-512 kernels, docs/KERNELS.md).
constexpr int64_t kPrefetchChunks = 64;
inline void prefetch(const uint8_t* codes, const uint8_t* scales, int64_t c) {
  _mm_prefetch(reinterpret_cast<const char*>(codes + (c + kPrefetchChunks) * 32), _MM_HINT_T1);
  if ((c & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + (c + kPrefetchChunks) * 4), _MM_HINT_T1);
}

// out[t] for one row and T tokens (token t's q at q0 + t * P * k64, factors at sa0 + t * k64 / 8):
// each chunk of the row is decoded once and used by the T tokens. One row at a time (measured
// per core at 4096², M = 1: 34 G weights/s against 31 for 2 rows side by side and 24 for 4;
// 2-4 tokens: 1 row as fast or faster than 2), so each thread streams one row.
template <int T, int P>
void dot_row(const Decoder& dec, const uint8_t* codes, const uint8_t* scales, int64_t k, const int16_t* q0,
             const float* sa0, int64_t k64, float* out /* [T] */) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t full = k / kChunk, chunks = k64 / kChunk;
  auto step = [&](int64_t c, const __m256i* w, __m256 sw) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      acc[t] = chunk_step<P>(w, sw, q0 + (t * k64 + c * kChunk) * P, sa0 + (t * k64 + c * kChunk) / 8, acc[t]);
  };
  int64_t c = 0;
  for (; c + 2 <= full; c += 2) {  // two chunks per iteration: their 8 scale bytes converted at once
    prefetch(codes, scales, c);
    prefetch(codes, scales, c + 1);
    __m256i w[4];
    __m256 s0, s1;
    dec.scales2(scales + c * 4, s0, s1);
    dec.weights(codes + c * 32, w);
    step(c, w, s0);
    dec.weights(codes + (c + 1) * 32, w);
    step(c + 1, w, s1);
  }
  for (; c < chunks; ++c) {
    __m256i w[4];
    uint32_t sbytes = 0;
    if (c < full) {
      dec.weights(codes + c * 32, w);
      std::memcpy(&sbytes, scales + c * 4, 4);
    } else {  // 16, 32 or 48 elements left: codes and scales zero-padded (q and sa are too)
      alignas(32) uint8_t tail[32] = {};
      const int64_t rem = k - c * kChunk;
      std::memcpy(tail, codes + c * 32, static_cast<size_t>(rem / 2));
      std::memcpy(&sbytes, scales + c * 4, static_cast<size_t>(rem / 16));
      dec.weights(tail, w);
    }
    step(c, w, dec.scales(sbytes));
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

using DotFn = void (*)(const Decoder&, const uint8_t*, const uint8_t*, int64_t, const int16_t*, const float*,
                       int64_t, float*);
// [pieces - 1][tokens]. Token tiles of 4 (4 accumulators, 4 weight vectors, the scales): 8 tokens
// in one tile spilled registers and measured slower (46 vs 58 G multiply-adds/s per core at m = 8).
constexpr DotFn kDot[2][kTokTile + 1] = {{nullptr, dot_row<1, 1>, dot_row<2, 1>, dot_row<3, 1>, dot_row<4, 1>},
                                         {nullptr, dot_row<1, 2>, dot_row<2, 2>, dot_row<3, 2>, dot_row<4, 2>}};

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

void nvfp4_w4a16_rows_avx2(const Nvfp4Matrix& w, const W4a16Input& in, int64_t r0, int64_t r1, void* y,
                           DType act) {
  const int64_t n = w.n, k = w.k, k64 = in.k64, m = in.m;
  const Decoder dec;
  float out[kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = std::min(r1, b0 + kRowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1; ++r) {
        kDot[in.pieces - 1][tt](dec, w.row_codes[r], w.row_scales[r], k, in.q.data() + t0 * k64 * in.pieces,
                                in.sa.data() + t0 * k64 / 8, k64, out);
        const float g = w.row_global[r], bias = w.bias.empty() ? 0.0f : w.bias[r];
        for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[t] * g + bias);
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu
