// Nemotron's patch budget is shared by the images of one call (transformers 5.24's
// NemotronH_Omni_Reasoning_V3ImageProcessor: max((max_model_len - 4) * merge^2, min_num_patches *
// images) clamped to [min_num_patches, max_num_patches], the same for every image of the call), so
// an image's grid depends on how many images the request holds once max_model_len is small. On the
// tiny fixture (tests/model/fixtures/nemotron_h_omni: patch 4, merge 2, min 16, max 64) with
// max_model_len 8 (budget 16 alone, 32 for two images, 48 for three), the grids the processor gives
// for [a], [a, b] and [a, b, a] (a = rgb_150x100.png, b = wide_97x31.png), computed with
//   NemotronH_Omni_Reasoning_V3ImageProcessor(**preprocessor_config, max_model_len=8)(images=...)
// are [4x4], [4x6, 2x10], [6x8, 4x12, 6x8]: ImageInput's token counts and encoder rows follow them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "common/paths.h"
#include "engine/image_input.h"
#include "io/json_file.h"
#include "model/causal_lm.h"

namespace fp4lm::engine::nemotron_image_budget_test {
namespace {

namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests/model/fixtures/nemotron_h_omni"; }

TEST(NemotronImageBudget, ImagesOfOneCallShareTheProcessorsBudget) {
  fp4lm::test::TempDir tmp;
  for (const auto& f : fs::directory_iterator(fixture())) fs::copy(f.path(), tmp.path() / f.path().filename());
  nlohmann::json pc = io::read_json_file((tmp.path() / "preprocessor_config.json").string());
  pc["max_model_len"] = 8;
  std::ofstream((tmp.path() / "preprocessor_config.json").string()) << pc.dump(2);
  model::EngineOptions o;
  o.dtype = "float32";
  const auto lm = model::CausalLM::load(tmp.path().string(), o);
  const auto input = ImageInput::for_model(*lm, tmp.path().string());
  ASSERT_TRUE(input);
  const std::string a = test::read_file(test::source_dir() / "tests/vision/data/rgb_150x100.png");
  const std::string b = test::read_file(test::source_dir() / "tests/vision/data/wide_97x31.png");
  struct Call {
    std::vector<const std::string*> images;
    std::vector<int64_t> tokens;  // h * w / 4 of the processor's grids
  };
  const std::vector<Call> calls = {{{&a}, {4}}, {{&a, &b}, {6, 5}}, {{&a, &b, &a}, {12, 12, 12}}};
  for (const Call& c : calls) {
    SCOPED_TRACE(c.images.size());
    const auto n = static_cast<int64_t>(c.images.size());
    for (size_t k = 0; k < c.images.size(); ++k) {
      const auto* p = reinterpret_cast<const uint8_t*>(c.images[k]->data());
      const vision::RgbImage img = input->decode({p, c.images[k]->size()}, "image");
      EXPECT_EQ(input->tokens_for(img.height, img.width, n), 2 + c.tokens[k]);  // <img>, tokens, </img>
      EXPECT_EQ(input->encode(img, "image", n).embeddings.rows, c.tokens[k]);
    }
  }
  // Alone, each image keeps the one-image budget (the default).
  const auto* p = reinterpret_cast<const uint8_t*>(a.data());
  EXPECT_EQ(input->encode({p, a.size()}, "image").embeddings.rows, 4);
}

}  // namespace
}  // namespace fp4lm::engine::nemotron_image_budget_test
