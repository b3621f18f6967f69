// Gemma 3's image encoder (model/vision/gemma3_image_encoder.h: the SigLIP tower and the
// multi-modal projector) against transformers 5.24's get_image_features in float64 on the same
// bf16 weights (tests/model/fixtures/gemma3_vl, written by scripts/make_gemma3_vl_goldens.py): a
// tiny random Gemma3ForConditionalGeneration (SigLIP 2 layers, 8 x 8 patches pooled to 16 tokens),
// a non-square image without crops and a wide one with pan-and-scan crops (the image and 3 crops
// in one call), preprocessed by fp4lm's own Gemma 3 processor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model/arch/arch.h"
#include "model/load/model_loader.h"
#include "model/load/tensor_usage.h"
#include "model/vision/gemma3_image_encoder.h"
#include "vision/gemma3_preprocess.h"
#include "vision/image_decode.h"

namespace fp4lm::model::gemma3_vision_tower_test {
namespace {

using test::error_of;
namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests" / "model" / "fixtures" / "gemma3_vl"; }
nlohmann::json golden() { return io::read_json_file((fixture() / "golden.json").string()); }

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

struct Loaded {
  std::unique_ptr<ModelLoader> loader;
  std::unique_ptr<ImageEncoder> encoder;
};

Loaded load(const fs::path& dir = fixture()) {
  Loaded r;
  r.loader = std::make_unique<ModelLoader>(io::Checkpoint::open(dir.string()), f32());
  r.encoder = r.loader->config().arch->load_image_encoder(*r.loader);
  return r;
}

vision::Gemma3Pixels preprocess(const nlohmann::json& c) {
  vision::Gemma3ProcessorConfig cfg = vision::read_gemma3_processor_config(fixture().string());
  vision::apply_gemma3_processor_config(c["processor"], "case", cfg);
  const std::string bytes = test::read_file(test::source_dir() / c["image"].get<std::string>());
  const vision::RgbImage img = vision::decode_image(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), {}, "image");
  return vision::gemma3_preprocess(img, cfg);
}

std::vector<double> expected(const nlohmann::json& c) {
  const std::string s = test::read_file(fixture() / c["file"].get<std::string>());
  std::vector<double> v(s.size() / sizeof(double));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(double));
  return v;
}

double relative_error(const ImageEmbeddings& ours, const std::vector<double>& theirs) {
  double err = 0, range = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    err = std::max(err, std::fabs(ours.values[i] - theirs[i]));
    range = std::max(range, std::fabs(theirs[i]));
  }
  return err / range;
}

TEST(Gemma3VisionTower, MatchesTransformersFloat64WithAndWithoutCrops) {
  Loaded m = load();
  ASSERT_NE(m.encoder, nullptr);
  EXPECT_EQ(m.encoder->family(), ImageFamily::gemma3);
  EXPECT_EQ(m.encoder->hidden_size(), 40);
  const nlohmann::json g = golden();
  ASSERT_EQ(g["tower"].size(), 2u);
  for (const auto& c : g["tower"]) {
    SCOPED_TRACE(c["case"].get<std::string>());
    const vision::Gemma3Pixels px = preprocess(c);
    EXPECT_EQ(px.num_crops, c["num_crops"].get<int64_t>());
    EXPECT_EQ(px.images, c["images"].get<int64_t>());
    const ImageEmbeddings e = m.encoder->encode(px);
    ASSERT_EQ(e.rows, c["rows"].get<int64_t>());
    ASSERT_EQ(e.cols, c["cols"].get<int64_t>());
    const auto want = expected(c);
    ASSERT_EQ(e.values.size(), want.size());
    const double err = relative_error(e, want);
    EXPECT_LT(err, 1e-4);
    RecordProperty("relative_error_" + c["case"].get<std::string>(), fmt::format("{:.2e}", err));
  }
  EXPECT_EQ(g["tower"][1]["num_crops"].get<int64_t>(), 3);  // the crops are exercised
}

TEST(Gemma3VisionTower, LoadedTowerTensorsAreConsumedNotIgnored) {
  const auto vision_ignored = [](const ModelLoader& l) {
    size_t n = 0;
    for (const auto& [why, names] : tensor_usage(l.checkpoint(), l.config(), false, false).ignored)
      for (const std::string& name : names)
        n += name.rfind("vision_tower.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
    return n;
  };
  ModelLoader without(io::Checkpoint::open(fixture().string()), f32());
  EXPECT_EQ(vision_ignored(without), 39u);  // the tower not loaded: listed as not run
  Loaded m = load();
  EXPECT_EQ(vision_ignored(*m.loader), 0u);
  const TensorUsage u = tensor_usage(m.loader->checkpoint(), m.loader->config(), false, false);
  for (const std::string& name : u.unused_model) {  // (this loader read no text layer)
    EXPECT_NE(name.rfind("vision_tower.", 0), 0u) << name;
    EXPECT_NE(name.rfind("multi_modal_projector.", 0), 0u) << name;
  }
}

TEST(Gemma3VisionTower, BadPixelsAreErrorsNamingBoth) {
  Loaded m = load();
  vision::Gemma3Pixels px = preprocess(golden()["tower"][0]);
  vision::Gemma3Pixels big = px;
  big.height = big.width = 64;
  big.pixel_values.resize(3 * 64 * 64);
  std::string e = error_of([&] { m.encoder->encode(big); });
  EXPECT_NE(e.find("images of 64x64 pixels"), std::string::npos) << e;
  EXPECT_NE(e.find("image_size 32x32"), std::string::npos) << e;
  vision::Gemma3Pixels cut = px;
  cut.pixel_values.pop_back();
  e = error_of([&] { m.encoder->encode(cut); });
  EXPECT_NE(e.find("3071 values"), std::string::npos) << e;
  // Another family's pixels.
  e = error_of([&] { m.encoder->encode(vision::QwenVlPixels{}); });
  EXPECT_NE(e.find("takes Gemma 3 processor pixels"), std::string::npos) << e;
}

TEST(Gemma3VisionTower, EveryVisionConfigKeyIsReadOrRefused) {
  const nlohmann::json base = io::read_json_file((fixture() / "config.json").string())["vision_config"];
  const SiglipVisionConfig c = parse_siglip_vision_config(base, "vc");
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.grid(), 8);
  EXPECT_EQ(c.patch_width(), 48);
  EXPECT_FALSE(c.vision_use_head);
  // SiglipVisionConfig's defaults for absent keys.
  const SiglipVisionConfig d = parse_siglip_vision_config(nlohmann::json::object(), "vc");
  EXPECT_EQ(d.hidden_size, 768);
  EXPECT_EQ(d.image_size, 224);
  EXPECT_EQ(d.patch_size, 16);
  const auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[key] = v;
    return error_of([&] { parse_siglip_vision_config(j, "vc"); });
  };
  EXPECT_NE(with("projection_dim", 64).find("unknown field 'projection_dim'"), std::string::npos);
  EXPECT_NE(with("hidden_act", "relu").find("'hidden_act' is 'relu'"), std::string::npos);
  EXPECT_NE(with("image_size", nlohmann::json{32, 32}).find("'image_size' must be an integer"), std::string::npos);
  EXPECT_NE(with("patch_size", 5).find("image_size 32 is not a multiple of patch_size 5"), std::string::npos);
  EXPECT_NE(with("num_attention_heads", 3).find("not a multiple of num_attention_heads 3"), std::string::npos);
  EXPECT_EQ(with("attention_dropout", 0.1), "");  // dropout is off at inference
}

TEST(Gemma3VisionTower, TokensPerImageMustPoolTheGridEvenly) {
  for (const auto& [tokens, want] : std::vector<std::pair<int, std::string>>{
           {15, "mm_tokens_per_image 15 is not a square"}, {9, "does not pool evenly to mm_tokens_per_image 9"}}) {
    test::TempDir dir;
    for (const auto& f : fs::directory_iterator(fixture())) fs::copy(f.path(), dir.path() / f.path().filename());
    nlohmann::json c = io::read_json_file((dir.path() / "config.json").string());
    c["mm_tokens_per_image"] = tokens;
    test::write_file(dir.path() / "config.json", c.dump(2));
    const std::string e = error_of([&] { load(dir.path()); });
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::gemma3_vision_tower_test
