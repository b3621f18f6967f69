#include "vision/gemma3_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"
#include "vision/pillow_resize.h"

namespace fp4lm::vision::gemma3_preprocess_test {
namespace {

using test::error_of;

nlohmann::json manifest() { return io::read_json_file((golden_data::data_dir() / "manifest_gemma.json").string()); }

Gemma3ProcessorConfig config_of(const nlohmann::json& c) {
  const std::string path = (golden_data::data_dir() / c["config"].get<std::string>()).string();
  return parse_gemma3_processor_config(io::read_json_file(path), path);
}

// One 8-bit level in normalized units, per the config's smallest std.
float level_of(const Gemma3ProcessorConfig& c) {
  return static_cast<float>(c.rescale_factor) / std::min({c.image_std[0], c.image_std[1], c.image_std[2]});
}

// pixel_values and num_crops of every golden case against transformers 5.24's
// Gemma3ImageProcessorPil given the Pillow-opened image: the crops in the same number and order,
// every value bit for bit (0.0 difference: fp4lm computes the same float32 operations on the same
// 8-bit pixels). The JPEG input is decoded by us (libjpeg-turbo may differ from Pillow's build in
// the last bit), so it compares within one 8-bit level after normalization.
TEST(Gemma3Preprocess, MatchesTheHuggingFacePilProcessor) {
  const auto m = manifest();
  ASSERT_GE(m["preprocess"].size(), 17u);
  int with_crops = 0;
  for (const auto& c : m["preprocess"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(c["config"].get<std::string>() + " on " + file);
    const auto cfg = config_of(c);
    const RgbImage img = decode_image(golden_data::bytes(file), {}, file);
    const Gemma3Pixels out = gemma3_preprocess(img, cfg);
    const auto& pil = c["pil"];
    EXPECT_EQ(out.num_crops, pil["num_crops"][0].get<int64_t>());
    with_crops += out.num_crops > 0;
    EXPECT_EQ(gemma3_image_tokens(img.height, img.width, cfg), (1 + out.num_crops) * cfg.image_seq_length);
    ASSERT_EQ(out.images, pil["shape"][0].get<int64_t>());
    ASSERT_EQ(3, pil["shape"][1].get<int64_t>());
    ASSERT_EQ(out.height, pil["shape"][2].get<int64_t>());
    ASSERT_EQ(out.width, pil["shape"][3].get<int64_t>());
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
  EXPECT_GE(with_crops, 9);
}

// The torchvision backend (Gemma3ImageProcessor, transformers' default when torchvision is
// installed) resizes in float32 and rounds; this bounds its difference to Pillow's fixed point.
TEST(Gemma3Preprocess, StaysWithinOneLevelOfTheTorchvisionProcessor) {
  const auto m = manifest();
  int compared = 0;
  for (const auto& c : m["preprocess"]) {
    if (!c.contains("tv")) continue;
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const auto cfg = config_of(c);
    const Gemma3Pixels out = gemma3_preprocess(decode_image(golden_data::bytes(file), {}, file), cfg);
    EXPECT_EQ(out.num_crops, c["tv"]["num_crops"][0].get<int64_t>());
    const auto want = golden_data::floats(c["tv"]["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(out.pixel_values[i] - want[i]));
    EXPECT_LE(worst, 1.001f * level_of(cfg));  // measured: exactly one level at 0.1-5% of values
    ++compared;
  }
  EXPECT_GE(compared, 7);
}

TEST(Gemma3Preprocess, PanAndScanRules) {
  Gemma3ProcessorConfig c;
  EXPECT_TRUE(gemma3_pan_and_scan(300, 1000, c).empty());  // off by default (the checkpoints' null)
  c.do_pan_and_scan = true;  // Gemma3Processor's defaults: min crop 256, 4 crops at most, ratio 1.2
  // Expected boxes from transformers' Gemma3ImageProcessorPil.pan_and_scan on the same sizes.
  // 1000 x 300: ratio 3.33 -> 3 crops of ceil(1000 / 3) = 334 wide, the last cut to 332 at the edge.
  auto b = gemma3_pan_and_scan(300, 1000, c);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].x, 0);
  EXPECT_EQ(b[1].x, 334);
  EXPECT_EQ(b[2].x, 668);
  EXPECT_EQ(b[2].width, 332);
  EXPECT_EQ(b[2].height, 300);
  // Below the ratio threshold: none.
  EXPECT_TRUE(gemma3_pan_and_scan(1000, 1190, c).empty());
  // Ratio 1.3: floor(1.8) = 1 crop, raised to 2.
  EXPECT_EQ(gemma3_pan_and_scan(1000, 1300, c).size(), 2u);
  // Ratio 10 on a tall image: floor(10.5) = 10, capped at 4; crops stacked top to bottom.
  b = gemma3_pan_and_scan(4000, 400, c);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[3].y, 3000);
  EXPECT_EQ(b[3].width, 400);
  // The crops' short side under the minimum: none (400 x 100: crops 100 high, under 256).
  EXPECT_TRUE(gemma3_pan_and_scan(100, 400, c).empty());
  // No more crops than fit at the minimum size: 600 / 256 -> 2, even at ratio 2.
  EXPECT_EQ(gemma3_pan_and_scan(300, 600, c).size(), 2u);
  EXPECT_EQ(gemma3_image_tokens(300, 1000, c), 4 * 256);
  c.do_pan_and_scan = false;
  EXPECT_EQ(gemma3_image_tokens(300, 1000, c), 256);
}

TEST(PillowResize, BilinearConstantStaysConstant) {
  RgbImage img;
  img.width = 13;
  img.height = 7;
  img.rgb.assign(13 * 7 * 3, 201);
  for (auto [w, h] : {std::pair{5, 3}, {40, 30}, {13, 30}, {3, 7}}) {
    const RgbImage r = resize_pillow(img, w, h, PillowFilter::kBilinear);
    ASSERT_EQ(r.rgb.size(), size_t(w) * h * 3);
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 201) << w << "x" << h;
  }
}

TEST(Gemma3ProcessorConfig, EveryKeyIsReadOrRefused) {
  const std::string real = (golden_data::data_dir() / "preprocessor_gemma3_real.json").string();
  const auto c = parse_gemma3_processor_config(io::read_json_file(real), real);
  EXPECT_EQ(c.height, 896);
  EXPECT_EQ(c.width, 896);
  EXPECT_EQ(c.resample, PillowFilter::kBilinear);
  EXPECT_FALSE(c.do_pan_and_scan);
  EXPECT_EQ(c.pan_and_scan_min_crop_size, 256);
  EXPECT_EQ(c.image_seq_length, 256);
  EXPECT_EQ(c.image_mean[2], 0.5f);
  // processor_config.json as transformers 5 writes it: the image processor nested.
  const auto n = parse_gemma3_processor_config(
      nlohmann::json::parse(R"({"image_seq_length": 64, "processor_class": "Gemma3Processor",
        "image_processor": {"size": {"height": 448, "width": 448}, "do_pan_and_scan": true}})"),
      "p.json");
  EXPECT_EQ(n.image_seq_length, 64);
  EXPECT_EQ(n.height, 448);
  EXPECT_TRUE(n.do_pan_and_scan);
  auto err = [](const char* text) {
    return error_of([&] { parse_gemma3_processor_config(nlohmann::json::parse(text), "p.json"); });
  };
  EXPECT_NE(err(R"({"crop_size": 224})").find("p.json: unknown key \"crop_size\""), std::string::npos);
  EXPECT_NE(err(R"({"resample": 0})").find("\"resample\" 0 is not supported; expected 2"), std::string::npos);
  EXPECT_NE(err(R"({"do_convert_rgb": false})").find("do_convert_rgb"), std::string::npos);
  EXPECT_NE(err(R"({"size": {"shortest_edge": 224}})").find("\"size.shortest_edge\" is not a Gemma 3 size key"),
            std::string::npos);
  EXPECT_NE(err(R"({"size": {"height": 224}})").find("must have both height and width"), std::string::npos);
  EXPECT_NE(err(R"({"image_processor_type": "SiglipImageProcessor"})").find("not a Gemma 3 image processor"),
            std::string::npos);
  EXPECT_NE(err(R"({"image_std": [0.5, 0.5, 0]})").find("finite and non-zero"), std::string::npos);
  EXPECT_NE(err(R"({"pan_and_scan_max_num_crops": 0})").find("\"pan_and_scan_max_num_crops\" must be an integer"),
            std::string::npos);
  EXPECT_NE(err(R"({"image_processor": {"foo": 1}})").find("p.json (image_processor): unknown key \"foo\""),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::vision::gemma3_preprocess_test
