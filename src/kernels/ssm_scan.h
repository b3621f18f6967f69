#pragma once
// The selective state-space scan of a Mamba-2 layer (model/layers/mamba2_mixer.h) over one sequence's
// rows, for one head. State S [P, N] float32 (P = head_dim, N = ssm_state_size); per row t, with
// the head's input x_t [P], its group's B_t, C_t [N], step dt_t > 0 (softplus'd, clamped) and the
// head's scalars A < 0 and D:
//   S ← e^{dt_t·A}·S + (dt_t·x_t) ⊗ B_t;   y_t = S·C_t + D·x_t
// (the recurrence of transformers' mamba2 torch_forward / mamba_ssm's selective_state_update).
// Two forms of the same map:
// - recurrent (`scan`): exactly that, row by row (decode, and prefill when the recurrent form is
//   chosen). It reads and writes the state once per row, which stays in the L1/L2 cache across a
//   span's rows (P·N·4 bytes: 40 KiB at Nemotron-Nano-9B-v2's 80 × 128), so a row costs ~3·P·N
//   multiply-adds whatever the span length; a sequence's results depend only on its own rows.
// - chunked (`chunked`, Mamba-2's SSD form, as transformers' torch_forward and the mamba_ssm
//   kernels compute prefill): rows in blocks of `chunk` positions aligned to absolute positions
//   (multiples of chunk; a span's first and last blocks may be shorter). In a block, with S the
//   state before it, a_t = dt_t·A, γ_t = Σ_{s≤t} a_s (cumulative log decay, in float64) and the
//   segment decay D_ts = e^{γ_t−γ_s} = Π_{s<k≤t} e^{a_k} (s ≤ t, ≤ 1: nothing overflows):
//     Y = (D ∘ C·Bᵀ)_lower·diag(dt)·X  +  diag(e^γ)·C·Sᵀ  +  D·X        (intra- and inter-chunk)
//     S ← e^{γ_last}·S + Xᵀ·diag(D_last,s·dt_s)·B                     (the state passed on)
//   so S is read and written once per block instead of per row, and the work is dense products
//   (C·Bᵀ once per group, shared by its heads; the block's quadratic form; C·Sᵀ; Xᵀ·B) through one
//   register-tiled kernel. The products sum each element over k in order, so a block's result
//   depends only on its rows and the state before it: batch invariant, and step-split invariant at
//   multiples of chunk (Mamba2Mixer declares that row alignment).
// Both forms agree with a float64 recurrence to float32 rounding (tests/kernels/ssm_scan_test.cpp).
//
// A kernel family like the delta rule (kernels/delta_rule.h): variants per instruction set
// (`avx512`, `avx2`: the scan compiled with those flags; `reference`: the same source compiled
// for the build's baseline, always available), registered in kernels/ssm_scan.cpp with what they
// need (kernels/isa.h, the one ISA decision); the first available one runs. They agree to float32
// rounding (the dot product S·C is summed in vector lanes; tests/kernels/ssm_scan_test.cpp runs
// every registered variant against a float64 recurrence).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/isa.h"

namespace fp4lm::kernels {

// One head's rows [0, n) of one sequence (strides in floats).
struct SsmScanRows {
  int64_t n = 0;
  int64_t head_dim = 0, state = 0;  // P, N
  const float* x = nullptr;         // row t: x + t·x_stride, [P]
  int64_t x_stride = 0;
  const float* b = nullptr;  // row t: b + t·bc_stride, [N]
  const float* c = nullptr;  // row t: c + t·bc_stride, [N]
  int64_t bc_stride = 0;
  const float* dt = nullptr;  // row t: dt[t·dt_stride]
  int64_t dt_stride = 0;
  float a = 0, d = 0;  // A = -exp(A_log), D
  float* y = nullptr;  // row t: y + t·y_stride, [P]
  int64_t y_stride = 0;
};

// The heads of one group (sharing B and C) over rows [0, n) of one sequence, for the chunked form.
struct SsdRows {
  int64_t n = 0;
  int64_t pos0 = 0;   // absolute position of row 0 (blocks start at multiples of chunk)
  int64_t chunk = 0;  // block length (the config's chunk_size)
  int64_t heads = 0, head_dim = 0, state = 0;  // heads sharing B and C, P, N
  const float* x = nullptr;  // head h at row t: x + t·x_stride + h·P, [P]
  int64_t x_stride = 0;
  const float* b = nullptr;  // row t: b + t·bc_stride, [N]
  const float* c = nullptr;  // row t: c + t·bc_stride, [N]
  int64_t bc_stride = 0;
  const float* dt = nullptr;  // head h at row t: dt[t·dt_stride + h]
  int64_t dt_stride = 0;
  const float* a = nullptr;  // [heads]: A = -exp(A_log)
  const float* d = nullptr;  // [heads]: D
  float* y = nullptr;        // head h at row t: y + t·y_stride + h·P, [P]
  int64_t y_stride = 0;
};

struct SsmScanKernel {
  const char* name;  // "avx512", "avx2", "reference"
  IsaNeeds isa;
  // S: the head's state [P, N], updated in place. nullptr when this build did not compile it.
  void (*scan)(const SsmScanRows& r, float* S);
  // S: the group's heads' states [heads, P, N], updated in place.
  void (*chunked)(const SsdRows& r, float* S);

  // "" when it can run on this machine, else why not (isa_unavailable_reason).
  std::string unavailable_reason() const { return isa_unavailable_reason(isa); }
};

// Every variant, in priority order (the reference last).
std::vector<const SsmScanKernel*> ssm_scan_kernels();
// The variant that runs: the first available. Decided once per process.
const SsmScanKernel& ssm_scan_kernel();

// The two forms on ssm_scan_kernel().
void ssm_scan(const SsmScanRows& r, float* S);
void ssm_scan_chunked(const SsdRows& r, float* S);

}  // namespace fp4lm::kernels
