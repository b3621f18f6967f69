// The two forms of the gated delta rule (kernels/delta_rule.h), written once and compiled once
// per instruction set: cpu/reference/delta_rule.cpp (the build's baseline) and
// cpu/avx2/delta_rule.cpp (AVX2 + FMA, chosen at run time). Include only from those, with
// FP4LM_GDN_ISA naming the namespace and FP4LM_GDN_LANES the floats per vector register. Every inner loop runs over a contiguous dimension with a
// fixed summation order per element, so the compiler vectorizes it and the result of a row does
// not depend on the thread or on the other rows of the batch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/delta_rule.h"

namespace fp4lm::kernels::cpu::FP4LM_GDN_ISA {

constexpr int64_t kChunk = kDeltaRuleChunk;

namespace {

// One row of the recurrent form for one value head (S [dk, dv]); delta: dv floats of scratch.
inline void recurrent_row(const float* q, const float* k, const float* v, float g, float b, float* S, float* o,
                          int64_t dk, int64_t dv, float* delta) {
  const float e = std::exp(g);
  std::fill(delta, delta + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    const float* Si = S + i * dv;
    const float ki = k[i];
    for (int64_t c = 0; c < dv; ++c) delta[c] += Si[c] * ki;
  }
  for (int64_t c = 0; c < dv; ++c) delta[c] = (v[c] - e * delta[c]) * b;
  std::fill(o, o + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t c = 0; c < dv; ++c) {
      Si[c] = e * Si[c] + ki * delta[c];
      o[c] += Si[c] * qi;
    }
  }
}

// FP4LM_GDN_LANES floats as one value (GCC/Clang vector extension: one register of the build's
// widest vectors: 8 for AVX2, 4 for the SSE2 baseline). Moved with memcpy (unaligned), never
// passed by value.
constexpr int kLanes = FP4LM_GDN_LANES;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
constexpr int kNr = 16, kVecs = kNr / kLanes;  // tile columns, vectors per tile row
constexpr int kMr = kLanes == 8 ? 4 : 2;        // tile rows: accumulators fit the registers

// C[M][N] += A[M][K]·B[K][N] (row-major, leading dimensions in floats): register tiles of
// MR rows × 16 columns. Each element's sum runs over k in order from its initial value, however
// the tiles fall, so the result is the same for any M and any split.
template <int MR>
inline void gemm_tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K) {
  Vec acc[MR][kVecs];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kVecs; ++j) std::memcpy(&acc[r][j], C + r * ldc + j * kLanes, sizeof(Vec));
  for (int64_t k = 0; k < K; ++k) {
    Vec b[kVecs];
    for (int j = 0; j < kVecs; ++j) std::memcpy(&b[j], B + k * ldb + j * kLanes, sizeof(Vec));
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
      for (int j = 0; j < kVecs; ++j) acc[r][j] += a * b[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kVecs; ++j) std::memcpy(C + r * ldc + j * kLanes, &acc[r][j], sizeof(Vec));
}

void gemm_acc(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t M, int64_t N,
              int64_t K) {
  const int64_t n16 = N / kNr * kNr;
  int64_t m = 0;
  for (; m + kMr <= M; m += kMr)
    for (int64_t n = 0; n < n16; n += kNr) gemm_tile<kMr>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, K);
  for (; m < M; ++m)
    for (int64_t n = 0; n < n16; n += kNr) gemm_tile<1>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, K);
  for (m = 0; m < M; ++m)  // columns past the last full tile
    for (int64_t n = n16; n < N; ++n) {
      float acc = C[m * ldc + n];
      for (int64_t k = 0; k < K; ++k) acc += A[m * lda + k] * B[k * ldb + n];
      C[m * ldc + n] = acc;
    }
}

// Row t of a sequence for value head h.
struct Row {
  const DeltaRuleRows& r;
  const float* q(int64_t t) const { return r.q + t * r.qk_stride; }
  const float* k(int64_t t) const { return r.k + t * r.qk_stride; }
  const float* v(int64_t t, int64_t h) const { return r.v + t * r.v_stride + h * r.dv; }
  float g(int64_t t, int64_t h) const { return r.g[t * r.gb_stride + h]; }
  float beta(int64_t t, int64_t h) const { return r.beta[t * r.gb_stride + h]; }
  float* o(int64_t t, int64_t h) const { return r.o + t * r.o_stride + h * r.dv; }
};

// Scratch of one thread's block, reused across calls.
struct Scratch {
  std::vector<float> kt;           // this block's k transposed: [dk][C]
  std::vector<float> gkk, gqk;     // Gram matrices [C][C]: k_t·k_s, q_t·k_s
  std::vector<float> am, pm;       // −β_t·e^{γ_t−γ_s}·k_t·k_s (s < t), e^{γ_t−γ_s}·q_t·k_s (s ≤ t)
  std::vector<float> last;         // e^{γ_last−γ_s} [C]
  std::vector<float> ks, qs, u;    // K·S, Q·S and the block's deltas u, [C][dv]
  std::vector<float> kw;           // e^{γ_last − γ_s}·k_s, [C][dk]
  std::vector<float> eg, delta;    // e^{γ_t} [C]; dv floats for the recurrent row
  std::vector<double> gam;         // cumulative log decay [C]
  void size(int64_t dk, int64_t dv) {
    const size_t c = static_cast<size_t>(kChunk);
    kt.resize(dk * c), gkk.resize(c * c), gqk.resize(c * c), am.resize(c * c), pm.resize(c * c), last.resize(c);
    ks.resize(c * dv), qs.resize(c * dv), u.resize(c * dv), kw.resize(c * dk);
    eg.resize(c), delta.resize(dv), gam.resize(c);
  }
};

Scratch& scratch(int64_t dk, int64_t dv) {
  thread_local Scratch s;
  s.size(dk, dv);
  return s;
}

// e^{g} for g below this is 0 in float32 anyway; clamping keeps the cumulative sums finite
// (an infinite g would make a difference of two of them NaN).
constexpr double kMinLogDecay = -1e4;

// Rows [t0, t0 + C) of r, C ≥ 2: one block of the chunked form, every value head. Every product
// is gemm_acc; the rows of q, k and v are read where the mixer left them (strided).
void chunk_block(const Row& in, int64_t t0, int64_t C, float* S, Scratch& w) {
  const int64_t dk = in.r.dk, dv = in.r.dv, ld = in.r.qk_stride;
  const float *K = in.k(t0), *Q = in.q(t0);
  for (int64_t s = 0; s < C; ++s)  // Kᵀ [dk][C]
    for (int64_t i = 0; i < dk; ++i) w.kt[i * C + s] = K[s * ld + i];
  // Gram matrices of this key head, shared by its value heads (only s ≤ t is used).
  std::fill(w.gkk.begin(), w.gkk.begin() + C * C, 0.0f);
  std::fill(w.gqk.begin(), w.gqk.begin() + C * C, 0.0f);
  gemm_acc(K, ld, w.kt.data(), C, w.gkk.data(), C, C, C, dk);
  gemm_acc(Q, ld, w.kt.data(), C, w.gqk.data(), C, C, C, dk);
  for (int64_t h = 0; h < in.r.nv; ++h) {
    float* Sh = S + h * dk * dv;
    double acc = 0;
    for (int64_t t = 0; t < C; ++t) {
      acc += std::max(static_cast<double>(in.g(t0 + t, h)), kMinLogDecay);
      w.gam[t] = acc;
      w.eg[t] = static_cast<float>(std::exp(acc));
    }
    // A (negated, strictly lower) for the substitution and P (lower) for the outputs.
    for (int64_t t = 0; t < C; ++t) {
      const float bt = in.beta(t0 + t, h);
      float *a = w.am.data() + t * C, *p = w.pm.data() + t * C;
      for (int64_t s = 0; s <= t; ++s) {
        const float d = static_cast<float>(std::exp(w.gam[t] - w.gam[s]));
        a[s] = -(bt * d * w.gkk[t * C + s]);
        p[s] = d * w.gqk[t * C + s];
        if (t == C - 1) w.last[s] = d;
      }
      std::fill(p + t + 1, p + C, 0.0f);
    }
    // K·S and Q·S.
    std::fill(w.ks.begin(), w.ks.begin() + C * dv, 0.0f);
    std::fill(w.qs.begin(), w.qs.begin() + C * dv, 0.0f);
    gemm_acc(K, ld, Sh, dv, w.ks.data(), dv, C, dv, dk);
    gemm_acc(Q, ld, Sh, dv, w.qs.data(), dv, C, dv, dk);
    // The deltas by forward substitution: u_t = β_t(v_t − e^{γ_t}·(KS)_t) − Σ_{s<t} A_ts·u_s.
    for (int64_t t = 0; t < C; ++t) {
      const float bt = in.beta(t0 + t, h), et = w.eg[t];
      const float* vt = in.v(t0 + t, h);
      const float* kr = w.ks.data() + t * dv;
      float* ut = w.u.data() + t * dv;
      for (int64_t c = 0; c < dv; ++c) ut[c] = bt * (vt[c] - et * kr[c]);
      gemm_acc(w.am.data() + t * C, C, w.u.data(), dv, ut, dv, 1, dv, t);
    }
    // Outputs: o_t = e^{γ_t}·(QS)_t + Σ_{s≤t} e^{γ_t−γ_s}(q_t·k_s)·u_s.
    for (int64_t t = 0; t < C; ++t) {
      float* ot = in.o(t0 + t, h);
      const float* qr = w.qs.data() + t * dv;
      const float et = w.eg[t];
      for (int64_t c = 0; c < dv; ++c) ot[c] = et * qr[c];
    }
    gemm_acc(w.pm.data(), C, w.u.data(), dv, in.o(t0, h), in.r.o_stride, C, dv, C);
    // State: S ← e^{γ_last}·S + Σ_s (e^{γ_last−γ_s}·k_s) ⊗ u_s.
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t s = 0; s < C; ++s) w.kw[i * C + s] = w.last[s] * w.kt[i * C + s];
    const float eC = w.eg[C - 1];
    for (int64_t i = 0; i < dk * dv; ++i) Sh[i] *= eC;
    gemm_acc(w.kw.data(), C, w.u.data(), dv, Sh, dv, dk, dv, C);
  }
}

}  // namespace

void recurrent(const DeltaRuleRows& r, float* S) {
  const Row in{r};
  std::vector<float> delta(static_cast<size_t>(r.dv));
  for (int64_t h = 0; h < r.nv; ++h)
    for (int64_t t = 0; t < r.n; ++t)
      recurrent_row(in.q(t), in.k(t), in.v(t, h), in.g(t, h), in.beta(t, h), S + h * r.dk * r.dv, in.o(t, h), r.dk,
                    r.dv, delta.data());
}

void chunked(const DeltaRuleRows& r, float* S) {
  const Row in{r};
  Scratch& w = scratch(r.dk, r.dv);
  for (int64_t t0 = 0; t0 < r.n;) {
    const int64_t C = std::min(r.n - t0, kChunk - (r.pos0 + t0) % kChunk);
    if (C == 1) {  // a one-row block is one recurrent step
      for (int64_t h = 0; h < r.nv; ++h)
        recurrent_row(in.q(t0), in.k(t0), in.v(t0, h), in.g(t0, h), in.beta(t0, h), S + h * r.dk * r.dv,
                      in.o(t0, h), r.dk, r.dv, w.delta.data());
    } else {
      chunk_block(in, t0, C, S, w);
    }
    t0 += C;
  }
}

}  // namespace fp4lm::kernels::cpu::FP4LM_GDN_ISA
