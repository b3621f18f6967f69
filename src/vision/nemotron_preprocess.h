#pragma once
// Nemotron VL / Omni image preprocessing (NemotronH_Omni_Reasoning_V3ImageProcessor, transformers
// 5.24, its torchvision backend — the processor has no Pillow one): the image, as float32, resized
// with torch's antialiased bicubic (vision/torch_resize_f32.h, no clamping) to a patch grid near its
// own (get_patch_grid_size: within the patch budget, each side a multiple of the pixel-shuffle
// merge), rescaled and normalized in one step ((x - mean * 255) / (std * 255) in float32), and cut
// into patch_size x patch_size patches in row-major order, each laid out channel-major.
#include <cstdint>
#include <vector>

#include "vision/image.h"
#include "vision/nemotron_processor_config.h"

namespace fp4lm::vision {

struct NemotronGrid {
  int64_t h = 0, w = 0;  // image_grid_hw: patches per column and per row
};

struct NemotronPixels {
  NemotronGrid grid;
  int64_t tiles = 1;                // images of h x w patches, one after another (tiling: vision/nemotron_tiling.h)
  int64_t rows = 0;                 // tiles * h * w patches
  int64_t cols = 0;                 // 3 * patch_size^2
  std::vector<float> pixel_values;  // rows x cols, row-major
};

// The patch budget of each image when `images` images are processed in one call (the processor's
// max((max_model_len - 4) * merge^2, min_num_patches * images) clamped to [min, max]).
int64_t nemotron_patch_budget(const NemotronProcessorConfig& config, int64_t images = 1);
// get_patch_grid_size: Error when a side comes out as 0 patches (the processor divides by zero).
NemotronGrid nemotron_grid(int64_t height, int64_t width, const NemotronProcessorConfig& config, int64_t images = 1);
// The image's placeholder tokens: h * w / merge_size^2 (the processor's replace_image_token).
int64_t nemotron_image_tokens(const NemotronGrid& grid, const NemotronProcessorConfig& config);

// An image whose sides are multiples of P -> its P x P patches (row-major, each channel-major),
// each value (x / 255 - mean) / std in float32: vLLM's remote-code normalization (input_conditioner).
std::vector<float> nemotron_uint8_patches(const RgbImage& image, int64_t P, const NemotronProcessorConfig& config);

NemotronPixels nemotron_preprocess(const RgbImage& image, const NemotronProcessorConfig& config, int64_t images = 1);

}  // namespace fp4lm::vision
