#pragma once
// Gemma 3n's Laurel (learned augmented residual layer, transformers' Gemma3nTextLaurelBlock): a
// low-rank branch beside the attention, x + post_laurel_norm(linear_right(linear_left(x))) on the
// layer's normed input x (linear_left [rank, hidden], linear_right [hidden, rank]).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

class ModelLoader;
struct LayerSpec;

// Appends layer i's two Linears (model.layers.<i>.laurel.linear_{left,right}) to a plan.
void plan_laurel(int64_t hidden, int64_t rank, int64_t layer, std::vector<LayerSpec>& out);

class Laurel {
 public:
  Laurel(ModelLoader& l, int64_t layer);
  // x [m, hidden] -> y [m, hidden] (y may not alias x).
  void forward(const float* x, int64_t m, float* y, DType act) const;
  size_t own_param_bytes() const { return static_cast<size_t>(norm_.dim()) * sizeof(float); }

 private:
  std::unique_ptr<Linear> left_, right_;
  RmsNorm norm_;
};

}  // namespace fp4lm::model
