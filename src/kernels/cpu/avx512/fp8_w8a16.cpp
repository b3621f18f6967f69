// FP8 (E4M3) W8A16 GEMM/GEMV on AVX-512 (F, BW, VBMI, BF16): weights looked up as bf16, x split
// into bf16 pieces whose sum is x (as the W4A16 and dense AVX-512 kernels: bf16 x is 1 piece,
// f16 2, f32 3), products by vdpbf16ps with fp32 accumulation.
//
// Decode (64 weights, 5 ops): every E4M3 value / 256 is exactly a normal bf16 (4 significant
// bits, |v| in [2^-17, 1.75]; E4M3's subnormals too, so vdpbf16ps never sees a denormal). Two
// 128-entry byte tables (vpermi2b takes 7 index bits: the magnitude) give each code's bf16 high
// and low byte, one vpternlog copies the sign bit into the high byte, and vpunpck{l,h}bw make
// the words: vector A holds elements 16L + j, vector B elements 16L + 8 + j, in word 8L + j
// (L = 128-bit lane, j < 8). x is packed per call in the same order (fp8_avx512_pack_token). The
// 256 is folded into the row scale. Every product e4m3 × bf16 (≤ 12 significant bits) is exact
// in fp32, so the only roundings are the fp32 sums (one accumulator per (row, token), 16 lanes).
//
// Schedules (fp8_w8a16_schedule.h): few tokens decode in registers, 4 rows × 1-4 tokens; many
// tokens decode each row group once into a bf16 panel (the same A, B vectors), then 4 rows × 6
// tokens per tile (24 accumulators + 4 weight + 1 x of the 32 zmm). Per 64-element chunk each
// (row, token) accumulator takes vdpbf16ps with A then B, each over the pieces in order, in both
// schedules, so they are bit-identical. Built only with the AVX-512 flags (CMake), called only
// through fp8_kernels_avx512() when the CPU has AVX-512 F, BW, VL, VBMI and BF16.
#include "kernels/cpu/fp8_w8a16_schedule.h"
#include "kernels/cpu/avx512/common.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx512::bh;
using avx512::hsum;

constexpr int kChunk = 64;  // elements per decode step: vectors A and B

// The bf16 bits of E4M3 magnitude code c (sign bit clear) divided by 256, split into high and
// low bytes. Normal (exponent e ≥ 1): 2^(e-15) × (1 + m/8); subnormal: m × 2^-17. 0x7F (NaN) is
// rejected at load.
struct Bf16Tables {
  alignas(64) uint8_t hi[128] = {};
  alignas(64) uint8_t lo[128] = {};
  constexpr Bf16Tables() {
    for (int c = 1; c < 127; ++c) {
      const int e = c >> 3, m = c & 7;
      int exp = 0, mant = 0;
      if (e > 0) {
        exp = e + 112, mant = m << 4;
      } else {
        const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // the leading bit of m
        exp = p + 110, mant = (m - (1 << p)) << (7 - p);
      }
      const int bits = exp << 7 | mant;
      hi[c] = static_cast<uint8_t>(bits >> 8);
      lo[c] = static_cast<uint8_t>(bits & 0xff);
    }
  }
};
constexpr Bf16Tables kBf16 = {};

struct Decoder {
  __m512i hi0 = _mm512_load_si512(kBf16.hi), hi1 = _mm512_load_si512(kBf16.hi + 64);
  __m512i lo0 = _mm512_load_si512(kBf16.lo), lo1 = _mm512_load_si512(kBf16.lo + 64);
  __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));

  // 64 code bytes -> A (elements 16L + j) and B (elements 16L + 8 + j), 32 bf16 each.
  inline void operator()(const uint8_t* p, __m512i& a, __m512i& b) const {
    const __m512i c = _mm512_loadu_si512(p);
    // hi[c & 127] | (c & 0x80): ternary-logic 0xF8 = A | (B & C).
    const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, c, hi1), c, sign, 0xF8);
    const __m512i l = _mm512_permutex2var_epi8(lo0, c, lo1);
    a = _mm512_unpacklo_epi8(l, h);
    b = _mm512_unpackhi_epi8(l, h);
  }
};

// x of token t, chunk c, vector v (A, B), piece q at xp + t * tstride + ((c * 2 + v) * P + q) * 32.
template <int R, int T, int P>
void tile(const uint8_t* const* rows, int64_t k, const uint16_t* xp, int64_t tstride, float* out) {
  const Decoder dec;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  auto step = [&](int r, const uint8_t* p, int64_t c) {
    __m512i z[2];
    dec(p, z[0], z[1]);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < 2; ++v)
#pragma GCC unroll 3
        for (int q = 0; q < P; ++q)
          acc[r][t] = _mm512_dpbf16_ps(acc[r][t], bh(z[v]),
                                       bh(_mm512_load_si512(xp + t * tstride + ((c * 2 + v) * P + q) * 32)));
  };
  const int64_t full = k / kChunk;
  for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) step(r, rows[r] + c * kChunk, c);
  }
  if (full * kChunk < k) {  // the zero-padded last chunk (x is padded too)
    for (int r = 0; r < R; ++r) {
      alignas(64) uint8_t tail[kChunk] = {};
      std::memcpy(tail, rows[r] + full * kChunk, static_cast<size_t>(k - full * kChunk));
      step(r, tail, full);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// tile()'s accumulation with the weights from a decoded bf16 panel (row stride kc words; per
// chunk A then B).
template <int R, int T, int P>
void panel_tile(const uint16_t* panel, int64_t kc, const uint16_t* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < kc / kChunk; ++c)
    for (int v = 0; v < 2; ++v) {
      __m512i w[R];
      for (int r = 0; r < R; ++r) w[r] = _mm512_load_si512(panel + r * kc + (c * 2 + v) * 32);
#pragma GCC unroll 3
      for (int q = 0; q < P; ++q)
        for (int t = 0; t < T; ++t) {
          const __m512i xv = _mm512_load_si512(xp + t * tstride + ((c * 2 + v) * P + q) * 32);
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], bh(w[r]), bh(xv));
        }
    }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

template <int P>
struct Avx512 {
  using X = uint16_t;
  using Panel = uint16_t;
  static constexpr int kChunk = ::fp4lm::kernels::cpu::kChunk;
  static constexpr int kTokTile = 4;
  static constexpr int kRowsFor[kTokTile + 1] = {0, 4, 4, 4, 4};
  using Tile = void (*)(const uint8_t* const*, int64_t, const uint16_t*, int64_t, float*);
  static constexpr Tile kWide[kTokTile + 1] = {nullptr, tile<4, 1, P>, tile<4, 2, P>, tile<4, 3, P>, tile<4, 4, P>};
  static constexpr Tile kOne[kTokTile + 1] = {nullptr, tile<1, 1, P>, tile<1, 2, P>, tile<1, 3, P>, tile<1, 4, P>};

  static void decode_row(const uint8_t* codes, int64_t k, uint16_t* out) {
    const Decoder dec;
    __m512i a, b;
    const int64_t full = k / kChunk;
    for (int64_t c = 0; c < full; ++c) {
      dec(codes + c * kChunk, a, b);
      _mm512_store_si512(out + c * kChunk, a);
      _mm512_store_si512(out + c * kChunk + 32, b);
    }
    if (full * kChunk < k) {
      alignas(64) uint8_t tail[kChunk] = {};
      std::memcpy(tail, codes + full * kChunk, static_cast<size_t>(k - full * kChunk));
      dec(tail, a, b);
      _mm512_store_si512(out + full * kChunk, a);
      _mm512_store_si512(out + full * kChunk + 32, b);
    }
  }

  // Measured per core (2048², 4096 × 1024; bf16 x): the register schedule (5 decode ops per 64
  // weights, shared by 4 tokens) runs 70-77 G MAC/s at any m; the panel 66-68 at m = 16, 69-73 at
  // 32, 79-80 at 64, 78-88 at 256.
  static constexpr int64_t kPanelMinTokens = 32;
  static constexpr int kPanelR = 4, kPanelT = 6;
  using PanelTile = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*);
  static constexpr PanelTile kPanelWide[kPanelT + 1] = {
      nullptr, panel_tile<4, 1, P>, panel_tile<4, 2, P>, panel_tile<4, 3, P>, panel_tile<4, 4, P>, panel_tile<4, 5, P>,
      panel_tile<4, 6, P>};
  static constexpr PanelTile kPanelOne[kPanelT + 1] = {
      nullptr, panel_tile<1, 1, P>, panel_tile<1, 2, P>, panel_tile<1, 3, P>, panel_tile<1, 4, P>, panel_tile<1, 5, P>,
      panel_tile<1, 6, P>};

  static void store(void* y, DType act, int64_t i, float v) { avx512::store_act(y, act, i, v); }
};
static_assert(kFp8RowBlock % 4 == 0);

}  // namespace

int64_t fp8_avx512_token_words(int64_t k, int pieces) { return (k + kChunk - 1) / kChunk * 2 * pieces * 32; }

void fp8_avx512_pack_token(const float* x, int64_t k, int pieces, uint16_t* out) {
  alignas(64) float v[32];
  for (int64_t c = 0; c * kChunk < k; ++c)
    for (int h = 0; h < 2; ++h) {
      // Word 8L + j of vector h is element 16L + 8h + j (the decoder's order).
      for (int L = 0; L < 4; ++L)
        for (int j = 0; j < 8; ++j) {
          const int64_t e = c * kChunk + 16 * L + 8 * h + j;
          v[8 * L + j] = e < k ? x[e] : 0.0f;
        }
      avx512::bf16_pieces(_mm512_load_ps(v), _mm512_load_ps(v + 16), pieces, out + (c * 2 + h) * pieces * 32);
    }
}

int64_t fp8_w8a16_row_block_avx512(int64_t m, int64_t k) { return fp8_row_block<Avx512<1>>(m, k); }

void fp8_w8a16_rows_avx512(const Fp8Rows& w, const uint16_t* x, int64_t tstride, int pieces, int64_t m, int64_t r0,
                           int64_t r1, void* y, DType act) {
  switch (pieces) {
    case 1: return fp8_rows<Avx512<1>>(w, x, tstride, m, r0, r1, y, act);
    case 2: return fp8_rows<Avx512<2>>(w, x, tstride, m, r0, r1, y, act);
    default: return fp8_rows<Avx512<3>>(w, x, tstride, m, r0, r1, y, act);
  }
}

}  // namespace fp4lm::kernels::cpu
