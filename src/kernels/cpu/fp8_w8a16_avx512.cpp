// FP8 (E4M3) W8A16 GEMM/GEMV on AVX-512 (F, BW, BF16): weights decoded exactly to bf16, x split
// into bf16 pieces whose sum is x (as the W4A16 and dense AVX-512 kernels: bf16 x is 1 piece,
// f16 2, f32 3), products by vdpbf16ps with fp32 accumulation.
//
// Decode (32 weights): the AVX2 kernel's fp16 route (docs in fp8_w8a16_avx2.cpp) on 32 bytes —
// vpmovzxbw, shift left 8, psraw 1, mask bit 14, two vcvtph2ps give E4M3 / 256 in fp32 exactly —
// then vcvtne2ps2bf16, exact too (4 significant bits; |v| in [2^-17, 1.75], bf16-normal). Every
// product e4m3 × bf16 (≤ 12 significant bits) is exact in fp32, so the only roundings are the
// fp32 sums (vdpbf16ps: one accumulator per (row, token), 16 lanes, pairs in each lane).
//
// Schedules (fp8_w8a16_schedule.h): few tokens decode in registers, 4 rows × 1-4 tokens; many
// tokens decode each row group once into a bf16 panel (the same 32-weight vectors), then 4 rows ×
// 6 tokens per tile (24 accumulators + 4 weight + 1 x of the 32 zmm): 1 vdpbf16ps per 32
// multiply-adds per piece. Per 32-element chunk each (row, token) accumulator takes P vdpbf16ps in
// piece order in both schedules, so they are bit-identical. Built only with the AVX-512 flags
// (CMake), called only through fp8_kernels_avx512() when the CPU has AVX-512 F, BW, VL and BF16.
#include "kernels/cpu/fp8_w8a16_schedule.h"
#include "kernels/cpu/nvfp4_common_avx512.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx512::bh;
using avx512::hsum;

// 32 code bytes -> 32 bf16 weights E4M3 / 256, element j in word j.
inline __m512i decode32(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 1),
                                     _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Calls step(c, codes of elements [32c, 32c + 32)) over a row, the last chunk zero-padded.
template <class Step>
inline void each_chunk32(const uint8_t* row, int64_t k, Step&& step) {
  const int64_t full = k / 32;
  for (int64_t c = 0; c < full; ++c) step(c, row + c * 32);
  if (full * 32 < k) {
    alignas(32) uint8_t tail[32] = {};
    std::memcpy(tail, row + full * 32, static_cast<size_t>(k - full * 32));
    step(full, tail);
  }
}

// x of token t, chunk c, piece q at xp + t * tstride + (c * P + q) * 32 (dense_pack_token layout).
template <int R, int T, int P>
void tile(const uint8_t* const* rows, int64_t k, const uint16_t* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  auto step = [&](int r, const uint8_t* p, int64_t c) {
    const __m512i z = decode32(p);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 3
      for (int q = 0; q < P; ++q)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], bh(z), bh(_mm512_load_si512(xp + t * tstride + (c * P + q) * 32)));
  };
  const int64_t full = k / 32;
  for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) step(r, rows[r] + c * 32, c);
  }
  if (full * 32 < k) {  // the zero-padded last chunk (x is padded too)
    for (int r = 0; r < R; ++r) {
      alignas(32) uint8_t tail[32] = {};
      std::memcpy(tail, rows[r] + full * 32, static_cast<size_t>(k - full * 32));
      step(r, tail, full);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// tile()'s accumulation with the weights from a decoded bf16 panel (row stride kc words).
template <int R, int T, int P>
void panel_tile(const uint16_t* panel, int64_t kc, const uint16_t* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < kc / 32; ++c) {
    __m512i w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_load_si512(panel + r * kc + c * 32);
#pragma GCC unroll 3
    for (int q = 0; q < P; ++q)
      for (int t = 0; t < T; ++t) {
        const __m512i xv = _mm512_load_si512(xp + t * tstride + (c * P + q) * 32);
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
  static constexpr int kChunk = 32;
  static constexpr int kTokTile = 4;
  static constexpr int kRowsFor[kTokTile + 1] = {0, 4, 4, 4, 4};
  using Tile = void (*)(const uint8_t* const*, int64_t, const uint16_t*, int64_t, float*);
  static constexpr Tile kWide[kTokTile + 1] = {nullptr, tile<4, 1, P>, tile<4, 2, P>, tile<4, 3, P>, tile<4, 4, P>};
  static constexpr Tile kOne[kTokTile + 1] = {nullptr, tile<1, 1, P>, tile<1, 2, P>, tile<1, 3, P>, tile<1, 4, P>};

  static void decode_row(const uint8_t* codes, int64_t k, uint16_t* out) {
    each_chunk32(codes, k, [&](int64_t c, const uint8_t* p) { _mm512_store_si512(out + c * 32, decode32(p)); });
  }

  static constexpr int64_t kPanelMinTokens = 8;  // measured per core, 2048²: m = 8 panel 49 vs 39 G MAC/s
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
