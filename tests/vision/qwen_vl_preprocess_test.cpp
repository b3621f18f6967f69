#include "vision/qwen_vl_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"
#include "vision/pillow_resize.h"

namespace fp4lm::vision::qwen_vl_preprocess_test {
namespace {

using test::error_of;

// pixel_values and image_grid_thw of every golden case against transformers 5.24's
// Qwen2VLImageProcessorPil given the Pillow-decoded image: bit for bit on the same decoded pixels.
// JPEG / lossy WebP inputs are decoded by us (libjpeg-turbo may differ from Pillow's build in the
// last bit), so those compare within one 8-bit level after normalization.
TEST(QwenVlPreprocess, MatchesTheHuggingFacePilProcessor) {
  const auto m = golden_data::manifest();
  ASSERT_GE(m["preprocess"].size(), 10u);
  for (const auto& c : m["preprocess"]) {
    const std::string file = c["file"], cfg_name = c["config"];
    SCOPED_TRACE(cfg_name + " on " + file);
    const auto cfg = read_qwen_vl_processor_config((golden_data::data_dir() / cfg_name).string());
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const QwenVlPixels out = qwen_vl_preprocess(img, cfg);
    const auto& pil = c["pil"];
    const GridThw g = qwen_vl_grid(img.height, img.width, cfg);
    EXPECT_EQ(g.h, out.grid.h);
    EXPECT_EQ(g.w, out.grid.w);
    EXPECT_EQ(qwen_vl_image_tokens(g, cfg), out.rows / (cfg.merge_size * cfg.merge_size));
    EXPECT_EQ(out.grid.t, pil["grid_thw"][0].get<int64_t>());
    EXPECT_EQ(out.grid.h, pil["grid_thw"][1].get<int64_t>());
    EXPECT_EQ(out.grid.w, pil["grid_thw"][2].get<int64_t>());
    ASSERT_EQ(out.rows, pil["rows"].get<int64_t>());
    ASSERT_EQ(out.cols, pil["cols"].get<int64_t>());
    const auto want = golden_data::floats(pil["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    // One 8-bit level in normalized units, per the config's smallest std.
    const float level = static_cast<float>(cfg.rescale_factor) /
                        std::min({cfg.image_std[0], cfg.image_std[1], cfg.image_std[2]});
    const bool exact = !(file.ends_with(".jpg") || file.find("lossy") != std::string::npos);
    float worst = 0;
    size_t differing = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float d = std::fabs(out.pixel_values[i] - want[i]);
      worst = std::max(worst, d);
      differing += d != 0;
    }
    if (exact) {
      EXPECT_EQ(worst, 0.0f) << differing << " of " << want.size() << " values differ";
    } else {
      EXPECT_LE(worst, level * 1.001f) << differing << " of " << want.size() << " values differ";
    }
  }
}

// The torchvision backend (transformers' default when torchvision is installed) resizes in float32
// and rounds, so it differs from Pillow's fixed-point bicubic by at most 2 levels at a few pixels;
// this bounds that difference (docs/VISION.md).
TEST(QwenVlPreprocess, StaysWithinTwoLevelsOfTheTorchvisionProcessor) {
  const auto m = golden_data::manifest();
  int compared = 0;
  for (const auto& c : m["preprocess"]) {
    if (!c.contains("tv")) continue;
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const auto cfg = read_qwen_vl_processor_config((golden_data::data_dir() / c["config"].get<std::string>()).string());
    const QwenVlPixels out = qwen_vl_preprocess(decode_image(golden_data::bytes(file), {}, file), cfg);
    const auto want = golden_data::floats(c["tv"]["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    EXPECT_EQ(out.grid.h, c["tv"]["grid_thw"][1].get<int64_t>());
    const float level = static_cast<float>(cfg.rescale_factor) / cfg.image_std[0];
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(out.pixel_values[i] - want[i]));
    EXPECT_LE(worst, 2.001f * level);
    ++compared;
  }
  EXPECT_GE(compared, 5);
}

TEST(QwenVlPreprocess, SmartResizeAsTransformers) {
  // Values from transformers' smart_resize (factor 28, min 56*56, max 28*28*1280).
  EXPECT_EQ(qwen_vl_smart_resize(33, 47, 28, 3136, 1003520), (std::pair<int64_t, int64_t>{56, 84}));
  EXPECT_EQ(qwen_vl_smart_resize(1080, 1920, 28, 3136, 1003520), (std::pair<int64_t, int64_t>{728, 1316}));
  // Python's round() halves to even: 42 / 28 = 1.5 -> 2, 70 / 28 = 2.5 -> 2.
  EXPECT_EQ(qwen_vl_smart_resize(42, 70, 28, 1, 1 << 30), (std::pair<int64_t, int64_t>{56, 56}));
  // Qwen3.5 / Qwen3.6's own preprocessor_config.json: patch 16, merge 2, 65536..16777216 pixels.
  QwenVlProcessorConfig q;
  q.patch_size = 16;
  q.min_pixels = 65536;
  q.max_pixels = 16777216;
  const GridThw g448 = qwen_vl_grid(448, 448, q);
  EXPECT_EQ(g448.h, 28);
  EXPECT_EQ(g448.w, 28);
  EXPECT_EQ(qwen_vl_image_tokens(g448, q), 196);
  EXPECT_EQ(qwen_vl_smart_resize(33, 47, 32, 65536, 16777216), (std::pair<int64_t, int64_t>{224, 320}));
  EXPECT_EQ(qwen_vl_smart_resize(1080, 1920, 32, 65536, 16777216), (std::pair<int64_t, int64_t>{1088, 1920}));
  EXPECT_EQ(qwen_vl_smart_resize(3000, 4000, 32, 65536, 16777216), (std::pair<int64_t, int64_t>{3008, 4000}));
  const auto e = error_of([] { qwen_vl_smart_resize(10, 2010, 28, 3136, 1003520); });
  EXPECT_NE(e.find("aspect ratio 201.0 is above the processor's limit of 200"), std::string::npos) << e;
}

TEST(QwenVlPreprocess, PatchOrderIsTheMergeWindowOrder) {
  // A 4x4 image, patch 1, merge 2, temporal 2, no normalization: each patch is one pixel; rows go
  // block by block (2x2 windows), each window row-major; each row holds R,R,G,G,B,B (t = 2).
  RgbImage img;
  img.width = img.height = 4;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) img.rgb.insert(img.rgb.end(), {uint8_t(y * 4 + x), uint8_t(100 + y * 4 + x), 200});
  QwenVlProcessorConfig c;
  c.patch_size = 1;
  c.do_resize = c.do_rescale = c.do_normalize = false;
  const QwenVlPixels out = qwen_vl_preprocess(img, c);
  ASSERT_EQ(out.rows, 16);
  ASSERT_EQ(out.cols, 6);
  const int order[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  for (int r = 0; r < 16; ++r) {
    const float* row = &out.pixel_values[r * 6];
    EXPECT_EQ(row[0], order[r]) << r;
    EXPECT_EQ(row[1], order[r]) << r;
    EXPECT_EQ(row[2], 100 + order[r]) << r;
    EXPECT_EQ(row[4], 200) << r;
  }
  img.width = 3;
  img.rgb.resize(3 * 4 * 3);
  c.patch_size = 2;
  EXPECT_NE(error_of([&] { qwen_vl_preprocess(img, c); }).find("multiples of patch_size * merge_size = 4"),
            std::string::npos);
}

TEST(PillowResize, ConstantStaysConstantAndSameSizeIsACopy) {
  RgbImage img;
  img.width = 17;
  img.height = 9;
  img.rgb.assign(17 * 9 * 3, 77);
  for (auto [w, h] : {std::pair{5, 3}, {40, 30}, {17, 30}, {3, 9}}) {
    const RgbImage r = resize_bicubic_pillow(img, w, h);
    ASSERT_EQ(r.rgb.size(), size_t(w) * h * 3);
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 77) << w << "x" << h;
  }
  img.rgb[5] = 3;
  EXPECT_EQ(resize_bicubic_pillow(img, 17, 9).rgb, img.rgb);
}

TEST(QwenVlProcessorConfig, EveryKeyIsReadOrRefused) {
  const auto c = parse_qwen_vl_processor_config(
      nlohmann::json::parse(R"({"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
        "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"})"),
      "p.json");
  EXPECT_EQ(c.max_pixels, 16777216);
  EXPECT_EQ(c.min_pixels, 65536);
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.image_mean[1], 0.5f);
  auto err = [](const char* text) {
    return error_of([&] { parse_qwen_vl_processor_config(nlohmann::json::parse(text), "p.json"); });
  };
  EXPECT_NE(err(R"({"crop_size": 224})").find("p.json: unknown key \"crop_size\""), std::string::npos);
  EXPECT_NE(err(R"({"resample": 2})").find("\"resample\" 2 is not supported; expected 3"), std::string::npos);
  EXPECT_NE(err(R"({"do_convert_rgb": false})").find("do_convert_rgb"), std::string::npos);
  EXPECT_NE(err(R"({"size": {"height": 224}})").find("\"size.height\" is not a Qwen2-VL size key"),
            std::string::npos);
  EXPECT_NE(err(R"({"image_processor_type": "SiglipImageProcessor"})").find("not a Qwen2-VL image processor"),
            std::string::npos);
  EXPECT_NE(err(R"({"image_std": [0.5, 0]})").find("3 numbers"), std::string::npos);
  EXPECT_NE(err(R"({"min_pixels": 100, "max_pixels": 50})").find("min_pixels (100) is larger"), std::string::npos);
  EXPECT_NE(err(R"({"patch_size": 0})").find("\"patch_size\" must be in 1..1024, found 0"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::vision::qwen_vl_preprocess_test
