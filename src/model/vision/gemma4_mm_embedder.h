#pragma once
// Gemma 4's multimodal embedder for images (transformers 5.24's Gemma4MultimodalEmbedder,
// `model.embed_vision.*`): each soft token RMS-normalized without a weight (the vision config's
// rms_norm_eps), then embedding_projection (no bias) to the language model's hidden size. The rows
// replace the image placeholders' embeddings unscaled (only text embeddings are × sqrt(hidden)).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

class Gemma4MmEmbedder {
 public:
  // `prefix` e.g. "model.embed_vision."; Error naming a missing or misshaped tensor.
  static Gemma4MmEmbedder load(ModelLoader& l, const std::string& prefix, int64_t vision_hidden, int64_t text_hidden,
                               double eps);
  // rows x vision_hidden -> rows x text_hidden.
  std::vector<float> forward(const float* x, int64_t rows) const;
  int64_t text_hidden() const { return text_hidden_; }

 private:
  std::unique_ptr<Linear> proj_;
  int64_t vision_hidden_ = 0, text_hidden_ = 0;
  double eps_ = 1e-6;
};

}  // namespace fp4lm::model
