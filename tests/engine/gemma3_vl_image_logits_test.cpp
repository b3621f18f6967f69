// A Gemma 3 image prompt end to end through the engine's pieces, against transformers 5.24
// (scripts/make_gemma3_vl_goldens.py, tests/model/fixtures/gemma3_vl): a tiny random
// Gemma3ForConditionalGeneration with its tokenizer, chat template and preprocessor config; the
// chat message [image, text] rendered and encoded, the PNG decoded, preprocessed and encoded by
// the SigLIP tower and projector (engine/image_input.h), the <start_of_image> expanded as
// Gemma3Processor writes it, and the whole prompt run in float32 with the image tokens attending
// to each other both ways (sliding and full layers). The prompt ids equal the processor's, and
// every position's logits are within 1e-4 of the logit range of the float64 forward with
// pixel_values and token_type_ids — for the checkpoint's processor and for pan-and-scan (the image
// and 3 crops, four blocks), whole and in forward steps cut before image blocks.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

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
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/sequence_chunk.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/gemma3_processor_config.h"

namespace fp4lm::engine::gemma3_vl_image_logits_test {
namespace {

namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests/model/fixtures/gemma3_vl"; }
nlohmann::json golden() { return io::read_json_file((fixture() / "golden.json").string()); }

std::unique_ptr<model::CausalLM> load(int64_t prefill_chunk = 256) {
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.prefill_chunk = prefill_chunk;
  return model::CausalLM::load(fixture().string(), o, lo);
}

// The image input for a golden case: the checkpoint's own, or with the case's processor keys.
std::unique_ptr<ImageInput> input_for(const model::CausalLM& lm, const nlohmann::json& c) {
  if (c["processor"].empty()) return ImageInput::for_model(lm, fixture().string());
  vision::Gemma3ProcessorConfig cfg = vision::read_gemma3_processor_config(fixture().string());
  vision::apply_gemma3_processor_config(c["processor"], "case", cfg);
  const nlohmann::json j = io::read_json_file((fixture() / "config.json").string());
  Gemma3ImageTokens t;
  t.boi = j["boi_token_index"];
  t.eoi = j["eoi_token_index"];
  t.soft = j["image_token_index"];
  t.per_image = j["mm_tokens_per_image"];
  t.tokenizer = tokenizer::Tokenizer::from_dir(fixture().string());
  return std::make_unique<ImageInput>(*lm.image_encoder(), cfg, t, vision::ImageLimits{});
}

RequestParams prompt_of(const model::CausalLM& lm, const ImageInput& input, const nlohmann::json& c) {
  const auto tok = tokenizer::Tokenizer::from_dir(fixture().string());
  const auto tmpl = tokenizer::ChatTemplate::from_dir(fixture().string());
  const nlohmann::json messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content", nlohmann::json::array({{{"type", "image"}}, {{"type", "text"}, {"text", c["text"]}}})}}});
  tokenizer::ChatOptions co;
  co.add_generation_prompt = true;
  const std::string rendered = tmpl.render(messages, co);
  EXPECT_EQ(rendered, c["rendered"].get<std::string>());
  RequestParams p;
  p.prompt = tok->encode(rendered, /*add_special_tokens=*/false);
  const std::string png = test::read_file(test::source_dir() / c["image"].get<std::string>());
  std::vector<EncodedImage> images;
  images.push_back(input.encode(std::vector<uint8_t>(png.begin(), png.end()), "image"));
  input.attach(p, std::move(images), lm.max_model_len());
  return p;
}

std::vector<double> expected(const nlohmann::json& c) {
  const std::string raw = test::read_file(fixture() / c["file"].get<std::string>());
  std::vector<double> want(raw.size() / sizeof(double));
  std::memcpy(want.data(), raw.data(), raw.size());
  return want;
}

// max |ours - theirs| over the float64 logits' range.
double error(const std::vector<float>& ours, const std::vector<double>& want) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(ours[i] - want[i]));
  return worst / (*hi - *lo);
}

// The prompt's logits, in chunks ending at `cuts` (each chunk one forward call).
std::vector<float> run(const model::CausalLM& lm, const RequestParams& p, std::vector<int64_t> cuts,
                       bool bidirectional = true) {
  const int64_t n = static_cast<int64_t>(p.prompt.size()), vocab = lm.vocab_size();
  cuts.push_back(n);
  model::SequenceState state = lm.new_sequence();
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  int64_t at = 0;
  for (const int64_t end : cuts) {
    model::SequenceChunk c;
    c.state = &state;
    c.tokens = p.prompt.data() + at;
    c.n = end - at;
    c.logits = model::LogitsMode::all;
    c.out = logits.data() + at * vocab;
    c.embeds = p.images->embeds.data() + at;
    if (bidirectional) c.bidir_end = p.images->bidir_end.data() + at;
    lm.forward(std::span<const model::SequenceChunk>(&c, 1));
    at = end;
  }
  return logits;
}

class Gemma3VlImageLogits : public ::testing::TestWithParam<int> {};

TEST_P(Gemma3VlImageLogits, EqualsTransformersWholeAndChunked) {
  const nlohmann::json c = golden()["e2e"][GetParam()];
  SCOPED_TRACE(c["case"].get<std::string>());
  const auto lm = load();
  const auto input = input_for(*lm, c);
  const RequestParams p = prompt_of(*lm, *input, c);
  ASSERT_EQ(p.prompt, c["prompt_ids"].get<std::vector<int32_t>>());
  // The processor's token_type_ids are the soft tokens, each run one bidirectional block.
  const auto types = c["token_type_ids"].get<std::vector<int>>();
  ASSERT_EQ(p.images->bidir_end.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(p.images->bidir_end[i] >= 0, types[i] == 1) << i;
  EXPECT_TRUE(p.images->positions.empty());

  const int64_t n = static_cast<int64_t>(p.prompt.size());
  ASSERT_EQ(c["logits_rows"].get<int64_t>(), n);
  ASSERT_EQ(c["logits_cols"].get<int64_t>(), lm->vocab_size());
  const std::vector<double> want = expected(c);
  const double whole = error(run(*lm, p, {}), want);
  EXPECT_LE(whole, 1e-4);
  RecordProperty("relative_error", fmt::format("{:.2e}", whole));

  // Forward calls cut at block boundaries (before the first image token, after a block) and a
  // model whose forward steps (prefill_chunk 20) would cut inside blocks: the cuts move to the
  // blocks' starts, the logits stay the same.
  const auto first = std::find(types.begin(), types.end(), 1) - types.begin();
  EXPECT_LE(error(run(*lm, p, {first, first + 16}), want), 1e-4);
  const auto small = load(20);
  EXPECT_LE(error(run(*small, p, {}), want), 1e-4);

  // Causal attention over the image tokens is far off (the test would see a missing mask).
  const double causal = error(run(*lm, p, {}, false), want);
  EXPECT_GT(causal, 100 * 1e-4);
  RecordProperty("causal_error", fmt::format("{:.2e}", causal));
}

INSTANTIATE_TEST_SUITE_P(Cases, Gemma3VlImageLogits, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? std::string("plain") : std::string("pan_and_scan"); });

TEST(Gemma3VlImageInput, ChunksCutInsideAnImageBlockAreRefused) {
  const auto lm = load();
  const nlohmann::json c = golden()["e2e"][0];
  const auto input = input_for(*lm, c);
  const RequestParams p = prompt_of(*lm, *input, c);
  const auto types = c["token_type_ids"].get<std::vector<int>>();
  const int64_t first = std::find(types.begin(), types.end(), 1) - types.begin();
  const std::string e = test::error_of([&] { run(*lm, p, {first + 5}); });
  EXPECT_NE(e.find("inside an image block"), std::string::npos) << e;
  // A block longer than a forward step.
  const auto tiny = load(8);
  const std::string e2 = test::error_of([&] { run(*tiny, p, {}); });
  EXPECT_NE(e2.find("is 16 tokens, more than one forward step of 8 rows"), std::string::npos) << e2;
}

TEST(Gemma3VlImageInput, PlaceholderCountsAndContextAreChecked) {
  const auto lm = load();
  const auto input = ImageInput::for_model(*lm, fixture().string());
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->image_pad_id(), 261);  // <start_of_image>
  EXPECT_EQ(input->tokens_for(84, 56), 4 + 2 + 16);
  const std::string png = test::read_file(test::source_dir() / "tests/vision/data/rgb_56x84.png");
  const auto one = [&] {
    std::vector<EncodedImage> v;
    v.push_back(input->encode(std::vector<uint8_t>(png.begin(), png.end()), "image 1"));
    return v;
  };
  RequestParams none;
  none.prompt = {258, 65, 66};
  std::string e = test::error_of([&] { input->attach(none, one(), 256); });
  EXPECT_NE(e.find("0 image placeholder(s) (<start_of_image>, token id 261) for 1 image(s)"), std::string::npos) << e;
  RequestParams soft;
  soft.prompt = {258, 261, 263, 65};
  e = test::error_of([&] { input->attach(soft, one(), 256); });
  EXPECT_NE(e.find("already holds image soft tokens"), std::string::npos) << e;
  RequestParams tight;
  tight.prompt = {258, 261, 65};
  e = test::error_of([&] { input->attach(tight, one(), 20); });
  EXPECT_NE(e.find("more than the model's context of 20"), std::string::npos) << e;
  // The newline before the image's "\n\n" stays its own token with this byte-level vocabulary,
  // and the expansion is the processor's string tokenized.
  RequestParams ok;
  ok.prompt = {258, 10, 261, 65};
  input->attach(ok, one(), 256);
  const auto tok = tokenizer::Tokenizer::from_dir(fixture().string());
  std::string s = "<bos>\n\n\n<start_of_image>";
  for (int i = 0; i < 16; ++i) s += "<image_soft_token>";
  s += "<end_of_image>\n\nA";
  EXPECT_EQ(ok.prompt, tok->encode(s, false));
}

}  // namespace
}  // namespace fp4lm::engine::gemma3_vl_image_logits_test
