// The Qwen3.5 / Qwen3.6 vision tower (model/vision/qwen3_5_vision_tower.h) against transformers
// 5.24's get_image_features in float64 on the same bf16 weights (tests/model/fixtures/
// qwen3_5_vl_tower, written by scripts/make_qwen_vl_tower_goldens.py): tiny random
// Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration, two non-square images
// whose patch grids (6x10, 8x4) both resample the 4x4 learned position grid, preprocessed by
// fp4lm's own Qwen-VL processor.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model/arch/arch.h"
#include "model/load/model_loader.h"
#include "model/load/tensor_usage.h"
#include "model/vision/qwen3_5_vision_tower.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::model::qwen3_5_vision_tower_test {
namespace {

using test::error_of;
namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests" / "model" / "fixtures" / "qwen3_5_vl_tower"; }
nlohmann::json manifest() { return io::read_json_file((fixture() / "manifest.json").string()); }

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

struct Loaded {
  std::unique_ptr<ModelLoader> loader;
  std::unique_ptr<ImageEncoder> encoder;
};

Loaded load(const std::string& kind) {
  Loaded r;
  r.loader = std::make_unique<ModelLoader>(io::Checkpoint::open((fixture() / kind).string()), f32());
  r.encoder = r.loader->config().arch->load_image_encoder(*r.loader);
  return r;
}

std::vector<vision::QwenVlPixels> preprocess(const std::string& kind) {
  const auto cfg = vision::read_qwen_vl_processor_config((fixture() / kind / "preprocessor_config.json").string());
  std::vector<vision::QwenVlPixels> out;
  const nlohmann::json m = manifest();
  for (const auto& im : m["images"]) {
    vision::RgbImage img;
    img.height = im["height"];
    img.width = im["width"];
    const std::string bytes = test::read_file(fixture() / im["file"].get<std::string>());
    img.rgb.assign(bytes.begin(), bytes.end());
    out.push_back(vision::qwen_vl_preprocess(img, cfg));
  }
  return out;
}

std::vector<double> expected(const std::string& kind, const nlohmann::json& e) {
  const std::string s = test::read_file(fixture() / kind / e["file"].get<std::string>());
  std::vector<double> v(s.size() / sizeof(double));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(double));
  return v;
}

// max |ours - theirs| over max |theirs|.
double relative_error(const ImageEmbeddings& ours, const std::vector<double>& theirs) {
  double err = 0, range = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    err = std::max(err, std::fabs(ours.values[i] - theirs[i]));
    range = std::max(range, std::fabs(theirs[i]));
  }
  return err / range;
}

class Tower : public ::testing::TestWithParam<std::string> {};

TEST_P(Tower, MatchesTransformersFloat64PerImageAndBatched) {
  const std::string kind = GetParam();
  Loaded m = load(kind);
  ASSERT_NE(m.encoder, nullptr);
  EXPECT_EQ(m.encoder->hidden_size(), 40);
  const auto pixels = preprocess(kind);
  const nlohmann::json man = manifest();
  const nlohmann::json& cases = man["archs"][kind];
  ASSERT_EQ(cases.size(), pixels.size());
  std::vector<const vision::QwenVlPixels*> all;
  for (size_t i = 0; i < pixels.size(); ++i) {
    SCOPED_TRACE(kind + " image " + std::to_string(i));
    const auto& c = cases[i];
    EXPECT_EQ(pixels[i].grid.t, c["grid"][0].get<int64_t>());
    EXPECT_EQ(pixels[i].grid.h, c["grid"][1].get<int64_t>());
    EXPECT_EQ(pixels[i].grid.w, c["grid"][2].get<int64_t>());
    const ImageEmbeddings e = m.encoder->encode(pixels[i]);
    ASSERT_EQ(e.rows, c["rows"].get<int64_t>());
    ASSERT_EQ(e.cols, c["cols"].get<int64_t>());
    const auto want = expected(kind, c);
    ASSERT_EQ(e.values.size(), want.size());
    const double err = relative_error(e, want);
    EXPECT_LT(err, 1e-4);
    RecordProperty("relative_error_image" + std::to_string(i), fmt::format("{:.2e}", err));
    all.push_back(&pixels[i]);
  }
  // Both images in one call: each attends only to its own patches.
  const auto& tower = dynamic_cast<const Qwen3_5VisionTower&>(*m.encoder);
  const std::vector<ImageEmbeddings> both = tower.encode_all(all);
  ASSERT_EQ(both.size(), 2u);
  for (size_t i = 0; i < both.size(); ++i) EXPECT_LT(relative_error(both[i], expected(kind, cases[i])), 1e-4) << i;
}

INSTANTIATE_TEST_SUITE_P(Qwen3_5VisionTower, Tower, ::testing::Values("dense", "moe"));

TEST(Qwen3_5VisionTower, LoadedTowerTensorsAreConsumedNotIgnored) {
  const auto visual_ignored = [](const ModelLoader& l) {
    size_t n = 0;
    for (const auto& [why, names] : tensor_usage(l.checkpoint(), l.config(), false, false).ignored)
      for (const std::string& name : names) n += name.rfind("model.visual.", 0) == 0;
    return n;
  };
  ModelLoader without(io::Checkpoint::open((fixture() / "dense").string()), f32());
  EXPECT_EQ(visual_ignored(without), 33u);  // the tower not loaded: listed as not run
  Loaded m = load("dense");
  EXPECT_EQ(visual_ignored(*m.loader), 0u);
  const TensorUsage u = tensor_usage(m.loader->checkpoint(), m.loader->config(), false, false);
  for (const std::string& name : u.unused_model) EXPECT_NE(name.rfind("model.visual.", 0), 0u) << name;
}

TEST(Qwen3_5VisionTower, BadPixelsAreErrorsNamingBoth) {
  Loaded m = load("dense");
  auto pixels = preprocess("dense");
  vision::QwenVlPixels wide = pixels[0];
  wide.cols = 3 * 2 * 16 * 16;
  wide.pixel_values.resize(static_cast<size_t>(wide.rows * wide.cols));
  std::string e = error_of([&] { m.encoder->encode(wide); });
  EXPECT_NE(e.find("1536 values per patch"), std::string::npos) << e;
  EXPECT_NE(e.find("takes 384"), std::string::npos) << e;

  vision::QwenVlPixels grid = pixels[0];
  grid.grid.h = 8;  // 8 x 10 = 80 patches, but 60 rows
  e = error_of([&] { m.encoder->encode(grid); });
  EXPECT_NE(e.find("60 rows"), std::string::npos) << e;
  EXPECT_NE(e.find("1 x 8 x 10 has 80"), std::string::npos) << e;

  vision::QwenVlPixels odd = pixels[0];
  odd.grid = {1, 5, 12};  // 60 patches, but h not a multiple of spatial_merge_size 2
  e = error_of([&] { m.encoder->encode(odd); });
  EXPECT_NE(e.find("1 x 5 x 12"), std::string::npos) << e;
  EXPECT_NE(e.find("spatial_merge_size 2"), std::string::npos) << e;
}

TEST(Qwen3_5VisionTower, EveryVisionConfigKeyIsReadOrRefused) {
  const nlohmann::json base = io::read_json_file((fixture() / "moe" / "config.json").string())["vision_config"];
  const Qwen3_5VisionConfig c = parse_qwen3_5_vision_config(base, "vc");
  EXPECT_EQ(c.depth, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.patch_size, 8);
  EXPECT_EQ(c.num_position_embeddings, 16);
  EXPECT_EQ(c.out_hidden_size, 40);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.patch_width(), 384);
  // transformers' defaults (Qwen3_5MoeVisionConfig) for absent keys: the real tower's shapes.
  const Qwen3_5VisionConfig d = parse_qwen3_5_vision_config(nlohmann::json::object(), "vc");
  EXPECT_EQ(d.depth, 27);
  EXPECT_EQ(d.hidden_size, 1152);
  EXPECT_EQ(d.intermediate_size, 4304);
  EXPECT_EQ(d.num_heads, 16);
  EXPECT_EQ(d.num_position_embeddings, 2304);

  const auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[key] = v;
    return error_of([&] { parse_qwen3_5_vision_config(j, "vc"); });
  };
  EXPECT_NE(with("window_size", 112).find("unknown field 'window_size'"), std::string::npos);
  EXPECT_NE(with("hidden_act", "relu").find("'hidden_act' is 'relu'"), std::string::npos);
  EXPECT_NE(with("deepstack_visual_indexes", nlohmann::json{8, 16}).find("deepstack_visual_indexes"),
            std::string::npos);
  EXPECT_EQ(with("deepstack_visual_indexes", nlohmann::json::array()), "");
  EXPECT_NE(with("patch_size", nlohmann::json{16, 16}).find("'patch_size' must be an integer"), std::string::npos);
  EXPECT_NE(with("rope_parameters", {{"rope_type", "yarn"}}).find("rope_type"), std::string::npos);
  EXPECT_NE(with("depth", 0).find("'depth' must be positive"), std::string::npos);
}

TEST(Qwen3_5VisionTower, OutHiddenSizeMustBeTheLanguageModelsHiddenSize) {
  test::TempDir dir;
  for (const auto& f : fs::directory_iterator(fixture() / "dense")) fs::copy(f.path(), dir.path() / f.path().filename());
  nlohmann::json c = io::read_json_file((dir.path() / "config.json").string());
  c["vision_config"]["out_hidden_size"] = 48;
  test::write_file(dir.path() / "config.json", c.dump(2));
  ModelLoader l(io::Checkpoint::open(dir.path().string()), f32());
  const std::string e = error_of([&] { l.config().arch->load_image_encoder(l); });
  EXPECT_NE(e.find("out_hidden_size 48"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size 40"), std::string::npos) << e;
}

// An NVFP4 export whose exclusions do not list the tower (it is stored in bf16 without scales):
// the tower still loads unquantized and gives the same embeddings.
TEST(Qwen3_5VisionTower, BF16TowerOfAQuantizedExportRunsUnquantized) {
  test::TempDir dir;
  for (const auto& f : fs::directory_iterator(fixture() / "dense")) fs::copy(f.path(), dir.path() / f.path().filename());
  nlohmann::json c = io::read_json_file((dir.path() / "config.json").string());
  c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16},
                              {"ignore", {"lm_head"}}};
  test::write_file(dir.path() / "config.json", c.dump(2));
  ModelLoader l(io::Checkpoint::open(dir.path().string()), f32());
  const auto encoder = l.config().arch->load_image_encoder(l);
  ASSERT_NE(encoder, nullptr);
  const auto pixels = preprocess("dense");
  const nlohmann::json man = manifest();
  EXPECT_LT(relative_error(encoder->encode(pixels[1]), expected("dense", man["archs"]["dense"][1])), 1e-4);
  EXPECT_EQ(l.describe(l.layer("model.visual.blocks.0.attn.qkv")).scheme.key, kernels::kUnquantized);
}

TEST(Qwen3_5VisionTower, NonSquarePositionGridIsRefused) {
  Qwen3_5VisionConfig c;
  c.num_position_embeddings = 12;
  const std::string e = error_of([&] { Qwen3_5VisionTower(c, {}, "vc"); });
  EXPECT_NE(e.find("num_position_embeddings 12 is not a square"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp4lm::model::qwen3_5_vision_tower_test
