// The two forms of the gated delta rule (model/gated_delta_rule.h), written once and compiled
// once per instruction set: gated_delta_rule.cpp (the build's baseline) and
// gated_delta_rule_avx2.cpp (AVX2 + FMA, chosen at run time). Include only from those two, with
// FP4LM_GDN_ISA naming the namespace. Every inner loop runs over a contiguous dimension with a
// fixed summation order per element, so the compiler vectorizes it and the result of a row does
// not depend on the thread or on the other rows of the batch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/gated_delta_rule.h"

namespace fp4lm::model::gdn::FP4LM_GDN_ISA {

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
  std::vector<float> kt, qt;       // this block's k and q transposed: [dk][C]
  std::vector<float> gkk, gqk;     // Gram matrices [C][C]: k_t·k_s, q_t·k_s
  std::vector<float> dec;          // e^{γ_t − γ_s} [C][C] (s ≤ t)
  std::vector<float> ks, qs, u;    // K·S, Q·S and the block's deltas u, [C][dv]
  std::vector<float> kw;           // e^{γ_last − γ_s}·k_s, [C][dk]
  std::vector<float> eg, delta;    // e^{γ_t} [C]; dv floats for the recurrent row
  std::vector<double> gam;         // cumulative log decay [C]
  void size(int64_t dk, int64_t dv) {
    const size_t c = static_cast<size_t>(kChunk);
    kt.resize(dk * c), qt.resize(dk * c), gkk.resize(c * c), gqk.resize(c * c), dec.resize(c * c);
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

// Rows [t0, t0 + C) of r, C ≥ 2: one block of the chunked form, every value head.
void chunk_block(const Row& in, int64_t t0, int64_t C, float* S, Scratch& w) {
  const int64_t dk = in.r.dk, dv = in.r.dv;
  // K and Q of the block transposed, so each Gram row is a sum of contiguous rows.
  for (int64_t s = 0; s < C; ++s) {
    const float *ks = in.k(t0 + s), *qs = in.q(t0 + s);
    for (int64_t i = 0; i < dk; ++i) {
      w.kt[i * C + s] = ks[i];
      w.qt[i * C + s] = qs[i];
    }
  }
  // Gram matrices of this key head, shared by its value heads: row t = Σ_i x_t[i]·Kᵀ[i].
  for (int64_t t = 0; t < C; ++t) {
    float *gk = w.gkk.data() + t * C, *gq = w.gqk.data() + t * C;
    std::fill(gk, gk + C, 0.0f);
    std::fill(gq, gq + C, 0.0f);
    const float *kt = in.k(t0 + t), *qt = in.q(t0 + t);
    for (int64_t i = 0; i < dk; ++i) {
      const float* col = w.kt.data() + i * C;
      const float a = kt[i], b = qt[i];
      for (int64_t s = 0; s < C; ++s) {
        gk[s] += a * col[s];
        gq[s] += b * col[s];
      }
    }
  }
  for (int64_t h = 0; h < in.r.nv; ++h) {
    float* Sh = S + h * dk * dv;
    double acc = 0;
    for (int64_t t = 0; t < C; ++t) {
      acc += std::max(static_cast<double>(in.g(t0 + t, h)), kMinLogDecay);
      w.gam[t] = acc;
      w.eg[t] = static_cast<float>(std::exp(acc));
    }
    for (int64_t t = 0; t < C; ++t)
      for (int64_t s = 0; s <= t; ++s) w.dec[t * C + s] = static_cast<float>(std::exp(w.gam[t] - w.gam[s]));
    // K·S and Q·S, four rows at a time (each state row read once per four rows).
    std::fill(w.ks.begin(), w.ks.begin() + C * dv, 0.0f);
    std::fill(w.qs.begin(), w.qs.begin() + C * dv, 0.0f);
    for (int64_t tb = 0; tb < C; tb += 4) {
      const int64_t te = std::min(C, tb + 4);
      for (int64_t i = 0; i < dk; ++i) {
        const float* Si = Sh + i * dv;
        for (int64_t t = tb; t < te; ++t) {
          const float a = w.kt[i * C + t], b = w.qt[i * C + t];
          float *kr = w.ks.data() + t * dv, *qr = w.qs.data() + t * dv;
          for (int64_t c = 0; c < dv; ++c) {
            kr[c] += a * Si[c];
            qr[c] += b * Si[c];
          }
        }
      }
    }
    // The deltas by forward substitution: u_t = β_t(v_t − e^{γ_t}·(KS)_t) − Σ_{s<t} A_ts·u_s.
    for (int64_t t = 0; t < C; ++t) {
      const float bt = in.beta(t0 + t, h), et = w.eg[t];
      const float* vt = in.v(t0 + t, h);
      const float* kr = w.ks.data() + t * dv;
      float* ut = w.u.data() + t * dv;
      for (int64_t c = 0; c < dv; ++c) ut[c] = bt * (vt[c] - et * kr[c]);
      for (int64_t s = 0; s < t; ++s) {
        const float a = bt * w.dec[t * C + s] * w.gkk[t * C + s];
        const float* us = w.u.data() + s * dv;
        for (int64_t c = 0; c < dv; ++c) ut[c] -= a * us[c];
      }
    }
    // Outputs: o_t = e^{γ_t}·(QS)_t + Σ_{s≤t} e^{γ_t−γ_s}(q_t·k_s)·u_s.
    for (int64_t t = 0; t < C; ++t) {
      float* ot = in.o(t0 + t, h);
      const float* qr = w.qs.data() + t * dv;
      const float et = w.eg[t];
      for (int64_t c = 0; c < dv; ++c) ot[c] = et * qr[c];
      for (int64_t s = 0; s <= t; ++s) {
        const float p = w.dec[t * C + s] * w.gqk[t * C + s];
        const float* us = w.u.data() + s * dv;
        for (int64_t c = 0; c < dv; ++c) ot[c] += p * us[c];
      }
    }
    // State: S ← e^{γ_last}·S + Σ_s (e^{γ_last−γ_s}·k_s) ⊗ u_s, one state row at a time.
    const float* last = w.dec.data() + (C - 1) * C;
    for (int64_t s = 0; s < C; ++s)
      for (int64_t i = 0; i < dk; ++i) w.kw[i * C + s] = last[s] * w.kt[i * C + s];
    const float eC = w.eg[C - 1];
    for (int64_t i = 0; i < dk; ++i) {
      float* Si = Sh + i * dv;
      const float* kwi = w.kw.data() + i * C;
      for (int64_t c = 0; c < dv; ++c) Si[c] *= eC;
      for (int64_t s = 0; s < C; ++s) {
        const float a = kwi[s];
        const float* us = w.u.data() + s * dv;
        for (int64_t c = 0; c < dv; ++c) Si[c] += a * us[c];
      }
    }
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

}  // namespace fp4lm::model::gdn::FP4LM_GDN_ISA
