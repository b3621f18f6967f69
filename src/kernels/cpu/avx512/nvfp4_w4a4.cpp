// NVFP4 W4A4 on AVX-512 (VBMI, VNNI): x quantized at run time by the W4A4 rule (the AVX2
// quantizer, bit-identical to quant::quantize_activation), every 16-element block dot product
// computed exactly in integers by vpdpbusd (docs/KERNELS.md, "AVX-512 W4A4").
//
// 2 × E2M1 values are the integers W, A ∈ [-12, 12]. vpdpbusd multiplies unsigned by signed
// bytes, so weights enter as W + 12 ∈ [0, 24] (one vpermb lookup per 64 codes) and the
// activations as A; the excess 12 · Σ A of each block is precomputed per token and is the
// starting value of the block's integer sum. Per 256-element super-chunk of a row, two vpermt2d
// put block i's code bytes into dword lane i, so the 4 vpdpbusd leave lane i = Σ W·A over
// block i (|Σ| ≤ 2304, exact), converted to fp32 and multiplied by scale_w × scale_a (exact:
// 4 × 4 significant bits) in one FMA. The only roundings are the fp32 accumulations.
#include <cmath>

#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/nvfp4_w4a4_decode.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

// One (row, token) super-chunk: the exact integer block sums, × the scales, into acc.
inline __m512 accumulate(const __m512i z[kVectors], __m512 sw, const __m512i* x, __m512 acc) {
  __m512i d = _mm512_load_si512(x + kVectors);  // -12 × Σ A per block
  for (int v = 0; v < kVectors; ++v) d = _mm512_dpbusd_epi32(d, z[v], _mm512_load_si512(x + v));
  const __m512 s = _mm512_mul_ps(sw, _mm512_castsi512_ps(_mm512_load_si512(x + kVectors + 1)));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc);
}

template <int R, int T>
void dot_rows(const Decoder& dec, const uint8_t* const* codes, const uint8_t* const* scales, int64_t k,
              const __m512i* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  each_decoded_super_chunk<R>(dec, codes, scales, k, [&](int r, int64_t c, const __m512i* z, __m512 sw) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = accumulate(z, sw, xp + t * tstride + c * kTokenVectors, acc[r][t]);
  });
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

constexpr int kPanelVecs = kPanelVectors<Decoder>;

// The same per-(row, token) sequence as accumulate(), weights from the panel: the R rows'
// vectors are loaded once per super-chunk and shared by the T tokens (R × T integer block sums
// and R × T accumulators live in registers).
template <int R, int T>
void panel_tile(const __m512i* panel, int64_t chunks, const __m512i* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i* w[R];
  const __m512i* x[T];
  for (int r = 0; r < R; ++r) w[r] = panel + r * chunks * kPanelVecs;
  for (int t = 0; t < T; ++t) x[t] = xp + t * tstride;
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i d[R][T];
    for (int t = 0; t < T; ++t) {
      const __m512i start = _mm512_load_si512(x[t] + kVectors);
      for (int r = 0; r < R; ++r) d[r][t] = start;
    }
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      __m512i wv[R];
      for (int r = 0; r < R; ++r) wv[r] = _mm512_load_si512(w[r] + v);
      for (int t = 0; t < T; ++t) {
        const __m512i xv = _mm512_load_si512(x[t] + v);
        for (int r = 0; r < R; ++r) d[r][t] = _mm512_dpbusd_epi32(d[r][t], wv[r], xv);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 sa = _mm512_castsi512_ps(_mm512_load_si512(x[t] + kVectors + 1));
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_load_si512(w[r] + kVectors)), sa);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][t]), s, acc[r][t]);
      }
    }
    for (int r = 0; r < R; ++r) w[r] += kPanelVecs;
    for (int t = 0; t < T; ++t) x[t] += kTokenVectors;
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// 0.25: both operands doubled; 256: the weight scales are scale × 2^-8.
inline void epilogue(const Rows& w, const float* token_scale, int64_t r, int64_t t, float v, void* y, DType act) {
  const float alpha = token_scale[t] * w.global[r] * (0.25f * kE4m3ScaledInv);
  // An explicit fma: the W4A4 GEMM (nvfp4_w4a4_gemm.cpp) computes the same, so the bits must not
  // depend on whether the compiler contracts v * alpha + b (GCC does at -O2, not at -O1).
  store_act(y, act, t * w.n + r, std::fma(v, alpha, w.bias ? w.bias[r] : 0.0f));
}

void register_rows(const Rows& w, const float* token_scale, const __m512i* xp, int64_t m, int64_t r0, int64_t r1, void* y,
                   DType act) {
  using Fn = void (*)(const Decoder&, const uint8_t* const*, const uint8_t* const*, int64_t, const __m512i*,
                      int64_t, float*);
  // [tokens]: kRowsFor<T> rows (wide) or 1 row (one) × T tokens.
  static constexpr Fn wide[kWideTokTile + 1] = {
      nullptr, dot_rows<kRowsFor<1>, 1>, dot_rows<kRowsFor<2>, 2>,
      dot_rows<kRowsFor<3>, 3>, dot_rows<kRowsFor<4>, 4>, dot_rows<kRowsFor<5>, 5>,
      dot_rows<kRowsFor<6>, 6>, dot_rows<kRowsFor<7>, 7>, dot_rows<kRowsFor<8>, 8>};
  static constexpr Fn one[kWideTokTile + 1] = {
      nullptr, dot_rows<1, 1>, dot_rows<1, 2>, dot_rows<1, 3>, dot_rows<1, 4>,
      dot_rows<1, 5>, dot_rows<1, 6>, dot_rows<1, 7>, dot_rows<1, 8>};
  const Decoder dec(kWeightU8);
  const int64_t tstride = super_chunks(w.k) * kTokenVectors;
  register_schedule(
      m, r0, r1, register_token_tile(tstride * 64),
      [&](int64_t r, int rr, int64_t t0, int tt, float* out) {
        (rr > 1 ? wide[tt] : one[tt])(dec, w.codes + r, w.scales + r, w.k, xp + t0 * tstride, tstride, out);
      },
      [&](int64_t r, int64_t t, float v) { epilogue(w, token_scale, r, t, v, y, act); });
}

void panel_rows_range(const Rows& w, const float* token_scale, const __m512i* xp, int64_t m, int64_t r0, int64_t r1, void* y,
                      DType act) {
  using Fn = void (*)(const __m512i*, int64_t, const __m512i*, int64_t, float*);
  static constexpr Fn wide[kPanelT + 1] = {nullptr, panel_tile<kPanelR, 1>, panel_tile<kPanelR, 2>,
                                           panel_tile<kPanelR, 3>, panel_tile<kPanelR, 4>};
  static constexpr Fn one[kPanelT + 1] = {nullptr, panel_tile<1, 1>, panel_tile<1, 2>, panel_tile<1, 3>,
                                          panel_tile<1, 4>};
  const Decoder dec(kWeightU8);
  const int64_t chunks = super_chunks(w.k), tstride = chunks * kTokenVectors, group = panel_rows<Decoder>(w.k);
  panel_schedule(
      m, r0, r1, group, static_cast<size_t>(group * chunks * kPanelVecs * 64),
      [&](int64_t g0, int rows, __m512i* panel) { decode_panel(dec, w.codes + g0, w.scales + g0, rows, w.k, panel); },
      [&](const __m512i* panel, int i, int rr, int64_t t0, int tt, float* out) {
        (rr > 1 ? wide[tt] : one[tt])(panel + i * chunks * kPanelVecs, chunks, xp + t0 * tstride, tstride, out);
      },
      [&](int64_t r, int64_t t, float v) { epilogue(w, token_scale, r, t, v, y, act); });
}

}  // namespace

int64_t w4a4_token_bytes(int64_t k) { return super_chunks(k) * kTokenVectors * 64; }

void w4a4_pack_token(const uint8_t* codes, const uint8_t* scales, int64_t k, uint8_t* out) {
  const Decoder dec(kActS8);
  const __m512i twelve = _mm512_set1_epi8(12);
  const int64_t chunks = super_chunks(k);
  TailBuffer tail;
  auto* o = reinterpret_cast<__m512i*>(out);
  for (int64_t c = 0; c < chunks; ++c, o += kTokenVectors) {
    const SuperChunk sc = super_chunk(codes, scales, k, c, tail);
    // The same lane layout as the weights (A in place of W + 12).
    dec(sc.codes, o);
    __m512i sum = _mm512_setzero_si512();  // 12 × Σ A per block
    for (int v = 0; v < kVectors; ++v) sum = _mm512_dpbusd_epi32(sum, twelve, o[v]);
    o[kVectors] = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
    o[kVectors + 1] = _mm512_castps_si512(_mm512_mul_ps(e4m3x16_scaled(sc.scales), _mm512_set1_ps(kE4m3ScaledInv)));
  }
}

int64_t w4a4_row_block(int64_t m, int64_t k) {
  return m >= kW4a4PanelMinTokens ? panel_rows<Decoder>(k) : kRowBlock;
}

void w4a4_rows(const Rows& w, const float* token_scale, const uint8_t* xp, int64_t m, int64_t r0, int64_t r1, void* y,
               DType act) {
  const auto* x = reinterpret_cast<const __m512i*>(xp);
  if (m >= kW4a4PanelMinTokens)
    panel_rows_range(w, token_scale, x, m, r0, r1, y, act);
  else
    register_rows(w, token_scale, x, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu::avx512
