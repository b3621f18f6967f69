// Qwen3-VL video frames against transformers 5.24's Qwen3VLVideoProcessor with torchvision 0.24.1
// (scripts/make_qwen3_vl_video_goldens.py, tests/vision/data/video): torch's uint8 antialiased
// bicubic resize byte for byte, the video smart_resize over a table of sizes, frame counts and
// budgets, and pixel_values_videos / video_grid_thw bit for bit for 4, 3 (odd: the last frame
// repeated), 5 and 2 frames under the tiny model's config, a patch-16 one and one with CLIP's mean and
// std (the fused normalize's rounding); then the timestamps
// Qwen3VLProcessor writes and the errors for hostile input.
#include "vision/qwen_vl_video.h"

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "vision/golden_data.h"
#include "vision/image_decode.h"
#include "vision/pillow_resize.h"
#include "vision/torch_resize.h"

namespace fp4lm::vision::qwen_vl_video_test {
namespace {

using test::error_of;

nlohmann::json manifest() { return io::read_json_file((golden_data::data_dir() / "video" / "manifest.json").string()); }

RgbImage load(const std::string& file) { return decode_image(golden_data::bytes(file), {}, file); }

TEST(TorchResize, MatchesTorchUint8AntialiasedBicubic) {
  const auto m = manifest();
  ASSERT_EQ(m["resize"].size(), 6u);
  int differs_from_pillow = 0;
  for (const auto& c : m["resize"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const RgbImage in = load(file);
    const int w = c["width"], h = c["height"];
    const RgbImage out = resize_bicubic_torch_aa(in, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    const std::vector<uint8_t> want = golden_data::bytes(c["rgb"]);
    ASSERT_EQ(out.rgb.size(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += out.rgb[i] != want[i];
    EXPECT_EQ(bad, 0u) << "of " << want.size();
    differs_from_pillow += resize_bicubic_pillow(in, w, h).rgb != want;
  }
  // Pillow's 22-bit coefficients give other bytes: the cases would catch the wrong resampler.
  EXPECT_GE(differs_from_pillow, 4);
}

TEST(QwenVlVideo, SmartResizeMatchesTheProcessor) {
  const auto m = manifest();
  ASSERT_GE(m["smart_resize"].size(), 10u);
  for (const auto& c : m["smart_resize"]) {
    SCOPED_TRACE(c.dump());
    const auto [h, w] = qwen_vl_video_smart_resize(c["frames"], c["height"], c["width"], 2, c["factor"],
                                                   c["min_pixels"], c["max_pixels"]);
    EXPECT_EQ(h, c["resized"][0].get<int64_t>());
    EXPECT_EQ(w, c["resized"][1].get<int64_t>());
  }
}

TEST(QwenVlVideo, PixelsMatchTheVideoProcessorBitForBit) {
  const auto m = manifest();
  ASSERT_EQ(m["preprocess"].size(), 5u);
  for (const auto& c : m["preprocess"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto cfg = read_qwen_vl_video_config((golden_data::data_dir() / c["config"].get<std::string>()).string());
    std::vector<RgbImage> frames;
    for (const auto& f : c["frames"]) frames.push_back(load(f));
    const QwenVlPixels out = qwen_vl_video_preprocess(frames, cfg);
    const GridThw g = qwen_vl_video_grid(static_cast<int64_t>(frames.size()), frames[0].height, frames[0].width, cfg);
    EXPECT_EQ((std::vector<int64_t>{out.grid.t, out.grid.h, out.grid.w}), c["grid_thw"].get<std::vector<int64_t>>());
    EXPECT_EQ((std::vector<int64_t>{g.t, g.h, g.w}), c["grid_thw"].get<std::vector<int64_t>>());
    ASSERT_EQ(out.rows, c["rows"].get<int64_t>());
    ASSERT_EQ(out.cols, c["cols"].get<int64_t>());
    const auto want = golden_data::floats(c["pixel_values"]);
    ASSERT_EQ(want.size(), out.pixel_values.size());
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += out.pixel_values[i] != want[i];
    EXPECT_EQ(bad, 0u) << "of " << want.size();
  }
}

TEST(QwenVlVideo, TimestampsAsQwen3VLProcessorWritesThem) {
  // Frames 0.. at 24 fps, groups of 2: the mean of each group's first and last frame's time.
  EXPECT_EQ(qwen3_vl_video_timestamps(4, 2), (std::vector<std::string>{"<0.0 seconds>", "<0.1 seconds>"}));
  EXPECT_EQ(qwen3_vl_video_timestamps(3, 2), (std::vector<std::string>{"<0.0 seconds>", "<0.1 seconds>"}));
  EXPECT_EQ(qwen3_vl_video_timestamps(6, 2, 2.0), (std::vector<std::string>{"<0.2 seconds>", "<1.2 seconds>",
                                                                             "<2.2 seconds>"}));
  EXPECT_EQ(qwen3_vl_video_timestamps(5, 2, 1.0).back(), "<4.0 seconds>");  // the last frame alone, repeated
}

TEST(QwenVlVideo, ReadsThePublishedQwen3VlConfig) {
  // Qwen/Qwen3-VL-*'s video_preprocessor_config.json, every key as published.
  const auto c = parse_qwen_vl_video_config(nlohmann::json::parse(R"({
    "processor_class": "Qwen3VLProcessor", "do_convert_rgb": true, "do_normalize": true, "do_rescale": true,
    "do_resize": true, "do_sample_frames": true, "fps": 2, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5], "max_frames": 768, "merge_size": 2, "min_frames": 4, "patch_size": 16,
    "resample": 3, "rescale_factor": 0.00392156862745098, "return_metadata": false,
    "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "temporal_patch_size": 2,
    "video_processor_type": "Qwen3VLVideoProcessor"})"),
                                           "video_preprocessor_config.json");
  EXPECT_EQ(c.min_pixels, 4096);
  EXPECT_EQ(c.max_pixels, 25165824);
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_FALSE(c.cap_pixels_per_frame);
  // 8 frames of 480x640 under it: factor 32, within the budget, rounded to the factor.
  const GridThw g = qwen_vl_video_grid(8, 480, 640, c);
  EXPECT_EQ((std::vector<int64_t>{g.t, g.h, g.w}), (std::vector<int64_t>{4, 30, 40}));
}

TEST(QwenVlVideo, HostileInputIsAClearError) {
  QwenVlVideoConfig cfg;
  EXPECT_EQ(error_of([&] { qwen_vl_video_preprocess({}, cfg); }), "a video of no frames: at least 2 are needed");
  RgbImage a{64, 48, std::vector<uint8_t>(64 * 48 * 3, 7)}, b{48, 64, std::vector<uint8_t>(64 * 48 * 3, 7)};
  EXPECT_EQ(error_of([&] { qwen_vl_video_preprocess({a}, cfg); }),
            "a video of 1 frame(s): the processor needs at least temporal_patch_size = 2 frames");
  EXPECT_EQ(error_of([&] { qwen_vl_video_preprocess({a, a, b}, cfg); }),
            "video frame 3 is 48x64, but frame 1 is 64x48: a video's frames must all be the same size");
  EXPECT_EQ(error_of([&] { parse_qwen_vl_video_config({{"video_processor_type", "Qwen2VLVideoProcessor"}}, "v.json"); }),
            "v.json: \"video_processor_type\" \"Qwen2VLVideoProcessor\" is not supported; fp4lm takes video frames "
            "for Qwen3VLVideoProcessor (Qwen3-VL, Qwen3.5) only");
  EXPECT_EQ(error_of([&] { parse_qwen_vl_video_config({{"resample", 2}}, "v.json"); }),
            "v.json: \"resample\" 2 is not supported; expected 3 (bicubic, the Qwen processors' filter)");
  EXPECT_EQ(error_of([&] { parse_qwen_vl_video_config({{"frame_rate", 2}}, "v.json"); }),
            "v.json: unknown key \"frame_rate\" for a Qwen3-VL video processor (fp4lm reads every key it accepts)");
}

}  // namespace
}  // namespace fp4lm::vision::qwen_vl_video_test
