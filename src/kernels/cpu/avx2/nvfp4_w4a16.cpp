// NVFP4 W4A16 on AVX2: x stays in 16/32-bit (converted to fp32 once per call), weights are
// decoded on the fly from the checkpoint's nibbles (docs/KERNELS.md, "W4A16 inner loop").
//
// Decoding 32 codes (16 bytes) into 4 fp32 vectors: every E2M1 value is exactly a bfloat16, so
// two pshufb tables give each code's bf16 high and low byte; unpacking bytes into words and words
// into the top half of dwords yields fp32 without any int->float conversion. The unpacks
// interleave elements, so x is permuted the same way once per call (permute_x32).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx2/common.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::hsum;
using avx2::round_up;
using avx2::store_act;

constexpr int64_t kRowBlock = kNvfp4RowBlock;  // rows whose weights stay in L1/L2 while all tokens pass
constexpr int kTokTile = 4;        // tokens sharing one decoded weight chunk

struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int i = 0; i < 256; ++i) v[i] = e4m3_to_f32(static_cast<uint8_t>(i));
  }
};
const float* e4m3_table() {
  static const E4m3Table t;
  return t.v;
}

// Position of element e (0..31) of a 32-element chunk in the decoder's output: vectors 0-1 hold
// block 0 (elements 0..15), 2-3 block 1; in each, the low 128-bit lane holds even elements and
// the high lane odd ones; vector 2b takes elements ≡ 0, 1 (mod 4), vector 2b+1 ≡ 2, 3.
inline int permuted_index(int e) {
  const int b = e / 16, i = e % 16;
  return (b * 2 + ((i >> 1) & 1)) * 8 + (i & 1) * 4 + (i >> 2);
}

// x row (fp32, k values) -> permuted, zero-padded to k32.
void permute_x32(const float* x, int64_t k, int64_t k32, float* out) {
  static const auto perm = [] {
    std::vector<int> p(32);
    for (int e = 0; e < 32; ++e) p[e] = permuted_index(e);
    return p;
  }();
  for (int64_t c = 0; c < k32; c += 32) {
    float* o = out + c;
    if (c + 32 <= k) {
      for (int e = 0; e < 32; ++e) o[perm[e]] = x[c + e];
    } else {
      for (int e = 0; e < 32; ++e) o[perm[e]] = c + e < k ? x[c + e] : 0.0f;
    }
  }
}

// 16 code bytes (32 elements, element 2j in byte j's low nibble) -> 4 x 8 fp32 values.
// f0, f1 hold elements 0..15 (block 0), f2, f3 elements 16..31 (block 1), in permuted_index order.
// Every E2M1 value is exactly a bfloat16: two pshufb tables give each code's bf16 high and low
// byte, one unpack per 16 elements makes bf16 words, and a bf16 word in the top or bottom half
// of a dword becomes fp32 by a mask or a 16-bit shift (ALU ops: the shuffle ports are the
// bottleneck of the M=1 loop). No int->float conversion anywhere.
struct Decoder {
  __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i top16 = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  // bf16 bytes of ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, indexed by the 4-bit code (bit 3 = sign).
  __m256i hi = _mm256_broadcastsi128_si256(_mm_setr_epi8(
      0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, char(0x80), char(0xBF), char(0xBF),
      char(0xBF), char(0xC0), char(0xC0), char(0xC0), char(0xC0)));
  __m256i lo = _mm256_broadcastsi128_si256(_mm_setr_epi8(
      0x00, 0x00, char(0x80), char(0xC0), 0x00, 0x40, char(0x80), char(0xC0), 0x00, 0x00,
      char(0x80), char(0xC0), 0x00, 0x40, char(0x80), char(0xC0)));

  inline void operator()(const uint8_t* p, __m256& f0, __m256& f1, __m256& f2, __m256& f3) const {
    // Low 128-bit lane: low nibbles (even elements); high lane: high nibbles (odd elements).
    const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(c, shift), low4);
    const __m256i hb = _mm256_shuffle_epi8(hi, nib);
    const __m256i lb = _mm256_shuffle_epi8(lo, nib);
    const __m256i wa = _mm256_unpacklo_epi8(lb, hb);  // bf16 of block 0
    const __m256i wb = _mm256_unpackhi_epi8(lb, hb);  // bf16 of block 1
    f0 = _mm256_castsi256_ps(_mm256_slli_epi32(wa, 16));
    f1 = _mm256_castsi256_ps(_mm256_and_si256(wa, top16));
    f2 = _mm256_castsi256_ps(_mm256_slli_epi32(wb, 16));
    f3 = _mm256_castsi256_ps(_mm256_and_si256(wb, top16));
  }
};

// out[r][t] = Σ_j x_t[j] · e2m1(code_rj) · scale(block of j), for R rows and T tokens of xp
// (permuted, stride k32). The decoded weight times its block scale is exact in fp32 (3 × 4
// significant bits), so the only roundings are the accumulations: one 8-lane accumulator per
// (row, token), fed the chunk's four vectors in order, the same for every (R, T) and for the
// panel path, so a row's result never depends on the tile it was computed in.
template <int R, int T>
void dot_rows(const Decoder& dec, const uint8_t* const* codes, const uint8_t* const* scales, int64_t k,
              const float* xp, int64_t k32, float* out /* [R][T] */) {
  const float* lut = e4m3_table();
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t full = k / 32;
  auto step = [&](int r, const uint8_t* cp, float s0v, float s1v, int64_t c) {
    __m256 f0, f1, f2, f3;
    dec(cp, f0, f1, f2, f3);
    const __m256 s0 = _mm256_set1_ps(s0v), s1 = _mm256_set1_ps(s1v);
    f0 = _mm256_mul_ps(f0, s0);
    f1 = _mm256_mul_ps(f1, s0);
    f2 = _mm256_mul_ps(f2, s1);
    f3 = _mm256_mul_ps(f3, s1);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const float* xt = xp + t * k32 + c * 32;
      acc[r][t] = _mm256_fmadd_ps(f0, _mm256_loadu_ps(xt), acc[r][t]);
      acc[r][t] = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xt + 8), acc[r][t]);
      acc[r][t] = _mm256_fmadd_ps(f2, _mm256_loadu_ps(xt + 16), acc[r][t]);
      acc[r][t] = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xt + 24), acc[r][t]);
    }
  };
  for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) step(r, codes[r] + c * 16, lut[scales[r][2 * c]], lut[scales[r][2 * c + 1]], c);
  }
  if (k % 32) {  // one 16-element block left: its 8 code bytes, zero-padded (x is padded too)
    for (int r = 0; r < R; ++r) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, codes[r] + full * 16, 8);
      step(r, tail, lut[scales[r][2 * full]], 0.0f, full);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// Tiles: M=1 runs 4 rows at a time (4 FMA chains; 6 rows spill registers and measured slower),
// 2 tokens 3 rows, 3-4 tokens 2 rows.
template <int T>
constexpr int kRowsFor = T == 1 ? 4 : T == 2 ? 3 : 2;

using DotFn = void (*)(const Decoder&, const uint8_t* const*, const uint8_t* const*, int64_t,
                       const float*, int64_t, float*);
constexpr DotFn kDot[kTokTile + 1] = {nullptr, dot_rows<kRowsFor<1>, 1>, dot_rows<kRowsFor<2>, 2>,
                                      dot_rows<kRowsFor<3>, 3>, dot_rows<kRowsFor<4>, 4>};
constexpr DotFn kDot1[kTokTile + 1] = {nullptr, dot_rows<1, 1>, dot_rows<1, 2>, dot_rows<1, 3>,
                                       dot_rows<1, 4>};
constexpr int kRows[kTokTile + 1] = {0, kRowsFor<1>, kRowsFor<2>, kRowsFor<3>, kRowsFor<4>};

// ---- Many tokens: decode once, multiply many times. A group of rows is decoded (and scaled)
// once per call into an fp32 panel in exactly the values and order dot_rows produces in
// registers; register tiles then run every token over it. Each accumulator receives the same
// FMAs in the same order as in dot_rows, so results are bit-identical to the small-m path (and
// to each token computed alone).

// Rows [0, R) of `codes`/`scales` -> panel[r * kp + j], j in decoder order, block-scaled.
void decode_panel(const Decoder& dec, const uint8_t* const* codes, const uint8_t* const* scales, int rows,
                  int64_t k, int64_t kp, float* panel) {
  const float* lut = e4m3_table();
  const int64_t full = k / 32;
  for (int r = 0; r < rows; ++r) {
    float* out = panel + r * kp;
    auto put = [&](const uint8_t* cp, float s0v, float s1v, int64_t c) {
      __m256 f0, f1, f2, f3;
      dec(cp, f0, f1, f2, f3);
      const __m256 s0 = _mm256_set1_ps(s0v), s1 = _mm256_set1_ps(s1v);
      _mm256_storeu_ps(out + c * 32, _mm256_mul_ps(f0, s0));
      _mm256_storeu_ps(out + c * 32 + 8, _mm256_mul_ps(f1, s0));
      _mm256_storeu_ps(out + c * 32 + 16, _mm256_mul_ps(f2, s1));
      _mm256_storeu_ps(out + c * 32 + 24, _mm256_mul_ps(f3, s1));
    };
    for (int64_t c = 0; c < full; ++c) put(codes[r] + c * 16, lut[scales[r][2 * c]], lut[scales[r][2 * c + 1]], c);
    if (k % 32) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, codes[r] + full * 16, 8);
      put(tail, lut[scales[r][2 * full]], 0.0f, full);
    }
  }
}

// out[r][t] for R panel rows and T tokens: dot_rows' accumulation, operands from memory.
template <int R, int T>
void panel_tile(const float* panel, const float* xp, int64_t kp, float* out) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t j = 0; j < kp; j += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_loadu_ps(panel + r * kp + j);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(xp + t * kp + j);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

constexpr int kPanelR = 3, kPanelT = 4;
using PanelFn = void (*)(const float*, const float*, int64_t, float*);
constexpr PanelFn kPanelWide[kPanelT + 1] = {nullptr, panel_tile<kPanelR, 1>, panel_tile<kPanelR, 2>,
                                             panel_tile<kPanelR, 3>, panel_tile<kPanelR, 4>};
constexpr PanelFn kPanelOne[kPanelT + 1] = {nullptr, panel_tile<1, 1>, panel_tile<1, 2>, panel_tile<1, 3>,
                                            panel_tile<1, 4>};

// Rows per decoded panel: about 384 KiB of fp32 (stays in L2 while all tokens pass), a
// multiple of the tile's rows, within [6, 48].
int64_t panel_rows(int64_t kp) {
  const int64_t fit = (384 << 10) / (kp * 4);
  return std::clamp<int64_t>(fit / 6 * 6, 6, 48);
}

void panel_rows_range(const Nvfp4Matrix& w, const W4a16Input& in, int64_t r0, int64_t r1, void* y,
                      DType act) {
  const int64_t n = w.n, k = w.k, kp = in.kp, m = in.m, group = panel_rows(kp);
  const Decoder dec;
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(group * kp));
  float out[kPanelR * kPanelT];
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int rows = static_cast<int>(std::min(r1, g0 + group) - g0);
    decode_panel(dec, w.row_codes.data() + g0, w.row_scales.data() + g0, rows, k, kp, panel.data());
    for (int64_t t0 = 0; t0 < m; t0 += kPanelT) {
      const int tt = static_cast<int>(std::min<int64_t>(kPanelT, m - t0));
      for (int i = 0; i < rows;) {
        const int rr = i + kPanelR <= rows ? kPanelR : 1;
        (rr > 1 ? kPanelWide[tt] : kPanelOne[tt])(panel.data() + i * kp, in.x.data() + t0 * kp, kp, out);
        for (int ri = 0; ri < rr; ++ri, ++i) {
          const int64_t r = g0 + i;
          const float g = w.row_global[r], bias = w.bias.empty() ? 0.0f : w.bias[r];
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[ri * tt + t] * g + bias);
        }
      }
    }
  }
}

}  // namespace

W4a16Input nvfp4_w4a16_input_avx2(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool) {
  W4a16Input in;
  in.m = m;
  in.kp = round_up(k, 32);
  in.x.resize(static_cast<size_t>(m * in.kp));
  const size_t esize = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * esize, act, row.data(), row.size());
      permute_x32(row.data(), k, in.kp, in.x.data() + t * in.kp);
    }
  });
  return in;
}

int64_t nvfp4_w4a16_row_block_avx2(int64_t m, int64_t k) {
  return m >= kW4a16PanelMinTokens ? panel_rows(round_up(k, 32)) : kNvfp4RowBlock;
}

void nvfp4_w4a16_rows_avx2(const Nvfp4Matrix& w, const W4a16Input& in, int64_t r0, int64_t r1,
                           void* y, DType act) {
  if (in.m >= kW4a16PanelMinTokens) return panel_rows_range(w, in, r0, r1, y, act);
  const int64_t n = w.n, k = w.k, k32 = in.kp, m = in.m;
  const Decoder dec;
  float out[6 * kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = std::min(r1, b0 + kRowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1;) {
        const int rr = r + kRows[tt] <= b1 ? kRows[tt] : 1;
        (rr > 1 ? kDot[tt] : kDot1[tt])(dec, w.row_codes.data() + r, w.row_scales.data() + r, k,
                                        in.x.data() + t0 * k32, k32, out);
        for (int i = 0; i < rr; ++i, ++r) {
          const float g = w.row_global[r], bias = w.bias.empty() ? 0.0f : w.bias[r];
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[i * tt + t] * g + bias);
        }
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu
