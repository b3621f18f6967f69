#pragma once
// SVDQuant's low-rank branch (ModelOpt NVFP4_SVD; docs/FORMAT.md, "NVFP4_SVD"): beside the
// quantized GEMM, a 16-bit side GEMM on the same input x' (after pre_quant_scale, before the input
// is quantized) whose result is added to the layer's output, as ModelOpt's SVDQuantLinear.forward
// computes it: y = quantized(x') · Wᵀ + (x' · Aᵀ) · Bᵀ, A [r, k] = `svdquant_lora_a`,
// B [n, r] = `svdquant_lora_b`. Each shard of a fused layer has its own pair (ModelOpt's export
// gives fused shards one A; each B is its rows').
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layer_plan.h"
#include "model/load/param_reader.h"

namespace fp4lm::model {

struct LowRankBranch {
  struct Part {
    std::string module;
    int64_t row0 = 0, rows = 0, rank = 0;
    std::vector<float> a;  // [rank, k]
    std::vector<float> b;  // [rows, rank]
  };
  int64_t k = 0, n = 0;
  std::vector<Part> parts;
  bool empty() const { return parts.empty(); }
  // y[m, n] += (x[m, k] · Aᵀ) · Bᵀ per part: each product in float32 and rounded to `act`, as a
  // 16-bit layer computes its two F.linear calls, then y rounded to `act` after the sum.
  void add_to(const float* x, int64_t m, float* y, DType act) const;
};

// The branch of a Linear layer: each shard's `<m>.weight_quantizer._svdquant_lora_a` / `_b` (the
// transformers export) or `<m>.svdquant_lora_a` / `_b` (the diffusers export), F32 / BF16 / F16.
// Empty when no shard stores one. Errors name the tensor: a shard with A and no B, shapes other
// than [r, k] / [rows, r], ranks that differ from `rank` (the config's lora_rank), non-finite
// values, some shards of a fused layer with a branch and others without; and, when `required`
// (the module's algorithm is NVFP4_SVD), a shard without one.
LowRankBranch read_low_rank_branch(const ParamReader& p, const LayerSpec& spec, bool required,
                                   std::optional<int> rank);

}  // namespace fp4lm::model
