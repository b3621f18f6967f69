#include "model/layers/decoder_layer.h"

#include <fmt/format.h>

namespace fp4lm::model {

PreNormNames pre_norm_names(int64_t layer) {
  return {fmt::format("model.layers.{}.input_layernorm.weight", layer),
          fmt::format("model.layers.{}.post_attention_layernorm.weight", layer)};
}

void PreNormLayer::forward(const LayerStep& s) const {
  add_residual(s, input_norm_, [&](const float* x, float* y) { mixer_->forward(x, s.spans, y); });
  add_residual(s, post_norm_, [&](const float* x, float* y) { ffn_->forward(x, s.m, y); });
}

size_t PreNormLayer::own_param_bytes() const {
  return static_cast<size_t>(input_norm_.dim() + post_norm_.dim()) * sizeof(float) + mixer_->own_param_bytes();
}

}  // namespace fp4lm::model
