#pragma once
// The gated delta rule of a gated delta-net (model/gated_delta_net.h) over one sequence's rows,
// for one key head and the value heads that read it. Per value head, state S [DK, DV] float32,
// per row t (log decay g_t ≤ 0, β_t in (0, 1), q and k L2-normalized):
//   S ← e^g·S;  u = β(v − Sᵀk);  S ← S + k ⊗ u;  o = Sᵀq
// Two forms of the same map:
// - recurrent: exactly that, row by row (decode, and one-row blocks);
// - chunked (the WY / UT form of the fla kernels): rows in blocks of kChunk positions aligned to
//   absolute positions (multiples of kChunk; a span's first and last blocks may be shorter). With
//   γ_t = Σ_{s≤t} g_s inside a block (cumulative log decay) and S the state before the block:
//     u_t = β_t(v_t − e^{γ_t}·Sᵀk_t) − Σ_{s<t} β_t·e^{γ_t−γ_s}·(k_t·k_s)·u_s   (forward substitution
//           of the unit lower-triangular system (I + A)U = β(V − e^γ·KS), i.e. U = (I + A)⁻¹…)
//     o_t = e^{γ_t}·Sᵀq_t + Σ_{s≤t} e^{γ_t−γ_s}·(q_t·k_s)·u_s
//     S  ← e^{γ_last}·S + Σ_s e^{γ_last−γ_s}·k_s ⊗ u_s
//   so the state is read twice and written once per block instead of per row, and the block's
//   work is small dense products (K·S, Q·S, the Gram matrices K·Kᵀ and Q·Kᵀ shared by a key
//   head's value heads, and Kᵀ·U). Every decay factor is e^{difference of cumulative log
//   decays} with s ≤ t, so it is ≤ 1: nothing overflows however negative g is; the cumulative
//   sums are kept in double so a strongly negative g early in a block does not blur the small
//   differences after it.
// Both forms give the same values to float32 rounding (tests/model/gated_delta_rule_test.cpp).
// A block's result depends only on its rows and the state before it, and blocks are aligned to
// positions, so a sequence's outputs do not depend on what else is in the batch or on the step
// split at positions that are multiples of kChunk (see CausalLM::forward).
#include <cstdint>

namespace fp4lm::model::gdn {

// Rows per block of the chunked form (as the reference kernels).
inline constexpr int64_t kChunk = 64;

// One sequence's rows [0, n) for one key head and its nv value heads (strides in floats).
struct DeltaRuleRows {
  int64_t n = 0;     // rows
  int64_t pos0 = 0;  // absolute position of row 0 (block boundaries at multiples of kChunk)
  int64_t dk = 0, dv = 0, nv = 0;
  const float* q = nullptr;  // row t: q + t·qk_stride, [dk] (normalized, scaled)
  const float* k = nullptr;  // row t: k + t·qk_stride, [dk] (normalized)
  int64_t qk_stride = 0;
  const float* v = nullptr;  // value head h of row t: v + t·v_stride + h·dv
  int64_t v_stride = 0;
  const float* g = nullptr;     // log decay of value head h at row t: g[t·gb_stride + h]
  const float* beta = nullptr;  // β likewise
  int64_t gb_stride = 0;
  float* o = nullptr;  // output of value head h at row t: o + t·o_stride + h·dv
  int64_t o_stride = 0;
};

// S: the nv value heads' states [nv, dk, dv], updated in place.
void delta_rule_recurrent(const DeltaRuleRows& r, float* S);
void delta_rule_chunked(const DeltaRuleRows& r, float* S);

// How the gated delta-net runs spans of more than one row (decode rows always run recurrent).
// Process-wide, for benchmarks and tests that compare the two; chunked by default.
enum class PrefillForm { chunked, recurrent };
void set_prefill_form(PrefillForm f);
PrefillForm prefill_form();

// A cheap per-part timer of the gated delta-net mixers (off by default; decode_bench turns it
// on): wall seconds spent in the delta rule (state read, update and write, and the outputs) and
// in the whole mixer, summed over every GDN layer and call since the last reset.
struct MixerTimes {
  double rule_s = 0, mixer_s = 0;
};
void enable_timing(bool on);
bool timing_enabled();
void add_times(double rule_s, double mixer_s);
MixerTimes times();
void reset_times();

}  // namespace fp4lm::model::gdn
