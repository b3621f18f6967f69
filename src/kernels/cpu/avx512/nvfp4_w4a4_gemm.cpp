// NVFP4 W4A4 GEMM on AVX-512-VNNI for many tokens (m >= kW4a4GemmMinTokens): the arithmetic of
// nvfp4_w4a4.cpp, bit for bit, with 16 output rows per vector instead of a row's 16 blocks (the
// rows-in-lanes form of nvfp4_w4a16_gemm.cpp; docs/KERNELS.md, "AVX-512 W4A4 GEMM").
//
// Per (row, token) and block: d = -12 · Σ A (the activations' excess), then the 4 vpdpbusd of
// W + 12 by A — exact integers, so any order gives the same d — then acc_i = fma(float(d),
// scale_w × scale_a, acc_i) per block position i over the super-chunks (scale_w × scale_a is
// exact: 4 × 4 significant bits), the 16 acc_i in hsum's tree, and the same epilogue. m picks
// this kernel or the register/panel schedule, so the same bits keep a token's output independent
// of its batch (tested).
//
// Layout: the row groups as in the W4A16 GEMM (decode_row_vector: 4 byte vectors + the scales per
// row vector, block position, super-chunk); activations repacked in tiles of 6 tokens, per (i, c)
// 6 dwords — the 4 activation dwords, the excess, the scale — × 6 tokens. Tile: 2 row vectors ×
// 6 tokens, 12 integer sums and 12 accumulators in registers.
#include <array>
#include <utility>

#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/gemm_common.h"
#include "kernels/cpu/avx512/nvfp4_w4a4_decode.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

constexpr int kGemmVecs = kVectors + 1;  // per (row vector, i, c): 4 weight vectors + the scales
constexpr int kTileRv = 2, kTileT = 6;
constexpr int kDwords = kTokenVectors;   // per (token, i, c): 4 activation dwords, excess, scale

// out[rv][t][16 rows] (rv < RV, t < T, stride kTileT tokens) for RV row vectors × T tokens.
template <int RV, int T>
void gemm_tile(const void* panel_bytes, int64_t rv_stride, int64_t chunks, const uint32_t* xp, float* out) {
  const auto* panel = static_cast<const __m512i*>(panel_bytes);
  __m512 sums[kLanes][RV][T];
  for (int i = 0; i < kLanes; ++i) {
    __m512 acc[RV][T];
    for (int rv = 0; rv < RV; ++rv)
      for (int t = 0; t < T; ++t) acc[rv][t] = _mm512_setzero_ps();
    const __m512i* w = panel + i * chunks * kGemmVecs;
    const uint32_t* x = xp + i * chunks * kDwords * kTileT;
    for (int64_t c = 0; c < chunks; ++c, w += kGemmVecs, x += kDwords * kTileT) {
      __m512i d[RV][T];
      for (int t = 0; t < T; ++t) {
        const __m512i start = _mm512_set1_epi32(static_cast<int>(x[kVectors * kTileT + t]));
        for (int rv = 0; rv < RV; ++rv) d[rv][t] = start;
      }
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        __m512i wv[RV];
        for (int rv = 0; rv < RV; ++rv) wv[rv] = _mm512_load_si512(w + rv * rv_stride + v);
        for (int t = 0; t < T; ++t) {
          const __m512i xv = _mm512_set1_epi32(static_cast<int>(x[v * kTileT + t]));
          for (int rv = 0; rv < RV; ++rv) d[rv][t] = _mm512_dpbusd_epi32(d[rv][t], wv[rv], xv);
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512 sa = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(x[(kVectors + 1) * kTileT + t])));
        for (int rv = 0; rv < RV; ++rv) {
          const __m512 s = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_load_si512(w + rv * rv_stride + kVectors)), sa);
          acc[rv][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[rv][t]), s, acc[rv][t]);
        }
      }
    }
    for (int rv = 0; rv < RV; ++rv)
      for (int t = 0; t < T; ++t) sums[i][rv][t] = acc[rv][t];
  }
  for (int rv = 0; rv < RV; ++rv)
    for (int t = 0; t < T; ++t) {
      __m512 a[8], b[4];
      for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(sums[j][rv][t], sums[j + 8][rv][t]);
      for (int j = 0; j < 4; ++j) b[j] = _mm512_add_ps(a[j], a[j + 4]);
      _mm512_store_ps(out + (rv * kTileT + t) * kLanes,
                      _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3])));
    }
}

// nvfp4_w4a4.cpp's epilogue for 16 rows: alpha = (token_scale × global) × (0.25 × 2^8), then
// fma(v, alpha, bias) (nvfp4_w4a4.cpp writes it as std::fma), then store_act's conversions.
inline void epilogue16(const Rows& w, float token_scale, int64_t r, int rows, int64_t t, __m512 v, void* y, DType act) {
  const __mmask16 mask = lane_mask(rows);
  const __m512 alpha = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(token_scale), _mm512_maskz_loadu_ps(mask, w.global + r)),
                                     _mm512_set1_ps(0.25f * kE4m3ScaledInv));
  const __m512 b = w.bias ? _mm512_maskz_loadu_ps(mask, w.bias + r) : _mm512_setzero_ps();
  store16_act(y, act, t * w.n + r, mask, _mm512_fmadd_ps(v, alpha, b));
}

// Rows per decoded group: a multiple of kTileRv row vectors, about 768 KiB of panel.
int64_t group_rows(int64_t k) {
  const int64_t rv_bytes = kLanes * super_chunks(k) * kGemmVecs * 64;
  const int64_t fit = (768 << 10) / (kTileRv * rv_bytes);
  return (fit < 1 ? 1 : fit > 4 ? 4 : fit) * kTileRv * kLanes;
}

using TileFn = void (*)(const void*, int64_t, int64_t, const uint32_t*, float*);
template <int RV, int... T>
constexpr std::array<TileFn, kTileT + 1> tile_row(std::integer_sequence<int, T...>) {
  return {nullptr, gemm_tile<RV, T + 1>...};
}

}  // namespace

int64_t w4a4_gemm_input_bytes(int64_t m, int64_t k) {
  return (m + kTileT - 1) / kTileT * kTileT * w4a4_token_bytes(k);
}

void w4a4_gemm_pack_token(const uint8_t* codes, const uint8_t* scales, int64_t t, int64_t k, uint8_t* scratch,
                          uint8_t* out) {
  // The register kernel's packing (per super-chunk: 4 activation vectors, the excess, the scales;
  // dword lane i = block i), then the dwords reordered to token tile t / 6, [i][c][j], slot t % 6.
  w4a4_pack_token(codes, scales, k, scratch);
  const int64_t chunks = super_chunks(k);
  const auto* in = reinterpret_cast<const uint32_t*>(scratch);
  auto* o = reinterpret_cast<uint32_t*>(out) + t / kTileT * (kTileT * w4a4_token_bytes(k) / 4) + t % kTileT;
  for (int64_t c = 0; c < chunks; ++c)
    for (int j = 0; j < kDwords; ++j)
      for (int i = 0; i < kLanes; ++i) o[((i * chunks + c) * kDwords + j) * kTileT] = in[(c * kDwords + j) * kLanes + i];
}

int64_t w4a4_gemm_row_block(int64_t m, int64_t k) {
  return m >= kW4a4GemmMinTokens ? group_rows(k) : w4a4_row_block(m, k);
}

void w4a4_gemm_rows(const Rows& w, const float* token_scale, const uint8_t* xp, int64_t m, int64_t r0, int64_t r1,
                    void* y, DType act) {
  static constexpr std::array<TileFn, kTileT + 1> tiles[kTileRv] = {
      tile_row<1>(std::make_integer_sequence<int, kTileT>{}), tile_row<2>(std::make_integer_sequence<int, kTileT>{})};
  const Decoder dec(kWeightU8);
  const auto* x = reinterpret_cast<const uint32_t*>(xp);
  const int64_t chunks = super_chunks(w.k), group = group_rows(w.k);
  const int64_t rv_stride = kLanes * chunks * kGemmVecs, tile_dwords = chunks * kLanes * kDwords * kTileT;
  auto* panel = static_cast<__m512i*>(thread_scratch(static_cast<size_t>(group / kLanes * rv_stride * 64)));
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t rows = (g0 + group < r1 ? g0 + group : r1) - g0;
    const int rvs = static_cast<int>((rows + kLanes - 1) / kLanes);
    for (int rv = 0; rv < rvs; ++rv) {
      const int64_t first = g0 + rv * kLanes;
      const int n = static_cast<int>(rows - rv * kLanes < kLanes ? rows - rv * kLanes : kLanes);
      decode_row_vector(dec, w.codes + first, w.scales + first, n, w.k, panel + rv * rv_stride);
    }
    for (int64_t t0 = 0; t0 < m; t0 += kTileT) {
      const int tt = static_cast<int>(m - t0 < kTileT ? m - t0 : kTileT);
      for (int rv = 0; rv < rvs;) {
        const int nr = rv + kTileRv <= rvs ? kTileRv : 1;
        alignas(64) float out[kTileRv * kTileT * kLanes];
        tiles[nr - 1][tt](panel + rv * rv_stride, rv_stride, chunks, x + t0 / kTileT * tile_dwords, out);
        for (int j = 0; j < nr; ++j, ++rv) {
          const int64_t r = g0 + rv * kLanes;
          const int n = static_cast<int>(g0 + rows - r);
          for (int t = 0; t < tt; ++t)
            epilogue16(w, token_scale[t0 + t], r, n, t0 + t, _mm512_load_ps(out + (j * kTileT + t) * kLanes), y, act);
        }
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu::avx512
