// `fp4lm generate --image` through the binary, against transformers 5.24
// (scripts/make_qwen_vl_e2e_goldens.py, scripts/make_qwen3_vl_goldens.py): on a tiny random Qwen3.5
// VL and Qwen3-VL (dense and MoE), a PNG + a
// --chat message give Qwen3VLProcessor's prompt ids and transformers' greedy tokens; the same
// with the placeholder written into --prompt-ids; and the usage errors (a model without a
// vision tower, an unreadable or undecodable image, placeholders that do not match the images).
// The same on a tiny random Gemma 3 (scripts/make_gemma3_vl_goldens.py): Gemma3Processor's prompt
// ids (<start_of_image> expanded, bidirectional image tokens) and transformers' greedy tokens; on
// a tiny random Gemma 4 (scripts/make_gemma4_vl_goldens.py): Gemma4Processor's prompt ids
// (<|image|> expanded to boi, the image's soft tokens, eoi) and transformers' greedy tokens.
// And on a tiny random Qwen2.5-VL (scripts/make_qwen2_5_vl_goldens.py: patch 14, a windowed tower,
// a 150 x 100 PNG) and Qwen2-VL, the processors' prompt ids and transformers' greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace fp4lm::generate_image_cli_test {
namespace {

using nlohmann::json;

test::CommandResult fp4lm(const std::string& args) { return test::run_fp4lm(args); }

// "dense", "moe": Qwen3.5 VL; "qwen3_vl_e2e/dense" etc.: Qwen3-VL (scripts/make_qwen3_vl_goldens.py).
std::string fixture(const std::string& kind) {
  const auto root = test::source_dir() / "tests/cli/fixtures";
  return (kind.find('/') == std::string::npos ? root / "qwen3_5_vl_e2e" / kind : root / kind).string();
}
std::string image() { return (test::source_dir() / "tests/vision/data/rgb_56x84.png").string(); }
json golden(const std::string& kind) { return json::parse(test::read_file(fixture(kind) + "/golden.json")); }

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t v : ids) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

void chat_with_image(const std::string& kind) {
  const json g = golden(kind);
  const std::string img = g.contains("image") ? (test::source_dir() / g["image"].get<std::string>()).string() : image();
  const auto r = fp4lm("generate --model " + fixture(kind) + " --chat '" + g["text"].get<std::string>() +
                       "' --image " + img + " --json --dtype float32 --ignore-eos --max-tokens " +
                       std::to_string(g["greedy_ids"].size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(out["output_ids"], g["greedy_ids"]);
}

TEST(GenerateImageCli, DenseChatWithImageEqualsTransformers) { chat_with_image("dense"); }
TEST(GenerateImageCli, MoeChatWithImageEqualsTransformers) { chat_with_image("moe"); }
// Qwen3-VL: the tower's DeepStack features added after the first decoder layers.
TEST(GenerateImageCli, Qwen3VlDenseChatWithImageEqualsTransformers) { chat_with_image("qwen3_vl_e2e/dense"); }
TEST(GenerateImageCli, Qwen3VlMoeChatWithImageEqualsTransformers) { chat_with_image("qwen3_vl_e2e/moe"); }
TEST(GenerateImageCli, Qwen3VlMoePerExpertChatWithImageEqualsTransformers) {
  chat_with_image("qwen3_vl_e2e/moe_per_expert");
}

// Qwen2.5-VL: window attention in the tower, contiguous M-RoPE in the text model.
TEST(GenerateImageCli, Qwen2_5VlChatWithImageEqualsTransformers) { chat_with_image("qwen2_5_vl_e2e/qwen2_5_vl"); }

// fp4lm quantize keeps the tower of the published layout (visual.*) unquantized and lists it, and
// copies the processor's settings: the quantized checkpoint still takes the image.
TEST(GenerateImageCli, Qwen2_5VlQuantizedKeepsItsTower) {
  const test::TempDir tmp;
  const std::string out = (tmp / "q").string();
  const auto q = fp4lm("quantize --model " + fixture("qwen2_5_vl_e2e/qwen2_5_vl") + " --out " + out +
                       " --algo W4A16_NVFP4");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const json hq = json::parse(test::read_file(out + "/hf_quant_config.json"));
  const json& ex = hq["quantization"]["exclude_modules"];
  EXPECT_NE(std::find(ex.begin(), ex.end(), "visual*"), ex.end()) << ex.dump();
  const json g = golden("qwen2_5_vl_e2e/qwen2_5_vl");
  const auto r = fp4lm("generate --model " + out + " --chat '" + g["text"].get<std::string>() + "' --image " +
                       (test::source_dir() / g["image"].get<std::string>()).string() +
                       " --json --dtype float32 --ignore-eos --max-tokens 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json o = json::parse(r.out);
  EXPECT_EQ(o["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(o["output_ids"].size(), 3u);
}

TEST(GenerateImageCli, Qwen2VlChatWithImageEqualsTransformers) { chat_with_image("qwen2_5_vl_e2e/qwen2_vl"); }

TEST(GenerateImageCli, PromptIdsWithOnePlaceholderPerImage) {
  const json g = golden("dense");
  const int32_t pad = 261;  // <|image_pad|> in the fixture's tokenizer
  std::vector<int32_t> ids;
  for (int32_t v : g["prompt_ids"].get<std::vector<int32_t>>())
    if (v != pad || ids.empty() || ids.back() != pad) ids.push_back(v);  // the run collapsed to one
  const auto r = fp4lm("generate --model " + fixture("dense") + " --prompt-ids " + ids_arg(ids) + " --image " +
                       image() + " --json --dtype float32 --ignore-eos --max-tokens " +
                       std::to_string(g["greedy_ids"].size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(out["output_ids"], g["greedy_ids"]);

  // Two images for one placeholder: a usage error.
  const auto two = fp4lm("generate --model " + fixture("dense") + " --prompt-ids " + ids_arg(ids) + " --image " +
                         image() + " --image " + image() + " --max-tokens 1");
  EXPECT_EQ(two.exit_code, 2) << two.err;
  EXPECT_NE(two.err.find("placeholder"), std::string::npos) << two.err;
}

std::string gemma3() { return (test::source_dir() / "tests/model/fixtures/gemma3_vl").string(); }

TEST(GenerateImageCli, Gemma3ChatWithImageEqualsTransformers) {
  const json g = json::parse(test::read_file(gemma3() + "/golden.json"))["e2e"][0];
  const auto r = fp4lm("generate --model " + gemma3() + " --chat '" + g["text"].get<std::string>() + "' --image " +
                       image() + " --json --dtype float32 --ignore-eos --max-tokens " +
                       std::to_string(g["greedy_ids"].size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(out["output_ids"], g["greedy_ids"]);

  // The prompt as ids with one <start_of_image> (261), as the template wrote it: the expansion
  // ("\n\n", the block, "\n\n") collapsed back.
  const auto full = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto boi = std::find(full.begin(), full.end(), 261) - full.begin();
  const auto eoi = std::find(full.begin(), full.end(), 262) - full.begin();
  std::vector<int32_t> raw(full.begin(), full.begin() + boi - 2);
  raw.push_back(261);
  raw.insert(raw.end(), full.begin() + eoi + 3, full.end());
  const auto r2 = fp4lm("generate --model " + gemma3() + " --prompt-ids " + ids_arg(raw) + " --image " + image() +
                        " --json --dtype float32 --ignore-eos --max-tokens " + std::to_string(g["greedy_ids"].size()));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const json out2 = json::parse(r2.out);
  EXPECT_EQ(out2["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(out2["output_ids"], g["greedy_ids"]);
}

std::string gemma4() { return (test::source_dir() / "tests/model/fixtures/gemma4_vl").string(); }

TEST(GenerateImageCli, Gemma4ChatWithImageEqualsTransformers) {
  const json golden = json::parse(test::read_file(gemma4() + "/golden.json"));
  ASSERT_EQ(golden["e2e"].size(), 2u);
  for (const json& g : golden["e2e"]) {
    SCOPED_TRACE(g["case"].get<std::string>());
    const std::string img = (test::source_dir() / g["image"].get<std::string>()).string();
    const auto r = fp4lm("generate --model " + gemma4() + " --chat '" + g["text"].get<std::string>() + "' --image " +
                         img + " --json --dtype float32 --ignore-eos --max-tokens " +
                         std::to_string(g["greedy_ids"].size()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["prompt_ids"], g["prompt_ids"]);
    EXPECT_EQ(out["output_ids"], g["greedy_ids"]);

    // The prompt as ids with one <|image|> (263), as the template wrote it.
    const auto full = g["prompt_ids"].get<std::vector<int32_t>>();
    const auto boi = std::find(full.begin(), full.end(), 261) - full.begin();
    const auto eoi = std::find(full.begin(), full.end(), 262) - full.begin();
    std::vector<int32_t> raw(full.begin(), full.begin() + boi);
    raw.push_back(263);
    raw.insert(raw.end(), full.begin() + eoi + 1, full.end());
    const auto r2 = fp4lm("generate --model " + gemma4() + " --prompt-ids " + ids_arg(raw) + " --image " + img +
                          " --json --dtype float32 --ignore-eos --max-tokens " +
                          std::to_string(g["greedy_ids"].size()));
    ASSERT_EQ(r2.exit_code, 0) << r2.err;
    const json out2 = json::parse(r2.out);
    EXPECT_EQ(out2["prompt_ids"], g["prompt_ids"]);
    EXPECT_EQ(out2["output_ids"], g["greedy_ids"]);
  }
}

TEST(GenerateImageCli, BadImagesAreUsageErrorsNamingTheFile) {
  const std::string cfg = fixture("dense") + "/config.json";
  auto r = fp4lm("generate --model " + fixture("dense") + " --chat hi --image " + cfg + " --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(cfg), std::string::npos) << r.err;
  r = fp4lm("generate --model " + fixture("dense") + " --chat hi --image /nonexistent/x.png --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot read '/nonexistent/x.png'"), std::string::npos) << r.err;
}

TEST(GenerateImageCli, ModelWithoutAVisionTowerIsAUsageErrorNamingIt) {
  FP4LM_REQUIRE_SHARED("models/stories260k/config.json");
  const std::string model = (test::shared_dir() / "models/stories260k").string();
  const auto r = fp4lm("generate --model " + model + " --prompt-ids 1,2 --image " + image() + " --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model '" + model + "' has no vision tower"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4lm::generate_image_cli_test
