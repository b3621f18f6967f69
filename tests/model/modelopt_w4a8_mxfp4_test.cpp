// ModelOpt W4A8_MXFP4_FP8 (docs/FORMAT.md, "W4A8_MXFP4_FP8"): MXFP4 weights (U8 codes, U8 E8M0
// scales per 32) with per-tensor FP8 activations, run on the MXFP4 W4A16 kernels behind
// model::Linear's FP8 pass or on the reference backend. Checked against ModelOpt 0.47.0's own CPU
// export (scripts/make_modelopt_goldens.py w4a8_mxfp4_fp8: transformers' float64 logits of the
// exported tensors, each input quantized by ModelOpt's _fp8_eager with its own amax, since the recipe
// calibrates nothing and writes no input_scale).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/checkpoint_edit.h"
#include "common/dense_reference.h"
#include "common/error_norms.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/load/model_loader.h"
#include "reference/modelopt_golden.h"
#include "quant/modelopt_config.h"
#include "quant/mxfp4.h"

namespace fp4lm::model::modelopt_w4a8_mxfp4_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::DenseTensor;
using test::rel_to_range;
using test::TempDir;

fs::path fixture() { return modelopt_fixture("modelopt_w4a8_mxfp4_fp8"); }

bool ends(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.ends_with(t); }

// The dense float32 checkpoint of the export: e2m1(code) × 2^(scale byte - 127).
std::string write_dense(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale", ".input_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::U8) return std::nullopt;
        const TensorView& s = ck.get(name.substr(0, name.size() - 7) + ".weight_scale");
        const int64_t n = t.shape[0], k = t.shape[1] * 2;
        return DenseTensor{{n, k}, quant::dequantize_mxfp4(t.data, s.data, n, k)};
      });
}

// A copy of the export with `edit` applied (and `extra` tensors added).
std::string edited(const fs::path& dir, const std::function<bool(test::EditedTensor&)>& edit,
                   std::vector<test::EditedTensor> extra = {}) {
  test::copy_dir(fixture(), dir);
  test::edit_tensors(dir, edit, std::move(extra));
  return dir.string();
}

test::EditedTensor f32_scalar(const std::string& name, float v) {
  test::EditedTensor t{name, DType::F32, {}, std::vector<uint8_t>(4)};
  std::memcpy(t.bytes.data(), &v, 4);
  return t;
}

const char* kModules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

TEST(W4A8Mxfp4Fp8Modelopt, ExportRunsAsStoredWithTheLogitsOfTransformersOnItsDequantizedTensors) {
  const ModeloptGolden g = modelopt_golden(fixture());
  {
    auto ck = io::Checkpoint::open(fixture().string());
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight").dtype, DType::U8);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight").shape, (Shape{64, 64}));
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").dtype, DType::U8);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, (Shape{64, 4}));
    EXPECT_EQ(ck->find("model.layers.0.mlp.down_proj.input_scale"), nullptr);  // the recipe calibrates nothing
    ModelLoader l(ck, modelopt_f32());
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::W4A8_MXFP4_FP8);
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).other, nullptr);  // the two files agree
    const LayerReport r = l.describe(l.layer("model.layers.0.mlp.down_proj"));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::mxfp4_fp8);
    EXPECT_EQ(r.scheme.key, kernels::kMxfp4W4A8Dynamic);
    EXPECT_EQ(kernels::scheme_name(r.scheme.key), "mxfp4_w4a8_fp8_dynamic");
  }
  const auto stored = checkpoint_logits(fixture().string(), g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(fixture().string(), g.tokens, modelopt_f32(false, "reference"));
  const auto w4a16 = checkpoint_logits(fixture().string(), g.tokens, modelopt_f32(true));
  ASSERT_EQ(stored.size(), g.logits.size());
  const double d = rel_to_range(stored, g.logits), dr = rel_to_range(reference, g.logits),
               d16 = rel_to_range(w4a16, g.logits);
  RecordProperty("modelopt_export", fmt::format("as stored {:.2e}, reference backend {:.2e}, W4A16 override {:.2e} "
                                                "of the range",
                                                d, dr, d16));
  std::printf("W4A8_MXFP4_FP8 export: as stored %.2e, reference %.2e, W4A16 override %.2e of the range\n", d, dr, d16);
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  EXPECT_GT(d16, 10 * d);
}

TEST(W4A8Mxfp4Fp8Modelopt, OverrideGivesTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const ModeloptGolden g = modelopt_golden(fixture());
  ModelLoader l(io::Checkpoint::open(fixture().string()), modelopt_f32(true));
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.down_proj")).scheme.key, kernels::kMxfp4W4A16);
  const auto want = checkpoint_logits(write_dense(fixture().string(), dir.path() / "dense"), g.tokens);
  const auto got = checkpoint_logits(fixture().string(), g.tokens, modelopt_f32(true));
  const auto bf16 = checkpoint_logits(fixture().string(), g.tokens, [] {
    EngineOptions o;
    o.dtype = "float32";
    o.override_activation_dtype = DType::BF16;
    return o;
  }());
  ASSERT_EQ(got.size(), want.size());
  std::printf("W4A8_MXFP4_FP8 override: float32 %.2e, bfloat16 %.2e of the dense logits' range\n",
              rel_to_range(got, want), rel_to_range(bf16, want));
  EXPECT_LT(rel_to_range(got, want), 1e-4);
  EXPECT_LT(test::rel_rms(bf16, want), 0.05);
}

// A calibrated export (an input_scale per module, amax / 448) runs the static per-tensor scale.
TEST(W4A8Mxfp4Fp8Modelopt, AStoredInputScaleIsTheStaticScaleOnEveryBackend) {
  TempDir dir;
  const ModeloptGolden g = modelopt_golden(fixture());
  std::vector<test::EditedTensor> scales;
  for (const char* m : kModules) scales.push_back(f32_scalar(fmt::format("model.layers.0.{}.input_scale", m), 0.02f));
  const std::string q = edited(dir.path() / "q", [](test::EditedTensor&) { return true; }, scales);
  ModelLoader l(io::Checkpoint::open(q), modelopt_f32());
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.down_proj")).scheme.key, kernels::kMxfp4W4A8);
  const auto stored = checkpoint_logits(q, g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(q, g.tokens, modelopt_f32(false, "reference"));
  const auto dynamic = checkpoint_logits(fixture().string(), g.tokens, modelopt_f32());
  const auto w4a16 = checkpoint_logits(q, g.tokens, modelopt_f32(true));
  const double agree = rel_to_range(stored, reference), vs_dynamic = rel_to_range(stored, dynamic),
               vs_w4a16 = rel_to_range(stored, w4a16);
  std::printf("W4A8_MXFP4_FP8 static: default vs reference %.2e; vs dynamic %.2e; vs W4A16 %.2e of the range\n", agree,
              vs_dynamic, vs_w4a16);
  EXPECT_LT(agree, 1e-4);
  EXPECT_GT(vs_dynamic, 1e-4);  // another scale: another rounding
  EXPECT_GT(vs_w4a16, 1e-4);
  EXPECT_LT(test::rel_rms(stored, w4a16), 0.1);
}

TEST(W4A8Mxfp4Fp8Modelopt, BadTensorsAreErrorsNamingThem) {
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  auto error = [](const std::function<bool(test::EditedTensor&)>& edit, std::vector<test::EditedTensor> extra = {}) {
    TempDir dir;
    const std::string q = edited(dir.path() / "q", edit, std::move(extra));
    return test::error_of([&] { CausalLM::load(q, modelopt_f32()); });
  };
  std::string e = error([&](test::EditedTensor& t) { return t.name != scale; });
  EXPECT_NE(e.find("missing tensor '" + scale + "'"), std::string::npos) << e;
  e = error([&](test::EditedTensor& t) {
    if (t.name == scale) t.shape = {t.shape[1], t.shape[0]};
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  e = error([&](test::EditedTensor& t) {
    if (t.name == scale) t.bytes[5] = 0xFF;  // E8M0 NaN at [1, 1]
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 1] is 0xFF"), std::string::npos) << e;
  // Fused q/k/v share one input: an input_scale on q alone is an error naming the layer.
  e = error([](test::EditedTensor&) { return true; }, {f32_scalar("model.layers.0.self_attn.q_proj.input_scale", 0.02f)});
  EXPECT_NE(e.find("store an input_scale"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp4lm::model::modelopt_w4a8_mxfp4_test
