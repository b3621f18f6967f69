// An image prompt end to end through the engine's pieces, against transformers 5.24
// (scripts/make_qwen_vl_e2e_goldens.py): a tiny random Qwen3.5 VL (dense and MoE) with its
// tokenizer, chat template and preprocessor config; the chat message [image, text] rendered and
// encoded, the PNG decoded, preprocessed and encoded by the vision tower (engine/image_input.h),
// and the whole prompt run in float32. The prompt ids equal Qwen3VLProcessor's, and every
// position's logits (the text after the image included) are within 1e-4 of the logit range of
// the float64 forward of Qwen3_5ForConditionalGeneration with pixel_values. The same for Qwen3-VL and
// Qwen3-VL-MoE (scripts/make_qwen3_vl_goldens.py: Qwen3VL(Moe)ForConditionalGeneration, whose
// tower's DeepStack features are added after decoder layers 0 and 1; without them the logits are
// hundreds of times the bound away, which golden.json records). The same for Qwen2.5-VL
// (scripts/make_qwen2_5_vl_goldens.py: Qwen2_5_VLForConditionalGeneration, patch 14, window
// attention in its tower, contiguous M-RoPE; with every block attending to the whole image the
// logits are tens of times the bound away, which golden.json records), and Qwen2-VL
// (Qwen2VLForConditionalGeneration: its tower's LayerNorm / QuickGELU form, no windows).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "common/paths.h"
#include "engine/image_input.h"
#include "engine/prompt_images.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/sequence_chunk.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine::qwen3_5_vl_image_logits_test {
namespace {

namespace fs = std::filesystem;

// "dense", "moe": Qwen3.5 VL; "qwen3_vl_e2e/<kind>": Qwen3-VL.
fs::path fixture(const std::string& kind) {
  const fs::path root = test::source_dir() / "tests/cli/fixtures";
  return kind.find('/') == std::string::npos ? root / "qwen3_5_vl_e2e" / kind : root / kind;
}

void check(const std::string& kind) {
  const std::string dir = fixture(kind).string();
  const nlohmann::json g = io::read_json_file((fixture(kind) / "golden.json").string());
  model::EngineOptions o;
  o.dtype = "float32";
  const auto lm = model::CausalLM::load(dir, o);
  const auto input = ImageInput::for_model(*lm, dir);
  ASSERT_NE(input, nullptr);

  const auto tok = tokenizer::Tokenizer::from_dir(dir);
  const auto tmpl = tokenizer::ChatTemplate::from_dir(dir);
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
  images.push_back(input->encode(std::vector<uint8_t>(png.begin(), png.end()), g["image"].get<std::string>()));
  EXPECT_EQ((std::vector<int64_t>{images[0].grid.t, images[0].grid.h, images[0].grid.w}),
            g["image_grid_thw"].get<std::vector<int64_t>>());
  input->attach(p, std::move(images), lm->max_model_len());
  ASSERT_EQ(p.prompt, g["prompt_ids"].get<std::vector<int32_t>>());

  const int64_t n = static_cast<int64_t>(p.prompt.size()), vocab = lm->vocab_size();
  ASSERT_EQ(g["logits_rows"].get<int64_t>(), n);
  ASSERT_EQ(g["logits_cols"].get<int64_t>(), vocab);
  model::SequenceState state = lm->new_sequence();
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  model::SequenceChunk c;
  c.state = &state;
  c.tokens = p.prompt.data();
  c.n = n;
  c.logits = model::LogitsMode::all;
  c.out = logits.data();
  c.embeds = p.images->embeds.data();
  c.positions = p.images->positions.data();
  lm->forward(std::span<const model::SequenceChunk>(&c, 1));

  const std::string raw = test::read_file(fixture(kind) / "expected_logits.f64");
  ASSERT_EQ(raw.size(), static_cast<size_t>(n * vocab) * sizeof(double));
  std::vector<double> want(static_cast<size_t>(n * vocab));
  std::memcpy(want.data(), raw.data(), raw.size());
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  const double tol = 1e-4 * (*hi - *lo);
  // The text after the image: from <|vision_end|> on.
  const int32_t pad = input->image_pad_id();
  const int64_t last_pad = std::find(p.prompt.rbegin(), p.prompt.rend(), pad).base() - p.prompt.begin() - 1;
  ASSERT_GT(n - last_pad - 1, 10);
  double worst = 0, worst_after = 0;
  for (int64_t i = 0; i < n * vocab; ++i) {
    const double d = std::abs(logits[static_cast<size_t>(i)] - want[static_cast<size_t>(i)]);
    worst = std::max(worst, d);
    if (i / vocab > last_pad) worst_after = std::max(worst_after, d);
  }
  EXPECT_LE(worst_after, tol) << kind << ": text after the image, logit range " << (*hi - *lo);
  EXPECT_LE(worst, tol) << kind << ": all positions";
  EXPECT_GT(worst_after, 0.0) << "compared nothing?";
  ::testing::Test::RecordProperty("rel_diff", fmt::format("{:.2e}", worst / (*hi - *lo)));
  if (g.contains("no_deepstack_rel_diff")) {
    EXPECT_EQ(lm->deepstack_levels(), 2);
    EXPECT_GT(g["no_deepstack_rel_diff"].get<double>(), 100 * 1e-4) << "the fixture would not show DeepStack missing";
  }
  if (g.contains("no_windows_rel_diff")) {
    EXPECT_GT(g["no_windows_rel_diff"].get<double>(), 10 * 1e-4) << "the fixture would not show the windows missing";
  }
}

TEST(Qwen3_5VlImageLogits, DenseEqualsTransformers) { check("dense"); }
TEST(Qwen3_5VlImageLogits, MoeEqualsTransformers) { check("moe"); }
TEST(Qwen3VlImageLogits, DenseEqualsTransformers) { check("qwen3_vl_e2e/dense"); }
TEST(Qwen3VlImageLogits, MoeEqualsTransformers) { check("qwen3_vl_e2e/moe"); }
TEST(Qwen3VlImageLogits, MoeInputMajorEqualsTransformers) { check("qwen3_vl_e2e/moe_input_major"); }
TEST(Qwen3VlImageLogits, MoePerExpertEqualsTransformers) { check("qwen3_vl_e2e/moe_per_expert"); }
TEST(Qwen2_5VlImageLogits, EqualsTransformers) { check("qwen2_5_vl_e2e/qwen2_5_vl"); }
TEST(Qwen2VlImageLogits, EqualsTransformers) { check("qwen2_5_vl_e2e/qwen2_vl"); }

}  // namespace
}  // namespace fp4lm::engine::qwen3_5_vl_image_logits_test
