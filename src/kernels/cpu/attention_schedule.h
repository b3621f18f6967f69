#pragma once
// The attention kernel's schedule, shared by the AVX2 and AVX-512 variants (included only from
// avx2/attention.cpp / avx512/attention.cpp, compiled with their flags). `Isa` provides a vector
// type V of W float lanes and: zero, set1, loadu, storeu, fmadd, mul, add, sub, hsum, hsum8,
// prefetch_l2,
// exp_nonpos (exp of x <= 0, exactly 0 below -87.3), and load<DT>(row, d, scale256): W elements
// of a cached row from element d, converted to float32 in registers (FP8: (code / 256) ×
// (scale × 256), which is code × scale rounded once, as the reference and a float32 cache of the
// dequantized values give).
//
// Per query row and GQA group (each K and V row read once for the whole group):
//  1. scores: per K row t, chunk by chunk, one converted chunk feeds the FMAs of up to 8 query
//     heads (one accumulator each); the 8 horizontal sums in one fixed tree (hsum8), then the tail
//     of head_dim (its FMAs in element order, one lane per position), × 1/sqrt(head_dim). The max
//     is kept per head.
//  2. weights: w_t = exp(s_t − max) W positions at a time (positions past the row padded with
//     −inf → 0), summed in W lanes then one fixed horizontal sum.
//  3. values: per block of 64 positions and pair of W-wide chunks of head_dim, over t: one
//     converted chunk pair feeds up to 8 heads' accumulators (w_t broadcast); at the end × (1 / Σ w).
//     head_dim's tail: one more vector per head (lane = tail element, FMAs in position order).
//     (Pass 1 prefetches each V row into L2.)
// Every (row, head) thus runs the same operations in the same order whatever the call holds.
//
// Everything here has internal linkage and uses no std:: templates or inline functions of other
// headers (no containers, algorithms or bit_cast): a copy compiled with one ISA's flags must never
// be the one the linker keeps for code that runs on a CPU without it. Scratch memory comes from
// the ISA-neutral caller (run_attention).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace fp4lm::kernels::cpu {
namespace {
namespace attention_schedule {

inline float max_of(float a, float b) { return a < b ? b : a; }

// The scalar tails use explicit fused multiply-adds: C++ lets GCC contract a * b + c or not
// depending on how it vectorizes a loop, which would make results depend on the instantiation
// (an FP8 tail and a float32 tail of the same values differed in the last bit).

// Scalar element d of a cached row, as the vector load converts it (FP8: code × scale).
template <DType DT>
inline float element(const uint8_t* row, int64_t d, float scale) {
  if constexpr (DT == DType::F32) {
    return reinterpret_cast<const float*>(row)[d];
  } else if constexpr (DT == DType::BF16) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[d]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else if constexpr (DT == DType::F16) {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[d]);
  }
  else return e4m3_to_f32(row[d]) * scale;
}

// Position t's cached row in `plane` (row t, or its row on a sliding window's ring).
inline const uint8_t* kv_row(const uint8_t* plane, const AttentionCall& c, int64_t t, int64_t rb) {
  int64_t r = t;
  if (c.ring_rows > 0) {
    r += c.ring_first;
    if (r >= c.ring_rows) r -= c.ring_rows;
  }
  return plane + r * rb;
}

template <DType DT>
constexpr int64_t element_bytes() {
  return DT == DType::F32 ? 4 : DT == DType::F8_E4M3 ? 1 : 2;
}

// Pass 1 for heads [h0, h0 + NH): s[j * ld + t] = (q_j · k_t) × ck, and each head's max.
template <typename Isa, DType DT, int NH>
void scores(const AttentionCall& c, const float* q, int64_t len, float ck, float* s, int64_t ld, float* mx) {
  const typename Isa::V scale256 = Isa::set1(c.k_scale * 256.0f);
  using V = typename Isa::V;
  constexpr int W = Isa::W;
  const int64_t hd = c.head_dim, full = hd / W * W, rb = hd * element_bytes<DT>();
  for (int j = 0; j < NH; ++j) mx[j] = -INFINITY;
  // Positions in groups of W: the vector body's sums (after hsum8) and the keys' tail elements
  // (converted as `element` converts them) are gathered per group, then head_dim's tail runs with
  // one lane per position: per lane the scalar loop's fused multiply-adds in element order, so
  // the same bits, without W × NH scalar FMAs per position.
  const int64_t tail = hd - full;
  alignas(64) float dots[8 * W], kt[W * W];
  for (int64_t g0 = 0; g0 < len; g0 += W) {
    const int64_t gn = len - g0 < W ? len - g0 : W;
    for (int64_t i = 0; i < gn; ++i) {
      const int64_t t = g0 + i;
      const uint8_t* k = kv_row(c.keys, c, t, rb);
      // The V row of this position into L2 now, so pass 3 finds it there.
      const uint8_t* v = kv_row(c.values, c, t, rb);
      for (int64_t b = 0; b < rb; b += 64) Isa::prefetch_l2(v + b);
      V acc[8];  // heads past NH stay 0 (hsum8 reduces 8; every slot by the same tree)
      for (int j = 0; j < 8; ++j) acc[j] = Isa::zero();
      for (int64_t d = 0; d < full; d += W) {
        const V kv = Isa::template load<DT>(k, d, scale256);
        for (int j = 0; j < NH; ++j) acc[j] = Isa::fmadd(Isa::loadu(q + j * hd + d), kv, acc[j]);
      }
      float dot[8];
      Isa::hsum8(acc, dot);
      if (tail == 0) {  // no tail (head_dim a multiple of W): done here
        for (int j = 0; j < NH; ++j) {
          const float sc = dot[j] * ck;
          s[j * ld + t] = sc;
          mx[j] = max_of(mx[j], sc);
        }
        continue;
      }
      for (int j = 0; j < NH; ++j) dots[j * W + i] = dot[j];
      for (int64_t d = 0; d < tail; ++d) kt[d * W + i] = element<DT>(k, full + d, c.k_scale);
    }
    if (tail == 0) continue;
    for (int64_t i = gn; i < W; ++i) {  // lanes past len: any finite value, never read
      for (int j = 0; j < NH; ++j) dots[j * W + i] = 0.0f;
      for (int64_t d = 0; d < tail; ++d) kt[d * W + i] = 0.0f;
    }
    for (int j = 0; j < NH; ++j) {
      V a = Isa::loadu(dots + j * W);
      for (int64_t d = 0; d < tail; ++d) a = Isa::fmadd(Isa::set1(q[j * hd + full + d]), Isa::loadu(kt + d * W), a);
      Isa::storeu(dots + j * W, Isa::mul(a, Isa::set1(ck)));
      for (int64_t i = 0; i < gn; ++i) {
        const float sc = dots[j * W + i];
        s[j * ld + g0 + i] = sc;
        mx[j] = max_of(mx[j], sc);
      }
    }
  }
}

// Pass 3 for heads [h0, h0 + NH): o_j = (Σ_t w_j,t v_t) × r_j. Positions in blocks of
// kValueBlock, so a block's V rows are read from memory once and stay in L1 for every chunk pair
// of head_dim; o holds the running sums between blocks (storing and reloading them changes no bit:
// each element still takes its fused multiply-adds in position order).
constexpr int64_t kValueBlock = 64;

template <typename Isa, DType DT, int NH>
void values(const AttentionCall& c, const float* w, int64_t ld, int64_t len, const float* r, float* o,
            int64_t o_head_stride) {
  using V = typename Isa::V;
  constexpr int W = Isa::W;
  const int64_t hd = c.head_dim, full = hd / W * W, rb = hd * element_bytes<DT>();
  const V scale256 = Isa::set1(c.v_scale * 256.0f);
  // head_dim's tail (hd - full < W elements, e.g. 8 of the vision towers' 72): per block its rows'
  // tail elements converted once (as `element` converts them) into tv, then one vector per head
  // whose lanes take, per element, the scalar loop's fused multiply-adds in position order
  // (the sums kept in ta between blocks): the scalar loop's bits, without its latency-bound chain.
  const int64_t tail = hd - full;
  alignas(64) float tv[kValueBlock * W];
  alignas(64) float ta[NH * W];
  for (int64_t e = 0; e < NH * W; ++e) ta[e] = 0.0f;
  for (int64_t b0 = 0; b0 < len; b0 += kValueBlock) {
    const int64_t b1 = b0 + kValueBlock < len ? b0 + kValueBlock : len;
    if (tail > 0) {
      for (int64_t t = b0; t < b1; ++t) {
        const uint8_t* v = kv_row(c.values, c, t, rb);
        for (int64_t e = 0; e < W; ++e) tv[(t - b0) * W + e] = e < tail ? element<DT>(v, full + e, c.v_scale) : 0.0f;
      }
      V a[NH];
      for (int j = 0; j < NH; ++j) a[j] = Isa::loadu(ta + j * W);
      for (int64_t t = b0; t < b1; ++t) {
        const V vt = Isa::loadu(tv + (t - b0) * W);
        for (int j = 0; j < NH; ++j) a[j] = Isa::fmadd(Isa::set1(w[j * ld + t]), vt, a[j]);
      }
      for (int j = 0; j < NH; ++j) Isa::storeu(ta + j * W, a[j]);
    }
    int64_t d = 0;
    for (; d + 2 * W <= full; d += 2 * W) {
      V a0[NH], a1[NH];
      for (int j = 0; j < NH; ++j) {
        a0[j] = b0 == 0 ? Isa::zero() : Isa::loadu(o + j * o_head_stride + d);
        a1[j] = b0 == 0 ? Isa::zero() : Isa::loadu(o + j * o_head_stride + d + W);
      }
      for (int64_t t = b0; t < b1; ++t) {
        const uint8_t* v = kv_row(c.values, c, t, rb);
        const V v0 = Isa::template load<DT>(v, d, scale256), v1 = Isa::template load<DT>(v, d + W, scale256);
        for (int j = 0; j < NH; ++j) {
          const V wt = Isa::set1(w[j * ld + t]);
          a0[j] = Isa::fmadd(wt, v0, a0[j]);
          a1[j] = Isa::fmadd(wt, v1, a1[j]);
        }
      }
      for (int j = 0; j < NH; ++j) {
        Isa::storeu(o + j * o_head_stride + d, a0[j]);
        Isa::storeu(o + j * o_head_stride + d + W, a1[j]);
      }
    }
    for (; d < full; d += W) {
      V a0[NH];
      for (int j = 0; j < NH; ++j) a0[j] = b0 == 0 ? Isa::zero() : Isa::loadu(o + j * o_head_stride + d);
      for (int64_t t = b0; t < b1; ++t) {
        const V v0 = Isa::template load<DT>(kv_row(c.values, c, t, rb), d, scale256);
        for (int j = 0; j < NH; ++j) a0[j] = Isa::fmadd(Isa::set1(w[j * ld + t]), v0, a0[j]);
      }
      for (int j = 0; j < NH; ++j) Isa::storeu(o + j * o_head_stride + d, a0[j]);
    }
  }
  for (int j = 0; j < NH; ++j) {
    const V rj = Isa::set1(r[j]);
    for (int64_t d = 0; d < full; d += W) Isa::storeu(o + j * o_head_stride + d, Isa::mul(Isa::loadu(o + j * o_head_stride + d), rj));
  }
  for (int64_t d = full; d < hd; ++d)
    for (int j = 0; j < NH; ++j) o[j * o_head_stride + d] = ta[j * W + (d - full)] * r[j];
}

// One query row (position pos0 + i), all heads of the group, in blocks of up to 8 heads.
template <typename Isa, DType DT, int NH>
void row_block(const AttentionCall& c, int64_t i, int64_t h0, float* s) {
  using V = typename Isa::V;
  constexpr int W = Isa::W;
  const int64_t hd = c.head_dim, len = c.pos0 + i + 1;
  const int64_t ld = (len + W - 1) / W * W;
  const float* q = c.q + i * c.q_stride + h0 * hd;
  float* o = c.out + i * c.out_stride + h0 * hd;
  const float ck = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  float mx[NH], r[NH];
  scores<Isa, DT, NH>(c, q, len, ck, s, ld, mx);
  for (int j = 0; j < NH; ++j) {
    float* sj = s + j * ld;
    for (int64_t t = len; t < ld; ++t) sj[t] = -INFINITY;
    const float* sink = c.sinks ? c.sinks + h0 + j : nullptr;  // joins the max and the denominator only
    if (sink) mx[j] = max_of(mx[j], *sink);
    const V m = Isa::set1(mx[j]);
    V sum = Isa::zero();
    for (int64_t t = 0; t < ld; t += W) {
      const V e = Isa::exp_nonpos(Isa::sub(Isa::loadu(sj + t), m));
      Isa::storeu(sj + t, e);
      sum = Isa::add(sum, e);
    }
    r[j] = sink ? 1.0f / (Isa::hsum(sum) + std::exp(*sink - mx[j])) : 1.0f / Isa::hsum(sum);
  }
  values<Isa, DT, NH>(c, s, ld, len, r, o, hd);
}

template <typename Isa, DType DT>
void run_rows(const AttentionCall& c, float* scratch) {
  for (int64_t i = 0; i < c.rows; ++i)
    for (int64_t h0 = 0; h0 < c.group; h0 += kAttentionHeadBlock) {
      const int64_t nh = c.group - h0;
      switch (nh < kAttentionHeadBlock ? nh : kAttentionHeadBlock) {
        case 1: row_block<Isa, DT, 1>(c, i, h0, scratch); break;
        case 2: row_block<Isa, DT, 2>(c, i, h0, scratch); break;
        case 3: row_block<Isa, DT, 3>(c, i, h0, scratch); break;
        case 4: row_block<Isa, DT, 4>(c, i, h0, scratch); break;
        case 5: row_block<Isa, DT, 5>(c, i, h0, scratch); break;
        case 6: row_block<Isa, DT, 6>(c, i, h0, scratch); break;
        case 7: row_block<Isa, DT, 7>(c, i, h0, scratch); break;
        default: row_block<Isa, DT, 8>(c, i, h0, scratch); break;
      }
    }
}

// The variant's entry point: dispatch on the cache dtype (run_attention validated it).
template <typename Isa>
void run(const AttentionCall& c, float* scratch) {
  switch (c.kv_dtype) {
    case DType::F32: run_rows<Isa, DType::F32>(c, scratch); break;
    case DType::BF16: run_rows<Isa, DType::BF16>(c, scratch); break;
    case DType::F16: run_rows<Isa, DType::F16>(c, scratch); break;
    default: run_rows<Isa, DType::F8_E4M3>(c, scratch); break;
  }
}

}  // namespace attention_schedule
}  // namespace
}  // namespace fp4lm::kernels::cpu
