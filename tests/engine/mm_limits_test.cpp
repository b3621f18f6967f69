// limit_mm_per_prompt's one rule (engine/mm_limits.h), read by `fp4lm serve --limit-mm-per-prompt`
// and fp4lm.LLM(limit_mm_per_prompt=...).
#include "engine/mm_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "common/log_capture.h"
#include "core/error.h"

namespace fp4lm::engine {
namespace {

std::string limit_error(const std::string& text) {
  try {
    image_limit(text, "--limit-mm-per-prompt");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MmLimits, ImageCountInBothForms) {
  EXPECT_EQ(image_limit(std::string(), "--limit-mm-per-prompt"), 999);  // vLLM's default
  EXPECT_EQ(image_limit(std::string("{}"), "--limit-mm-per-prompt"), 999);
  EXPECT_EQ(image_limit(std::string(R"({"image": 2})"), "--limit-mm-per-prompt"), 2);
  EXPECT_EQ(image_limit(std::string(R"({"image": {"count": 0}})"), "--limit-mm-per-prompt"), 0);
  EXPECT_EQ(image_limit(std::string(R"({"image": 3, "video": 0, "audio": {"count": 0}})"), "x"), 3);
}

TEST(MmLimits, VideoAndAudioLimitsAreAcceptedAndSaidToHaveNoEffect) {
  fp4lm::test::LogCapture logs(spdlog::level::warn);
  EXPECT_EQ(image_limit(std::string(R"({"image": 4, "video": 1})"), "--limit-mm-per-prompt"), 4);
  EXPECT_EQ(logs.count("--limit-mm-per-prompt: the video limit (1) has no effect: fp4lm takes images only"), 1)
      << logs.text();
  EXPECT_EQ(image_limit(std::string(R"({"audio": {"count": 2}})"), "limit_mm_per_prompt"), 999);
  EXPECT_EQ(logs.count("limit_mm_per_prompt: the audio limit (2) has no effect"), 1) << logs.text();
  image_limit(std::string(R"({"video": 0})"), "--limit-mm-per-prompt");  // 0 says nothing
  EXPECT_EQ(logs.count("has no effect"), 2) << logs.text();
}

TEST(MmLimits, VideoCountForTheFramesFp4lmLlmTakes) {
  fp4lm::test::LogCapture logs(spdlog::level::warn);
  EXPECT_EQ(video_limit(std::string(), "limit_mm_per_prompt"), 999);  // vLLM's default
  EXPECT_EQ(video_limit(std::string(R"({"image": 2})"), "limit_mm_per_prompt"), 999);
  EXPECT_EQ(video_limit(std::string(R"({"video": {"count": 1}})"), "limit_mm_per_prompt"), 1);
  EXPECT_EQ(video_limit(std::string(R"({"video": 0})"), "limit_mm_per_prompt"), 0);
  // Where videos are taken their limit is not said to have no effect; audio's still is.
  EXPECT_EQ(image_limit(std::string(R"({"image": 4, "video": 2, "audio": 1})"), "limit_mm_per_prompt", true), 4);
  EXPECT_EQ(logs.count("the video limit"), 0) << logs.text();
  EXPECT_EQ(logs.count("the audio limit (1) has no effect"), 1) << logs.text();
  EXPECT_THROW(video_limit(std::string(R"({"video": -1})"), "limit_mm_per_prompt"), UsageError);
}

TEST(MmLimits, EveryBadValueNamesTheOptionAndKey) {
  EXPECT_EQ(limit_error("{image: 2}"), "--limit-mm-per-prompt: '{image: 2}' is not JSON; expected e.g. '{\"image\": 2}'");
  EXPECT_EQ(limit_error("[2]"), "--limit-mm-per-prompt: expected a JSON object such as {\"image\": 2}, got [2]");
  EXPECT_EQ(limit_error(R"({"images": 2})"), "--limit-mm-per-prompt: unknown modality 'images' (image, video or audio)");
  EXPECT_EQ(limit_error(R"({"image": -1})"), "--limit-mm-per-prompt: 'image' must be a count >= 0, got -1");
  EXPECT_EQ(limit_error(R"({"image": 1.5})"), "--limit-mm-per-prompt: 'image' must be a count >= 0, got 1.5");
  EXPECT_EQ(limit_error(R"({"image": true})"), "--limit-mm-per-prompt: 'image' must be a count >= 0, got true");
  EXPECT_EQ(limit_error(R"({"image": 18446744073709551615})"),
            "--limit-mm-per-prompt: 'image' must be a count >= 0, got 18446744073709551615");
  EXPECT_EQ(limit_error(R"({"video": {"count": 1, "num_frames": 8}})"),
            "--limit-mm-per-prompt: 'video.num_frames': only 'count' is read");
  EXPECT_EQ(limit_error(R"({"image": {}})"), "--limit-mm-per-prompt: 'image' needs a 'count'");
}

}  // namespace
}  // namespace fp4lm::engine
