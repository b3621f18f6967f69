#include "vision/nemotron_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/error_of.h"
#include "io/json_file.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"
#include "vision/torch_resize_f32.h"

namespace fp4lm::vision::nemotron_preprocess_test {
namespace {

using test::error_of;

nlohmann::json manifest() {
  return io::read_json_file((golden_data::data_dir() / "manifest_nemotron.json").string());
}

// pixel_values and image_grid_hw of every golden case (scripts/make_nemotron_h_omni_goldens.py:
// transformers 5.24's NemotronH_Omni_Reasoning_V3ImageProcessor with torch 2.9.1 / torchvision
// 0.24.1, three configs: downscaling into a 64-patch budget, upscaling to min_num_patches, a budget
// set by max_model_len) from the same PNGs: the grid exactly; the values of 9 of the 18 cases bit for
// bit, the others one float32 ulp of the resize off (< 5e-7 after normalization) at 0.6-6% of
// values, 23% for the 150 x 100 image shrunk in height and enlarged in width (vision/torch_resize_f32.h).
TEST(NemotronPreprocess, MatchesTheProcessorToOneUlp) {
  const auto m = manifest();
  int compared = 0, resized = 0, exact = 0;
  for (const auto& c : m["preprocess"]) {
    const std::string file = c["file"], cfg_file = c["config"];
    SCOPED_TRACE(cfg_file + " " + file);
    const auto cfg = parse_nemotron_processor_config(
        io::read_json_file((golden_data::data_dir() / cfg_file).string()), cfg_file);
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const NemotronPixels out = nemotron_preprocess(img, cfg);
    EXPECT_EQ(out.grid.h, c["image_grid_hw"][0].get<int64_t>());
    EXPECT_EQ(out.grid.w, c["image_grid_hw"][1].get<int64_t>());
    EXPECT_EQ(out.rows, c["shape"][0].get<int64_t>());
    EXPECT_EQ(out.cols, c["shape"][1].get<int64_t>());
    const auto want = golden_data::floats(c["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    size_t differing = 0;
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float d = std::fabs(out.pixel_values[i] - want[i]);
      differing += d != 0.0f;
      worst = std::max(worst, d);
    }
    const bool resize = out.grid.h * cfg.patch_size != img.height || out.grid.w * cfg.patch_size != img.width;
    if (!resize) {
      EXPECT_EQ(worst, 0.0f);
    }
    EXPECT_LE(worst, 5e-7f);
    EXPECT_LE(static_cast<double>(differing), 0.25 * static_cast<double>(want.size()))
        << differing << " of " << want.size() << " values differ";
    if (differing) std::printf("%s %s: %zu of %zu values one ulp off (max %.3g)\n", cfg_file.c_str(), file.c_str(),
                               differing, want.size(), static_cast<double>(worst));
    resized += resize;
    exact += differing == 0;
    ++compared;
  }
  EXPECT_EQ(compared, 18);
  EXPECT_GE(exact, 9);
  EXPECT_GE(resized, 17);
}

TEST(NemotronPreprocess, GridRulesAsTheProcessor) {
  NemotronProcessorConfig c;  // the processor's defaults: patch 16, merge 2, 1024..13312 patches
  EXPECT_EQ(nemotron_patch_budget(c), 13312);
  // Expected grids from transformers' get_patch_grid_size. 1000 x 800: round(63.0) = 63 -> 64 (the
  // merge), round(50.5) = 50 (Python rounds half to even); 816: round(51.5) = 52.
  NemotronGrid g = nemotron_grid(1000, 800, c);
  EXPECT_EQ(g.h, 64);
  EXPECT_EQ(g.w, 50);
  EXPECT_EQ(nemotron_image_tokens(g, c), 64 * 50 / 4);
  EXPECT_EQ(nemotron_grid(816, 800, c).h, 52);
  // Small: 100 x 100 -> 7 x 7 = 49 < 1024 -> x sqrt(1024 / 49) -> 32 x 32.
  g = nemotron_grid(100, 100, c);
  EXPECT_EQ(g.h, 32);
  EXPECT_EQ(g.w, 32);
  // The budget: max_model_len caps it, never below min_num_patches; several images share it.
  c.max_model_len = 104;
  EXPECT_EQ(nemotron_patch_budget(c), 1024);
  EXPECT_EQ(nemotron_patch_budget(c, 3), 3072);
  c.max_num_patches = 0;  // no cap
  c.max_model_len = 100004;
  EXPECT_EQ(nemotron_patch_budget(c), 400000);
}

TEST(NemotronPreprocess, RefusesAZeroPatchSide) {
  NemotronProcessorConfig c;
  c.patch_size = 4;
  c.min_num_patches = 16;
  c.max_num_patches = 64;
  const std::string e = error_of([&] { nemotron_grid(2, 300, c); });
  EXPECT_NE(e.find("a side of 0"), std::string::npos) << e;
}

TEST(NemotronPreprocess, ConfigKeysReadOrRefusedByName) {
  NemotronProcessorConfig c = parse_nemotron_processor_config(
      {{"norm_mean", {0.5, 0.25, 0.125}}, {"norm_std", 0.5}, {"patch_size", 8}, {"max_num_patches", 0}}, "p.json");
  EXPECT_EQ(c.image_mean[1], 0.25f);
  EXPECT_EQ(c.image_std[2], 0.5f);
  EXPECT_EQ(c.max_num_patches, 0);
  // image_mean wins over norm_mean, whichever comes first.
  c = parse_nemotron_processor_config({{"image_mean", 0.1}, {"norm_mean", 0.9}}, "p.json");
  EXPECT_FLOAT_EQ(c.image_mean[0], 0.1f);
  std::string e = error_of([] { parse_nemotron_processor_config({{"crop_size", 4}}, "p.json"); });
  EXPECT_NE(e.find("p.json: unknown key \"crop_size\""), std::string::npos) << e;
  e = error_of([] { parse_nemotron_processor_config({{"downsample_ratio", 0.3}}, "p.json"); });
  EXPECT_NE(e.find("\"downsample_ratio\" must be 1 / n"), std::string::npos) << e;
  e = error_of([] { parse_nemotron_processor_config({{"resample", 2}}, "p.json"); });
  EXPECT_NE(e.find("\"resample\" 2 is not supported"), std::string::npos) << e;
}

// The resize itself: a constant image stays constant (weights sum to 1), and the values torch 2.9.1
// printed (4 decimals) for F.interpolate(x, (2, 3), mode="bicubic", antialias=True) of
// x = arange(20).reshape(1, 1, 4, 5).
TEST(NemotronPreprocess, TorchResizeKeepsConstantsAndShrinks) {
  std::vector<float> flat(3 * 7 * 9, 42.0f);
  for (const auto& [h, w] : {std::pair{3, 4}, {12, 20}, {7, 9}})
    for (float v : resize_bicubic_antialias_torch(flat, 3, 7, 9, h, w)) ASSERT_NEAR(v, 42.0f, 1e-4f);
  std::vector<float> ramp(20);
  for (int i = 0; i < 20; ++i) ramp[static_cast<size_t>(i)] = static_cast<float>(i);
  const auto out = resize_bicubic_antialias_torch(ramp, 1, 4, 5, 2, 3);
  ASSERT_EQ(out.size(), 6u);
  const float want[] = {3.2877f, 4.9339f, 6.5800f, 12.4200f, 14.0661f, 15.7123f};
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(out[i], want[i], 1e-4f) << i;
}

}  // namespace
}  // namespace fp4lm::vision::nemotron_preprocess_test
