#pragma once
// GPTQ in the NVFP4 grid (`fp4lm quantize --weight-method gptq`): error-feedback rounding of a
// weight W[n, k] against its input's second-moment matrix H = sum x x^T (k x k, from calibration).
// Columns are quantized in order; each column's rounding error, scaled by the upper Cholesky factor
// U of H^-1 (U^T U = (H + damp)^-1), is pushed onto the columns not yet quantized (Frantar et al.,
// "GPTQ", 2022). Each 16-column group's E4M3 block scale is chosen from the group's weights as they
// stand when the group is reached (the amax/6 rule or the scale search), then its 16 columns are
// rounded in the E2M1 grid. Rows are independent given U, so callers split rows across threads.
// The output is the ordinary ModelOpt layout (codes, E4M3 scales, weight_scale_2 from the group amax).
#include <cstdint>
#include <optional>
#include <vector>

#include "quant/nvfp4.h"

namespace fp4lm::quant {

struct GptqFactor {
  int64_t k = 0;
  std::vector<double> u;  // row-major k x k, upper triangle (the lower is zero)
  std::vector<float> uf;  // u in float32: the per-row updates run in float32, as GPTQ's reference does
  double damp = 0;        // the damping added to the diagonal in the end
  // Act-order: the column order (perm[i] = the column quantized i-th; u is of H permuted so),
  // empty for natural order.
  std::vector<int64_t> perm;
};

// U for H (row-major k x k, symmetric positive semi-definite, double; only the upper triangle is
// read). act_order: columns in decreasing H[c, c] (the most active input channels first). The diagonal gets
// rel_damp * mean(diag H) added (and a zero diagonal entry, an input channel calibration never
// saw, becomes that damping alone); when the factorization still fails the damping grows 10x, up
// to 5 tries, then Error. Error on k <= 0 or a non-finite H.
GptqFactor gptq_factor(const double* h, int64_t k, double rel_damp = 0.01, bool act_order = false);

struct GptqOptions {
  bool scale_search = true;  // pick each block's E4M3 scale with search_block_scale (else amax/6)
  bool act_order = false;    // gptq_quantize_weight only: the factor's column order (gptq_factor)
  // Act-order only: per input channel [k] weights for the up-front scale search (H's diagonal), or null.
  const float* importance = nullptr;
};
// Under act-order (f.perm not empty) blocks are no longer reached one after another, so every
// block's scale is chosen up front from the original weights (the "static groups" form of GPTQ).

// Quantizes rows [0, n) of w (row-major, n x k) with the factor; s2 = the group's weight_scale_2
// (group_amax / 2688, > 0). Returns codes and scales for these rows (weight_scale_2 = s2).
Nvfp4Weight gptq_quantize_rows(const float* w, int64_t n, int64_t k, const GptqFactor& f, float s2,
                               const GptqOptions& opt = {});

// The whole matrix: checks as quantize_weight (k % 16, finite), s2 from group_amax or the matrix's
// own amax; an all-zero matrix gives quantize_weight's all-zero result.
Nvfp4Weight gptq_quantize_weight(const float* w, int64_t n, int64_t k, const double* h,
                                 std::optional<float> group_amax = std::nullopt, const GptqOptions& opt = {});

}  // namespace fp4lm::quant
