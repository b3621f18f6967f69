// A video given as frames end to end through the engine's pieces, against transformers 5.24
// (scripts/make_qwen3_vl_video_goldens.py): the tiny random Qwen3-VL of
// tests/cli/fixtures/qwen3_vl_e2e/dense with a Qwen3VLVideoProcessor; the chat message [video,
// text] rendered and encoded, the PNG frames decoded, preprocessed (vision/qwen_vl_video.h) and
// encoded by the vision tower, the placeholder expanded with Qwen3VLProcessor's timestamps, and the
// prompt run in float32. Prompt ids and the 3-D positions equal the processor's and get_rope_index's;
// every position's logits are within 1e-4 of the logit range of the float64 forward with
// pixel_values_videos, argmax equal, for 4 frames and for 3 (the odd count padded with the last).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "common/error_of.h"
#include "common/paths.h"
#include "engine/image_input.h"
#include "engine/prompt_images.h"
#include "engine/request_error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/sequence_chunk.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_decode.h"

namespace fp4lm::engine::qwen3_vl_video_logits_test {
namespace {

namespace fs = std::filesystem;

fs::path model_dir() { return test::source_dir() / "tests/cli/fixtures/qwen3_vl_e2e/dense"; }
fs::path golden_dir() { return test::source_dir() / "tests/cli/fixtures/qwen3_vl_video"; }

struct Loaded {
  std::unique_ptr<model::CausalLM> lm;
  std::unique_ptr<ImageInput> input;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
};

Loaded load() {
  model::EngineOptions o;
  o.dtype = "float32";
  Loaded l;
  l.lm = model::CausalLM::load(model_dir().string(), o);
  l.input = ImageInput::for_model(*l.lm, model_dir().string());
  l.tok = tokenizer::Tokenizer::from_dir(model_dir().string());
  return l;
}

std::vector<vision::RgbImage> frames_of(const nlohmann::json& files) {
  std::vector<vision::RgbImage> out;
  for (const auto& f : files) {
    const std::string s = test::read_file(test::source_dir() / f.get<std::string>());
    out.push_back(vision::decode_image({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, {}, f));
  }
  return out;
}

std::vector<int32_t> rendered_prompt(const Loaded& l, const nlohmann::json& g) {
  const auto tmpl = tokenizer::ChatTemplate::from_dir(model_dir().string());
  const nlohmann::json messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content", nlohmann::json::array({{{"type", "video"}}, {{"type", "text"}, {"text", g["text"]}}})}}});
  tokenizer::ChatOptions co;
  co.add_generation_prompt = true;
  const std::string rendered = tmpl.render(messages, co);
  EXPECT_EQ(rendered, g["rendered"].get<std::string>());
  return l.tok->encode(rendered, /*add_special_tokens=*/false);
}

void check(const std::string& name) {
  const nlohmann::json g = io::read_json_file((golden_dir() / "golden.json").string());
  const nlohmann::json& v = g["videos"][name];
  const Loaded l = load();
  ASSERT_NE(l.input, nullptr);
  ASSERT_EQ(l.input->video_refusal(), "");
  RequestParams p;
  p.prompt = rendered_prompt(l, g);
  const auto frames = frames_of(v["frames"]);
  std::vector<EncodedImage> videos;
  videos.push_back(l.input->encode_video(frames, name));
  EXPECT_EQ((std::vector<int64_t>{videos[0].grid.t, videos[0].grid.h, videos[0].grid.w}),
            v["video_grid_thw"].get<std::vector<int64_t>>());
  const int64_t before = static_cast<int64_t>(p.prompt.size());
  l.input->attach(p, {}, std::move(videos), l.lm->max_model_len());
  ASSERT_EQ(p.prompt, v["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(before + l.input->tokens_for_video(static_cast<int64_t>(frames.size()), frames[0].height, frames[0].width),
            static_cast<int64_t>(p.prompt.size()));
  const int64_t n = static_cast<int64_t>(p.prompt.size()), vocab = l.lm->vocab_size();
  // get_rope_index's positions: [3][n].
  const auto want_pos = v["positions"].get<std::vector<std::vector<int64_t>>>();
  for (int64_t t = 0; t < n; ++t)
    for (int a = 0; a < 3; ++a)
      ASSERT_EQ(p.images->positions[static_cast<size_t>(3 * t + a)], want_pos[static_cast<size_t>(a)][static_cast<size_t>(t)])
          << "token " << t << " axis " << a;
  // Decoding continues at length + rope_delta: the largest position + 1 - n, as get_rope_index's.
  const int64_t top = *std::max_element(p.images->positions.begin(), p.images->positions.end());
  EXPECT_EQ(top + 1 - n, v["rope_delta"].get<int64_t>());
  ASSERT_EQ(v["logits_rows"].get<int64_t>(), n);
  ASSERT_EQ(v["logits_cols"].get<int64_t>(), vocab);
  model::SequenceState state = l.lm->new_sequence();
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  model::SequenceChunk c;
  c.state = &state;
  c.tokens = p.prompt.data();
  c.n = n;
  c.logits = model::LogitsMode::all;
  c.out = logits.data();
  c.embeds = p.images->embeds.data();
  c.positions = p.images->positions.data();
  l.lm->forward(std::span<const model::SequenceChunk>(&c, 1));
  const std::string raw = test::read_file(golden_dir() / (name + "_logits.f64"));
  ASSERT_EQ(raw.size(), static_cast<size_t>(n * vocab) * sizeof(double));
  std::vector<double> want(static_cast<size_t>(n * vocab));
  std::memcpy(want.data(), raw.data(), raw.size());
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  const double range = *hi - *lo;
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* gr = logits.data() + r * vocab;
    const double* wr = want.data() + r * vocab;
    for (int64_t k = 0; k < vocab; ++k) worst = std::max(worst, std::abs(gr[k] - wr[k]));
    EXPECT_EQ(std::max_element(gr, gr + vocab) - gr, std::max_element(wr, wr + vocab) - wr) << "argmax at " << r;
  }
  EXPECT_LE(worst, 1e-4 * range) << name << ": logit range " << range;
  EXPECT_GT(worst, 0.0) << "compared nothing?";
  std::printf("%s: %lld tokens, max |float32 - float64| = %.3g of the logit range\n", name.c_str(),
              static_cast<long long>(n), worst / range);
  ::testing::Test::RecordProperty("rel_diff", fmt::format("{:.2e}", worst / range));
}

TEST(Qwen3VlVideoLogits, FourFramesEqualTransformers) { check("frames4"); }
TEST(Qwen3VlVideoLogits, ThreeFramesEqualTransformers) { check("frames3"); }

TEST(Qwen3VlVideoLogits, HostileVideosAreRequestErrors) {
  const nlohmann::json g = io::read_json_file((golden_dir() / "golden.json").string());
  const Loaded l = load();
  const auto frames = frames_of(g["videos"]["frames4"]["frames"]);
  EXPECT_EQ(test::error_of([&] { l.input->encode_video({}, "video 1"); }),
            "video 1: a video of no frames: at least 2 are needed");
  EXPECT_EQ(test::error_of([&] { l.input->encode_video({frames[0]}, "video 1"); }),
            "video 1: a video of 1 frame(s): the processor needs at least temporal_patch_size = 2 frames");
  const auto odd = frames_of(g["videos"]["frames3"]["frames"]);
  EXPECT_EQ(test::error_of([&] { l.input->encode_video({frames[0], odd[0]}, "video 1"); }),
            "video 1: video frame 2 is 83x37, but frame 1 is 60x44: a video's frames must all be the same size");
  // Two videos for one placeholder; a prompt the video does not fit.
  std::vector<EncodedImage> two = {l.input->encode_video(frames, "v"), l.input->encode_video(frames, "v")};
  RequestParams p;
  p.prompt = rendered_prompt(l, g);
  EXPECT_EQ(test::error_of([&] { l.input->attach(p, {}, two, l.lm->max_model_len()); }),
            "the prompt has 1 video placeholder(s) (token id 262) for 2 video(s); each video needs exactly one (a "
            "video content part or <|vision_start|><|video_pad|><|vision_end|> in a raw prompt)");
  const std::string too_long =
      "video 1 (4 frames, 12 tokens per frame group) makes the prompt 101 tokens, more than the model's context of 60 "
      "(max_model_len) leaves room for";
  EXPECT_EQ(test::error_of([&] { l.input->attach(p, {}, {two[0]}, 60); }), too_long);
  // The same from the frames' size alone, before the tower runs; and a thousand frames for a long context.
  const int64_t n = static_cast<int64_t>(p.prompt.size());
  EXPECT_EQ(test::error_of([&] { l.input->check_videos_fit(n, {{4, 44, 60}}, 60); }), too_long);
  l.input->check_videos_fit(n, {{4, 44, 60}}, 256);  // fits
  EXPECT_NE(test::error_of([&] { l.input->check_videos_fit(n, {{4, 44, 60}, {1000, 44, 60}}, 256); })
                .find("video 2 (1000 frames, "),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::engine::qwen3_vl_video_logits_test
