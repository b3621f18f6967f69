#pragma once
// Causal attention over one KV head's cached rows, for every query head of its GQA group: the
// kernel behind model::causal_attention (decode and prefill). A kernel family like the oracle's
// backends: variants per instruction set (reference, AVX2+FMA, AVX-512) are registered, in
// priority order, in kernels/attention.cpp, each declaring what it needs (kernels/isa.h); the
// first one available on this CPU runs (FP4LM_DISABLE_ISA / FP4LM_ATTENTION_KERNEL choose
// another).
//
// Numerical definition (the `reference` variant; docs/KERNELS.md "Attention"): for a query row at
// position p and each query head of the group, over cached positions t = 0 .. p,
//   s_t = (q · k_t) × c,   c = float(1 / sqrt(head_dim))
//   w_t = exp(s_t − max_t s_t),   o = (Σ_t w_t v_t) × float(1 / Σ_t w_t)
// in float32 (two passes over the row: scores and their max, then weights and the weighted sum;
// with an attention sink σ (AttentionCall::sinks) the max includes σ and Σ_t w_t gains exp(σ − max)),
// k_t and v_t the cached values as float32 (FP8: code × k_scale / v_scale rounded once, so an FP8
// cache gives exactly what a float32 cache of its dequantized values gives). Each (row, query head) is computed by the same
// instruction sequence whatever the other rows or heads of the call, so splitting rows or heads
// over calls and threads never changes a bit. Variants differ from the reference (and from each
// other) only in summation order and exp's last bits.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/isa.h"

namespace fp4lm::kernels {

// One call: `rows` query rows of one sequence at positions pos0 .. pos0 + rows − 1, the `group`
// query heads that share one KV head.
struct AttentionCall {
  // Row i, group head j: q[i * q_stride + j * head_dim + d], d < head_dim (float32).
  const float* q = nullptr;
  int64_t q_stride = 0;
  // Same layout, with out_stride; written, never read.
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0, pos0 = 0, group = 1, head_dim = 0;
  // The KV head's rows as the cache stores them: [>= pos0 + rows, head_dim] elements of kv_dtype
  // (F32, BF16, F16 or F8_E4M3); FP8 values are code × scale.
  DType kv_dtype = DType::F32;
  const uint8_t* keys = nullptr;
  const uint8_t* values = nullptr;
  // ring_rows > 0: keys / values are a sliding window's ring of ring_rows rows, and position t's
  // row is (ring_first + t) mod ring_rows (pos0 + rows <= ring_rows) — read in place, in position
  // order, so a window that wraps gives the bits a contiguous copy of it gives. 0: row t.
  int64_t ring_first = 0, ring_rows = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  // Attention sinks (gpt-oss): per group head j a learned logit sinks[j] that joins the softmax's
  // denominator and nothing else: max over the scores and the sink, Σ_t w_t + exp(sink − max). nullptr: none.
  const float* sinks = nullptr;
};

struct AttentionKernel {
  const char* name;  // "reference", "avx2", "avx512"
  IsaNeeds isa;      // the instruction set it was built for, the CPU features it uses
  // `scratch`: attention_scratch_floats(call) floats (run_attention provides them). nullptr when
  // this build did not compile the variant.
  void (*run)(const AttentionCall& call, float* scratch);
  // Every variant takes these KV cache dtypes (F8_E4M3 with a per-tensor scale).
  static constexpr DType kv_dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3};

  // "" when it can run on this machine, else why not (isa_unavailable_reason).
  std::string unavailable_reason() const { return isa_unavailable_reason(isa); }
};

// The vector variants process up to this many query heads of a group at a time.
inline constexpr int64_t kAttentionHeadBlock = 8;
// Scratch a call needs: one score row per head of a block, padded to 16 positions.
int64_t attention_scratch_floats(const AttentionCall& call);

// Every variant, in priority order (the reference last).
std::vector<const AttentionKernel*> attention_kernels();
// nullptr when no variant has that name.
const AttentionKernel* find_attention_kernel(const std::string& name);
// The variant that runs: FP4LM_ATTENTION_KERNEL=NAME when set (an Error naming the variants when
// it is unknown or unavailable), else the first available. Decided once per process.
const AttentionKernel& attention_kernel();

// Validates a call's shape and dtype (an Error naming the field), then runs `k`, which must be
// available on this CPU (attention_kernel(), or unavailable_reason() checked by the caller).
void run_attention(const AttentionKernel& k, const AttentionCall& call);

// One query row of one head over n gathered float32 key / value rows [n, head_dim] that are all
// visible to it (sparse attention's selected positions, gathered from the cache): out[head_dim].
void attend_gathered(const AttentionKernel& k, const float* q, const float* keys, const float* values, int64_t n,
                     int64_t head_dim, float* out);

}  // namespace fp4lm::kernels
