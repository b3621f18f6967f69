#pragma once
// Activation-aware weight scaling for NVFP4 (`fp4lm quantize --awq`), ModelOpt's `awq_lite` rule
// (modelopt/torch/quantization/model_calib.py): per input channel c a scale
//   s_c = clamp(a_c^alpha / (w_c^(1-alpha) + tiny), 1e-4, 1e4),  s /= sqrt(max(s) * min(s)),
// a_c = mean |x_c| over the calibration tokens, w_c = the mean over rows of |W[r, c]| divided by
// its 16-element block's amax; alpha in {0, 0.1, ..., 1} is the one whose quantized layer
// x·diag(1/s) · Q(W·diag(s))^T is closest (mean squared output error) to the unquantized x·W^T on
// the calibration inputs. The export stores pre_quant_scale = 1/s (applied to the input) and the
// codes of W·diag(s). The output error is computed from H = sum x x^T, which gives exactly the
// squared error over the calibration tokens without keeping them: sum_r d_r H d_r^T with
// d_r = Q(W s)_r / s - W_r.
#include <cstdint>
#include <vector>

namespace fp4lm::quant {

inline constexpr int kAwqAlphaSteps = 10;  // alpha = i / 10, i = 0..10 (ModelOpt's alpha_step 0.1)

// w_c: mean over the n rows of |W[r, c]| / (amax of W[r, c]'s 16-block + FLT_MIN), k % 16 == 0.
std::vector<float> awq_weight_magnitude(const float* w, int64_t n, int64_t k);

// The rule above for one alpha (act_mean and weight_mag [k]).
std::vector<float> awq_scale(const float* act_mean, const float* weight_mag, int64_t k, float alpha);

// sum_r d_r H d_r^T, d = Q(W·diag(s))·diag(1/s) - W with Q = ModelOpt's NVFP4 rounding
// (quantize_weight: amax/6 block scales, weight_scale_2 from the matrix's amax) — s null for
// plain quantization. h: full symmetric k x k, float32.
double awq_output_error(const float* w, int64_t n, int64_t k, const float* s, const float* h);

struct AwqSearch {
  float alpha = 0;
  std::vector<float> scale;      // s [k] for the best alpha
  std::vector<double> error;     // per alpha i (alpha = i / 10): awq_output_error
  double error_unscaled = 0;     // the same error without AWQ (s = 1)
};

// The alpha search over W [n, k] (a fused group's rows concatenated: they share the input and the
// weight_scale_2) with its input's mean |x| per channel and H (double, row-major k x k, only the
// upper triangle read). The first alpha with the least error wins, as ModelOpt's min() picks.
// Error on k % 16 != 0 or a non-finite statistic.
AwqSearch awq_search(const float* w, int64_t n, int64_t k, const float* act_mean, const double* h_upper);

}  // namespace fp4lm::quant
