// A Nemotron Omni image prompt end to end through the engine's pieces, against transformers 5.24
// (scripts/make_nemotron_h_omni_goldens.py, tests/model/fixtures/nemotron_h_omni): a tiny random
// NemotronH_Omni_Reasoning_V3 (Nemotron-H language model M * - M, a 2-layer RADIO tower of patch 4
// with 2 cls + 2 register tokens and an 8 x 8 position table interpolated to the image's grid, the
// 2 x 2 pixel shuffle and the RMSNorm / relu^2 projector) saved in the published layout, with its
// tokenizer, chat template and preprocessor config; the chat message [image, text] rendered and
// encoded, the PNG decoded, preprocessed and encoded (engine/image_input.h), <image> expanded as
// the processor writes it (<img> + <image> x 15 + </img>), and the prompt run in float32. The
// prompt ids equal the processor's; the projected image features, and the logits at every position
// (the text after the image included), are within 1e-4 of the float64 forward's range, argmax
// equal; a blank image moves them far more than that (the golden's blank_image_rel_diff).
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <vector>

#include "common/error_of.h"
#include "common/paths.h"
#include "engine/image_input.h"
#include "engine/prompt_images.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/sequence_chunk.h"
#include "model/vision/nemotron_image_encoder.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_decode.h"

namespace fp4lm::engine::nemotron_h_omni_image_logits_test {
namespace {

namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests/model/fixtures/nemotron_h_omni"; }
nlohmann::json golden() { return io::read_json_file((fixture() / "golden.json").string()); }

std::unique_ptr<model::CausalLM> load() {
  model::EngineOptions o;
  o.dtype = "float32";
  return model::CausalLM::load(fixture().string(), o);
}

std::vector<double> f64(const std::string& name) {
  const std::string raw = test::read_file(fixture() / name);
  std::vector<double> v(raw.size() / sizeof(double));
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

// max |ours - theirs| over the float64 values' range.
double error(const std::vector<float>& ours, const std::vector<double>& want) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(ours[i] - want[i]));
  return worst / (*hi - *lo);
}

RequestParams prompt_of(const model::CausalLM& lm, const ImageInput& input, const nlohmann::json& g) {
  const auto tok = tokenizer::Tokenizer::from_dir(fixture().string());
  const auto tmpl = tokenizer::ChatTemplate::from_dir(fixture().string());
  const nlohmann::json messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content", nlohmann::json::array({{{"type", "image"}}, {{"type", "text"}, {"text", g["text"]}}})}}});
  tokenizer::ChatOptions co;
  co.add_generation_prompt = true;
  const std::string rendered = tmpl.render(messages, co);
  EXPECT_EQ(rendered, g["rendered"].get<std::string>());
  RequestParams p;
  p.prompt = tok->encode(rendered, /*add_special_tokens=*/false);
  const std::string png = test::read_file(test::source_dir() / g["image"].get<std::string>());
  std::vector<EncodedImage> images;
  images.push_back(input.encode(std::vector<uint8_t>(png.begin(), png.end()), "image"));
  input.attach(p, std::move(images), lm.max_model_len());
  return p;
}

std::vector<float> run(const model::CausalLM& lm, const RequestParams& p) {
  const int64_t n = static_cast<int64_t>(p.prompt.size()), vocab = lm.vocab_size();
  model::SequenceState state = lm.new_sequence();
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  model::SequenceChunk c;
  c.state = &state;
  c.tokens = p.prompt.data();
  c.n = n;
  c.logits = model::LogitsMode::all;
  c.out = logits.data();
  c.embeds = p.images->embeds.data();
  lm.forward(std::span<const model::SequenceChunk>(&c, 1));
  return logits;
}

TEST(NemotronHOmniImage, ImageFeaturesEqualTransformers) {
  const nlohmann::json g = golden();
  const auto lm = load();
  const auto* enc = dynamic_cast<const model::NemotronImageEncoder*>(lm->image_encoder());
  ASSERT_NE(enc, nullptr);
  const auto proc = vision::read_nemotron_processor_config(fixture().string());
  const std::string png = test::read_file(test::source_dir() / g["image"].get<std::string>());
  const vision::RgbImage img =
      vision::decode_image(std::vector<uint8_t>(png.begin(), png.end()), {}, "image");
  const vision::NemotronPixels px = vision::nemotron_preprocess(img, proc);
  EXPECT_EQ(px.grid.h, g["image_grid_hw"][0].get<int64_t>());
  EXPECT_EQ(px.grid.w, g["image_grid_hw"][1].get<int64_t>());
  const model::ImageEmbeddings e = enc->encode(px);
  const std::vector<double> want = f64("image_features.f64");
  ASSERT_EQ(e.rows, g["image_features_shape"][0].get<int64_t>());
  ASSERT_EQ(e.cols, g["image_features_shape"][1].get<int64_t>());
  ASSERT_EQ(want.size(), e.values.size());
  const double err = error(e.values, want);
  std::printf("image features: max error %.2e of the range\n", err);
  EXPECT_LE(err, 1e-4);
  // Another family's pixels are refused by name.
  const std::string wrong = test::error_of([&] { enc->encode(vision::QwenVlPixels{}); });
  EXPECT_NE(wrong.find("Nemotron Omni processor patches"), std::string::npos) << wrong;
}

TEST(NemotronHOmniImage, PromptLogitsEqualTransformers) {
  const nlohmann::json g = golden();
  const auto lm = load();
  const auto input = ImageInput::for_model(*lm, fixture().string());
  ASSERT_NE(input, nullptr);
  const RequestParams p = prompt_of(*lm, *input, g);
  ASSERT_EQ(p.prompt, g["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_TRUE(p.images->positions.empty());
  EXPECT_TRUE(p.images->bidir_end.empty());  // causal
  const int64_t n = static_cast<int64_t>(p.prompt.size()), V = lm->vocab_size();
  ASSERT_EQ(g["logits_rows"].get<int64_t>(), n);
  ASSERT_EQ(g["logits_cols"].get<int64_t>(), V);
  EXPECT_EQ(input->tokens_for(100, 150), 2 + g["image_tokens"].get<int64_t>());
  const std::vector<double> want = f64("expected_logits.f64");
  const std::vector<float> got = run(*lm, p);
  const double err = error(got, want);
  std::printf("prompt logits: max error %.2e of the float64 range\n", err);
  EXPECT_LE(err, 1e-4);
  // Argmax equal at every position, and the positions after the image checked on their own.
  const int32_t image_id = lm->image_encoder() ? input->image_pad_id() : -1;
  int64_t last_image = 0;
  for (int64_t i = 0; i < n; ++i)
    if (p.prompt[static_cast<size_t>(i)] == image_id) last_image = i;
  ASSERT_GT(last_image, 0);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = got.data() + i * V;
    const double* w = want.data() + i * V;
    EXPECT_EQ(std::max_element(r, r + V) - r, std::max_element(w, w + V) - w) << "position " << i;
  }
  const std::vector<float> after(got.begin() + (last_image + 1) * V, got.end());
  const std::vector<double> want_after(want.begin() + (last_image + 1) * V, want.end());
  EXPECT_LE(error(after, want_after), 1e-4);
  EXPECT_GT(g["blank_image_rel_diff"].get<double>(), 100 * 1e-4);
}

TEST(NemotronHOmniImage, PlaceholderCountsAreChecked) {
  const nlohmann::json g = golden();
  const auto lm = load();
  const auto input = ImageInput::for_model(*lm, fixture().string());
  ASSERT_NE(input, nullptr);
  RequestParams p;
  p.prompt = {257, 10, 258};  // no <image>
  const std::string png = test::read_file(test::source_dir() / g["image"].get<std::string>());
  std::vector<EncodedImage> images;
  images.push_back(input->encode(std::vector<uint8_t>(png.begin(), png.end()), "image"));
  const std::string e = test::error_of([&] { input->attach(p, std::move(images), lm->max_model_len()); });
  EXPECT_NE(e.find("0 image placeholder(s) (<image>, token id 259) for 1 image(s)"), std::string::npos) << e;
}

// What the tower does not implement is an Error naming the key, never ignored.
TEST(NemotronHOmniImage, UnsupportedVisionSettingsAreRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"swiglu", [](nlohmann::json& c) { c["vision_config"]["use_swiglu_ffn"] = true; }, "field 'use_swiglu_ffn'"},
      {"unknown", [](nlohmann::json& c) { c["vision_config"]["cpe_mode"] = 1; }, "unknown field 'cpe_mode'"},
      {"act", [](nlohmann::json& c) { c["vision_config"]["hidden_act"] = "silu"; }, "field 'hidden_act' is 'silu'"},
      {"tiling", [](nlohmann::json& c) { c["force_image_size"] = 512; }, "field 'force_image_size' is 512"},
      {"width", [](nlohmann::json& c) { c["vision_hidden_size"] = 64; }, "field 'vision_hidden_size' is 64"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    fp4lm::test::TempDir tmp;
    for (const auto& f : fs::directory_iterator(fixture())) fs::copy(f.path(), tmp.path() / f.path().filename());
    nlohmann::json c = io::read_json_file((tmp.path() / "config.json").string());
    k.edit(c);
    std::ofstream((tmp.path() / "config.json").string()) << c.dump(2);
    model::EngineOptions o;
    o.dtype = "float32";
    const std::string e = test::error_of([&] { model::CausalLM::load(tmp.path().string(), o); });
    EXPECT_NE(e.find(k.error), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::engine::nemotron_h_omni_image_logits_test
