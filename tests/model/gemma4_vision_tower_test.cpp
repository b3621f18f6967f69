// Gemma 4's image encoder (model/vision/gemma4_image_encoder.h: the vision tower and the
// multimodal embedder) against transformers 5.24's get_image_features in float64 on the same bf16
// weights (tests/model/fixtures/gemma4_vl, written by scripts/make_gemma4_vl_goldens.py): a tiny
// random Gemma4ForConditionalGeneration (2 layers, hidden 32, patch 4, pooling 3, clipped linears
// with binding bounds, standardize on), a tall and a wide image. The pixels are fp4lm's own Gemma 4
// processor's, checked equal to Gemma4ImageProcessorPil's first.
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
#include "model/vision/gemma4_image_encoder.h"
#include "vision/gemma4_preprocess.h"
#include "vision/image_decode.h"

namespace fp4lm::model::gemma4_vision_tower_test {
namespace {

using test::error_of;
namespace fs = std::filesystem;

fs::path fixture() { return test::source_dir() / "tests" / "model" / "fixtures" / "gemma4_vl"; }
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

vision::Gemma4Pixels preprocess(const nlohmann::json& c) {
  const vision::Gemma4ProcessorConfig cfg = vision::read_gemma4_processor_config(fixture().string());
  const std::string bytes = test::read_file(test::source_dir() / c["image"].get<std::string>());
  const vision::RgbImage img = vision::decode_image(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), {}, "image");
  return vision::gemma4_preprocess(img, cfg);
}

template <typename T>
std::vector<T> read_values(const std::string& file) {
  const std::string s = test::read_file(fixture() / file);
  std::vector<T> v(s.size() / sizeof(T));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(T));
  return v;
}

double relative_error(const std::vector<float>& ours, const std::vector<double>& theirs) {
  double err = 0, range = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    err = std::max(err, std::fabs(ours[i] - theirs[i]));
    range = std::max(range, std::fabs(theirs[i]));
  }
  return err / range;
}

TEST(Gemma4VisionTower, MatchesTransformersFloat64) {
  Loaded m = load();
  ASSERT_NE(m.encoder, nullptr);
  EXPECT_EQ(m.encoder->family(), ImageFamily::gemma4);
  EXPECT_EQ(m.encoder->hidden_size(), 40);
  const nlohmann::json g = golden();
  ASSERT_EQ(g["tower"].size(), 2u);
  for (const auto& c : g["tower"]) {
    SCOPED_TRACE(c["case"].get<std::string>());
    const vision::Gemma4Pixels px = preprocess(c);
    // fp4lm's processor gives the processor's exact input.
    ASSERT_EQ(px.rows, c["pixel_rows"].get<int64_t>());
    ASSERT_EQ(px.cols, c["pixel_cols"].get<int64_t>());
    EXPECT_EQ(px.soft_tokens, c["num_soft_tokens"].get<int64_t>());
    EXPECT_EQ(px.pixel_values, read_values<float>(c["pixels"].get<std::string>()));
    EXPECT_EQ(px.position_ids, read_values<int64_t>(c["positions"].get<std::string>()));
    const ImageEmbeddings e = m.encoder->encode(px);
    ASSERT_EQ(e.rows, c["rows"].get<int64_t>());
    ASSERT_EQ(e.cols, c["cols"].get<int64_t>());
    const auto want = read_values<double>(c["file"].get<std::string>());
    ASSERT_EQ(e.values.size(), want.size());
    const double err = relative_error(e.values, want);
    EXPECT_LT(err, 1e-4);
    RecordProperty("relative_error_" + c["case"].get<std::string>(), fmt::format("{:.2e}", err));
    // The comparison sees the clipping: transformers without it is far outside the bound.
    EXPECT_GT(c["unclipped_error"].get<double>(), 1000 * 1e-4);
  }
}

TEST(Gemma4VisionTower, TheComparisonCanFail) {
  // The same image mirrored left to right (same size, positions and token count): the features move
  // far beyond the bound, so a tower that ignored pixels, positions or their order would fail.
  Loaded m = load();
  const nlohmann::json c = golden()["tower"][0];
  vision::Gemma4Pixels px = preprocess(c);
  const int64_t P = 4, W = px.width / P;
  vision::Gemma4Pixels mirrored = px;
  for (int64_t r = 0; r < px.patches; ++r) {
    const int64_t gy = r / W, gx = r % W, src = gy * W + (W - 1 - gx);
    for (int64_t py = 0; py < P; ++py)
      for (int64_t pxl = 0; pxl < P; ++pxl)
        for (int64_t ch = 0; ch < 3; ++ch)
          mirrored.pixel_values[static_cast<size_t>(r * px.cols + (py * P + pxl) * 3 + ch)] =
              px.pixel_values[static_cast<size_t>(src * px.cols + (py * P + (P - 1 - pxl)) * 3 + ch)];
  }
  const ImageEmbeddings e = m.encoder->encode(mirrored);
  EXPECT_GT(relative_error(e.values, read_values<double>(c["file"].get<std::string>())), 1e-2);
}

TEST(Gemma4VisionTower, LoadedTowerTensorsAreConsumedNotIgnored) {
  const auto vision_ignored = [](const ModelLoader& l) {
    size_t n = 0;
    for (const auto& [why, names] : tensor_usage(l.checkpoint(), l.config(), false, false).ignored)
      for (const std::string& name : names)
        n += name.rfind("model.vision_tower.", 0) == 0 || name.rfind("model.embed_vision.", 0) == 0;
    return n;
  };
  ModelLoader without(io::Checkpoint::open(fixture().string()), f32());
  // patch embedder 2, per layer 6 norms + 7 projections x (weight + 4 bounds) = 41, std 2, embedder 1.
  EXPECT_EQ(vision_ignored(without), 2u + 2 * 41 + 2 + 1);
  Loaded m = load();
  EXPECT_EQ(vision_ignored(*m.loader), 0u);
  const TensorUsage u = tensor_usage(m.loader->checkpoint(), m.loader->config(), false, false);
  for (const std::string& name : u.unused_model) {
    EXPECT_NE(name.rfind("model.vision_tower.", 0), 0u) << name;
    EXPECT_NE(name.rfind("model.embed_vision.", 0), 0u) << name;
  }
}

TEST(Gemma4VisionTower, BadPixelsAreErrorsNamingBoth) {
  Loaded m = load();
  const vision::Gemma4Pixels px = preprocess(golden()["tower"][0]);
  vision::Gemma4Pixels wide = px;
  wide.cols = 75;
  std::string e = error_of([&] { m.encoder->encode(wide); });
  EXPECT_NE(e.find("75 values per patch"), std::string::npos) << e;
  EXPECT_NE(e.find("takes 48"), std::string::npos) << e;
  vision::Gemma4Pixels far = px;
  far.position_ids[0] = 64;  // the table has 64 entries
  e = error_of([&] { m.encoder->encode(far); });
  EXPECT_NE(e.find("patch 0 is at (64, 0), outside the vision tower's 64 x 64 position table"), std::string::npos)
      << e;
  vision::Gemma4Pixels half = px;
  half.position_ids[1] = -1;  // one coordinate of a real patch marked as padding
  e = error_of([&] { m.encoder->encode(half); });
  EXPECT_NE(e.find("patch 0 is at (0, -1)"), std::string::npos) << e;
  vision::Gemma4Pixels count = px;
  count.soft_tokens += 1;
  e = error_of([&] { m.encoder->encode(count); });
  EXPECT_NE(e.find("the pooler gives 60 soft tokens, but the processor counted 61"), std::string::npos) << e;
  e = error_of([&] { m.encoder->encode(vision::Gemma3Pixels{}); });
  EXPECT_NE(e.find("takes Gemma 4 processor patches, not Gemma 3 processor pixels"), std::string::npos) << e;
}

TEST(Gemma4VisionTower, EveryVisionConfigKeyIsReadOrRefused) {
  const nlohmann::json base = io::read_json_file((fixture() / "config.json").string())["vision_config"];
  const Gemma4VisionConfig c = parse_gemma4_vision_config(base, "vc");
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.pooling_kernel_size, 3);
  EXPECT_EQ(c.position_embedding_size, 64);
  EXPECT_EQ(c.patch_width(), 48);
  EXPECT_TRUE(c.use_clipped_linears);
  EXPECT_TRUE(c.standardize);
  EXPECT_EQ(c.rope_theta, 100.0);
  // Gemma4VisionConfig's defaults for absent keys.
  const Gemma4VisionConfig d = parse_gemma4_vision_config(nlohmann::json::object(), "vc");
  EXPECT_EQ(d.hidden_size, 768);
  EXPECT_EQ(d.num_hidden_layers, 16);
  EXPECT_EQ(d.patch_size, 16);
  EXPECT_EQ(d.position_embedding_size, 10240);
  EXPECT_FALSE(d.use_clipped_linears);
  EXPECT_FALSE(d.standardize);
  const auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[key] = v;
    return error_of([&] { parse_gemma4_vision_config(j, "vc"); });
  };
  EXPECT_NE(with("output_proj_dims", 64).find("unknown field 'output_proj_dims'"), std::string::npos);
  EXPECT_NE(with("hidden_activation", "relu").find("'hidden_activation' is 'relu'"), std::string::npos);
  EXPECT_NE(with("patch_size", nlohmann::json{4, 4}).find("'patch_size' must be an integer"), std::string::npos);
  EXPECT_NE(with("head_dim", 18).find("head_dim 18 must be a multiple of 4"), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 3).find("not a multiple of num_key_value_heads 3"), std::string::npos);
  EXPECT_NE(with("pooling_kernel_size", 1).find("pooling_kernel_size 1 must be at least 2"), std::string::npos);
  EXPECT_NE(with("global_head_dim", 32).find("'global_head_dim' = 32 differs from head_dim = 16"), std::string::npos);
  EXPECT_NE(with("rope_parameters", {{"rope_type", "linear"}}).find("rope_type is \"linear\""), std::string::npos);
  EXPECT_NE(with("rope_parameters", {{"rope_type", "axial"}, {"factor", 2.0}}).find("'rope_parameters.factor'"),
            std::string::npos);
  // Read by name and without effect in transformers' vision modules, or published alongside.
  EXPECT_EQ(with("attention_dropout", 0.1), "");
  EXPECT_EQ(with("default_output_length", 280), "");
  EXPECT_EQ(with("global_head_dim", 16), "");
  EXPECT_EQ(with("rope_parameters", {{"rope_type", "default"}, {"rope_theta", 100.0}}), "");
}

// Copies the fixture with config.json's vision_config edited.
struct EditedFixture {
  test::TempDir dir;
  explicit EditedFixture(const std::function<void(nlohmann::json&)>& edit) {
    for (const auto& f : fs::directory_iterator(fixture())) fs::copy(f.path(), dir.path() / f.path().filename());
    nlohmann::json c = io::read_json_file((dir.path() / "config.json").string());
    edit(c["vision_config"]);
    test::write_file(dir.path() / "config.json", c.dump(2));
  }
};

TEST(Gemma4VisionTower, ClipBoundsAndStandardizationAreNeverIgnored) {
  // The checkpoint stores clip bounds / std tensors, the config says not to use them: refused, naming
  // the tensor, instead of silently running a tower that is not the one trained.
  {
    EditedFixture f([](nlohmann::json& v) { v["use_clipped_linears"] = false; });
    const std::string e = error_of([&] { load(f.dir.path()); });
    EXPECT_NE(e.find("stores 'model.vision_tower.encoder.layers.0.self_attn.q_proj.input_min', but "
                     "use_clipped_linears is false"),
              std::string::npos)
        << e;
  }
  {
    EditedFixture f([](nlohmann::json& v) { v["standardize"] = false; });
    const std::string e = error_of([&] { load(f.dir.path()); });
    EXPECT_NE(e.find("stores 'model.vision_tower.std_bias', but standardize is false"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::gemma4_vision_tower_test
