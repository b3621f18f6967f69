#pragma once
// Gemma 4 image preprocessing, as transformers 5.24's Gemma4ImageProcessorPil computes it
// (docs/VISION.md): the largest aspect-preserving size whose sides are multiples of
// pooling_kernel_size * patch_size and that holds at most max_soft_tokens * pooling_kernel_size^2
// patches, Pillow's resize (bicubic), rescale (and normalize if configured) in float32, then the
// patches row-major, each patch (row, column, channel), zero-padded to max_patches rows with
// their (x, y) positions (-1 for padding).
#include <cstdint>
#include <utility>
#include <vector>

#include "vision/gemma4_processor_config.h"
#include "vision/image.h"

namespace fp4lm::vision {

struct Gemma4Pixels {
  int64_t height = 0, width = 0;  // the resized image
  int64_t patches = 0;            // real patches: (height / patch) * (width / patch)
  int64_t rows = 0;               // max_patches (padded)
  int64_t cols = 0;               // patch_size^2 * 3
  int64_t soft_tokens = 0;        // num_soft_tokens_per_image: patches / pooling_kernel_size^2
  std::vector<float> pixel_values;       // rows x cols
  std::vector<int64_t> position_ids;     // rows x 2: (x, y) of each patch, (-1, -1) for padding
};

// transformers' get_aspect_ratio_preserving_size: the (height, width) an image is resized to.
std::pair<int64_t, int64_t> gemma4_target_size(int64_t height, int64_t width, const Gemma4ProcessorConfig& config);

Gemma4Pixels gemma4_preprocess(const RgbImage& image, const Gemma4ProcessorConfig& config);

// The soft tokens an image of this size gives, without touching pixels.
int64_t gemma4_image_tokens(int64_t height, int64_t width, const Gemma4ProcessorConfig& config);

}  // namespace fp4lm::vision
