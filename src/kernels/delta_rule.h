#pragma once
// The gated delta rule of a gated delta-net (model/layers/gated_delta_net.h) over one sequence's rows,
// for one key head and the value heads that read it. Per value head, state S [DK, DV] float32,
// per row t (log decay g_t ≤ 0, β_t in (0, 1), q and k L2-normalized):
//   S ← e^g·S;  u = β(v − Sᵀk);  S ← S + k ⊗ u;  o = Sᵀq
// Two forms of the same map:
// - recurrent: exactly that, row by row (decode, and one-row blocks);
// - chunked (the WY / UT form of the fla kernels): rows in blocks of kDeltaRuleChunk positions aligned to
//   absolute positions (multiples of kDeltaRuleChunk; a span's first and last blocks may be shorter). With
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
// Both forms give the same values to float32 rounding (tests/kernels/delta_rule_test.cpp).
// A block's result depends only on its rows and the state before it, and blocks are aligned to
// positions, so a sequence's outputs do not depend on what else is in the batch or on the step
// split at positions that are multiples of kDeltaRuleChunk (see CausalLM::forward).
//
// A kernel family like the oracle's backends: variants per instruction set (`avx2`: the forms
// compiled for AVX2 + FMA; `reference`: the same code compiled for the build's baseline, always
// available) registered in kernels/delta_rule.cpp with what they need (kernels/isa.h); the first
// available one runs. The variants are one source compiled twice; they agree to float32
// rounding (tests/kernels/delta_rule_test.cpp runs every registered variant).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/isa.h"

namespace fp4lm::kernels {

// Rows per block of the chunked form (as the reference kernels).
inline constexpr int64_t kDeltaRuleChunk = 64;

// One sequence's rows [0, n) for one key head and its nv value heads (strides in floats).
struct DeltaRuleRows {
  int64_t n = 0;     // rows
  int64_t pos0 = 0;  // absolute position of row 0 (block boundaries at multiples of kDeltaRuleChunk)
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

struct DeltaRuleKernel {
  const char* name;  // "avx2", "reference"
  IsaNeeds isa;
  // S: the nv value heads' states [nv, dk, dv], updated in place. nullptr when this build did
  // not compile the variant.
  void (*recurrent)(const DeltaRuleRows& r, float* S);
  void (*chunked)(const DeltaRuleRows& r, float* S);

  // "" when it can run on this machine, else why not (isa_unavailable_reason).
  std::string unavailable_reason() const { return isa_unavailable_reason(isa); }
};

// Every variant, in priority order (the reference last).
std::vector<const DeltaRuleKernel*> delta_rule_kernels();
// The variant that runs: the first available. Decided once per process.
const DeltaRuleKernel& delta_rule_kernel();

// The two forms on delta_rule_kernel().
void delta_rule_recurrent(const DeltaRuleRows& r, float* S);
void delta_rule_chunked(const DeltaRuleRows& r, float* S);

}  // namespace fp4lm::kernels
