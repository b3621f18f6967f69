#include "model/layers/rms_norm.h"

#include <cmath>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void RmsNorm::forward(const float* x, int64_t m, float* y, DType act) const {
  const int64_t d = dim();
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps_));
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv;
    if (!round_once_) round_to_dtype(yr, static_cast<size_t>(d), act);
    for (int64_t i = 0; i < d; ++i) yr[i] *= weight_[i];
    round_to_dtype(yr, static_cast<size_t>(d), act);
  }
}

RmsNorm load_rms_norm(const ModelLoader& loader, const std::string& name, int64_t dim) {
  std::vector<float> w = loader.tensor_f32(name, {dim});
  if (loader.config().zero_centered_norm)
    for (float& x : w) x += 1.0f;
  return RmsNorm(std::move(w), loader.config().rms_norm_eps, loader.config().norm_rounds_once);
}

}  // namespace fp4lm::model
