// The remote-code Nemotron VL / Omni checkpoints (NemotronH_Nano_VL_V2, NemotronH_Nano_Omni_Reasoning_V3
// as NVIDIA ships them: llm_config, the RADIO tower described by vision_config.args, force_image_size
// tiling with a thumbnail or dynamic resolution by args.min_num_patches, norm_mean / norm_std in
// config.json) load their tower and take images. Replicas made here from the tiny transformers
// fixture (tests/model/fixtures/nemotron_h_omni: its language model, tokenizer, template) with a
// vit_small_patch16_224-shaped tower (384 wide, 12 blocks, 6 heads; patch 4, an 8 x 8 position
// table, seeded random bf16 weights), written twice: in the remote form and in transformers' form
// (NemotronH_Omni_Reasoning_V3's RadioConfig, whose tower tests/engine/nemotron_h_omni_image_logits_test.cpp
// checks against transformers in float64). The two forms give the same tower: equal features for
// the same pixels, so the mapping of args (timm name, cpe_max_size, teachers / cls_token_per_teacher,
// register_multiple) is the transformers config's. The tiles' and the dynamic grid's token counts
// follow the processor rule (tests/vision/nemotron_tiling_test.cpp checks it against vLLM's), and a
// prompt's <image> expands to all the tiles' tokens. What fp4lm cannot run is refused by name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "core/dtype.h"
#include "engine/image_input.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/vision/nemotron_image_encoder.h"
#include "vision/image_decode.h"
#include "vision/nemotron_preprocess.h"
#include "vision/nemotron_tiling.h"

namespace fp4lm::engine::nemotron_remote_vl_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kHidden = 384, kBlocks = 12, kPatch = 4, kTable = 8, kProj = 48, kCls = 2, kRegs = 2;

fs::path fixture() { return test::source_dir() / "tests/model/fixtures/nemotron_h_omni"; }

test::EditedTensor bf16(const std::string& name, Shape shape, std::mt19937& rng, float scale, float offset = 0) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  test::EditedTensor t{name, DType::BF16, std::move(shape), std::vector<uint8_t>(n * 2)};
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = f32_to_bf16(offset + scale * dist(rng));
    t.bytes[2 * i] = static_cast<uint8_t>(b & 0xff);
    t.bytes[2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  return t;
}

// The vit_small-shaped tower and its projector (the published tensor names).
std::vector<test::EditedTensor> tower_tensors() {
  std::mt19937 rng(4343);
  const std::string p = "vision_model.radio_model.model.";
  const float w = 1.0f / std::sqrt(static_cast<float>(kHidden));
  std::vector<test::EditedTensor> t;
  t.push_back(bf16(p + "patch_generator.embedder.weight", {kHidden, 3 * kPatch * kPatch}, rng, 0.15f));
  t.push_back(bf16(p + "patch_generator.pos_embed", {1, kTable * kTable, kHidden}, rng, 0.5f));
  t.push_back(bf16(p + "patch_generator.cls_token.token", {kCls + kRegs, kHidden}, rng, 0.5f));
  for (int64_t i = 0; i < kBlocks; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    for (const char* n : {"norm1", "norm2"}) {
      t.push_back(bf16(b + n + ".weight", {kHidden}, rng, 0.1f, 1.0f));
      t.push_back(bf16(b + n + ".bias", {kHidden}, rng, 0.1f));
    }
    t.push_back(bf16(b + "attn.qkv.weight", {3 * kHidden, kHidden}, rng, w));
    t.push_back(bf16(b + "attn.qkv.bias", {3 * kHidden}, rng, 0.1f));
    t.push_back(bf16(b + "attn.proj.weight", {kHidden, kHidden}, rng, w));
    t.push_back(bf16(b + "attn.proj.bias", {kHidden}, rng, 0.1f));
    t.push_back(bf16(b + "mlp.fc1.weight", {4 * kHidden, kHidden}, rng, w));
    t.push_back(bf16(b + "mlp.fc1.bias", {4 * kHidden}, rng, 0.1f));
    t.push_back(bf16(b + "mlp.fc2.weight", {kHidden, 4 * kHidden}, rng, w / 2));
    t.push_back(bf16(b + "mlp.fc2.bias", {kHidden}, rng, 0.1f));
  }
  t.push_back(bf16("mlp1.0.weight", {4 * kHidden}, rng, 0.1f, 1.0f));
  t.push_back(bf16("mlp1.1.weight", {kProj, 4 * kHidden}, rng, 1.0f / std::sqrt(4.0f * kHidden)));
  t.push_back(bf16("mlp1.3.weight", {32, kProj}, rng, 1.0f / std::sqrt(static_cast<float>(kProj))));
  return t;
}

const std::vector<test::EditedTensor>& cached_tower() {
  static const std::vector<test::EditedTensor> t = tower_tensors();
  return t;
}

// The fixture with its tower and projector replaced by tower_tensors().
void write_weights(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(fixture()))
    if (f.path().extension() != ".f64") fs::copy(f.path(), dir / f.path().filename());
  test::edit_tensors(
      dir, [](test::EditedTensor& t) { return t.name.rfind("language_model.", 0) == 0; }, cached_tower());
}

json fixture_config() { return io::read_json_file((fixture() / "config.json").string()); }

// transformers' form (NemotronH_Omni_Reasoning_V3, RadioConfig).
void write_transformers_form(const fs::path& dir) {
  write_weights(dir);
  json c = fixture_config();
  json& v = c["vision_config"];
  v["hidden_size"] = kHidden;
  v["num_hidden_layers"] = kBlocks;
  v["num_attention_heads"] = 6;
  v["max_img_size"] = kTable * kPatch;
  v["num_cls_tokens"] = kCls;
  v["num_registers"] = kRegs;
  c["vision_hidden_size"] = kHidden;
  c["projector_hidden_size"] = kProj;
  std::ofstream((dir / "config.json").string()) << c.dump(2);
}

// NVIDIA's remote-code form: `dynamic` adds args.min_num_patches (the Omni checkpoint's dynamic
// resolution), else force_image_size tiles (Nemotron-Nano-12B-v2-VL's).
void write_remote_form(const fs::path& dir, const std::string& arch, bool dynamic,
                       const std::function<void(json&)>& edit = {}) {
  write_weights(dir);
  const json t = fixture_config();
  json args = {{"model", "vit_small_patch16_224"},
               {"cpe_max_size", kTable * kPatch},
               {"register_multiple", 4},  // 4 - 2 cls % 4 = 2 registers
               {"cls_token_per_teacher", true},
               {"teachers", json::array({{{"name", "clip"}}, {{"name", "siglip"}}, {{"name", "clip"}}})},
               {"lr", 1e-4}};  // a training argument: not read
  if (dynamic) {
    args["min_num_patches"] = 16;
    args["max_num_patches"] = 64;
  }
  json c = {{"architectures", {arch}},
            {"model_type", arch},
            {"llm_config", t["text_config"]},
            {"vision_config", {{"model_type", "radio"}, {"patch_size", kPatch}, {"args", args}}},
            {"force_image_size", 16},
            {"patch_size", kPatch},
            {"downsample_ratio", 0.5},
            {"use_thumbnail", true},
            {"ps_version", "v2"},
            {"img_context_token_id", 259},
            {"vit_hidden_size", kHidden},
            {"projector_hidden_size", kProj},
            {"norm_mean", {0.48145466, 0.4578275, 0.40821073}},
            {"norm_std", {0.26862954, 0.26130258, 0.27577711}}};
  if (edit) edit(c);
  std::ofstream((dir / "config.json").string()) << c.dump(2);
  const json pre = {{"image_processor_type", "NemotronH_Nano_VL_V2ImageProcessor"}, {"image_size", 16},
                    {"patch_size", kPatch}, {"downsample_ratio", 0.5}, {"max_num_tiles", 4}, {"use_thumbnail", true}};
  std::ofstream((dir / "preprocessor_config.json").string()) << pre.dump(2);
}

std::unique_ptr<model::CausalLM> load(const fs::path& dir) {
  model::EngineOptions o;
  o.dtype = "float32";
  return model::CausalLM::load(dir.string(), o);
}

vision::RgbImage image() {
  const auto b = test::read_file(test::source_dir() / "tests/vision/data/rgb_150x100.png");
  return vision::decode_image({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, {}, "rgb_150x100.png");
}

double max_diff(const model::ImageEmbeddings& a, const model::ImageEmbeddings& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.values.size(), b.values.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.values.size(), b.values.size()); ++i)
    d = std::max(d, static_cast<double>(std::fabs(a.values[i] - b.values[i])));
  return d;
}

class NemotronRemoteVl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test::TempDir();
    write_transformers_form(tmp_->path() / "hf");
    hf_ = load(tmp_->path() / "hf").release();
  }
  static void TearDownTestSuite() {
    delete hf_;
    delete tmp_;
  }
  static test::TempDir* tmp_;
  static model::CausalLM* hf_;
};
test::TempDir* NemotronRemoteVl::tmp_ = nullptr;
model::CausalLM* NemotronRemoteVl::hf_ = nullptr;

TEST_F(NemotronRemoteVl, TiledCheckpointRunsTheTransformersTowerOnItsTiles) {
  const fs::path dir = tmp_->path() / "vl";
  write_remote_form(dir, "NemotronH_Nano_VL_V2", /*dynamic=*/false);
  const auto lm = load(dir);
  ASSERT_TRUE(lm->image_encoder());
  const auto input = ImageInput::for_model(*lm, dir.string());
  ASSERT_TRUE(input);
  // 150 x 100 at tile 16, at most 4 tiles: the 2 x 2 grid (the remote rule) and the thumbnail, 4
  // tokens each (4 x 4 patches, 2 x 2 pixel shuffle).
  const vision::NemotronTileGrid g = vision::nemotron_tile_grid(150, 100, 16, 4);
  EXPECT_EQ(g.cols * g.rows, 4);
  EXPECT_EQ(input->tokens_for(100, 150), 2 + 5 * 4);
  const EncodedImage e = input->encode(image(), "image 1");
  EXPECT_EQ(e.embeddings.rows, 5 * 4);
  EXPECT_EQ(e.embeddings.cols, 32);
  // The same tiles through transformers' form of the same weights: the same features.
  vision::NemotronProcessorConfig pc;
  pc.patch_size = kPatch;
  pc.tile_size = 16;
  pc.max_num_tiles = 4;
  pc.uint8_resize = true;
  pc.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  pc.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  const vision::NemotronPixels px = vision::nemotron_tile_preprocess(image(), pc);
  EXPECT_EQ(max_diff(e.embeddings, hf_->image_encoder()->encode(px)), 0.0);
  double mag = 0;
  for (float v : e.embeddings.values) mag = std::max(mag, static_cast<double>(std::fabs(v)));
  EXPECT_GT(mag, 1e-3);
  // A chat prompt's <image>: <img> + 20 <image> + </img>, as the remote processor writes it.
  RequestParams p;
  p.prompt = {257, 117, 10, 259, 10, 87, 258, 10, 257, 97, 10};
  input->attach(p, {e}, lm->max_model_len());
  ASSERT_EQ(p.prompt.size(), 11u - 1 + 22);
  EXPECT_EQ(p.prompt[3], 260);
  EXPECT_EQ(std::count(p.prompt.begin(), p.prompt.end(), 259), 20);
  EXPECT_EQ(p.prompt[3 + 21], 261);
}

TEST_F(NemotronRemoteVl, DynamicResolutionCheckpointUsesThePatchBudgetOfArgs) {
  const fs::path dir = tmp_->path() / "omni";
  write_remote_form(dir, "NemotronH_Nano_Omni_Reasoning_V3", /*dynamic=*/true);
  const auto lm = load(dir);
  const auto input = ImageInput::for_model(*lm, dir.string());
  ASSERT_TRUE(input);
  // min 16 / max 64 patches of 4 pixels: 150 x 100 -> the processor's 6 x 10 grid -> 15 tokens.
  vision::NemotronProcessorConfig pc;
  pc.patch_size = kPatch;
  pc.min_num_patches = 16;
  pc.max_num_patches = 64;
  pc.max_model_len = lm->max_model_len();
  pc.uint8_resize = true;
  pc.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  pc.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  const vision::NemotronGrid grid = vision::nemotron_grid(100, 150, pc);
  EXPECT_EQ(grid.h, 6);
  EXPECT_EQ(grid.w, 10);
  EXPECT_EQ(input->tokens_for(100, 150), 2 + 15);
  const EncodedImage e = input->encode(image(), "image 1");
  EXPECT_EQ(e.embeddings.rows, 15);
  EXPECT_EQ(max_diff(e.embeddings, hf_->image_encoder()->encode(vision::nemotron_preprocess(image(), pc))), 0.0);
}

TEST_F(NemotronRemoteVl, WhatCannotRunIsRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"timm name", [](json& c) { c["vision_config"]["args"]["model"] = "vit_giant_patch14_224"; },
       "model 'vit_giant_patch14_224' is not a ViT fp4lm knows"},
      {"qk norm", [](json& c) { c["vision_config"]["args"]["qk_normalization"] = true; }, "'qk_normalization' is true"},
      {"no norm", [](json& c) { c.erase("norm_mean"); }, "field 'norm_mean' is missing"},
      {"tile", [](json& c) { c["force_image_size"] = 18; }, "force_image_size 18 is not a multiple"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const fs::path dir = tmp_->path() / (std::string("bad_") + k.what);
    write_remote_form(dir, "NemotronH_Nano_VL_V2", false, k.edit);
    const std::string e = test::error_of([&] {
      const auto lm = load(dir);
      ImageInput::for_model(*lm, dir.string());
    });
    EXPECT_NE(e.find(k.error), std::string::npos) << e;
  }
}

TEST_F(NemotronRemoteVl, WithoutTowerTensorsOrArgsTheWrapperRunsTextAndTakesNoImage) {
  const fs::path dir = tmp_->path() / "text_only";
  write_remote_form(dir, "NemotronH_Nano_VL_V2", false);
  test::edit_tensors(dir, [](test::EditedTensor& t) { return t.name.rfind("language_model.", 0) == 0; });
  const auto lm = load(dir);
  EXPECT_EQ(lm->image_encoder(), nullptr);
  EXPECT_EQ(ImageInput::for_model(*lm, dir.string()), nullptr);  // the server's "no vision tower" 400
  // A vision_config without RADIO's args: the tower's shape is unknown, so the same (with a warning).
  const fs::path bare = tmp_->path() / "no_args";
  write_remote_form(bare, "NemotronH_Nano_VL_V2", false, [](json& c) { c["vision_config"].erase("args"); });
  const auto lm2 = load(bare);
  EXPECT_EQ(lm2->image_encoder(), nullptr);
}

}  // namespace
}  // namespace fp4lm::engine::nemotron_remote_vl_test
