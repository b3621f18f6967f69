// The remote-code Nemotron VL / Omni preprocessing (vision/nemotron_tiling.h, nemotron_preprocess's
// uint8_resize) against tests/vision/data/nemotron_remote.json (scripts/make_nemotron_h_omni_goldens.py
// --remote: the rule of vLLM's nano_nemotron_vl.py restated in Python, torch 2.9.1's uint8 resize):
// the tile grid of 693 image sizes at three (tile size, max_num_tiles) settings; the tiles' patches
// (thumbnail included) and the dynamic-resolution patches of four PNGs, bit for bit.
#include "vision/nemotron_tiling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/json_file.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"

namespace fp4lm::vision::nemotron_tiling_test {
namespace {

nlohmann::json goldens() { return io::read_json_file((golden_data::data_dir() / "nemotron_remote.json").string()); }

TEST(NemotronTiling, GridMatchesTheRemoteCodeRule) {
  const auto g = goldens();
  int checked = 0, several = 0;
  for (const auto& row : g["grids"]) {
    const int64_t w = row[0], h = row[1], tile = row[2], max_tiles = row[3];
    const NemotronTileGrid got = nemotron_tile_grid(w, h, tile, max_tiles);
    EXPECT_EQ(got.cols, row[4].get<int64_t>()) << w << "x" << h << " tile " << tile << " max " << max_tiles;
    EXPECT_EQ(got.rows, row[5].get<int64_t>()) << w << "x" << h << " tile " << tile << " max " << max_tiles;
    EXPECT_LE(got.cols * got.rows, max_tiles);
    ++checked;
    several += got.cols * got.rows > 1;
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(several, checked / 2);  // the table exercises the tiling, not just the 1 x 1 grid
  EXPECT_EQ(nemotron_tile_count({3, 2}, true), 7);
  EXPECT_EQ(nemotron_tile_count({3, 2}, false), 6);
  EXPECT_EQ(nemotron_tile_count({1, 1}, true), 1);  // no thumbnail for a single tile
}

NemotronProcessorConfig remote_config(const nlohmann::json& g) {
  NemotronProcessorConfig c;
  c.patch_size = g["patch"].get<int>();
  c.uint8_resize = true;
  for (int ch = 0; ch < 3; ++ch) {
    c.image_mean[static_cast<size_t>(ch)] = g["norm_mean"][ch].get<float>();
    c.image_std[static_cast<size_t>(ch)] = g["norm_std"][ch].get<float>();
  }
  return c;
}

// torch's x / 255 and (x - mean) / std are float32 operations fp4lm repeats in the same order.
void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  std::printf("  max |fp4lm - torch| = %.3g over %zu values\n", static_cast<double>(worst), want.size());
  EXPECT_EQ(worst, 0.0f);  // measured: bit for bit
}

TEST(NemotronTiling, TilesEqualTheRemoteCodesPixels) {
  const auto g = goldens();
  NemotronProcessorConfig c = remote_config(g);
  c.tile_size = g["tile"].get<int64_t>();
  c.max_num_tiles = g["max_num_tiles"].get<int64_t>();
  int cases = 0;
  for (const auto& k : g["cases"]) {
    if (k["kind"] != "tiles") continue;
    const std::string file = k["file"];
    SCOPED_TRACE(file);
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const NemotronPixels px = nemotron_tile_preprocess(img, c);
    EXPECT_EQ(px.tiles, k["tiles"].get<int64_t>());
    EXPECT_EQ(px.grid.h, c.tile_size / c.patch_size);
    EXPECT_EQ(px.rows, k["shape"][0].get<int64_t>());
    EXPECT_EQ(px.cols, k["shape"][1].get<int64_t>());
    expect_close(px.pixel_values, golden_data::floats(k["pixel_values"]));
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

TEST(NemotronTiling, DynamicResolutionWithTheUint8ResizeEqualsTheRemoteCodes) {
  const auto g = goldens();
  NemotronProcessorConfig c = remote_config(g);
  c.min_num_patches = 16;
  c.max_num_patches = 64;
  int cases = 0;
  for (const auto& k : g["cases"]) {
    if (k["kind"] != "dynamic") continue;
    const std::string file = k["file"];
    SCOPED_TRACE(file);
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const NemotronPixels px = nemotron_preprocess(img, c);
    EXPECT_EQ(px.grid.h, k["grid_hw"][0].get<int64_t>());
    EXPECT_EQ(px.grid.w, k["grid_hw"][1].get<int64_t>());
    expect_close(px.pixel_values, golden_data::floats(k["pixel_values"]));
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

}  // namespace
}  // namespace fp4lm::vision::nemotron_tiling_test
