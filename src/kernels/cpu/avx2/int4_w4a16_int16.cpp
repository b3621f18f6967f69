// int4 W4A16 on AVX2 in integers, the NVFP4 AVX2 W4A16 kernel's arithmetic (avx2/nvfp4_w4a16.cpp)
// on the repacked int4 layout (int4_packed.h; docs/KERNELS.md, "int4 W4A16: the repacked
// layout"). x is quantized once per call by nvfp4_w4a16_input_avx2 (int16 per 16-column block with
// a power-of-two factor; f32 x in two pieces). Per 64-column chunk of a row, 32 code bytes give 4
// vectors of 16 int16 weights (code - zero) × 256: the nibbles are looked up (vpshufb) in a table
// that already holds code - zero of the chunk half's group (each 128-bit lane is 32 columns, one
// group: the layer's group is a multiple of 32), so the zero point costs nothing per token. Per
// token: vpmaddwd / vpaddd give exact int32 sums of 8 products per lane (|sum| <= 8 × 16 × 256 ×
// 2^15 = 2^30, a multiple of 256, so its float is exact), then one FMA by scale × block factor.
// One row at a time, up to 4 tokens per decode, 2 KiB software prefetch (as the NVFP4 kernel).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2/rows_local.h"
#include "kernels/cpu/int4_packed.h"

namespace fp4lm::kernels::cpu {
namespace {

constexpr int64_t kChunk = 64;
constexpr int64_t kRowBlock = 24;
constexpr int kTokTile = 4;

struct Decoder {
  __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i high8 = _mm256_set1_epi16(static_cast<short>(0xFF00));
  __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                  11, 12, 13, 14, 15);
  __m256i halves = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1);  // byte 0 to the low 128-bit lane, byte 1 to the high
  __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  // 32 code bytes -> w[v], word i = column 4i + {0, 2, 1, 3}[v] (the order of the quantized x),
  // each (code - zero) × 256, the table `lut` holding code - zero per 128-bit lane.
  inline void weights(const uint8_t* p, __m256i lut, __m256i w[4]) const {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(c, low4));
    const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(c, 4), low4));
    w[0] = _mm256_slli_epi16(lo, 8);
    w[1] = _mm256_and_si256(lo, high8);
    w[2] = _mm256_slli_epi16(hi, 8);
    w[3] = _mm256_and_si256(hi, high8);
  }
};

// How a chunk's two 32-column halves find their groups: one group for the chunk (groups that are
// multiples of 64), the consecutive groups 2c and 2c + 1 (group 32), or the per-chunk table.
enum class Halves { one, pair, table };

// The decode table (code - zero) and the 8 lanes' scales of row r, chunk c. For `pair`, a last
// chunk's second half past k reads the next group (the next row's first, or the arrays' spare
// entries): finite values times x = 0.
template <Halves H>
inline void chunk_lanes(const Decoder& dec, const Int4PackedRows& w, int64_t r, int64_t c, __m256i& lut, __m256& s) {
  const int64_t base = r * w.groups + w.chunk_group[c];
  if constexpr (H == Halves::one) {
    lut = _mm256_sub_epi8(dec.iota, _mm256_set1_epi8(static_cast<char>(w.zeros[base])));
    s = _mm256_broadcast_ss(w.scales + base);
  } else if constexpr (H == Halves::pair) {
    uint16_t z2;
    std::memcpy(&z2, w.zeros + base, 2);
    lut = _mm256_sub_epi8(dec.iota, _mm256_shuffle_epi8(_mm256_set1_epi16(static_cast<short>(z2)), dec.halves));
    // The two groups' scales as one unaligned 64-bit load (movq; a double load would assume 8-byte alignment).
    const __m128 s2 = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales + base)));
    s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s2), dec.pair);
  } else {
    const int64_t g0 = base + w.lane_group[2 * c], g1 = base + w.lane_group[2 * c + 1];
    lut = _mm256_sub_epi8(dec.iota, _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(w.zeros[g1])),
                                                     _mm_set1_epi8(static_cast<char>(w.zeros[g0]))));
    s = _mm256_set_m128(_mm_broadcast_ss(w.scales + g1), _mm_broadcast_ss(w.scales + g0));
  }
}

inline __m256i piece_sum(const __m256i w[4], const int16_t* q) {
  const __m256i* x = reinterpret_cast<const __m256i*>(q);
  __m256i s = _mm256_madd_epi16(w[0], _mm256_loadu_si256(x));
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[1], _mm256_loadu_si256(x + 1)));
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[2], _mm256_loadu_si256(x + 2)));
  return _mm256_add_epi32(s, _mm256_madd_epi16(w[3], _mm256_loadu_si256(x + 3)));
}

// acc += float(Σ) × (scale × block factor); f32 x: the second piece joins as × 2^-15 first.
template <int P>
inline __m256 chunk_step(const __m256i w[4], __m256 sw, const int16_t* q, const float* sa, __m256 acc) {
  __m256 f = _mm256_cvtepi32_ps(piece_sum(w, q));
  if constexpr (P == 2) f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(piece_sum(w, q + kChunk)), _mm256_set1_ps(0x1p-15f), f);
  return _mm256_fmadd_ps(f, _mm256_mul_ps(sw, _mm256_loadu_ps(sa)), acc);
}

struct Call {
  const Int4PackedRows& w;
  const int16_t* q;
  const float* sa;
  int64_t chunks;
};

template <int T, int P, Halves H>
void dot_rows(const Decoder& dec, const Call& a, int64_t b0, int64_t b1, int64_t t0, void* y, DType act) {
  const size_t qt = static_cast<size_t>(a.w.kp) * P, st = static_cast<size_t>(a.w.kp) / 8;
  const int16_t* q0 = a.q + t0 * qt;
  const float* sa0 = a.sa + t0 * st;
  const int64_t rowb = a.w.kp / 2;
  for (int64_t r = b0; r < b1; ++r) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const uint8_t* codes = a.w.codes + r * rowb;
    for (int64_t c = 0; c < a.chunks; ++c) {
      if ((c & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(codes + (c + 64) * 32), _MM_HINT_T1);
      __m256i lut, w[4];
      __m256 s;
      chunk_lanes<H>(dec, a.w, r, c, lut, s);
      dec.weights(codes + c * 32, lut, w);
      const int16_t* qc = q0 + static_cast<size_t>(c) * (kChunk * P);
      const float* sc = sa0 + static_cast<size_t>(c) * (kChunk / 8);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[t] = chunk_step<P>(w, s, qc + t * qt, sc + t * st, acc[t]);
    }
    const float bias = a.w.bias ? a.w.bias[r] : 0.0f;
    for (int t = 0; t < T; ++t) rows_store(y, act, (t0 + t) * a.w.n + r, rows_hsum(acc[t]) + bias);
  }
}

template <int P, Halves H>
void rows_form(const Call& a, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  using Fn = void (*)(const Decoder&, const Call&, int64_t, int64_t, int64_t, void*, DType);
  static constexpr Fn fns[kTokTile + 1] = {nullptr, dot_rows<1, P, H>, dot_rows<2, P, H>, dot_rows<3, P, H>,
                                           dot_rows<4, P, H>};
  const Decoder dec;
  rows_by_tiles<kRowBlock, kTokTile>(r0, r1, m, [&](int64_t b0, int64_t b1, int64_t t0, int tt) {
    fns[tt](dec, a, b0, b1, t0, y, act);
  });
}

}  // namespace

int64_t int4_int16_row_block_avx2(int64_t, int64_t) { return kRowBlock; }

void int4_int16_rows_avx2(const Int4PackedRows& w, int64_t group, const int16_t* q, const float* sa, int pieces,
                          int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  const Call a{w, q, sa, w.kp / kChunk};
  auto form = [&]<int P>() {
    if (group % 64 == 0)
      rows_form<P, Halves::one>(a, m, r0, r1, y, act);
    else if (group == 32)
      rows_form<P, Halves::pair>(a, m, r0, r1, y, act);
    else
      rows_form<P, Halves::table>(a, m, r0, r1, y, act);
  };
  if (pieces == 2)
    form.template operator()<2>();
  else
    form.template operator()<1>();
}

}  // namespace fp4lm::kernels::cpu
