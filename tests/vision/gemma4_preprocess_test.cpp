#include "vision/gemma4_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"

namespace fp4lm::vision::gemma4_preprocess_test {
namespace {

using test::error_of;

nlohmann::json cases() {
  return io::read_json_file((golden_data::data_dir() / "manifest_gemma.json").string())["gemma4"];
}

Gemma4ProcessorConfig config_of(const nlohmann::json& c) {
  const std::string path = (golden_data::data_dir() / c["config"].get<std::string>()).string();
  return parse_gemma4_processor_config(io::read_json_file(path), path);
}

float level_of(const Gemma4ProcessorConfig& c) {
  const float s = c.do_normalize ? std::min({c.image_std[0], c.image_std[1], c.image_std[2]}) : 1.0f;
  return static_cast<float>(c.rescale_factor) / s;
}

// pixel_values (padded to max_patches), the soft-token count and the patch positions of every
// golden case against transformers 5.24's Gemma4ImageProcessorPil: bit for bit (0.0 difference)
// on the same 8-bit pixels; the JPEG input, decoded by libjpeg-turbo here, within one level.
TEST(Gemma4Preprocess, MatchesTheHuggingFacePilProcessor) {
  const auto all = cases();
  ASSERT_GE(all.size(), 10u);
  for (const auto& c : all) {
    const std::string file = c["file"];
    SCOPED_TRACE(c["config"].get<std::string>() + " on " + file);
    const auto cfg = config_of(c);
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const Gemma4Pixels out = gemma4_preprocess(img, cfg);
    const auto& pil = c["pil"];
    ASSERT_EQ(out.rows, pil["shape"][0].get<int64_t>());
    ASSERT_EQ(out.cols, pil["shape"][1].get<int64_t>());
    EXPECT_EQ(out.soft_tokens, pil["soft_tokens"].get<int64_t>());
    EXPECT_EQ(gemma4_image_tokens(img.height, img.width, cfg), out.soft_tokens);
    ASSERT_EQ(out.patches, pil["real_patches"].get<int64_t>());
    EXPECT_EQ(out.width / cfg.patch_size, pil["grid_width"].get<int64_t>());
    const size_t last = static_cast<size_t>(out.patches - 1);
    EXPECT_EQ(out.position_ids[last * 2], pil["last_position"][0].get<int64_t>());
    EXPECT_EQ(out.position_ids[last * 2 + 1], pil["last_position"][1].get<int64_t>());
    for (size_t r = last + 1; r < static_cast<size_t>(out.rows); ++r) ASSERT_EQ(out.position_ids[r * 2], -1) << r;
    const auto want = golden_data::floats(pil["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    float worst = 0;
    size_t differing = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const float d = std::fabs(out.pixel_values[i] - want[i]);
      worst = std::max(worst, d);
      differing += d != 0;
    }
    if (!file.ends_with(".jpg")) {
      EXPECT_EQ(worst, 0.0f) << differing << " of " << want.size() << " values differ";
    } else {
      EXPECT_LE(worst, level_of(cfg) * 1.001f) << differing << " of " << want.size() << " values differ";
    }
  }
}

// The torchvision backend (Gemma4ImageProcessor) resizes in float32 and rounds: measured one
// 8-bit level at 0.2-0.6% of the values.
TEST(Gemma4Preprocess, StaysWithinOneLevelOfTheTorchvisionProcessor) {
  const auto all = cases();
  int compared = 0;
  for (const auto& c : all) {
    if (!c.contains("tv")) continue;
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const auto cfg = config_of(c);
    const Gemma4Pixels out = gemma4_preprocess(decode_image(golden_data::bytes(file), {}, file), cfg);
    EXPECT_EQ(out.soft_tokens, c["tv"]["soft_tokens"].get<int64_t>());
    const auto want = golden_data::floats(c["tv"]["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(out.pixel_values[i] - want[i]));
    EXPECT_LE(worst, 1.001f * level_of(cfg));
    ++compared;
  }
  EXPECT_GE(compared, 3);
}

TEST(Gemma4Preprocess, TargetSizeAsTransformers) {
  // Gemma 4's defaults: patch 16, pooling 3 (sides multiples of 48), 280 soft tokens = 2520
  // patches. Values from transformers' get_aspect_ratio_preserving_size.
  Gemma4ProcessorConfig c;
  EXPECT_EQ(gemma4_target_size(448, 448, c), (std::pair<int64_t, int64_t>{768, 768}));
  EXPECT_EQ(gemma4_target_size(1080, 1920, c), (std::pair<int64_t, int64_t>{576, 1056}));
  EXPECT_EQ(gemma4_target_size(10, 5000, c), (std::pair<int64_t, int64_t>{48, 13440}));
  EXPECT_EQ(gemma4_image_tokens(448, 448, c), 256);
  EXPECT_EQ(gemma4_image_tokens(1080, 1920, c), 264);
  c.max_soft_tokens = 1120;
  EXPECT_EQ(gemma4_target_size(1080, 1920, c), (std::pair<int64_t, int64_t>{1200, 2112}));
  // A tiny image is scaled up to the budget: 1 x 1 -> 384 x 384 at 70 soft tokens.
  c.max_soft_tokens = 70;
  EXPECT_EQ(gemma4_target_size(1, 1, c), (std::pair<int64_t, int64_t>{384, 384}));
  EXPECT_EQ(gemma4_image_tokens(1, 1, c), 64);
}

TEST(Gemma4ProcessorConfig, EveryKeyIsReadOrRefused) {
  const auto c = parse_gemma4_processor_config(
      nlohmann::json::parse(R"({"processor_class": "Gemma4Processor", "image_seq_length": 280,
        "audio_seq_length": 750, "feature_extractor": {"x": 1},
        "image_processor": {"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 560,
          "patch_size": 16, "pooling_kernel_size": 3, "resample": 3, "size": null}})"),
      "p.json");
  EXPECT_EQ(c.max_soft_tokens, 560);
  EXPECT_EQ(c.max_patches(), 560 * 9);
  EXPECT_EQ(c.resample, PillowFilter::kBicubic);
  EXPECT_FALSE(c.do_normalize);
  auto err = [](const char* text) {
    return error_of([&] { parse_gemma4_processor_config(nlohmann::json::parse(text), "p.json"); });
  };
  EXPECT_NE(err(R"({"crop_size": 224})").find("p.json: unknown key \"crop_size\""), std::string::npos);
  EXPECT_NE(err(R"({"max_soft_tokens": 100})").find("one of 70, 140, 280, 560, 1120"), std::string::npos);
  EXPECT_NE(err(R"({"size": {"height": 224, "width": 224}})").find("not used by Gemma 4"), std::string::npos);
  EXPECT_NE(err(R"({"resample": 1})").find("\"resample\" 1 is not supported"), std::string::npos);
  EXPECT_NE(err(R"({"do_convert_rgb": false})").find("do_convert_rgb"), std::string::npos);
  EXPECT_NE(err(R"({"image_processor_type": "Gemma3ImageProcessor"})").find("not a Gemma 4 image processor"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::vision::gemma4_preprocess_test
