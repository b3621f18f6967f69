#include "model/layers/laurel.h"

#include <fmt/format.h>

#include "model/layers/activation.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void plan_laurel(int64_t hidden, int64_t rank, int64_t layer, std::vector<LayerSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.laurel.", layer);
  out.push_back(plan_linear(p + "linear_left", layer, {p + "linear_left"}, {rank}, hidden));
  out.push_back(plan_linear(p + "linear_right", layer, {p + "linear_right"}, {hidden}, rank));
}

Laurel::Laurel(ModelLoader& l, int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.laurel.", layer);
  left_ = l.load_linear(p + "linear_left");
  right_ = l.load_linear(p + "linear_right");
  norm_ = load_rms_norm(l, p + "post_laurel_norm.weight", l.config().hidden_size);
}

void Laurel::forward(const float* x, int64_t m, float* y, DType act) const {
  std::vector<float> low(static_cast<size_t>(m * left_->out_features()));
  left_->forward(x, m, low.data());
  round_to_dtype(low.data(), low.size(), act);
  right_->forward(low.data(), m, y);
  round_to_dtype(y, static_cast<size_t>(m * norm_.dim()), act);
  norm_.forward(y, m, y, act);
  const size_t size = static_cast<size_t>(m * norm_.dim());
  for (size_t i = 0; i < size; ++i) y[i] += x[i];
  round_to_dtype(y, size, act);
}

}  // namespace fp4lm::model
