// AWQ's pre_quant_scale (docs/FORMAT.md, "AWQ pre_quant_scale"): a checkpoint whose every
// quantized Linear stores one — ModelOpt's NVFP4_AWQ, and quant_algo NVFP4 with
// "pre_quant_scale": true as nvidia/DeepSeek-R1-0528-NVFP4 declares it — computes, through the
// W4A16 path in float32, the logits of the dense checkpoint holding W_deq · diag(pre_quant_scale);
// as stored (W4A4) it tracks them. Fused shards must share one scale; MoE experts' are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_edit.h"
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
#include "quant/nvfp4.h"

namespace fp4lm::model::pre_quant_scale_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::TempDir;
using test::as_f32;
using test::DenseTensor;
using test::rel_to_range;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::string write_awq(const fs::path& dir, QuantAlgo algo, const std::string& arch = "Qwen3ForCausalLM") {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.quantize_lm_head = true;
  s.pre_quant_scale = true;
  s.seed = 11;
  synth::write_synthetic_checkpoint(dir.string(), s);
  return dir.string();
}

bool ends(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.ends_with(t); }

// The dense float32 checkpoint the AWQ one stands for: each NVFP4 module's weights dequantized
// (quant/nvfp4.h) and, when `scale`, multiplied per input channel by its pre_quant_scale; the
// other tensors as stored; no quantization config.
std::string write_dense_reference(const std::string& q, const fs::path& out, bool scale = true) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale", ".weight_scale_2", ".input_scale", ".pre_quant_scale"},
      [scale](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::U8) return std::nullopt;
        const std::string m = name.substr(0, name.size() - 7);
        const int64_t n = t.shape[0], k = 2 * t.shape[1];
        const float s2 = as_f32(ck.get(m + ".weight_scale_2"))[0];
        std::vector<float> w = quant::dequantize_weight(t.data, ck.get(m + ".weight_scale").data, n, k, s2);
        if (const TensorView* p = ck.find(m + ".pre_quant_scale"); p && scale) {
          const std::vector<float> s = as_f32(*p);
          for (int64_t r = 0; r < n; ++r)
            for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(r * k + j)] *= s[static_cast<size_t>(j)];
        }
        return DenseTensor{{n, k}, std::move(w)};
      });
}

EngineOptions f32(bool w4a16) {
  EngineOptions o;
  o.dtype = "float32";
  if (w4a16) o.override_activation_dtype = DType::F32;
  return o;
}

// Both config forms: quant_algo NVFP4 with "pre_quant_scale": true, and NVFP4_AWQ.
class PreQuantScale : public ::testing::TestWithParam<QuantAlgo> {};

TEST_P(PreQuantScale, W4A16PathGivesTheDenseLogitsOfDequantizedWeightsTimesTheScale) {
  TempDir dir;
  const std::string q = write_awq(dir.path() / "awq", GetParam());
  const auto want = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto got = checkpoint_logits(q, kTokens, f32(/*w4a16=*/true));
  ASSERT_EQ(got.size(), want.size());
  const double d = rel_to_range(got, want);
  EXPECT_LT(d, 1e-4);
  RecordProperty("w4a16_rel_to_range", fmt::format("{:.2e}", d));
  // The scale matters: the same weights without it are far off (what ignoring it computed).
  const auto unscaled = checkpoint_logits(write_dense_reference(q, dir.path() / "unscaled", false), kTokens);
  EXPECT_GT(rel_to_range(unscaled, want), 0.05);
}

TEST_P(PreQuantScale, AsStoredW4A4TracksTheReference) {
  TempDir dir;
  const std::string q = write_awq(dir.path() / "awq", GetParam());
  const auto want = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto w4a4 = checkpoint_logits(q, kTokens, f32(false));
  const auto unscaled = checkpoint_logits(write_dense_reference(q, dir.path() / "unscaled", false), kTokens);
  const double e = test::rel_rms(w4a4, want), e_unscaled = test::rel_rms(unscaled, want);
  RecordProperty("w4a4_rel_rms", fmt::format("{:.3f} (unscaled weights: {:.3f})", e, e_unscaled));
  // 4-bit activations add error (quantized_models_test.cpp bounds NVFP4 W4A4 at 0.4), but far
  // less than ignoring the scale.
  EXPECT_LT(e, 0.4);
  EXPECT_LT(e, 0.5 * e_unscaled) << e_unscaled;
}

INSTANTIATE_TEST_SUITE_P(ConfigForms, PreQuantScale, ::testing::Values(QuantAlgo::NVFP4, QuantAlgo::NVFP4_AWQ),
                         [](const auto& info) { return std::string(quant::algo_name(info.param)); });

TEST(PreQuantScaleConfig, BothFormsDeclareIt) {
  TempDir dir;
  const std::string q = write_awq(dir.path() / "awq", QuantAlgo::NVFP4);
  std::ifstream f(fs::path(q) / "hf_quant_config.json");
  const json j = json::parse(f);
  EXPECT_EQ(j["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(j["quantization"]["pre_quant_scale"], true);
  ModelLoader l(io::Checkpoint::open(q), f32(false));
  EXPECT_TRUE(quant::as_modelopt(l.quant_config()).pre_quant_scale);
}

// A fused layer's shards share one input: different scales are an error naming both.
TEST(PreQuantScaleFused, ShardsWithDifferentScalesAreAnErrorNamingThem) {
  TempDir dir;
  const std::string q = write_awq(dir.path() / "awq", QuantAlgo::NVFP4_AWQ);
  test::edit_tensors(q, [](test::EditedTensor& t) {
    if (t.name == "model.layers.0.self_attn.k_proj.pre_quant_scale") {
      std::vector<float> v(t.bytes.size() / 2);
      to_f32_n(t.bytes.data(), t.dtype, v.data(), v.size());
      v[3] *= 2;
      from_f32_n(v.data(), t.dtype, t.bytes.data(), v.size());
    }
    return true;
  });
  const std::string e = test::error_of([&] { CausalLM::load(q, f32(false)); });
  EXPECT_NE(e.find("model.layers.0.self_attn.qkv_proj hold different pre_quant_scale values"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj and model.layers.0.self_attn.k_proj"), std::string::npos) << e;
}

TEST(PreQuantScaleFused, OneShardWithoutAScaleIsAnError) {
  TempDir dir;
  const std::string q = write_awq(dir.path() / "awq", QuantAlgo::NVFP4_AWQ);
  test::edit_tensors(q, [](test::EditedTensor& t) { return t.name != "model.layers.1.mlp.up_proj.pre_quant_scale"; });
  const std::string e = test::error_of([&] { CausalLM::load(q, f32(false)); });
  EXPECT_NE(e.find("model.layers.1.mlp.gate_proj stores a pre_quant_scale and model.layers.1.mlp.up_proj does not"),
            std::string::npos)
      << e;
}

// The grouped MoE kernels scale no expert's input: an expert's pre_quant_scale is refused by name.
TEST(PreQuantScaleMoe, ExpertScalesAreRefusedByName) {
  TempDir dir;
  synth::SyntheticOptions s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.algo = QuantAlgo::NVFP4_AWQ;
  synth::write_synthetic_checkpoint((dir.path() / "moe").string(), s);
  const std::string q = (dir.path() / "moe").string();
  std::vector<uint16_t> ones(static_cast<size_t>(s.moe_intermediate), 0x3F80);  // bf16 1.0
  test::EditedTensor extra{"model.layers.0.mlp.experts.2.down_proj.pre_quant_scale", DType::BF16,
                           {s.moe_intermediate}, {}};
  extra.bytes.resize(ones.size() * 2);
  std::memcpy(extra.bytes.data(), ones.data(), extra.bytes.size());
  test::edit_tensors(q, [](test::EditedTensor&) { return true; }, {extra});
  const std::string e = test::error_of([&] { CausalLM::load(q, f32(false)); });
  EXPECT_NE(e.find("'model.layers.0.mlp.experts.2.down_proj.pre_quant_scale'"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp4lm::model::pre_quant_scale_test
