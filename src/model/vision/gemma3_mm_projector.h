#pragma once
// Gemma 3's multi-modal projector (transformers 5.24's Gemma3MultiModalProjector, the
// `multi_modal_projector.*` tensors): the SigLIP tower's patch grid (image_size / patch_size per
// side) average-pooled to sqrt(mm_tokens_per_image) per side (AvgPool2d, kernel = stride), each
// pooled row through mm_soft_emb_norm (Gemma's RMSNorm x / rms(x) * (1 + w), eps = the vision
// config's layer_norm_eps, float32) and multiplied by mm_input_projection_weight
// [vision hidden, text hidden]. The rows are not scaled by sqrt(hidden_size): only the text
// embeddings are (Gemma3TextScaledWordEmbedding).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

class Gemma3MmProjector {
 public:
  // `prefix` e.g. "multi_modal_projector."; `grid` patches per side, `tokens` mm_tokens_per_image
  // (a square whose side divides grid: an Error naming both otherwise).
  static Gemma3MmProjector load(ModelLoader& l, const std::string& prefix, int64_t grid, int64_t tokens,
                                int64_t vision_hidden, int64_t text_hidden, double eps, const std::string& where);

  // x: `images` x grid^2 x vision_hidden (the tower's last_hidden_state) -> images x tokens x text_hidden.
  std::vector<float> forward(const float* x, int64_t images) const;
  int64_t tokens() const { return side_ * side_; }

 private:
  int64_t grid_ = 0, side_ = 0, kernel_ = 0, vision_hidden_ = 0, text_hidden_ = 0;
  double eps_ = 1e-6;
  std::vector<float> norm_w_;
  std::unique_ptr<Linear> proj_;  // mm_input_projection_weight transposed: [text_hidden, vision_hidden]
};

}  // namespace fp4lm::model
