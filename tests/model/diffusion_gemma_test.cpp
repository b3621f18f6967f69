// DiffusionGemma (model/diffusion_gemma.h) against transformers' float64 forwards of the tiny
// random checkpoint scripts/make_diffusion_gemma_goldens.py builds: the causal encoder's logits
// over a prompt longer than the sliding window, and the decoder's for a canvas after it (reading
// the cut sliding-layer cache), without and with self-conditioning logits. Within 1e-4 of the
// reference's range at every position, argmax equal; config and tensor errors by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "model/diffusion_gemma.h"

namespace fp4lm::model::diffusion_gemma_test {
namespace {

using nlohmann::json;

std::filesystem::path fixture() { return test::source_dir() / "tests" / "model" / "fixtures" / "diffusion_gemma" / "tiny"; }

std::vector<double> read_f64(const std::string& name) {
  std::ifstream in(fixture() / name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  in.seekg(0, std::ios::end);
  std::vector<double> v(static_cast<size_t>(in.tellg()) / sizeof(double));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  return v;
}

json goldens() {
  std::ifstream in(fixture() / "goldens.json");
  return json::parse(in);
}

std::vector<int32_t> ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// Max |got - want| relative to max |want|, and argmax equal per row.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, int64_t vocab, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double diff = 0, scale = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    diff = std::max(diff, std::abs(got[k] - want[k]));
    scale = std::max(scale, std::abs(want[k]));
  }
  const double rel = diff / scale;
  std::printf("%s: max |fp4lm - transformers float64| = %.3g (%.3g of the range %.3g)\n", what, diff, rel, scale);
  EXPECT_LT(rel, 1e-4) << what;
  for (size_t r = 0; r < want.size() / vocab; ++r) {
    const auto g = std::max_element(got.begin() + r * vocab, got.begin() + (r + 1) * vocab) - (got.begin() + r * vocab);
    const auto w =
        std::max_element(want.begin() + r * vocab, want.begin() + (r + 1) * vocab) - (want.begin() + r * vocab);
    EXPECT_EQ(g, w) << what << " row " << r;
  }
}

TEST(DiffusionGemma, EncoderLogitsMatchTransformersFloat64) {
  const auto m = DiffusionGemma::load(fixture().string());
  const json g = goldens();
  DiffusionGemmaCache cache = m->new_cache();
  const std::vector<int32_t> prompt = ids(g["prompt_ids"]);
  const std::vector<float> logits = m->encode(cache, prompt, true);
  expect_close(logits, read_f64("expected_encoder_logits.f64"), m->config().vocab_size, "encoder");
  EXPECT_EQ(cache.length, static_cast<int64_t>(prompt.size()));
  // Sliding layers keep sliding_window - 1 positions, full-attention layers all of them.
  EXPECT_EQ(cache.layers[0].rows, m->config().sliding_window - 1);
  EXPECT_EQ(cache.layers[2].rows, static_cast<int64_t>(prompt.size()));
}

TEST(DiffusionGemma, EncoderInTwoPiecesMatchesOnePass) {
  const auto m = DiffusionGemma::load(fixture().string());
  const std::vector<int32_t> prompt = ids(goldens()["prompt_ids"]);
  DiffusionGemmaCache a = m->new_cache(), b = m->new_cache();
  const std::vector<float> whole = m->encode(a, prompt, true);
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 7), tail(prompt.begin() + 7, prompt.end());
  m->encode(b, head, false);
  const std::vector<float> last = m->encode(b, tail, true);
  const int64_t V = m->config().vocab_size;
  ASSERT_EQ(last.size(), tail.size() * V);
  for (size_t k = 0; k < last.size(); ++k) ASSERT_NEAR(last[k], whole[7 * V + k], 1e-4) << k;
}

TEST(DiffusionGemma, DecoderLogitsMatchTransformersFloat64) {
  const auto m = DiffusionGemma::load(fixture().string());
  const json g = goldens();
  DiffusionGemmaCache cache = m->new_cache();
  m->encode(cache, ids(g["prompt_ids"]), false);
  const std::vector<int32_t> canvas = ids(g["canvas"]);
  const std::vector<float> first = m->decode(cache, canvas, {});
  expect_close(first, read_f64("expected_decoder_logits.f64"), m->config().vocab_size, "decoder");
  // The decoder reads the cache without writing it.
  EXPECT_EQ(cache.length, static_cast<int64_t>(g["prompt_ids"].size()));
  // Self-conditioning on the first logits divided by a temperature.
  std::vector<float> sc(first);
  for (float& v : sc) v /= g["self_conditioning_divisor"].get<float>();
  const std::vector<float> second = m->decode(cache, canvas, sc);
  expect_close(second, read_f64("expected_decoder_sc_logits.f64"), m->config().vocab_size, "decoder, self-conditioned");
  // The signal matters: the two differ far beyond the tolerance (1e-4 of a range of ~15). The
  // fixture weakens the self-conditioning MLP (make_diffusion_gemma_goldens.py, SC_GAIN) so that
  // denoising does not amplify rounding, hence a difference of ~0.02 rather than ~1.
  double d = 0;
  for (size_t k = 0; k < first.size(); ++k) d = std::max(d, static_cast<double>(std::abs(first[k] - second[k])));
  EXPECT_GT(d, 0.01);
}

// A copy of the fixture with config.json edited by `edit`.
std::string edited_copy(const test::TempDir& dir, const std::function<void(json&)>& edit) {
  for (const auto& e : std::filesystem::directory_iterator(fixture()))
    std::filesystem::copy_file(e.path(), dir.path() / e.path().filename());
  std::ifstream in(fixture() / "config.json");
  json c = json::parse(in);
  edit(c);
  std::ofstream(dir.path() / "config.json") << c.dump(1);
  return dir.path().string();
}

std::string load_error(const std::string& dir) {
  try {
    DiffusionGemma::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DiffusionGemma, ThePublishedConfigsTopLevelFieldsLoad) {
  // google/diffusiongemma-26B-A4B-it's config.json carries Gemma 4's media fields and an EOS list
  // at the top level (as public conversions of it show): read as not changing the text model.
  // The same logits as the fixture's own config.
  test::TempDir d;
  const std::string dir = edited_copy(d, [](json& c) {
    c["eos_token_id"] = json::array({1, 106, 50});
    c["vision_soft_tokens_per_image"] = 280;
    c["text_config"]["use_bidirectional_attention"] = "vision";
    // The published text_config gives the full-attention layers' shape as transformers' inputs
    // (global_head_dim, num_global_key_value_heads), not as the per_layer_config it saves.
    c["text_config"].erase("per_layer_config");
    c["text_config"]["global_head_dim"] = 32;
    c["text_config"]["num_global_key_value_heads"] = 1;
  });
  const auto m = DiffusionGemma::load(dir);
  DiffusionGemmaCache cache = m->new_cache();
  const std::vector<float> logits = m->encode(cache, ids(goldens()["prompt_ids"]), true);
  expect_close(logits, read_f64("expected_encoder_logits.f64"), m->config().vocab_size, "encoder, published fields");
}

TEST(DiffusionGemma, ConfigKeysAreReadOrRefusedByName) {
  {
    test::TempDir d;
    const std::string e = load_error(edited_copy(d, [](json& c) { c["text_config"]["attn_logit_softcapping"] = 50.0; }));
    EXPECT_NE(e.find("unknown field 'text_config.attn_logit_softcapping'"), std::string::npos) << e;
  }
  {
    test::TempDir d;
    // quantization_config is the quantization config's (read as for any checkpoint): one that names
    // no method is refused by it.
    const std::string e = load_error(edited_copy(d, [](json& c) { c["quantization_config"] = json::object(); }));
    EXPECT_NE(e.find("config.json: quantization_config: no quant_method"), std::string::npos) << e;
  }
  {
    test::TempDir d;
    const std::string e =
        load_error(edited_copy(d, [](json& c) { c["text_config"]["use_bidirectional_attention"] = "all"; }));
    EXPECT_NE(e.find("'text_config.use_bidirectional_attention' \"all\" is not supported"), std::string::npos) << e;
  }
  {
    test::TempDir d;
    const std::string e = load_error(edited_copy(d, [](json& c) {
      c["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
    }));
    EXPECT_NE(e.find("rope_type' yarn is not supported"), std::string::npos) << e;
  }
  {
    // A wrong shape names the tensor, expected and found.
    test::TempDir d;
    const std::string e = load_error(edited_copy(d, [](json& c) { c["text_config"]["moe_intermediate_size"] = 12; }));
    EXPECT_NE(e.find("experts.gate_up_proj': expected shape [4, 24, 32], found [4, 48, 32]"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::diffusion_gemma_test
