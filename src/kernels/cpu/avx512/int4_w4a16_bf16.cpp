// int4 W4A16 on AVX-512 (BF16), the NVFP4 W4A16 kernel's arithmetic on the repacked int4 layout
// (int4_packed.h; docs/KERNELS.md, "int4 W4A16: the repacked layout"). The codes are in the
// NVFP4 nibble order, so the same decode gives 8 vectors of 32 bf16 weights per 256 columns (two
// vpermt2d, six shifts, eight vpermw), here from the table code - 8 (exact in bf16); x is packed
// once per call into bf16 pieces (1 for bf16, 2 for f16, 3 for f32; their sum is x exactly) and
// multiplied by vdpbf16ps with fp32 accumulation. Lane i of a super-chunk's partial holds columns
// 16i..16i+15, all in one group (groups are multiples of 16), so per (row, token, super-chunk):
//   part = Σ (code - 8) × x                            (8 × pieces vdpbf16ps, from zero)
//   part -= (zero - 8) × Σx over the lane's 16 columns (asymmetric layers only)
//   acc  += part × scale                               (the lanes' group scales)
// The lanes' scales are one load and one vpermps from the row's fp32 group array, their zero - 8 (asymmetric
// layers) a 16-byte load, widened, permuted and converted.
// Register and panel schedules (common.h) feed each (row, token) the same instruction sequence.
// Each kernel is built with vdpbf16ps and with common.h's AVX-512F form of it (no AVX512-BF16).
#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/nvfp4_w4a16_decode.h"
#include "kernels/cpu/int4_packed.h"

namespace fp4lm::kernels::cpu {
namespace {

using avx512::dot_bf16;

// bf16 of (j & 15) - 8 for vpermw's 5-bit index (the upper 16 entries repeat the lower).
alignas(64) constexpr uint16_t kInt4Bf16[32] = {
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0};

constexpr int kVec = 8;         // bf16 weight vectors per super-chunk
constexpr int kPanelVecs = 10;  // per (row, super-chunk) in a panel: 8 weights, scales, zero - 8

// NVFP4's decoder over int4's table: word 2i + j of z[v] (v = 4s + q) is column 16i + 8s + 4j + q,
// the order avx512::w4a16_pack_token packs x in.
using avx512::Decoder;
static_assert(Decoder::kVectors == kVec);

// The lanes' group scale and zero - 8 of row r, super-chunk c.
template <bool Sym>
inline void lanes(const Int4PackedRows& w, int64_t r, int64_t c, __m512& s, __m512& zz) {
  const __m512i idx = _mm512_loadu_si512(w.lane_group + c * 16);
  const int64_t base = r * w.groups + w.chunk_group[c];
  s = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(w.scales + base));
  if constexpr (!Sym) {
    // 16 zero-point bytes from the lane's group on (the arrays' 16 spare entries cover the end).
    const __m512i z = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.zeros + base)));
    zz = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(idx, z)), _mm512_set1_ps(8.0f));
  } else {
    zz = _mm512_setzero_ps();
  }
}

// One (row, token, super-chunk) step; x: the token's 8 × P piece vectors of the super-chunk,
// xs: its 16 lane sums.
template <int P, bool E, bool Sym>
inline __m512 step(const __m512i* z, const __m512i* x, const float* xs, __m512 s, __m512 zz, __m512 acc) {
  __m512 part = dot_bf16<E>(_mm512_setzero_ps(), z[0], x[0]);
#pragma GCC unroll 24
  for (int i = 1; i < kVec * P; ++i) part = dot_bf16<E>(part, z[i / P], x[i]);
  if constexpr (!Sym) part = _mm512_fnmadd_ps(zz, _mm512_loadu_ps(xs), part);
  return _mm512_fmadd_ps(part, s, acc);
}

struct Call {
  const Int4PackedRows& w;
  const __m512i* xp;  // token t's pieces at xp + t * tstride
  const float* xs;    // token t's lane sums at xs + t * (kp / 16), or null
  int64_t chunks, tstride;
};

// Register tile: R rows × T tokens, each super-chunk of a row decoded once for the T tokens.
template <int R, int T, int P, bool E, bool Sym>
void reg_tile(const Decoder& dec, const Call& a, int64_t r0, int64_t t0, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t rowb = a.w.kp / 2, xss = a.w.kp / 16;
  const __m512i* x = a.xp + t0 * a.tstride;
  const float* xs = Sym ? nullptr : a.xs + t0 * xss;
  for (int64_t c = 0; c < a.chunks; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = a.w.codes + (r0 + r) * rowb + c * 128;
      // 2 KiB ahead into L2 (into the next rows past a row's end): common.h, kPrefetchChunks.
      _mm_prefetch(reinterpret_cast<const char*>(p + avx512::kPrefetchChunks * 128), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(p + avx512::kPrefetchChunks * 128 + 64), _MM_HINT_T1);
      __m512i z[kVec];
      dec(p, z);
      __m512 s, zz;
      lanes<Sym>(a.w, r0 + r, c, s, zz);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        acc[r][t] = step<P, E, Sym>(z, x + t * a.tstride + c * kVec * P, Sym ? nullptr : xs + t * xss + c * 16, s, zz,
                                    acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = avx512::hsum(acc[r][t]);
}

// Panel tile: the same steps over rows decoded into the panel.
template <int R, int T, int P, bool E, bool Sym>
void panel_tile(const Call& a, const __m512i* panel, int64_t t0, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t xss = a.w.kp / 16;
  const __m512i* x = a.xp + t0 * a.tstride;
  const float* xs = Sym ? nullptr : a.xs + t0 * xss;
  for (int64_t c = 0; c < a.chunks; ++c)
    for (int r = 0; r < R; ++r) {
      const __m512i* pv = panel + (r * a.chunks + c) * kPanelVecs;
      const __m512 s = _mm512_castsi512_ps(_mm512_load_si512(pv + kVec));
      const __m512 zz = _mm512_castsi512_ps(_mm512_load_si512(pv + kVec + 1));
      for (int t = 0; t < T; ++t)
        acc[r][t] = step<P, E, Sym>(pv, x + t * a.tstride + c * kVec * P, Sym ? nullptr : xs + t * xss + c * 16, s, zz,
                                    acc[r][t]);
    }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = avx512::hsum(acc[r][t]);
}

template <bool Sym>
void decode_panel(const Decoder& dec, const Int4PackedRows& w, int64_t g0, int rows, int64_t chunks, __m512i* panel) {
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < chunks; ++c) {
      __m512i* out = panel + (r * chunks + c) * kPanelVecs;
      dec(w.codes + (g0 + r) * (w.kp / 2) + c * 128, out);
      __m512 s, zz;
      lanes<Sym>(w, g0 + r, c, s, zz);
      out[kVec] = _mm512_castps_si512(s);
      out[kVec + 1] = _mm512_castps_si512(zz);
    }
}

// Rows per panel: about 512 KiB of decoded rows (half of Zen 4's L2), a multiple of 12 in [12, 96].
int64_t int4_panel_rows(int64_t k) {
  const int64_t fit = (512 << 10) / (avx512::super_chunks(k) * kPanelVecs * 64);
  return fit < 12 ? 12 : fit > 96 ? 96 : fit / 12 * 12;
}

inline void epilogue(const Int4PackedRows& w, int64_t r, int64_t t, float v, void* y, DType act) {
  avx512::store_act(y, act, t * w.n + r, v + (w.bias ? w.bias[r] : 0.0f));
}

template <int P, bool E, bool Sym>
void rows_form(const Call& a, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  const Decoder dec(kInt4Bf16);
  if (m < avx512::kW4a16PanelMinTokens) {
    using Fn = void (*)(const Decoder&, const Call&, int64_t, int64_t, float*);
    constexpr int W = avx512::kWideTokTile;
    static constexpr Fn wide[W + 1] = {
        nullptr, reg_tile<avx512::kRowsFor<1>, 1, P, E, Sym>, reg_tile<avx512::kRowsFor<2>, 2, P, E, Sym>,
        reg_tile<avx512::kRowsFor<3>, 3, P, E, Sym>, reg_tile<avx512::kRowsFor<4>, 4, P, E, Sym>,
        reg_tile<avx512::kRowsFor<5>, 5, P, E, Sym>, reg_tile<avx512::kRowsFor<6>, 6, P, E, Sym>,
        reg_tile<avx512::kRowsFor<7>, 7, P, E, Sym>, reg_tile<avx512::kRowsFor<8>, 8, P, E, Sym>};
    static constexpr Fn one[W + 1] = {nullptr,
                                      reg_tile<1, 1, P, E, Sym>,
                                      reg_tile<1, 2, P, E, Sym>,
                                      reg_tile<1, 3, P, E, Sym>,
                                      reg_tile<1, 4, P, E, Sym>,
                                      reg_tile<1, 5, P, E, Sym>,
                                      reg_tile<1, 6, P, E, Sym>,
                                      reg_tile<1, 7, P, E, Sym>,
                                      reg_tile<1, 8, P, E, Sym>};
    avx512::register_schedule(
        m, r0, r1, avx512::register_token_tile(a.tstride * 64),
        [&](int64_t r, int rr, int64_t t0, int tt, float* out) { (rr > 1 ? wide[tt] : one[tt])(dec, a, r, t0, out); },
        [&](int64_t r, int64_t t, float v) { epilogue(a.w, r, t, v, y, act); });
    return;
  }
  using Fn = void (*)(const Call&, const __m512i*, int64_t, float*);
  constexpr int R = avx512::kPanelR;
  static constexpr Fn wide[avx512::kPanelT + 1] = {nullptr, panel_tile<R, 1, P, E, Sym>, panel_tile<R, 2, P, E, Sym>,
                                                   panel_tile<R, 3, P, E, Sym>, panel_tile<R, 4, P, E, Sym>};
  static constexpr Fn one[avx512::kPanelT + 1] = {nullptr, panel_tile<1, 1, P, E, Sym>, panel_tile<1, 2, P, E, Sym>,
                                                  panel_tile<1, 3, P, E, Sym>, panel_tile<1, 4, P, E, Sym>};
  const int64_t group = int4_panel_rows(a.w.k);
  avx512::panel_schedule(
      m, r0, r1, group, static_cast<size_t>(group * a.chunks * kPanelVecs * 64),
      [&](int64_t g0, int rows, __m512i* panel) { decode_panel<Sym>(dec, a.w, g0, rows, a.chunks, panel); },
      [&](const __m512i* panel, int i, int rr, int64_t t0, int tt, float* out) {
        (rr > 1 ? wide[tt] : one[tt])(a, panel + i * a.chunks * kPanelVecs, t0, out);
      },
      [&](int64_t r, int64_t t, float v) { epilogue(a.w, r, t, v, y, act); });
}

}  // namespace

int64_t int4_bf16_row_block_avx512(int64_t m, int64_t k) {
  return m >= avx512::kW4a16PanelMinTokens ? int4_panel_rows(k) : avx512::kRowBlock;
}

void int4_bf16_rows_avx512(const Int4PackedRows& w, const uint16_t* xp, const float* xs16, int64_t m, int pieces,
                           int64_t r0, int64_t r1, void* y, DType act, bool native_bf16) {
  const int64_t chunks = w.kp / avx512::kSuper;
  const Call a{w, reinterpret_cast<const __m512i*>(xp), xs16, chunks, chunks * kVec * pieces};
  avx512::with_pieces_and_bf16(pieces, native_bf16, [&]<int P, bool E>() {
    if (w.zeros)
      rows_form<P, E, false>(a, m, r0, r1, y, act);
    else
      rows_form<P, E, true>(a, m, r0, r1, y, act);
  });
}

}  // namespace fp4lm::kernels::cpu
