#include "kernels/weights.h"

#include "core/error.h"

namespace fp4lm::kernels {

WeightKey view_key(const ShardView& v) {
  return std::visit([](const auto& view) { return std::decay_t<decltype(view)>::key; }, v);
}

float WeightShard::input_scale() const {
  if (const auto* v = std::get_if<Nvfp4View>(&view)) return v->input_scale;
  if (const auto* v = std::get_if<Fp8View>(&view)) return v->input_scale;
  if (const auto* v = std::get_if<Int8View>(&view)) return v->input_scale;
  if (const auto* v = std::get_if<Mxfp4View>(&view)) return v->input_scale;
  return 0.0f;
}

void WeightShard::wrong_format(WeightKey wanted) const {
  fail("{}: shard holds {} weights, expected {}", name, weight_key_name(view_key(view)), weight_key_name(wanted));
}

}  // namespace fp4lm::kernels
