// ModelOpt's FP8_PER_CHANNEL_PER_TOKEN (docs/FORMAT.md, "FP8_PER_CHANNEL_PER_TOKEN"): E4M3
// weights with a weight_scale per output channel, no input_scale; each token's activations are
// quantized to E4M3 with its own amax / 448 at run time. Under --override-activation-dtype the
// layers run W8A16: the logits of the dense checkpoint holding the dequantized weights. As stored,
// the default (FP8 W8A16 kernel behind model::Linear's per-token FP8 pass) and the reference
// backend agree, and match transformers on a checkpoint ModelOpt exported.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/dense_reference.h"
#include "common/error_norms.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model::fp8_per_channel_per_token_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::TempDir;
using test::as_f32;
using test::DenseTensor;
using test::rel_to_range;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::string write_pcpt(const fs::path& dir) {
  synth::SyntheticOptions s;
  s.architecture = "Qwen3ForCausalLM";
  s.algo = QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN;
  s.seed = 29;
  synth::write_synthetic_checkpoint(dir.string(), s);
  return dir.string();
}

bool ends(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.ends_with(t); }

// The dense float32 checkpoint of the dequantized weights: e4m3(code) × weight_scale[row].
std::string write_dense_reference(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::F8_E4M3) return std::nullopt;
        const std::string m = name.substr(0, name.size() - 7);
        const int64_t n = t.shape[0], k = t.shape[1];
        const std::vector<float> s = as_f32(ck.get(m + ".weight_scale"));
        std::vector<float> w(static_cast<size_t>(n * k));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < k; ++j)
            w[static_cast<size_t>(r * k + j)] = e4m3_to_f32(t.data[r * k + j]) * s[static_cast<size_t>(r)];
        return DenseTensor{{n, k}, std::move(w)};
      });
}

EngineOptions f32(bool w8a16, const std::string& linear_backend = "") {
  EngineOptions o;
  o.dtype = "float32";
  if (w8a16) o.override_activation_dtype = DType::F32;
  o.linear_backend = linear_backend;
  return o;
}

TEST(Fp8PerChannelPerToken, RunsOnThePerTokenKeyAndTheOverrideMakesItW8A16) {
  TempDir dir;
  const std::string q = write_pcpt(dir.path() / "q");
  {
    auto ck = io::Checkpoint::open(q);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape.size(), 1u);  // per channel
    EXPECT_EQ(ck->find("model.layers.0.mlp.down_proj.input_scale"), nullptr);
    ModelLoader l(ck, f32(false));
    const LayerReport r = l.describe(l.layer("model.layers.0.mlp.down_proj"));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::fp8_pc_pt);
    EXPECT_EQ(r.scheme.key, kernels::kFp8PerToken);
    EXPECT_EQ(kernels::scheme_name(r.scheme.key), "fp8_per_token");
  }
  ModelLoader l(io::Checkpoint::open(q), f32(true));
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.down_proj")).scheme.key, kernels::kFp8W8A16);
}

TEST(Fp8PerChannelPerToken, OverrideGivesTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const std::string q = write_pcpt(dir.path() / "q");
  const auto want = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto got = checkpoint_logits(q, kTokens, f32(/*w8a16=*/true));
  ASSERT_EQ(got.size(), want.size());
  const double d = rel_to_range(got, want);
  EXPECT_LT(d, 1e-4);
  RecordProperty("w8a16_rel_to_range", fmt::format("{:.2e}", d));
}

TEST(Fp8PerChannelPerToken, AsStoredPerTokenActivationsAgreeWithTheReferenceBackendAndTrackTheDenseLogits) {
  TempDir dir;
  const std::string q = write_pcpt(dir.path() / "q");
  const auto dense = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto w8a16 = checkpoint_logits(q, kTokens, f32(true));
  const auto stored = checkpoint_logits(q, kTokens, f32(false));
  const auto reference = checkpoint_logits(q, kTokens, f32(false, "reference"));
  const double agree = rel_to_range(stored, reference);
  const double e = test::rel_rms(stored, dense), fp8_effect = rel_to_range(stored, w8a16);
  RecordProperty("per_token", fmt::format("default vs reference {:.2e} of range; rel RMS vs dense {:.4f}; vs W8A16 "
                                          "{:.2e} of range",
                                          agree, e, fp8_effect));
  EXPECT_LT(agree, 1e-4);
  EXPECT_LT(e, 0.1);
  EXPECT_GT(fp8_effect, 1e-4);
}

TEST(Fp8PerChannelPerToken, APerTensorWeightScaleIsAnErrorNamingIt) {
  TempDir dir;
  synth::SyntheticOptions s;
  s.architecture = "Qwen3ForCausalLM";
  s.algo = QuantAlgo::FP8;  // per-tensor weight_scale and input_scale, declared per channel below
  synth::write_synthetic_checkpoint((dir.path() / "q").string(), s);
  const fs::path hq = dir.path() / "q" / "hf_quant_config.json";
  json j = json::parse(test::read_file(hq));
  j["quantization"]["quant_algo"] = "FP8_PER_CHANNEL_PER_TOKEN";
  test::write_file(hq, j.dump());
  const fs::path cj = dir.path() / "q" / "config.json";
  json c = json::parse(test::read_file(cj));
  if (c.contains("quantization_config")) c["quantization_config"]["quant_algo"] = "FP8_PER_CHANNEL_PER_TOKEN";
  test::write_file(cj, c.dump());
  const std::string e = test::error_of([&] { CausalLM::load((dir.path() / "q").string(), f32(false)); });
  EXPECT_NE(e.find("FP8_PER_CHANNEL_PER_TOKEN layer"), std::string::npos) << e;
  EXPECT_NE(e.find("weight_scale"), std::string::npos) << e;
}

// ModelOpt 0.47.0's CPU export with FP8_PER_CHANNEL_PER_TOKEN_CFG (scripts/make_modelopt_goldens.py).
TEST(Fp8PerChannelPerTokenModelopt, ExportRunsAsStoredWithTheLogitsOfTransformersOnItsDequantizedTensors) {
  const fs::path dir = test::source_dir() / "tests/model/fixtures/modelopt_fp8_per_channel_per_token";
  const json golden = json::parse(test::read_file(dir / "golden.json"));
  const std::vector<int32_t> toks = golden["tokens"].get<std::vector<int32_t>>();
  std::vector<float> want;
  for (const json& row : golden["logits"])
    for (const json& v : row) want.push_back(v.get<float>());
  {
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight").dtype, DType::F8_E4M3);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, Shape{64});
  }
  const auto stored = checkpoint_logits(dir.string(), toks, f32(false));
  const auto reference = checkpoint_logits(dir.string(), toks, f32(false, "reference"));
  const auto w8a16 = checkpoint_logits(dir.string(), toks, f32(true));
  ASSERT_EQ(stored.size(), want.size());
  const double d = rel_to_range(stored, want), dr = rel_to_range(reference, want), d16 = rel_to_range(w8a16, want);
  RecordProperty("modelopt_export", fmt::format("as stored {:.2e}, reference backend {:.2e}, W8A16 override {:.2e} "
                                                "of the range",
                                                d, dr, d16));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  EXPECT_GT(d16, 10 * d);
}

TEST(Fp8PerChannelPerTokenConfig, BothFilesAsModeloptWritesThem) {
  const fs::path dir = test::source_dir() / "tests/model/fixtures/modelopt_fp8_per_channel_per_token";
  ModelLoader l(io::Checkpoint::open(dir.string()), f32(false));
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN);
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).other, nullptr);  // the two files agree
}

}  // namespace
}  // namespace fp4lm::model::fp8_per_channel_per_token_test
