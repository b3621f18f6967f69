#pragma once
// The seam between a vision tower and the language model. A tower (one file per architecture,
// read from the same checkpoint directory as the language model) turns the pixels its processor
// produced (src/vision) into the rows that replace the image's placeholder tokens in the prompt's
// embeddings; the language-model side (placeholder expansion, positions, the prefix cache keyed
// by the image's content hash) sees only this interface. One interface for every family: a tower
// takes its own processor's pixels (`family()` says which processor that is); the other overload
// is an Error naming both.
#include <cstdint>
#include <vector>

#include "vision/gemma3_preprocess.h"
#include "vision/gemma4_preprocess.h"
#include "vision/nemotron_preprocess.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::model {

struct ImageEmbeddings {
  int64_t rows = 0;           // the image's placeholder tokens (Qwen: t * h * w / merge_size^2;
                              // Gemma 3: mm_tokens_per_image for the image and for each crop;
                              // Gemma 4: the image's num_soft_tokens)
  int64_t cols = 0;           // the language model's hidden size
  std::vector<float> values;  // rows x cols, row-major, in the order of the placeholder tokens
  // DeepStack (Qwen3-VL): per level l, rows x cols more values, which the language model adds to the
  // placeholder tokens' hidden states after decoder layer l. Empty for a tower without it.
  std::vector<std::vector<float>> deepstack;
};

// Which processor makes a tower's pixels (and how the prompt writes an image: engine/image_input.h).
enum class ImageFamily {
  qwen_vl,  // Qwen2-VL-family processor (vision/qwen_vl_preprocess.h), M-RoPE positions
  gemma3,   // Gemma3ImageProcessor (vision/gemma3_preprocess.h), bidirectional image blocks
  gemma4,   // Gemma4ImageProcessor (vision/gemma4_preprocess.h), bidirectional blocks on sliding layers
  nemotron, // NemotronH_Omni_Reasoning_V3ImageProcessor (vision/nemotron_preprocess.h), causal, 1-D
};
const char* image_family_name(ImageFamily f);

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  virtual ImageFamily family() const = 0;
  // The embeddings of one image (or one video's frames) as the processor laid out its patches.
  // Errors (wrong patch width, a grid that disagrees with the rows, another family's pixels) are
  // fp4lm::Error naming both.
  virtual ImageEmbeddings encode(const vision::QwenVlPixels& pixels) const;
  // One image and its pan-and-scan crops: rows for the image first, then each crop's.
  virtual ImageEmbeddings encode(const vision::Gemma3Pixels& pixels) const;
  // One image's soft tokens.
  virtual ImageEmbeddings encode(const vision::Gemma4Pixels& pixels) const;
  // One image's tokens after the pixel shuffle (Nemotron VL / Omni).
  virtual ImageEmbeddings encode(const vision::NemotronPixels& pixels) const;
  virtual int64_t hidden_size() const = 0;
  // How many DeepStack levels every encode() returns (ImageEmbeddings::deepstack); 0: none.
  virtual int64_t deepstack_levels() const { return 0; }
};

}  // namespace fp4lm::model
