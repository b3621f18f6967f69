#pragma once
// The fixed-size tiling of the remote-code Nemotron VL checkpoints (NemotronH_Nano_VL_V2, e.g.
// Nemotron-Nano-12B-v2-VL: config.json's force_image_size, use_thumbnail, and no min_num_patches in
// vision_config.args), as vLLM's nano_nemotron_vl.py dynamic_preprocess runs it (InternVL's rule):
//   the grid: among the (cols, rows) with 1 <= cols * rows <= max_num_tiles, ordered by cols * rows,
//     the one whose cols / rows is closest to the image's width / height; on a tie the later one
//     when the image's area exceeds half of the tiles' (tile_size^2 * cols * rows / 2);
//   the image resized (torch's uint8 antialiased bicubic) to tile_size * cols x tile_size * rows and
//     cut into tiles row by row; with use_thumbnail and more than one tile, the whole image resized
//     to tile_size x tile_size after them;
//   each tile x / 255, (x - mean) / std, cut into patches as the dynamic-resolution processor does.
// Each tile is one image of (tile_size / patch_size)^2 patches for the tower; the prompt gets
// <img> + <image> x (tiles * tokens per tile) + </img>.
#include <cstdint>

#include "vision/image.h"
#include "vision/nemotron_preprocess.h"
#include "vision/nemotron_processor_config.h"

namespace fp4lm::vision {

struct NemotronTileGrid {
  int64_t cols = 1, rows = 1;
};

// find_closest_aspect_ratio over get_internvl_target_ratios(1, max_num_tiles).
NemotronTileGrid nemotron_tile_grid(int64_t width, int64_t height, int64_t tile_size, int64_t max_num_tiles);
// cols * rows, plus the thumbnail when use_thumbnail and cols * rows > 1.
int64_t nemotron_tile_count(const NemotronTileGrid& grid, bool use_thumbnail);

// config.tile_size > 0: the image's tiles, each (tile_size / patch_size)^2 patches (out.grid is one
// tile's, out.tiles their count).
NemotronPixels nemotron_tile_preprocess(const RgbImage& image, const NemotronProcessorConfig& config);

}  // namespace fp4lm::vision
