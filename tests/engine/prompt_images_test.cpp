// engine/prompt_images.h and engine/image_input.h: prompt token ids as the Hugging Face Qwen3-VL
// processor expands an image's placeholder (goldens: scripts/make_image_prompt_goldens.py, the
// real Qwen3 tokenizer and Qwen3.5's processor config), the rows / positions / prefix-cache key
// of an expanded prompt, and images from file bytes through ImageInput with a stand-in encoder.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/paths.h"
#include "engine/image_input.h"
#include "engine/prompt_images.h"
#include "engine/request_error.h"
#include "engine/test_image_encoder.h"
#include "model/layers/mrope_positions.h"
#include "tokenizer/tokenizer.h"
#include "vision/qwen_vl_processor_config.h"

namespace fp4lm::engine::prompt_images_test {
namespace {

constexpr int32_t kPad = 151655;  // <|image_pad|>

vision::QwenVlProcessorConfig qwen35_config() {
  return vision::read_qwen_vl_processor_config(
      (fp4lm::test::source_dir() / "tests/vision/data/preprocessor_qwen35.json").string());
}

std::vector<uint8_t> file_bytes(const std::string& name) {
  const std::string s = fp4lm::test::read_file(fp4lm::test::source_dir() / "tests/vision/data" / name);
  return {s.begin(), s.end()};
}

TEST(PromptImages, TokenIdsEqualTheHuggingFaceProcessor) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const auto tok = tokenizer::Tokenizer::from_dir((fp4lm::test::shared_dir() / "tokenizers/qwen3").string());
  std::ifstream in(fp4lm::test::source_dir() / "tests/engine/data/image_prompt_ids.json");
  const auto g = nlohmann::json::parse(in);
  const auto cfg = qwen35_config();
  int cases = 0;
  for (const auto& c : g["cases"]) {
    const std::vector<int32_t> ids = tok->encode(c["text"].get<std::string>());
    ASSERT_EQ(ids, c["text_ids"].get<std::vector<int32_t>>());
    std::vector<int64_t> counts;
    size_t k = 0;
    for (const auto& hw : c["sizes"]) {
      const vision::GridThw grid = vision::qwen_vl_grid(hw[0].get<int64_t>(), hw[1].get<int64_t>(), cfg);
      const auto want = c["image_grid_thw"][k++].get<std::vector<int64_t>>();
      EXPECT_EQ((std::vector<int64_t>{grid.t, grid.h, grid.w}), want);
      counts.push_back(model::image_run_tokens(grid, cfg.merge_size));
    }
    EXPECT_EQ(expand_image_placeholders(ids, kPad, counts), c["input_ids"].get<std::vector<int32_t>>())
        << c["text"].dump();
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

TEST(PromptImages, PlaceholderCountsMustMatchTheImages) {
  const std::vector<int32_t> one = {1, kPad, 2};
  const int64_t two[] = {4, 4};
  EXPECT_THROW(expand_image_placeholders(one, kPad, two), RequestError);
  const std::vector<int32_t> none = {1, 2};
  const int64_t four[] = {4};
  try {
    expand_image_placeholders(none, kPad, four);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("0 image placeholder(s)"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> run = {kPad, kPad};
  EXPECT_THROW(expand_image_placeholders(run, kPad, four), RequestError);
}

EncodedImage fake_image(vision::GridThw g, int64_t hidden, float base, uint64_t hash) {
  EncodedImage e;
  e.grid = g;
  e.hash = hash;
  e.embeddings.rows = model::image_run_tokens(g, 2);
  e.embeddings.cols = hidden;
  for (int64_t i = 0; i < e.embeddings.rows * hidden; ++i) e.embeddings.values.push_back(base + static_cast<float>(i));
  return e;
}

TEST(PromptImages, RowsPositionsAndContentKeys) {
  const int64_t hidden = 3;
  const int64_t counts[] = {2, 1};
  const std::vector<int32_t> prompt = expand_image_placeholders(std::vector<int32_t>{7, kPad, 8, kPad, 9}, kPad, counts);
  ASSERT_EQ(prompt, (std::vector<int32_t>{7, kPad, kPad, 8, kPad, 9}));
  std::vector<EncodedImage> ims;
  ims.push_back(fake_image({1, 2, 4}, hidden, 100, 11));
  ims.push_back(fake_image({1, 2, 2}, hidden, 200, 22));
  const auto p = make_prompt_images(prompt, kPad, ims, 2, hidden);
  EXPECT_EQ(p->count, 2);
  EXPECT_EQ(p->embeds[0], nullptr);
  ASSERT_NE(p->embeds[2], nullptr);
  EXPECT_EQ(p->embeds[1][0], 100.0f);
  EXPECT_EQ(p->embeds[2][0], 103.0f);
  EXPECT_EQ(p->embeds[4][2], 202.0f);
  const model::ImageRun runs[] = {{1, {1, 2, 4}}, {4, {1, 2, 2}}};
  EXPECT_EQ(p->positions, model::mrope_positions(6, runs, 2).thw);
  // Text ids stay; placeholders become negative content keys, distinct per image and per row.
  EXPECT_EQ(p->cache_key[0], 7);
  EXPECT_EQ(p->cache_key[3], 8);
  EXPECT_LT(p->cache_key[1], 0);
  EXPECT_NE(p->cache_key[1], p->cache_key[2]);
  // The same image (hash) gives the same key; another image of the same size another one.
  std::vector<EncodedImage> same = {fake_image({1, 2, 4}, hidden, 100, 11), fake_image({1, 2, 2}, hidden, 200, 22)};
  std::vector<EncodedImage> other = {fake_image({1, 2, 4}, hidden, 100, 12), fake_image({1, 2, 2}, hidden, 200, 22)};
  EXPECT_EQ(make_prompt_images(prompt, kPad, same, 2, hidden)->cache_key, p->cache_key);
  const auto q = make_prompt_images(prompt, kPad, other, 2, hidden);
  EXPECT_NE(q->cache_key[1], p->cache_key[1]);
  EXPECT_EQ(q->cache_key[4], p->cache_key[4]);
  // Rows that disagree with the grid: an error naming the image.
  std::vector<EncodedImage> bad = {fake_image({1, 2, 4}, hidden, 0, 1), fake_image({1, 2, 2}, hidden + 1, 0, 2)};
  try {
    make_prompt_images(prompt, kPad, bad, 2, hidden);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("image 2"), std::string::npos) << e.what();
  }
}

TEST(ImageInput, FileBytesToRowsAndHashes) {
  const auto cfg = qwen35_config();
  const int64_t hidden = 8;
  fp4lm::test::ProjectionImageEncoder enc(hidden, 3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size);
  ImageInput in(enc, cfg, kPad, cfg.merge_size, {});
  const EncodedImage a = in.encode(file_bytes("grey_40x30.png"), "image 1");
  const vision::GridThw g = vision::qwen_vl_grid(30, 40, cfg);
  EXPECT_EQ(a.grid.h, g.h);
  EXPECT_EQ(a.grid.w, g.w);
  EXPECT_EQ(a.embeddings.rows, in.tokens_for(30, 40));
  EXPECT_EQ(a.hash, in.encode(file_bytes("grey_40x30.png"), "again").hash);
  EXPECT_NE(a.hash, in.encode(file_bytes("palette_45x23.png"), "image 2").hash);

  RequestParams p;
  p.prompt = {5, kPad, 6};
  std::vector<EncodedImage> ims = {a};
  in.attach(p, ims, 4096);
  EXPECT_EQ(static_cast<int64_t>(p.prompt.size()), 2 + a.embeddings.rows);
  ASSERT_TRUE(p.images);
  EXPECT_EQ(p.images->embeds.size(), p.prompt.size());
  // Too large for the context: an error naming the image.
  RequestParams small;
  small.prompt = {5, kPad, 6};
  try {
    in.attach(small, ims, a.embeddings.rows);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("image 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_model_len"), std::string::npos) << e.what();
  }
}

TEST(ImageInput, HostileBytesAreRequestErrorsNamingTheImage) {
  const auto cfg = qwen35_config();
  fp4lm::test::ProjectionImageEncoder enc(8, 3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size);
  ImageInput in(enc, cfg, kPad, cfg.merge_size, {});
  std::vector<uint8_t> png = file_bytes("grey_40x30.png");
  std::vector<uint8_t> cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2));
  // A 20000 x 20000 PNG header: refused from its IHDR before any pixel buffer.
  std::vector<uint8_t> bomb = png;
  const uint32_t side = 20000;
  for (int i = 0; i < 4; ++i) bomb[16 + i] = bomb[20 + i] = static_cast<uint8_t>(side >> (24 - 8 * i));
  uint32_t crc = 0xffffffffu;  // IHDR's CRC over its type and data, so only the size is hostile
  for (int i = 12; i < 29; ++i) {
    crc ^= bomb[static_cast<size_t>(i)];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xffffffffu;
  for (int i = 0; i < 4; ++i) bomb[29 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  const std::string text = "not an image at all";
  const std::vector<uint8_t> notimg(text.begin(), text.end());
  for (const auto& [bytes, name] : {std::pair{cut, "image 3"}, std::pair{bomb, "image 4"}, std::pair{notimg, "image 5"}}) {
    try {
      in.encode(bytes, name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(enc.calls, 0);
}

}  // namespace
}  // namespace fp4lm::engine::prompt_images_test
