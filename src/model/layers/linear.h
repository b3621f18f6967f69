#pragma once
// An engine Linear layer: its scheme's method has validated and gathered the parameters, the
// oracle picked the backend, and forward() runs it. Activations cross the API as float32 and
// are rounded to the layer's activation dtype at its boundary, as a 16-bit engine stores them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "model/layer_plan.h"
#include "model/layer_scheme.h"
#include "model/layers/low_rank_branch.h"

namespace fp4lm::model {

class Linear {
 public:
  Linear(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::LinearKernel> kernel);
  // y[m, out] = x[m, in] · Wᵀ (+ bias).
  void forward(const float* x, int64_t m, float* y, ThreadPool& pool = ThreadPool::global()) const;

  const LayerSpec& spec() const { return spec_; }
  const LayerScheme& scheme() const { return scheme_; }
  const std::string& backend() const { return backend_; }
  int64_t in_features() const { return spec_.in_features; }
  int64_t out_features() const { return spec_.out_features; }
  size_t weight_bytes() const { return kernel_->weight_bytes(); }
  // AWQ's pre_quant_scale [in] (kernels::LinearWeights::pre_quant_scale): forward() multiplies the
  // input by it, as ModelOpt's input quantizer does before quantizing — in the activation dtype:
  // x rounded to it, times the scale, rounded again (exact in float32).
  void set_pre_quant_scale(std::vector<float> s);
  const std::vector<float>& pre_quant_scale() const { return pre_quant_scale_; }
  // W4A8_NVFP4_FP8 on a W4A16 backend (which quantizes no activation): forward() quantizes the
  // input to E4M3 with this static scale and dequantizes it, x -> e4m3(x / s) · s (saturating at
  // ±448, nearest even; the reference backend's W8A8 rule), after any pre_quant_scale, in the
  // activation dtype; the kernel then multiplies exactly those values. 0: off.
  void set_fp8_input_scale(float s);
  float fp8_input_scale() const { return fp8_input_scale_; }
  // W4A8_MXFP4_FP8 without input_scale on a W4A16 backend: the same pass with s = amax / 448 of
  // the whole input of the call (ModelOpt's uncalibrated per-tensor quantizer).
  void set_fp8_per_tensor_dynamic(bool on) { fp8_per_tensor_dynamic_ = on; }
  bool fp8_per_tensor_dynamic() const { return fp8_per_tensor_dynamic_; }
  // FP8_PER_CHANNEL_PER_TOKEN on a W8A16 backend: forward() quantizes each token's input to E4M3
  // with its own scale s = max(amax, 1e-10) / 448 (the reference backend's per-token rule),
  // after any pre_quant_scale, in the activation dtype.
  void set_fp8_per_token(bool on) { fp8_per_token_ = on; }
  // MXFP8 on a W8A16 backend: forward() quantizes each token's input to MXFP8 (E4M3 with an E8M0
  // scale per 32 inputs, quant/mxfp8.h), after any pre_quant_scale, in the activation dtype.
  void set_mxfp8_input(bool on) { mxfp8_input_ = on; }
  bool mxfp8_input() const { return mxfp8_input_; }
  bool fp8_per_token() const { return fp8_per_token_; }
  // W8A8_SQ_PER_CHANNEL on an int8 W8A16 backend: the input (after pre_quant_scale) is quantized to
  // int8 with this static scale and dequantized before the kernel (quant::int8_qdq); 0: off.
  void set_int8_input_scale(float s);
  float int8_input_scale() const { return int8_input_scale_; }

  // NVFP4_SVD: SVDQuant's low-rank branch, on the input after pre_quant_scale and before any
  // activation quantization, added to the kernel's output (model/layers/low_rank_branch.h).
  void set_low_rank_branch(LowRankBranch b);
  const LowRankBranch& low_rank_branch() const { return low_rank_; }

  // Calibration hook: sees every input x[m, in] (float32, before dtype rounding).
  using InputObserver = std::function<void(const float* x, int64_t m)>;
  void set_input_observer(InputObserver f) { observer_ = std::move(f); }

 private:
  LayerSpec spec_;
  LayerScheme scheme_;
  std::string backend_;
  std::unique_ptr<kernels::LinearKernel> kernel_;
  InputObserver observer_;
  std::vector<float> pre_quant_scale_;
  float fp8_input_scale_ = 0.0f;
  bool fp8_per_token_ = false;
  bool fp8_per_tensor_dynamic_ = false;
  bool mxfp8_input_ = false;
  float int8_input_scale_ = 0.0f;
  LowRankBranch low_rank_;
};

// The experts of one sparse MoE block (routing is the architecture's job).
class FusedMoe {
 public:
  FusedMoe(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::MoeKernel> kernel);
  // y[i] = Σ_j topk_weights[i, j] · expert_{topk_ids[i, j]}(x[i]); x, y [m, hidden].
  void forward(const float* x, int64_t m, const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
               float* y, ThreadPool& pool = ThreadPool::global()) const;

  const LayerSpec& spec() const { return spec_; }
  const LayerScheme& scheme() const { return scheme_; }
  const std::string& backend() const { return backend_; }
  size_t weight_bytes() const { return kernel_->weight_bytes(); }

  // Calibration hook: sees every input x[m, hidden] with its routing.
  using InputObserver = std::function<void(const float* x, int64_t m, const int32_t* topk_ids, int64_t top_k)>;
  void set_input_observer(InputObserver f) { observer_ = std::move(f); }

 private:
  LayerSpec spec_;
  LayerScheme scheme_;
  std::string backend_;
  std::unique_ptr<kernels::MoeKernel> kernel_;
  InputObserver observer_;
};

}  // namespace fp4lm::model
