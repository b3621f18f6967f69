#pragma once
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*() (a vector
// initialised from itself), which -Wuninitialized reports at every inlined use; the including
// cpu/avx512/*.cpp files turn those two warnings off.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// What the AVX-512 kernels (NVFP4, dense, FP8) share: small helpers, and the loops and schedules
// of the two NVFP4 kernels. Include only from cpu/avx512/*.cpp files. Everything
// here has internal linkage (static / anonymous namespace) so no copy compiled with AVX-512
// flags can be shared with other files (see nvfp4.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/avx512/nvfp4.h"

namespace fp4lm::kernels::cpu::avx512 {
namespace {

// Dword indices picking the even / odd dwords of two vectors (vpermt2d): applied to a
// super-chunk's 128 code bytes, lane i of the result holds 4 code bytes of block i.
alignas(64) constexpr int32_t kEvenDwords[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
alignas(64) constexpr int32_t kOddDwords[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

// Horizontal sum of 16 lanes in a fixed order.
inline float hsum(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 E4M3 bytes -> 16 fp32 lanes, each the scale × 2^-8, exactly: shifted left by 7 (and the
// sign moved from bit 14 to 15 by adding bit 14 to itself) an E4M3 byte is the binary16 of
// scale × 2^-8 (same exponent field, bias 7 vs 15), subnormals included; vcvtph2ps is exact.
// NaN bytes are rejected at load.
inline __m512 e4m3x16_scaled(const uint8_t* s) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  const __m256i t = _mm256_slli_epi16(w, 7);
  return _mm512_cvtph_ps(_mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000))));
}
constexpr float kE4m3ScaledInv = 256.0f;  // undoes e4m3x16_scaled's 2^-8

// Writes one output element in the activation dtype (bf16: round to nearest even, as
// f32_to_bf16; f16: vcvtps2ph round to nearest).
inline void store_act(void* y, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(y)[i] = v;
      return;
    case DType::BF16: {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      if ((u & 0x7fffffffu) > 0x7f800000u) {
        static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>((u >> 16) | 0x40);
        return;
      }
      u += 0x7fffu + ((u >> 16) & 1u);
      static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(u >> 16);
      return;
    }
    default:
      static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
      return;
  }
}

inline __m512bh bh(__m512i v) { return (__m512bh)v; }  // same bits, the bf16 vector type

// The W4A16 kernels' two BF16 instructions, native (`Emulated` false: AVX512-BF16) or computed
// from AVX-512F for the CPUs without it (Ice Lake), with the same results on their inputs:
//  - dot_bf16: vdpbf16ps, acc + a.odd·b.odd, then + a.even·b.even (the SDM's order). A product
//    of two bf16 is exact in fp32, so each step is one FMA. The instruction flushes denormal
//    inputs and results; the kernels never feed it denormals (E2M1 weights; activation pieces
//    below 2^-126 dropped), and a partial sum below 2^-126 (|x·w| < 1e-38) is kept by the FMA
//    where vdpbf16ps would flush it: the only difference, far below every tolerance.
//  - cvt2_bf16: vcvtne2ps2bf16 (low half from `lo`): round to nearest even in integers,
//    denormals to a signed zero, NaN quieted — bit for bit.
template <bool Emulated>
inline __m512 dot_bf16(__m512 acc, __m512i a, __m512i b) {
  if constexpr (Emulated) {
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(a, hi)), _mm512_castsi512_ps(_mm512_and_si512(b, hi)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), acc);
  } else {
    return _mm512_dpbf16_ps(acc, bh(a), bh(b));
  }
}

inline __m256i cvt_bf16_emulated(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __mmask16 denormal = _mm512_cmplt_epu32_mask(abs, _mm512_set1_epi32(0x00800000));
  __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  r = _mm512_mask_blend_epi32(denormal, r, _mm512_srli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u))), 16));
  return _mm512_cvtepi32_epi16(r);
}

template <bool Emulated>
inline __m512i cvt2_bf16(__m512 hi, __m512 lo) {
  if constexpr (Emulated)
    return _mm512_inserti64x4(_mm512_castsi256_si512(cvt_bf16_emulated(lo)), cvt_bf16_emulated(hi), 1);
  else
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// The W4A16 entry points' dispatch: f.template operator()<P, E>() for the call's activation
// pieces P (1-3) and BF16 form E (true: emulated), the kernels' two compile-time choices.
template <typename F>
inline void with_pieces_and_bf16(int pieces, bool native_bf16, F&& f) {
  auto form = [&]<int P>() {
    if (native_bf16)
      f.template operator()<P, false>();
    else
      f.template operator()<P, true>();
  };
  switch (pieces) {
    case 1: return form.template operator()<1>();
    case 2: return form.template operator()<2>();
    default: return form.template operator()<3>();
  }
}

// 32 fp32 values (a: elements 0-15, b: 16-31) -> `pieces` vectors of 32 bf16 at out[32 p]
// whose sum is the input exactly (round to nearest even, then the exact fp32 remainder; parts
// below 2^-126 are dropped, as vdpbf16ps treats bf16 denormals as zero).
template <bool Emulated = false>
inline void bf16_pieces(__m512 a, __m512 b, int pieces, uint16_t* out) {
  for (int p = 0; p < pieces; ++p) {
    const __m512i h = cvt2_bf16<Emulated>(b, a);
    _mm512_store_si512(out + p * 32, h);
    a = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16)));
    b = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16)));
  }
}

// A super-chunk's codes and scales: in place, or (the last, partial one) copied zero-padded.
struct SuperChunk {
  const uint8_t* codes;
  const uint8_t* scales;
};
struct TailBuffer {
  alignas(64) uint8_t codes[kSuper / 2];
  alignas(16) uint8_t scales[kSuper / 16];
};
inline SuperChunk super_chunk(const uint8_t* codes, const uint8_t* scales, int64_t k, int64_t c, TailBuffer& tail) {
  if ((c + 1) * kSuper <= k) return {codes + c * (kSuper / 2), scales + c * (kSuper / 16)};
  const int64_t rem = k - c * kSuper;  // a positive multiple of 16
  std::memset(&tail, 0, sizeof(tail));
  std::memcpy(tail.codes, codes + c * (kSuper / 2), static_cast<size_t>(rem / 2));
  std::memcpy(tail.scales, scales + c * (kSuper / 16), static_cast<size_t>(rem / 16));
  return {tail.codes, tail.scales};
}

// The GEMV (register) path streams each row's codes and scales; rows are short (a 4096-wide row
// is 2 KiB of codes) and the hardware prefetcher ramps up on each new one slowly. A software
// prefetch 2 KiB ahead (into the next rows once a row ends: rows are contiguous) keeps the
// loads in flight; past the end it never faults. Into L2 only (T1): prefetched into L1 the
// weights evicted the activation vector of wide rows (k = 14336: 21-57 KiB packed), which ran
// at 0.66 of the bandwidth then, 0.84-0.97 now (docs/KERNELS.md, "M = 1: one stream, prefetched").
constexpr int64_t kPrefetchChunks = 16;  // super-chunks: 16 × 128 code bytes (measured: 8-64 all help, 16 best)
inline void prefetch_super_chunk(const uint8_t* codes, const uint8_t* scales, int64_t c) {
  const char* p = reinterpret_cast<const char*>(codes + (c + kPrefetchChunks) * (kSuper / 2));
  _mm_prefetch(p, _MM_HINT_T1);
  _mm_prefetch(p + 64, _MM_HINT_T1);
  _mm_prefetch(reinterpret_cast<const char*>(scales + (c + kPrefetchChunks) * (kSuper / 16)), _MM_HINT_T1);
}

// ---- The two NVFP4 kernels' shared loops (W4A16 and W4A4 differ only in what a decoded
// super-chunk is and what a (row, token) step does with it). `Dec` decodes one super-chunk's 128
// code bytes into Dec::kVectors vectors: `dec(codes, z)`.

// The register schedule's loop over R rows: per super-chunk and row, decode once (z, the block
// scale vector s), then `step(r, c, z, s)` runs that row's tokens.
template <int R, class Dec, class Step>
inline void each_decoded_super_chunk(const Dec& dec, const uint8_t* const* codes, const uint8_t* const* scales,
                                     int64_t k, Step&& step) {
  const int64_t chunks = super_chunks(k);
  TailBuffer tail;
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const SuperChunk sc = super_chunk(codes[r], scales[r], k, c, tail);
      prefetch_super_chunk(codes[r], scales[r], c);
      __m512i z[Dec::kVectors];
      dec(sc.codes, z);
      step(r, c, z, e4m3x16_scaled(sc.scales));
    }
  }
}

// The panel: per row and super-chunk the Dec::kVectors decoded vectors, then the scale vector.
template <class Dec>
constexpr int kPanelVectors = Dec::kVectors + 1;

template <class Dec>
void decode_panel(const Dec& dec, const uint8_t* const* codes, const uint8_t* const* scales, int rows, int64_t k,
                  __m512i* panel) {
  const int64_t chunks = super_chunks(k);
  TailBuffer tail;
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < chunks; ++c) {
      const SuperChunk sc = super_chunk(codes[r], scales[r], k, c, tail);
      __m512i* out = panel + (r * chunks + c) * kPanelVectors<Dec>;
      dec(sc.codes, out);
      out[Dec::kVectors] = _mm512_castps_si512(e4m3x16_scaled(sc.scales));
    }
}

constexpr int kRowBlock = 24;  // rows per unit of work in the register schedule
constexpr int kTokTile = 4;    // tokens sharing one decoded super-chunk in registers
constexpr int kPanelR = 3, kPanelT = 4;

// The NVFP4 register tiles take up to 8 tokens on one decode when the 8 tokens' activations fit
// in 32 KiB (L1 holds them while the row streams past): a decode costs about as many ops as 2
// tokens' products (W4A16: 16 vs 9 per super-chunk), so one 8-token tile does M = 8 in 88 ops
// per row and super-chunk instead of 2 × 52. With longer rows the 8 tokens' activations come
// from L2 for every row and two 4-token tiles (2 rows each) are faster; K-panels that keep them
// in L1 broke the rows' sequential stream and were slower still (docs/KERNELS.md, "Small batches").
constexpr int kWideTokTile = 8;
constexpr int64_t kWideTileActivationBytes = 32 << 10;

// Rows per register tile of T tokens: one row at a time at M = 1 (one stream per thread: 1.4-1.5x
// faster than 4 rows side by side on 4096-wide rows, measured with fp4lm bench kernels), two for
// 2-4 tokens, one again from 5 (2 rows × 8 tokens' accumulators and their two decoded
// super-chunks would not fit in the 32 vector registers).
template <int T>
constexpr int kRowsFor = T >= 2 && T <= 4 ? 2 : 1;
constexpr int kRowsForTokens[kWideTokTile + 1] = {0,           kRowsFor<1>, kRowsFor<2>, kRowsFor<3>, kRowsFor<4>,
                                                  kRowsFor<5>, kRowsFor<6>, kRowsFor<7>, kRowsFor<8>};

// Rows per decoded panel: about 512 KiB (half of Zen 4/5's L2), a multiple of 12, in [12, 96].
template <class Dec>
int64_t panel_rows(int64_t k) {
  const int64_t row_bytes = super_chunks(k) * kPanelVectors<Dec> * 64;
  const int64_t fit = (512 << 10) / row_bytes;
  return fit < 12 ? 12 : fit > 96 ? 96 : fit / 12 * 12;
}

// Tokens per register tile for activations of `token_bytes` each (see kWideTokTile).
inline int register_token_tile(int64_t token_bytes) {
  return kWideTokTile * token_bytes <= kWideTileActivationBytes ? kWideTokTile : kTokTile;
}

// The register schedule over rows [r0, r1) and m tokens: 24-row blocks, tiles of `tok_tile`
// tokens (4 or 8). tile(r, rr, t0, tt, out) computes rows [r, r + rr) × tokens [t0, t0 + tt) into
// out[rr][tt]; epilogue(r, t, v) stores one result.
template <class Tile, class Epilogue>
inline void register_schedule(int64_t m, int64_t r0, int64_t r1, int tok_tile, Tile&& tile, Epilogue&& epilogue) {
  float out[2 * kWideTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = b0 + kRowBlock < r1 ? b0 + kRowBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += tok_tile) {
      const int tt = static_cast<int>(m - t0 < tok_tile ? m - t0 : tok_tile);
      for (int64_t r = b0; r < b1;) {
        const int rr = r + kRowsForTokens[tt] <= b1 ? kRowsForTokens[tt] : 1;
        tile(r, rr, t0, tt, out);
        for (int i = 0; i < rr; ++i, ++r)
          for (int t = 0; t < tt; ++t) epilogue(r, t0 + t, out[i * tt + t]);
      }
    }
  }
}

// The panel schedule: groups of `group` rows decoded once (decode(g0, rows, panel)), then
// kPanelR × kPanelT tiles: tile(panel row, rr, t0, tt, out) as above.
template <class Decode, class Tile, class Epilogue>
inline void panel_schedule(int64_t m, int64_t r0, int64_t r1, int64_t group, size_t panel_bytes, Decode&& decode,
                           Tile&& tile, Epilogue&& epilogue) {
  auto* panel = static_cast<__m512i*>(thread_scratch(panel_bytes));
  float out[kPanelR * kPanelT];
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int rows = static_cast<int>((g0 + group < r1 ? g0 + group : r1) - g0);
    decode(g0, rows, panel);
    for (int64_t t0 = 0; t0 < m; t0 += kPanelT) {
      const int tt = static_cast<int>(m - t0 < kPanelT ? m - t0 : kPanelT);
      for (int i = 0; i < rows;) {
        const int rr = i + kPanelR <= rows ? kPanelR : 1;
        tile(panel, i, rr, t0, tt, out);
        for (int ri = 0; ri < rr; ++ri, ++i)
          for (int t = 0; t < tt; ++t) epilogue(g0 + i, t0 + t, out[ri * tt + t]);
      }
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::cpu::avx512
