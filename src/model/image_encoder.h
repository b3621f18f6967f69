#pragma once
// The seam between a vision tower and the language model. A tower (one file per architecture,
// read from the same checkpoint directory as the language model) turns the pixels its processor
// produced (src/vision) into the rows that replace the image's placeholder tokens in the prompt's
// embeddings; the language-model side (placeholder expansion, 3-D positions, the prefix cache
// keyed by the image's content hash) sees only this interface.
#include <cstdint>
#include <vector>

#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::model {

struct ImageEmbeddings {
  int64_t rows = 0;           // the image's placeholder tokens (Qwen: t * h * w / merge_size^2)
  int64_t cols = 0;           // the language model's hidden size
  std::vector<float> values;  // rows x cols, row-major, in the order of the placeholder tokens
  // DeepStack (Qwen3-VL): per level l, rows x cols more values, which the language model adds to the
  // placeholder tokens' hidden states after decoder layer l. Empty for a tower without it.
  std::vector<std::vector<float>> deepstack;
};

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  // The embeddings of one image (or one video's frames) as the processor laid out its patches.
  // Errors (wrong patch width, a grid that disagrees with the rows) are fp4lm::Error naming both.
  virtual ImageEmbeddings encode(const vision::QwenVlPixels& pixels) const = 0;
  virtual int64_t hidden_size() const = 0;
  // How many DeepStack levels every encode() returns (ImageEmbeddings::deepstack); 0: none.
  virtual int64_t deepstack_levels() const { return 0; }
};

}  // namespace fp4lm::model
