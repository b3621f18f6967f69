#include "vision/nemotron_tiling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "vision/torch_resize.h"

namespace fp4lm::vision {

NemotronTileGrid nemotron_tile_grid(int64_t width, int64_t height, int64_t tile_size, int64_t max_num_tiles) {
  if (width <= 0 || height <= 0) fail("Nemotron tiling: the image is {} x {}", width, height);
  if (tile_size <= 0 || max_num_tiles <= 0)
    fail("Nemotron tiling: tile size {} and max_num_tiles {} must be positive", tile_size, max_num_tiles);
  // get_internvl_target_ratios(1, n): every (i, j) with i * j <= n, sorted (stably) by i * j. Within
  // one product the candidates' ratios differ, and two of them tie only when the image's ratio is
  // exactly between them; in that case the order is Python's set order, approximated here by i.
  std::vector<NemotronTileGrid> ratios;
  for (int64_t i = 1; i <= max_num_tiles; ++i)
    for (int64_t j = 1; i * j <= max_num_tiles; ++j) ratios.push_back({i, j});
  std::stable_sort(ratios.begin(), ratios.end(),
                   [](const NemotronTileGrid& a, const NemotronTileGrid& b) { return a.cols * a.rows < b.cols * b.rows; });
  const double aspect = static_cast<double>(width) / static_cast<double>(height);
  const double area = static_cast<double>(width * height);
  double best_diff = std::numeric_limits<double>::infinity();
  NemotronTileGrid best{1, 1};
  for (const NemotronTileGrid& r : ratios) {
    const double diff = std::abs(aspect - static_cast<double>(r.cols) / static_cast<double>(r.rows));
    if (diff < best_diff) {
      best_diff = diff;
      best = r;
    } else if (diff == best_diff &&
               area > 0.5 * static_cast<double>(tile_size) * static_cast<double>(tile_size) *
                          static_cast<double>(r.cols) * static_cast<double>(r.rows)) {
      best = r;
    }
  }
  return best;
}

int64_t nemotron_tile_count(const NemotronTileGrid& g, bool use_thumbnail) {
  const int64_t n = g.cols * g.rows;
  return n + (use_thumbnail && n != 1 ? 1 : 0);
}

NemotronPixels nemotron_tile_preprocess(const RgbImage& image, const NemotronProcessorConfig& c) {
  const int64_t S = c.tile_size, P = c.patch_size;
  if (S <= 0 || S % P != 0)
    fail("Nemotron tiling: force_image_size {} is not a positive multiple of patch_size {}", S, P);
  const NemotronTileGrid g = nemotron_tile_grid(image.width, image.height, S, c.max_num_tiles);
  const RgbImage resized = resize_bicubic_torch_aa(image, static_cast<int>(S * g.cols), static_cast<int>(S * g.rows));
  NemotronPixels out;
  out.grid = {S / P, S / P};
  out.tiles = nemotron_tile_count(g, c.use_thumbnail);
  out.cols = 3 * P * P;
  out.rows = out.tiles * out.grid.h * out.grid.w;
  out.pixel_values.reserve(static_cast<size_t>(out.rows * out.cols));
  const auto append = [&](const RgbImage& tile) {
    const std::vector<float> v = nemotron_uint8_patches(tile, P, c);
    out.pixel_values.insert(out.pixel_values.end(), v.begin(), v.end());
  };
  RgbImage tile;
  tile.width = tile.height = static_cast<int>(S);
  tile.rgb.resize(static_cast<size_t>(S * S * 3));
  for (int64_t ty = 0; ty < g.rows; ++ty)
    for (int64_t tx = 0; tx < g.cols; ++tx) {
      for (int64_t y = 0; y < S; ++y)
        std::copy_n(resized.rgb.data() + ((ty * S + y) * resized.width + tx * S) * 3, S * 3,
                    tile.rgb.data() + y * S * 3);
      append(tile);
    }
  if (out.tiles > g.cols * g.rows) append(resize_bicubic_torch_aa(image, static_cast<int>(S), static_cast<int>(S)));
  return out;
}

}  // namespace fp4lm::vision
