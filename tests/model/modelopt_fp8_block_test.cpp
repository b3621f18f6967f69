// ModelOpt's block-scaled FP8 exports (docs/FORMAT.md, "FP8_PB_WO" and "MXFP8"), both run on the
// block-FP8 kernels: FP8_PB_WO (one float32 scale per 128 x 128 block, weight-only) and MXFP8 (an
// E8M0 scale per 32 inputs, MXFP8 activations at run time). Checked against ModelOpt 0.47.0's own
// CPU exports (transformers' float64 logits of the exported tensors, scripts/make_modelopt_goldens.py)
// and against the dense checkpoint of the dequantized weights of synthetic checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_edit.h"
#include "common/dense_reference.h"
#include "common/error_norms.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "reference/modelopt_golden.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model::modelopt_fp8_block_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::as_f32;
using test::DenseTensor;
using test::rel_to_range;
using test::TempDir;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

bool ends(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.ends_with(t); }

// The dense float32 checkpoint of a FP8_PB_WO checkpoint: e4m3(code) × the scale of its 128 x 128
// block (the [R, 1, C, 1] grid read row-major; [] for a single block).
std::string write_pb_wo_dense(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::F8_E4M3) return std::nullopt;
        const std::vector<float> s = as_f32(ck.get(name.substr(0, name.size() - 7) + ".weight_scale"));
        const int64_t n = t.shape[0], k = t.shape[1], cols = (k + 127) / 128;
        EXPECT_EQ(static_cast<int64_t>(s.size()), (n + 127) / 128 * cols) << name;
        std::vector<float> w(static_cast<size_t>(n * k));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < k; ++j)
            w[static_cast<size_t>(r * k + j)] =
                e4m3_to_f32(t.data[r * k + j]) * s[static_cast<size_t>((r / 128) * cols + j / 128)];
        return DenseTensor{{n, k}, std::move(w)};
      });
}

// MXFP8: e4m3(code) × 2^(byte - 127) of its row's 32-input block.
std::string write_mxfp8_dense(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::F8_E4M3) return std::nullopt;
        const TensorView& s = ck.get(name.substr(0, name.size() - 7) + ".weight_scale");
        const int64_t n = t.shape[0], k = t.shape[1];
        std::vector<float> w(static_cast<size_t>(n * k));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < k; ++j)
            w[static_cast<size_t>(r * k + j)] =
                std::ldexp(e4m3_to_f32(t.data[r * k + j]), static_cast<int>(s.data[r * (k / 32) + j / 32]) - 127);
        return DenseTensor{{n, k}, std::move(w)};
      });
}

std::string write_synthetic(const fs::path& dir, QuantAlgo algo, const std::string& arch = "Qwen3ForCausalLM") {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.seed = 31;
  if (algo == QuantAlgo::FP8_PB_WO && arch == "Qwen3ForCausalLM") {
    // Not multiples of 128: partial blocks on both axes, fused q/k/v and gate/up shards with their own grids.
    s.hidden = 160;
    s.intermediate = 320;
    s.head_dim = 40;
  }
  synth::write_synthetic_checkpoint(dir.string(), s);
  return dir.string();
}

// --- FP8_PB_WO -------------------------------------------------------------------------------

TEST(Fp8PbWoModelopt, ExportRunsWithTheLogitsOfTransformersOnItsDequantizedTensors) {
  const fs::path dir = modelopt_fixture("modelopt_fp8_pb_wo");
  const ModeloptGolden g = modelopt_golden(dir);
  {
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, (Shape{2, 1, 3, 1}));  // [160, 320]
    EXPECT_EQ(ck->get("model.layers.0.self_attn.k_proj.weight_scale").shape, (Shape{1, 1, 2, 1}));  // [80, 160]
    ModelLoader l(ck, modelopt_f32());
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::FP8_PB_WO);  // written "fp8_pb_wo"
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).other, nullptr);              // the two files agree
    const LayerReport r = l.describe(l.layer("model.layers.0.self_attn.qkv_proj"));
    EXPECT_EQ(r.scheme.key, kernels::kFp8BlockW8A16);
    EXPECT_EQ(r.scheme.on_disk.block_n, 128);
    EXPECT_EQ(r.scheme.on_disk.block_k, 128);
  }
  const auto stored = checkpoint_logits(dir.string(), g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(false, "reference"));
  ASSERT_EQ(stored.size(), g.logits.size());
  const double d = rel_to_range(stored, g.logits), dr = rel_to_range(reference, g.logits);
  RecordProperty("modelopt_export", fmt::format("default {:.2e}, reference backend {:.2e} of the range", d, dr));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  // The same export read by this test's own dequantization (dense checkpoint) agrees too.
  TempDir tmp;
  const auto dense = checkpoint_logits(write_pb_wo_dense(dir.string(), tmp.path() / "dense"), g.tokens);
  EXPECT_LT(rel_to_range(stored, dense), 1e-4);
}

TEST(Fp8PbWo, PartialBlocksAndFusedShardsGiveTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::FP8_PB_WO);
  {
    auto ck = io::Checkpoint::open(q);
    EXPECT_EQ(ck->get("model.layers.0.self_attn.q_proj.weight_scale").shape, (Shape{2, 1, 2, 1}));
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, (Shape{2, 1, 3, 1}));
  }
  const auto want = checkpoint_logits(write_pb_wo_dense(q, dir.path() / "dense"), kTokens);
  const auto got = checkpoint_logits(q, kTokens, modelopt_f32());
  const auto ref = checkpoint_logits(q, kTokens, modelopt_f32(false, "reference"));
  // Weight-only: the override changes nothing.
  const auto over = checkpoint_logits(q, kTokens, modelopt_f32(true));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_to_range(got, want), 1e-4);
  EXPECT_LT(rel_to_range(ref, want), 1e-4);
  EXPECT_LT(rel_to_range(over, want), 1e-4);
  RecordProperty("pb_wo_rel_to_range", fmt::format("{:.2e}", rel_to_range(got, want)));
}

TEST(Fp8PbWo, MoeExpertsGiveTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::FP8_PB_WO, "Qwen3MoeForCausalLM");
  const auto want = checkpoint_logits(write_pb_wo_dense(q, dir.path() / "dense"), kTokens);
  EXPECT_LT(rel_to_range(checkpoint_logits(q, kTokens, modelopt_f32()), want), 1e-4);
  EXPECT_LT(rel_to_range(checkpoint_logits(q, kTokens, modelopt_f32(false, "reference", "reference")), want), 1e-4);
}

// A copy of the synthetic FP8_PB_WO checkpoint with one tensor changed; the load error.
std::string pb_wo_error(const std::function<bool(test::EditedTensor&)>& edit) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::FP8_PB_WO);
  test::edit_tensors(q, edit);
  return test::error_of([&] { CausalLM::load(q, modelopt_f32()); });
}

TEST(Fp8PbWo, BadTensorsAreErrorsNamingThem) {
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  std::string e = pb_wo_error([&](test::EditedTensor& t) { return t.name != scale; });
  EXPECT_NE(e.find("missing tensor '" + scale + "'"), std::string::npos) << e;
  e = pb_wo_error([&](test::EditedTensor& t) {
    if (t.name == scale) t.shape = {3, 2};  // the grid transposed
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 1, 3, 1]"), std::string::npos) << e;
  e = pb_wo_error([&](test::EditedTensor& t) {
    if (t.name == scale) {  // F32 -> BF16 (same count, half the bytes)
      t.dtype = DType::BF16;
      t.bytes.resize(t.bytes.size() / 2);
    }
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("BF16"), std::string::npos) << e;
  e = pb_wo_error([&](test::EditedTensor& t) {
    if (t.name == scale) std::memset(t.bytes.data(), 0, 4);  // block [0, 0] = 0
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("block scale [0, 0]"), std::string::npos) << e;
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  e = pb_wo_error([&](test::EditedTensor& t) {
    if (t.name == w) t.shape = {320, 160};
    return true;
  });
  EXPECT_NE(e.find(w), std::string::npos) << e;
}

// --- MXFP8 -----------------------------------------------------------------------------------

TEST(Mxfp8Modelopt, ExportRunsAsStoredWithTheLogitsOfTransformersOnItsDequantizedTensors) {
  const fs::path dir = modelopt_fixture("modelopt_mxfp8");
  const ModeloptGolden g = modelopt_golden(dir);
  {
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").dtype, DType::U8);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, (Shape{64, 4}));
    ModelLoader l(ck, modelopt_f32());
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::MXFP8);
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).other, nullptr);  // the two files agree (config.json: no group_size)
    const LayerReport r = l.describe(l.layer("model.layers.0.mlp.down_proj"));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::mxfp8);
    EXPECT_EQ(r.scheme.key, kernels::kMxfp8);
    EXPECT_EQ(kernels::scheme_name(r.scheme.key), "mxfp8");
  }
  const auto stored = checkpoint_logits(dir.string(), g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(false, "reference"));
  const auto w8a16 = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(true));
  ASSERT_EQ(stored.size(), g.logits.size());
  const double d = rel_to_range(stored, g.logits), dr = rel_to_range(reference, g.logits),
               d16 = rel_to_range(w8a16, g.logits);
  RecordProperty("modelopt_export", fmt::format("as stored {:.2e}, reference backend {:.2e}, W8A16 override {:.2e} "
                                                "of the range",
                                                d, dr, d16));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  EXPECT_GT(d16, 10 * d);
}

TEST(Mxfp8, OverrideGivesTheDenseLogitsOfTheDequantizedWeights) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::MXFP8);
  ModelLoader l(io::Checkpoint::open(q), modelopt_f32(true));
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.down_proj")).scheme.key, kernels::kFp8BlockW8A16);
  const auto want = checkpoint_logits(write_mxfp8_dense(q, dir.path() / "dense"), kTokens);
  const auto got = checkpoint_logits(q, kTokens, modelopt_f32(true));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_to_range(got, want), 1e-4);
  RecordProperty("w8a16_rel_to_range", fmt::format("{:.2e}", rel_to_range(got, want)));
}

TEST(Mxfp8, AsStoredMxActivationsAgreeWithTheReferenceBackendAndTrackTheDenseLogits) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::MXFP8);
  const auto dense = checkpoint_logits(write_mxfp8_dense(q, dir.path() / "dense"), kTokens);
  const auto w8a16 = checkpoint_logits(q, kTokens, modelopt_f32(true));
  const auto stored = checkpoint_logits(q, kTokens, modelopt_f32());
  const auto reference = checkpoint_logits(q, kTokens, modelopt_f32(false, "reference"));
  const double agree = rel_to_range(stored, reference), e = test::rel_rms(stored, dense),
               mx_effect = rel_to_range(stored, w8a16);
  RecordProperty("mxfp8", fmt::format("default vs reference {:.2e} of range; rel RMS vs dense {:.4f}; vs W8A16 {:.2e} "
                                      "of range",
                                      agree, e, mx_effect));
  EXPECT_LT(agree, 1e-4);
  EXPECT_LT(e, 0.1);
  EXPECT_GT(mx_effect, 1e-4);
}

TEST(Mxfp8, MoeExpertsRunOnTheReferenceWithMxInputsAndOnTheW8A16BackendsWithout) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::MXFP8, "Qwen3MoeForCausalLM");
  const auto dense = checkpoint_logits(write_mxfp8_dense(q, dir.path() / "dense"), kTokens);
  const auto ref = checkpoint_logits(q, kTokens, modelopt_f32(false, "reference", "reference"));
  const auto ref_experts = checkpoint_logits(q, kTokens, modelopt_f32(false, "", "reference"));
  EXPECT_LT(rel_to_range(ref_experts, ref), 1e-4);  // the Linears' MXFP8 pass = the reference's
  const auto over = checkpoint_logits(q, kTokens, modelopt_f32(true));
  EXPECT_LT(rel_to_range(over, dense), 1e-4);
  // As stored the experts' inputs are MXFP8 too: it tracks the dense logits (rel. RMS 0.11 here:
  // top-k routing amplifies the rounding) and is not the W8A16 result.
  const double e = test::rel_rms(ref, dense);
  RecordProperty("moe_rel_rms_vs_dense", fmt::format("{:.4f}", e));
  EXPECT_LT(e, 0.2);
  EXPECT_GT(rel_to_range(ref, over), 1e-4);
  // The default MoE backend (W8A16, inputs not MXFP8-quantized: a WARN says so) differs from the reference.
  const auto default_moe = checkpoint_logits(q, kTokens, modelopt_f32());
  EXPECT_GT(rel_to_range(default_moe, ref), 1e-4);
}

std::string mxfp8_error(const std::function<bool(test::EditedTensor&)>& edit) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::MXFP8);
  test::edit_tensors(q, edit);
  return test::error_of([&] { CausalLM::load(q, modelopt_f32()); });
}

TEST(Mxfp8, BadTensorsAreErrorsNamingThem) {
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  std::string e = mxfp8_error([&](test::EditedTensor& t) { return t.name != scale; });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  e = mxfp8_error([&](test::EditedTensor& t) {
    if (t.name == scale) t.shape = {t.shape[1], t.shape[0]};  // transposed: not [rows, k / 32]
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  e = mxfp8_error([&](test::EditedTensor& t) {
    if (t.name == scale) {  // E8M0 bytes read as F8_E4M3: an NVFP4-like scale dtype, not MXFP8's U8
      t.dtype = DType::F8_E4M3;
    }
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  e = mxfp8_error([&](test::EditedTensor& t) {
    if (t.name == scale) t.bytes[5] = 0xFF;
    return true;
  });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("0xFF (NaN)"), std::string::npos) << e;
}

TEST(Mxfp8Config, GroupSizeOtherThan32AndFp8PbWoWithAGroupSizeAreErrors) {
  TempDir dir;
  for (auto [algo, gs] : {std::pair{QuantAlgo::MXFP8, 16}, std::pair{QuantAlgo::FP8_PB_WO, 64}}) {
    const fs::path d = dir.path() / std::string(quant::algo_name(algo));
    write_synthetic(d, algo);
    for (const char* file : {"hf_quant_config.json", "config.json"}) {
      json j = json::parse(test::read_file(d / file));
      json& q = std::string(file) == "config.json" ? j["quantization_config"] : j["quantization"];
      q["group_size"] = gs;
      test::write_file(d / file, j.dump());
    }
    const std::string e = test::error_of([&] { CausalLM::load(d.string(), modelopt_f32()); });
    EXPECT_NE(e.find("group_size"), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(gs)), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::modelopt_fp8_block_test
