// NVFP4 W4A16 on AVX-512 (BF16): x stays 16/32-bit, split into bf16 pieces whose sum is x;
// weights are decoded from the checkpoint's nibbles straight to bf16 (every E2M1 value is a
// bf16) and multiplied by vdpbf16ps with fp32 accumulation (docs/KERNELS.md, "AVX-512 W4A16").
// Each kernel is instantiated twice: with vdpbf16ps, and (`native_bf16` false, for AVX-512 CPUs
// without AVX512-BF16) with common.h's two-FMA form of it.
//
// Per 256-element super-chunk of a row: two vpermt2d put the 4+4 code bytes of block i into
// dword lane i of P and Q; four vpermw lookups per vector (the word's nibbles 0-3, 4-7, 8-11,
// 12-15, by 0/4/8/12-bit shifts; the 32-entry table repeats its 16 values, so higher index bits
// do not matter) give 8 vectors of 32 bf16 weights whose lane i pairs all lie in block i. Per
// token: 8 × pieces vdpbf16ps into a zeroed partial (lane i = the block's exact products summed
// in fp32), then one FMA by the block scales into the accumulator. Each (row, token) result is
// the same instruction sequence in the register schedule and in the panel schedule.
#include <cmath>

#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/nvfp4_w4a16_decode.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

// The partial of one (row, token) for one super-chunk: Σ over the 8 vectors and P pieces, in
// that order, starting from zero. Lane i = block i's products (each exact: e2m1 × bf16 has at
// most 10 significant bits), summed in fp32.
template <int P, bool E>
inline __m512 partial(const __m512i z[kVectors], const __m512i* x /* [8][P] */) {
  __m512 part = dot_bf16<E>(_mm512_setzero_ps(), z[0], x[0]);
#pragma GCC unroll 24
  for (int i = 1; i < kVectors * P; ++i) part = dot_bf16<E>(part, z[i / P], x[i]);
  return part;
}

// out[r][t] for R rows and T tokens (x of token t at xp + t * tstride vectors), decoding in
// registers: each super-chunk of each row is decoded once and used by all T tokens.
template <int R, int T, int P, bool E>
void dot_rows(const Decoder& dec, const uint8_t* const* codes, const uint8_t* const* scales, int64_t k,
              const __m512i* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  each_decoded_super_chunk<R>(dec, codes, scales, k, [&](int r, int64_t c, const __m512i* z, __m512 s) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_fmadd_ps(partial<P, E>(z, xp + t * tstride + c * kVectors * P), s, acc[r][t]);
  });
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// ---- Panel schedule (m >= kW4a16PanelMinTokens): a group of rows is decoded once per call
// into a panel (per row and super-chunk: the 8 bf16 vectors and the scale vector), then
// register tiles of R rows × T tokens run over it with the same per-(row, token) sequence.
constexpr int kPanelVecs = kPanelVectors<Decoder>;

template <int R, int T, int P, bool E>
void panel_tile(const __m512i* panel, int64_t chunks, const __m512i* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i* w[R];
  const __m512i* x[T];
  for (int r = 0; r < R; ++r) w[r] = panel + r * chunks * kPanelVecs;
  for (int t = 0; t < T; ++t) x[t] = xp + t * tstride;
  for (int64_t c = 0; c < chunks; ++c) {
    __m512 part[R][T];
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      __m512i wv[R];
      for (int r = 0; r < R; ++r) wv[r] = _mm512_load_si512(w[r] + v);
#pragma GCC unroll 3
      for (int p = 0; p < P; ++p) {
        for (int t = 0; t < T; ++t) {
          const __m512i xv = _mm512_load_si512(x[t] + v * P + p);
          for (int r = 0; r < R; ++r)
            part[r][t] = dot_bf16<E>(v == 0 && p == 0 ? _mm512_setzero_ps() : part[r][t], wv[r], xv);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_castsi512_ps(_mm512_load_si512(w[r] + kVectors));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(part[r][t], s, acc[r][t]);
    }
    for (int r = 0; r < R; ++r) w[r] += kPanelVecs;
    for (int t = 0; t < T; ++t) x[t] += kVectors * P;
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

inline void epilogue(const Rows& w, int64_t r, int64_t t, float v, void* y, DType act) {
  const float g = w.global[r] * kE4m3ScaledInv, b = w.bias ? w.bias[r] : 0.0f;
  // An explicit fma, as the W4A16 GEMM (nvfp4_w4a16_gemm.cpp) computes it, whatever the compiler
  // contracts.
  store_act(y, act, t * w.n + r, std::fma(v, g, b));
}

template <int P, bool E>
void register_rows(const Rows& w, const __m512i* xp, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  using Fn = void (*)(const Decoder&, const uint8_t* const*, const uint8_t* const*, int64_t, const __m512i*,
                      int64_t, float*);
  // [tokens]: kRowsFor<T> rows (wide) or 1 row (one) × T tokens.
  static constexpr Fn wide[kWideTokTile + 1] = {
      nullptr, dot_rows<kRowsFor<1>, 1, P, E>, dot_rows<kRowsFor<2>, 2, P, E>,
      dot_rows<kRowsFor<3>, 3, P, E>, dot_rows<kRowsFor<4>, 4, P, E>, dot_rows<kRowsFor<5>, 5, P, E>,
      dot_rows<kRowsFor<6>, 6, P, E>, dot_rows<kRowsFor<7>, 7, P, E>, dot_rows<kRowsFor<8>, 8, P, E>};
  static constexpr Fn one[kWideTokTile + 1] = {
      nullptr, dot_rows<1, 1, P, E>, dot_rows<1, 2, P, E>, dot_rows<1, 3, P, E>, dot_rows<1, 4, P, E>,
      dot_rows<1, 5, P, E>, dot_rows<1, 6, P, E>, dot_rows<1, 7, P, E>, dot_rows<1, 8, P, E>};
  const Decoder dec;
  const int64_t tstride = super_chunks(w.k) * kVectors * P;
  register_schedule(
      m, r0, r1, register_token_tile(tstride * 64),
      [&](int64_t r, int rr, int64_t t0, int tt, float* out) {
        (rr > 1 ? wide[tt] : one[tt])(dec, w.codes + r, w.scales + r, w.k, xp + t0 * tstride, tstride, out);
      },
      [&](int64_t r, int64_t t, float v) { epilogue(w, r, t, v, y, act); });
}

template <int P, bool E>
void panel_rows_range(const Rows& w, const __m512i* xp, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  using Fn = void (*)(const __m512i*, int64_t, const __m512i*, int64_t, float*);
  static constexpr Fn wide[kPanelT + 1] = {nullptr, panel_tile<kPanelR, 1, P, E>, panel_tile<kPanelR, 2, P, E>,
                                           panel_tile<kPanelR, 3, P, E>, panel_tile<kPanelR, 4, P, E>};
  static constexpr Fn one[kPanelT + 1] = {nullptr, panel_tile<1, 1, P, E>, panel_tile<1, 2, P, E>,
                                          panel_tile<1, 3, P, E>, panel_tile<1, 4, P, E>};
  const Decoder dec;
  const int64_t chunks = super_chunks(w.k), tstride = chunks * kVectors * P, group = panel_rows<Decoder>(w.k);
  panel_schedule(
      m, r0, r1, group, static_cast<size_t>(group * chunks * kPanelVecs * 64),
      [&](int64_t g0, int rows, __m512i* panel) { decode_panel(dec, w.codes + g0, w.scales + g0, rows, w.k, panel); },
      [&](const __m512i* panel, int i, int rr, int64_t t0, int tt, float* out) {
        (rr > 1 ? wide[tt] : one[tt])(panel + i * chunks * kPanelVecs, chunks, xp + t0 * tstride, tstride, out);
      },
      [&](int64_t r, int64_t t, float v) { epilogue(w, r, t, v, y, act); });
}

template <int P, bool E>
void rows_p(const Rows& w, const __m512i* xp, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  if (m >= kW4a16PanelMinTokens)
    panel_rows_range<P, E>(w, xp, m, r0, r1, y, act);
  else
    register_rows<P, E>(w, xp, m, r0, r1, y, act);
}

}  // namespace

int64_t w4a16_token_words(int64_t k, int pieces) { return super_chunks(k) * kVectors * pieces * 32; }

void w4a16_pack_token(const float* x, int64_t k, int pieces, uint16_t* out, bool native_bf16) {
  const int64_t chunks = super_chunks(k);
  alignas(64) float v[32];
  for (int64_t c = 0; c < chunks; ++c) {
    for (int s = 0; s < 2; ++s)
      for (int q = 0; q < 4; ++q) {
        // Word 2i + j of vector 4s + q is element 16i + 8s + 4j + q (the decoder's order).
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 2; ++j) {
            const int64_t e = c * kSuper + 16 * i + 8 * s + 4 * j + q;
            v[2 * i + j] = e < k ? x[e] : 0.0f;
          }
        uint16_t* o = out + ((c * kVectors + 4 * s + q) * pieces) * 32;
        if (native_bf16)
          bf16_pieces<false>(_mm512_load_ps(v), _mm512_load_ps(v + 16), pieces, o);
        else
          bf16_pieces<true>(_mm512_load_ps(v), _mm512_load_ps(v + 16), pieces, o);
      }
  }
}

int64_t w4a16_row_block(int64_t m, int64_t k) {
  return m >= kW4a16PanelMinTokens ? panel_rows<Decoder>(k) : kRowBlock;
}

void w4a16_rows(const Rows& w, const uint16_t* xp, int64_t m, int pieces, int64_t r0, int64_t r1, void* y,
                DType act, bool native_bf16) {
  const auto* x = reinterpret_cast<const __m512i*>(xp);
  with_pieces_and_bf16(pieces, native_bf16, [&]<int P, bool E>() { rows_p<P, E>(w, x, m, r0, r1, y, act); });
}

}  // namespace fp4lm::kernels::cpu::avx512
