// Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) and Qwen2-VL (Qwen2VLForConditionalGeneration)
// text models against transformers itself: tiny random checkpoints transformers 5.24 built and
// saved (scripts/make_qwen2_5_vl_goldens.py, fixtures in tests/cli/fixtures/qwen2_5_vl_e2e, config.json
// in the published flat form, tensors in the published layout model.* / visual.*), fed text:
// float32 logits within 1e-4 of the range of transformers' float64 logits at every position,
// argmax equal. Then decoding, prefill chunks and batches against one forward, the config rules
// (flat or text_config, the "mrope" rope type, mrope_section covering the head) and the towers'
// window order and config errors.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/vision/qwen2_5_vision_tower.h"

namespace fp4lm::model::qwen2_5_vl_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return (test::source_dir() / "tests" / "cli" / "fixtures" / "qwen2_5_vl_e2e" / name).string();
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::vector<int32_t> tokens(const std::string& name) {
  return io::read_json_file(fixture(name) + "/golden.json")["text_tokens"].get<std::vector<int32_t>>();
}

class Qwen2VlGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen2VlGolden, Float32MatchesTransformersFloat64) {
  const std::string name = GetParam();
  const json g = io::read_json_file(fixture(name) + "/golden.json");
  const std::vector<int32_t> toks = tokens(name);
  const auto vocab = g["logits_cols"].get<size_t>();
  const std::string raw = test::read_file(fixture(name) + "/text_logits.f64");
  ASSERT_EQ(raw.size(), toks.size() * vocab * sizeof(double));
  std::vector<double> want(toks.size() * vocab);
  std::memcpy(want.data(), raw.data(), raw.size());

  auto lm = CausalLM::load(fixture(name), f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.tensor_prefix, "model.");  // the published layout: model.layers.*, visual.*
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_FALSE(c.mrope_interleaved);
  EXPECT_EQ(c.rope_theta, 10000.0);
  // The tower's tensors consumed, none left unread or ignored.
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  for (const auto& [why, names] : u.ignored)
    EXPECT_TRUE(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("visual."); }))
        << why;
  EXPECT_NE(lm->image_encoder(), nullptr);

  const std::vector<float> got = all_logits(*lm, toks);
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
  const double rel = diff / (*hi - *lo);  // relative to the range of transformers' logits
  EXPECT_LT(rel, 1e-4) << name;
  RecordProperty("rel_diff", fmt::format("{:.2e}", rel));
  for (size_t r = 0; r < toks.size(); ++r) {
    const auto gr = got.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    const auto wr = want.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    EXPECT_EQ(std::max_element(gr, gr + static_cast<std::ptrdiff_t>(vocab)) - gr,
              std::max_element(wr, wr + static_cast<std::ptrdiff_t>(vocab)) - wr)
        << name << ": argmax at position " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, Qwen2VlGolden, ::testing::Values("qwen2_5_vl", "qwen2_vl"));

TEST(Qwen2_5Vl, StepsChunksAndBatchesMatchOneForward) {
  expect_steps_chunks_and_batches_match_one_forward(fixture("qwen2_5_vl"), f32(), tokens("qwen2_5_vl"));
}

// The fixture's config in both forms transformers reads: flat (the published form) and text_config
// with rope_parameters (the form transformers 5 writes); the defaults of the text config class.
TEST(Qwen2_5Vl, ConfigForms) {
  json flat = io::read_json_file(fixture("qwen2_5_vl") + "/config.json");
  const ModelConfig a = parse_model_config(flat, "config.json");
  json nested = {{"architectures", flat["architectures"]}, {"vision_config", flat["vision_config"]},
                 {"tie_word_embeddings", false}};
  json text = flat;
  for (const char* k : {"architectures", "vision_config", "rope_scaling", "rope_theta"}) text.erase(k);
  text["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {4, 3, 3}}};
  nested["text_config"] = text;
  const ModelConfig b = parse_model_config(nested, "config.json");
  for (const ModelConfig* m : {&a, &b}) {
    EXPECT_EQ(m->hidden_size, 40);
    EXPECT_EQ(m->num_layers, 3);
    EXPECT_EQ(m->head_dim, 20);
    EXPECT_EQ(m->rope_theta, 10000.0);
    EXPECT_EQ(m->mrope_section, (std::vector<int64_t>{4, 3, 3}));
    EXPECT_FALSE(m->mrope_interleaved);
    EXPECT_TRUE(m->attention_bias);
  }
  // Without rope keys: rope_theta 1e6 and mrope_section [16, 24, 24] (head_dim 128), as transformers.
  json big = flat;
  big.erase("rope_scaling");
  big.erase("rope_theta");
  big["hidden_size"] = 256;
  const ModelConfig d = parse_model_config(big, "config.json");
  EXPECT_EQ(d.rope_theta, 1000000.0);
  EXPECT_EQ(d.mrope_section, (std::vector<int64_t>{16, 24, 24}));
}

std::string error_of(const json& c) {
  try {
    parse_model_config(c, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Qwen2_5Vl, ConfigErrorsNameTheField) {
  json c = io::read_json_file(fixture("qwen2_5_vl") + "/config.json");
  c["rope_scaling"]["mrope_section"] = {4, 3, 2};
  EXPECT_NE(error_of(c).find("rope_scaling.mrope_section [4,3,2] sums to 9, but the head has head_dim / 2 = 10 "
                             "frequency pairs"),
            std::string::npos)
      << error_of(c);
  c["rope_scaling"]["mrope_section"] = {4, 6};
  EXPECT_NE(error_of(c).find("rope_scaling.mrope_section must be 3 non-negative counts (t, h, w), found [4,6]"),
            std::string::npos)
      << error_of(c);
  c = io::read_json_file(fixture("qwen2_5_vl") + "/config.json");
  c["use_sliding_window"] = true;
  c["sliding_window"] = 16;
  EXPECT_NE(error_of(c).find("use_sliding_window=true is not supported"), std::string::npos) << error_of(c);
  c = io::read_json_file(fixture("qwen2_5_vl") + "/config.json");
  c["architectures"] = {"Qwen3VLForConditionalGeneration"};  // the flat form is Qwen2(.5)-VL's only
  EXPECT_NE(error_of(c).find("Qwen3VLForConditionalGeneration needs an object 'text_config'"), std::string::npos)
      << error_of(c);
}

// transformers' get_vision_window_index for one frame: windows row-major, units row-major within
// each, the grid's last windows cut, none empty.
TEST(Qwen2_5VisionTower, WindowOrder) {
  std::vector<int64_t> order, sizes;
  qwen2_5_window_order(4, 5, 2, order, sizes);  // the fixture's image: 4 x 5 merge units, 2 x 2 windows
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 15, 16, 12, 13, 17, 18, 14, 19}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2, 4, 4, 2}));
  order.clear();
  sizes.clear();
  qwen2_5_window_order(3, 2, 4, order, sizes);  // one window larger than the grid
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{6}));
}

TEST(Qwen2_5VisionTower, ConfigIsReadOrRefusedByName) {
  const json v = io::read_json_file(fixture("qwen2_5_vl") + "/config.json")["vision_config"];
  const Qwen2_5VisionConfig c = parse_qwen2_5_vision_config(v, "vc");
  EXPECT_EQ(c.depth, 4);
  EXPECT_EQ(c.window_size, 56);
  EXPECT_EQ(c.window_units(), 2);
  EXPECT_EQ(c.fullatt_block_indexes, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.patch_size, 14);
  const auto err = [](const json& j) {
    try {
      parse_qwen2_5_vision_config(j, "vc");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto err2 = [](const json& j) {
    try {
      parse_qwen2_5_vision_config(j, "vc", /*qwen2=*/true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  json bad = v;
  bad["mlp_ratio"] = 4;  // Qwen2-VL's tower key
  EXPECT_NE(err(bad).find("vc: unknown field 'mlp_ratio' (= 4)"), std::string::npos) << err(bad);
  bad = v;
  bad["in_chans"] = 4;  // the published configs' older spelling, disagreeing with in_channels
  EXPECT_NE(err(bad).find("field 'in_chans' is 4, but in_channels (which transformers reads) is 3"), std::string::npos)
      << err(bad);
  bad = v;
  bad["hidden_act"] = "relu";
  EXPECT_NE(err(bad).find("field 'hidden_act' is 'relu'"), std::string::npos) << err(bad);
  // A full-attention block outside the tower, a window under one merge unit: the tower refuses them.
  Qwen2_5VisionConfig out = c;
  out.fullatt_block_indexes = {1, 4};
  try {
    Qwen2_5VisionTower t(out, {}, "vc");
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vc: field 'fullatt_block_indexes' holds 4, not a block of the tower (depth 4)"),
              std::string::npos)
        << e.what();
  }
  // Qwen2-VL's keys: the tower embed_dim wide, its MLP embed_dim x mlp_ratio, the merger to
  // hidden_size, every block full attention; Qwen2.5-VL's window keys unknown there.
  const json v2 = io::read_json_file(fixture("qwen2_vl") + "/config.json")["vision_config"];
  const Qwen2_5VisionConfig q2 = parse_qwen2_5_vision_config(v2, "vc", /*qwen2=*/true);
  EXPECT_TRUE(q2.qwen2);
  EXPECT_EQ(q2.hidden_size, 32);
  EXPECT_EQ(q2.intermediate_size, 64);
  EXPECT_EQ(q2.out_hidden_size, 40);
  EXPECT_EQ(q2.hidden_act, "quick_gelu");
  EXPECT_EQ(q2.fullatt_block_indexes, (std::vector<int64_t>{0, 1}));
  json w2 = v2;
  w2["window_size"] = 112;
  EXPECT_NE(err2(w2).find("vc: unknown field 'window_size' (= 112)"), std::string::npos) << err2(w2);
  Qwen2_5VisionConfig small = c;
  small.window_size = 20;
  try {
    Qwen2_5VisionTower t(small, {}, "vc");
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("window_size 20 is smaller than one merge unit"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::model::qwen2_5_vl_test
