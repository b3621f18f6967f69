// ModelOpt's W4A8_NVFP4_FP8 (docs/FORMAT.md, "W4A8_NVFP4_FP8"): NVFP4 weights whose
// weight_scale_2 is amax/448 and static per-tensor FP8 activations (input_scale = amax/448).
// Under --override-activation-dtype the layers run W4A16: the logits of the dense checkpoint
// holding the dequantized weights. As stored, every Linear's input is quantized to E4M3 with its
// input_scale: the default (W4A16 kernel after model::Linear's FP8 pass) and the reference
// backend's own W8A8-style emulation agree, and both differ from W4A16 by what FP8 does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
#include "quant/modelopt_config.h"
#include "quant/nvfp4.h"

namespace fp4lm::model::w4a8_nvfp4_fp8_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::TempDir;
using test::as_f32;
using test::DenseTensor;
using test::rel_to_range;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::string write_w4a8(const fs::path& dir, QuantAlgo algo = QuantAlgo::W4A8_NVFP4_FP8) {
  synth::SyntheticOptions s;
  s.architecture = "Qwen3ForCausalLM";
  s.algo = algo;
  s.seed = 23;
  synth::write_synthetic_checkpoint(dir.string(), s);
  return dir.string();
}

bool ends(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.ends_with(t); }

// The dense float32 checkpoint holding every NVFP4 module's weights dequantized (e2m1 × E4M3
// block scale × weight_scale_2), the other tensors as stored, no quantization config.
std::string write_dense_reference(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale", ".weight_scale_2", ".input_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::U8) return std::nullopt;
        const std::string m = name.substr(0, name.size() - 7);
        const int64_t n = t.shape[0], k = 2 * t.shape[1];
        const float s2 = as_f32(ck.get(m + ".weight_scale_2"))[0];
        // Blocks of 32 as ModelOpt writes them: each scale covers two of NVFP4's blocks of 16.
        const TensorView& bs = ck.get(m + ".weight_scale");
        const int64_t per = k / 16 / bs.shape[1];
        std::vector<uint8_t> s16(static_cast<size_t>(n * (k / 16)));
        for (size_t i = 0; i < s16.size(); ++i) s16[i] = bs.data[i / static_cast<size_t>(per)];
        return DenseTensor{{n, k}, quant::dequantize_weight(t.data, s16.data(), n, k, s2)};
      });
}

EngineOptions f32(bool w4a16, const std::string& linear_backend = "") {
  EngineOptions o;
  o.dtype = "float32";
  if (w4a16) o.override_activation_dtype = DType::F32;
  o.linear_backend = linear_backend;
  return o;
}

// The export rule: weight_scale_2 = weight amax / 448 (NVFP4's is amax / 2688), so the same
// weights' W4A8 block scales are 6x NVFP4's; input_scale = activation amax / 448 (FP8's);
// group_size 32 in hf_quant_config.json, as ModelOpt 0.47.0 writes it.
TEST(W4A8Nvfp4Fp8, StoresNvfp4TensorsWithAmaxOver448Scales) {
  TempDir dir;
  const std::string q = write_w4a8(dir.path() / "w4a8");
  const std::string nv = write_w4a8(dir.path() / "nvfp4", QuantAlgo::NVFP4);
  auto a = io::Checkpoint::open(q), b = io::Checkpoint::open(nv);
  const std::string m = "model.layers.0.mlp.down_proj";
  EXPECT_EQ(a->get(m + ".weight").dtype, DType::U8);
  EXPECT_EQ(a->get(m + ".weight_scale").dtype, DType::F8_E4M3);
  EXPECT_EQ(a->get(m + ".weight").shape, b->get(m + ".weight").shape);
  // One E4M3 scale per 32 weights (the recipe's nvfp4_bs32), NVFP4's per 16.
  const Shape nv_scales = b->get(m + ".weight_scale").shape;
  EXPECT_EQ(a->get(m + ".weight_scale").shape, (Shape{nv_scales[0], nv_scales[1] / 2}));
  EXPECT_NEAR(as_f32(a->get(m + ".weight_scale_2"))[0] / as_f32(b->get(m + ".weight_scale_2"))[0], 6.0, 1e-5);
  // FP8's activation scale (amax/448) vs NVFP4's (amax/2688).
  EXPECT_NEAR(as_f32(a->get(m + ".input_scale"))[0] / as_f32(b->get(m + ".input_scale"))[0], 6.0, 1e-5);
  std::ifstream f(fs::path(q) / "hf_quant_config.json");
  const json hq = json::parse(f);
  EXPECT_EQ(hq["quantization"]["quant_algo"], "W4A8_NVFP4_FP8");
  EXPECT_EQ(hq["quantization"]["group_size"], 32);
}

TEST(W4A8Nvfp4Fp8, RunsOnTheW4A8KeyAndTheOverrideMakesItW4A16) {
  TempDir dir;
  const std::string q = write_w4a8(dir.path() / "w4a8");
  {
    ModelLoader l(io::Checkpoint::open(q), f32(false));
    const LayerReport r = l.describe(l.layer("model.layers.0.mlp.down_proj"));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::nvfp4_fp8);
    EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A8);
    EXPECT_EQ(kernels::scheme_name(r.scheme.key), "nvfp4_w4a8_fp8");
  }
  ModelLoader l(io::Checkpoint::open(q), f32(true));
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.down_proj")).scheme.key, kernels::kNvfp4W4A16);
}

// --override-activation-dtype: W4A16, the logits of the dense dequantized weights.
TEST(W4A8Nvfp4Fp8, OverrideGivesTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const std::string q = write_w4a8(dir.path() / "w4a8");
  const auto want = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto got = checkpoint_logits(q, kTokens, f32(/*w4a16=*/true));
  ASSERT_EQ(got.size(), want.size());
  const double d = rel_to_range(got, want);
  EXPECT_LT(d, 1e-4);
  RecordProperty("w4a16_rel_to_range", fmt::format("{:.2e}", d));
}

// As stored: the inputs quantized to FP8. The default path (W4A16 kernel behind model::Linear's
// FP8 pass) and the reference backend (its own activation emulation, float weights) agree; both
// track the dense logits, and differ from W4A16 (the FP8 step is not skipped).
TEST(W4A8Nvfp4Fp8, AsStoredFp8ActivationsAgreeWithTheReferenceBackendAndTrackTheDenseLogits) {
  TempDir dir;
  const std::string q = write_w4a8(dir.path() / "w4a8");
  const auto dense = checkpoint_logits(write_dense_reference(q, dir.path() / "dense"), kTokens);
  const auto w4a16 = checkpoint_logits(q, kTokens, f32(true));
  const auto stored = checkpoint_logits(q, kTokens, f32(false));
  const auto reference = checkpoint_logits(q, kTokens, f32(false, "reference"));
  const double agree = rel_to_range(stored, reference);
  EXPECT_LT(agree, 1e-4);
  const double e = test::rel_rms(stored, dense), fp8_effect = rel_to_range(stored, w4a16);
  RecordProperty("w4a8", fmt::format("default vs reference {:.2e} of range; rel RMS vs dense {:.4f}; "
                                     "vs W4A16 {:.2e} of range",
                                     agree, e, fp8_effect));
  EXPECT_LT(e, 0.1);           // E4M3 activations: a few percent at most
  EXPECT_GT(fp8_effect, 1e-4);  // and not nothing: the activations were quantized
}

TEST(W4A8Nvfp4Fp8, MissingInputScaleIsAnErrorNamingItUnlessTheOverrideRunsW4A16) {
  TempDir dir;
  const std::string q = write_w4a8(dir.path() / "w4a8");
  test::edit_tensors(q, [](test::EditedTensor& t) { return t.name != "model.layers.1.self_attn.o_proj.input_scale"; });
  const std::string e = test::error_of([&] { CausalLM::load(q, f32(false)); });
  EXPECT_NE(e.find("'model.layers.1.self_attn.o_proj.input_scale'"), std::string::npos) << e;
  EXPECT_NE(e.find("W4A8_NVFP4_FP8"), std::string::npos) << e;
  EXPECT_NO_THROW(CausalLM::load(q, f32(true)));
}

// MoE experts stored W4A8: the reference MoE backend quantizes each expert's input to FP8 (the
// same logits whichever Linear backend runs the rest); the default W4A16 MoE backends do not (one
// WARN says so), so they differ from it.
TEST(W4A8Nvfp4Fp8, MoeExpertsRunOnTheReferenceWithFp8InputsAndOnTheW4A16BackendsWithAWarning) {
  TempDir dir;
  synth::SyntheticOptions s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.algo = QuantAlgo::W4A8_NVFP4_FP8;
  s.seed = 31;
  const std::string q = (dir.path() / "moe").string();
  synth::write_synthetic_checkpoint(q, s);
  EngineOptions ref = f32(false);
  ref.moe_backend = "reference";
  EngineOptions all_ref = f32(false, "reference");
  all_ref.moe_backend = "reference";
  const auto a = checkpoint_logits(q, kTokens, ref);
  const auto r = checkpoint_logits(q, kTokens, all_ref);
  const auto b = checkpoint_logits(q, kTokens, f32(false));
  EXPECT_LT(rel_to_range(a, r), 1e-4);
  const double e = test::rel_rms(b, a);
  RecordProperty("moe_w4a16_experts_vs_fp8_experts_rel_rms", fmt::format("{:.4f}", e));
  EXPECT_GT(e, 1e-3);  // the experts' inputs were FP8-quantized on one path only
  for (float v : b) ASSERT_TRUE(std::isfinite(v));
}

// A checkpoint ModelOpt 0.47.0 exported on CPU with its W4A8_NVFP4_FP8_CFG recipe (a tiny random
// Llama; scripts/make_modelopt_goldens.py): its tensors as the exporter writes them (blocks of
// 32), and the float64 logits transformers computes from them with float8_e4m3fn inputs.
TEST(W4A8Nvfp4Fp8Modelopt, ExportRunsAsStoredWithTheLogitsOfTransformersOnItsDequantizedTensors) {
  const fs::path dir = test::source_dir() / "tests/model/fixtures/modelopt_w4a8_nvfp4_fp8";
  const json golden = json::parse(test::read_file(dir / "golden.json"));
  const std::vector<int32_t> toks = golden["tokens"].get<std::vector<int32_t>>();
  std::vector<float> want;
  for (const json& row : golden["logits"])
    for (const json& v : row) want.push_back(v.get<float>());
  {
    auto ck = io::Checkpoint::open(dir.string());
    const TensorView& s = ck->get("model.layers.0.mlp.down_proj.weight_scale");
    EXPECT_EQ(s.dtype, DType::F8_E4M3);
    EXPECT_EQ(s.shape, (Shape{64, 128 / 32}));
  }
  const auto stored = checkpoint_logits(dir.string(), toks, f32(false));
  const auto reference = checkpoint_logits(dir.string(), toks, f32(false, "reference"));
  const auto w4a16 = checkpoint_logits(dir.string(), toks, f32(true));
  ASSERT_EQ(stored.size(), want.size());
  const double d = rel_to_range(stored, want), dr = rel_to_range(reference, want),
               d16 = rel_to_range(w4a16, want);
  RecordProperty("modelopt_export", fmt::format("as stored {:.2e}, reference backend {:.2e}, W4A16 override {:.2e} "
                                                "of the range",
                                                d, dr, d16));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  EXPECT_GT(d16, 10 * d);  // without the FP8 step the logits are measurably elsewhere
}

// The forms ModelOpt 0.47.0 writes (export/quant_utils.py process_layer_quant_config,
// convert_hf_config.py): the top-level algorithm, a MIXED_PRECISION entry, and config.json's
// config_groups (4-bit float weights in groups of 16 with 8-bit float activations).
TEST(W4A8Nvfp4Fp8Config, EveryFormModeloptWritesParses) {
  using quant::parse_modelopt_config;
  const json top = {{"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}},
                    {"quantization",
                     {{"quant_algo", "W4A8_NVFP4_FP8"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                      {"exclude_modules", {"lm_head"}}}}};
  const auto a = parse_modelopt_config(top, json::object(), "/c");
  EXPECT_EQ(a.algo, QuantAlgo::W4A8_NVFP4_FP8);
  EXPECT_EQ(a.group_size, 16);
  json bs32 = top;
  bs32["quantization"]["group_size"] = 32;  // what ModelOpt's recipe writes
  EXPECT_EQ(parse_modelopt_config(bs32, json::object(), "/c").group_size, 32);
  EXPECT_EQ(quant::scheme_of(quant::module_algo(a, "model.layers.0.mlp.down_proj")), quant::Scheme::nvfp4_fp8);
  EXPECT_EQ(quant::module_algo(a, "lm_head"), QuantAlgo::None);

  const json mixed = {{"quantization",
                       {{"quant_algo", "MIXED_PRECISION"},
                        {"quantized_layers",
                         {{"model.layers.0.mlp.down_proj", {{"quant_algo", "W4A8_NVFP4_FP8"}, {"group_size", 16}}},
                          {"model.layers.0.mlp.up_proj", {{"quant_algo", "FP8"}}}}}}}};
  const auto b = parse_modelopt_config(mixed, json::object(), "/c");
  EXPECT_EQ(quant::module_algo(b, "model.layers.0.mlp.down_proj"), QuantAlgo::W4A8_NVFP4_FP8);

  const json groups = {{"quant_method", "modelopt"},
                       {"config_groups",
                        {{"group_0",
                          {{"input_activations", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
                           {"weights", {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
                           {"targets", {"Linear"}}}}}}};
  // convert_hf_config.py writes this same group for W4A8_MXFP4_FP8: alone, it names no format.
  const std::string e = test::error_of([&] { parse_modelopt_config(std::nullopt, {{"quantization_config", groups}}, "/c"); });
  EXPECT_NE(e.find("config_groups['group_0'] describes no supported format"), std::string::npos) << e;
  json with_algo = groups;
  with_algo["quant_algo"] = "W4A8_NVFP4_FP8";  // as ModelOpt writes it: quant_algo beside the groups
  EXPECT_EQ(parse_modelopt_config(std::nullopt, {{"quantization_config", with_algo}}, "/c").algo,
            QuantAlgo::W4A8_NVFP4_FP8);
  json bad = top;
  bad["quantization"]["group_size"] = 64;
  EXPECT_NE(test::error_of([&] { parse_modelopt_config(bad, json::object(), "/c"); })
                .find("group_size must be 16 or 32 for W4A8_NVFP4_FP8 (found 64)"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::model::w4a8_nvfp4_fp8_test
