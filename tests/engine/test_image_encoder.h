#pragma once
// A stand-in vision tower for the language-model side's tests until the real one lands: each
// image token's row is a fixed random projection (seeded) of its merged 2x2 patch group's pixels
// (the processor lays the group's merge_size^2 patches out consecutively), so rows depend on
// every pixel and nothing else.
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/image_encoder.h"

namespace fp4lm::test {

class ProjectionImageEncoder : public model::ImageEncoder {
 public:
  ProjectionImageEncoder(int64_t hidden, int64_t patch_cols, int64_t merge = 2, uint64_t seed = 3)
      : hidden_(hidden), cols_(patch_cols), group_(merge * merge), w_(static_cast<size_t>(hidden * patch_cols)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f / static_cast<float>(patch_cols));
    for (float& v : w_) v = nd(rng);
  }
  model::ImageFamily family() const override { return model::ImageFamily::qwen_vl; }
  using model::ImageEncoder::encode;
  model::ImageEmbeddings encode(const vision::QwenVlPixels& px) const override {
    if (px.cols != cols_) fail("test encoder: patches of {} values, expected {}", px.cols, cols_);
    if (px.rows % group_ != 0) fail("test encoder: {} patches is not whole {}-patch groups", px.rows, group_);
    ++calls;
    model::ImageEmbeddings e;
    e.rows = px.rows / group_;
    e.cols = hidden_;
    e.values.assign(static_cast<size_t>(e.rows * hidden_), 0.0f);
    for (int64_t r = 0; r < px.rows; ++r) {
      const float* p = px.pixel_values.data() + r * cols_;
      float* out = e.values.data() + (r / group_) * hidden_;
      for (int64_t o = 0; o < hidden_; ++o) {
        double s = 0;
        for (int64_t k = 0; k < cols_; ++k) s += static_cast<double>(w_[static_cast<size_t>(o * cols_ + k)]) * p[k];
        out[o] += static_cast<float>(s);
      }
    }
    return e;
  }
  int64_t hidden_size() const override { return hidden_; }
  mutable int64_t calls = 0;

 private:
  int64_t hidden_, cols_, group_;
  std::vector<float> w_;
};

}  // namespace fp4lm::test
