#pragma once
// RMSNorm as HF computes it: in fp32, y = weight * round(x / sqrt(mean(x²) + eps)), the
// normalized value rounded to the activation dtype before the weight multiplies it, and the
// product rounded again (a 16-bit engine stores both).
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp4lm::model {

class ModelLoader;

class RmsNorm {
 public:
  RmsNorm() = default;
  // round_once: y = round(weight * x / sqrt(mean(x²) + eps)) in float32, one rounding (Gemma).
  RmsNorm(std::vector<float> weight, double eps, bool round_once = false)
      : weight_(std::move(weight)), eps_(eps), round_once_(round_once) {}

  // m rows of dim() values; y may alias x.
  void forward(const float* x, int64_t m, float* y, DType act) const;

  int64_t dim() const { return static_cast<int64_t>(weight_.size()); }
  const std::vector<float>& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  std::vector<float> weight_;
  double eps_ = 1e-6;
  bool round_once_ = false;
};

// The RMSNorm weight `name` [dim] with the model's eps. Zero-centered models (Qwen3.5:
// x/rms·(1 + w)) store w - 1: the loaded weight is 1 + w. config.norm_rounds_once: one rounding.
RmsNorm load_rms_norm(const ModelLoader& loader, const std::string& name, int64_t dim);

}  // namespace fp4lm::model
