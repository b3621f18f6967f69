#pragma once
// Qwen2-VL-family image preprocessing (Qwen3.5 / Qwen3.6 / Qwen3-VL), as transformers 5.24's
// Qwen2VLImageProcessorPil computes it (docs/VISION.md): smart_resize to multiples of
// patch_size * merge_size within [min_pixels, max_pixels], Pillow's bicubic resize, rescale and
// normalize in float32, the still image repeated temporal_patch_size times, and the patches
// flattened in the 2x2 merge-window order the vision tower expects.
#include <cstdint>
#include <utility>
#include <vector>

#include "vision/image.h"
#include "vision/qwen_vl_processor_config.h"

namespace fp4lm::vision {

struct GridThw {
  int64_t t = 0, h = 0, w = 0;  // in patches
};

struct QwenVlPixels {
  GridThw grid;                   // image_grid_thw's row for this image
  int64_t rows = 0;               // t * h * w patches
  int64_t cols = 0;               // 3 * temporal_patch_size * patch_size^2
  std::vector<float> pixel_values;  // rows x cols, row-major
};

// transformers' smart_resize: the (height, width) an image is resized to. Error for an aspect ratio
// above 200, as the processor.
std::pair<int64_t, int64_t> qwen_vl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                 int64_t max_pixels);

QwenVlPixels qwen_vl_preprocess(const RgbImage& image, const QwenVlProcessorConfig& config);

// The grid an image of this size gets, without touching pixels (what the chat template's
// placeholder expansion needs), and the image tokens the language model sees for it:
// t * h * w / merge_size^2 (transformers' Qwen3VLProcessor).
GridThw qwen_vl_grid(int64_t height, int64_t width, const QwenVlProcessorConfig& config);
int64_t qwen_vl_image_tokens(const GridThw& grid, const QwenVlProcessorConfig& config);

}  // namespace fp4lm::vision
