// ModelOpt's int8 exports (docs/FORMAT.md, "W8A16 and W8A8_SQ_PER_CHANNEL"): ModelOpt 0.47.0's own
// CPU exports of a tiny Llama (INT8_WEIGHT_ONLY_CFG, INT8_SMOOTHQUANT_CFG; in/out widths 80 and
// 136, tails of the kernels' 16-element chunk) against ModelOpt's fake-quantized forward in float64
// (scripts/make_modelopt_goldens.py), on the default backends and on `reference`; W8A16 also
// against the dense checkpoint of this test's own dequantization; every missing or ill-shaped
// tensor a load error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/checkpoint_edit.h"
#include "common/dense_reference.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "reference/modelopt_golden.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model::modelopt_int8_test {
namespace {

namespace fs = std::filesystem;
using quant::QuantAlgo;
using test::DenseTensor;
using test::rel_to_range;
using test::TempDir;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The dense float32 checkpoint of an int8 one: code × its row's weight_scale (the SmoothQuant
// tensors dropped too, for W8A16 checkpoints they are absent).
std::string write_int8_dense(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale", ".input_scale", ".pre_quant_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<DenseTensor> {
        if (t.dtype != DType::I8) return std::nullopt;
        const std::vector<float> s = test::as_f32(ck.get(name.substr(0, name.size() - 7) + ".weight_scale"));
        const int64_t n = t.shape[0], k = t.shape[1];
        EXPECT_EQ(static_cast<int64_t>(s.size()), n) << name;
        std::vector<float> w(static_cast<size_t>(n * k));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < k; ++j)
            w[static_cast<size_t>(r * k + j)] =
                static_cast<float>(reinterpret_cast<const int8_t*>(t.data)[r * k + j]) * s[static_cast<size_t>(r)];
        return DenseTensor{{n, k}, std::move(w)};
      });
}

std::string write_synthetic(const fs::path& dir, QuantAlgo algo, const std::string& arch) {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.seed = 44;
  synth::write_synthetic_checkpoint(dir.string(), s);
  return dir.string();
}

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

TEST(Int8Modelopt, W8A16ExportRunsWithTheLogitsOfModeloptsFakeQuantForward) {
  const fs::path dir = modelopt_fixture("modelopt_w8a16");
  const ModeloptGolden g = modelopt_golden(dir);
  {
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight").dtype, DType::I8);
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight").shape, (Shape{80, 136}));
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.weight_scale").shape, (Shape{80}));
    ModelLoader l(ck, modelopt_f32());
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::W8A16);
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).other, nullptr);  // the two files agree
    for (const char* layer : {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.down_proj"}) {
      const LayerReport r = l.describe(l.layer(layer));
      EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::int8_a16) << layer;
      EXPECT_EQ(r.scheme.key, kernels::kInt8W8A16) << layer;
    }
    EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);
  }
  const auto stored = checkpoint_logits(dir.string(), g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(false, "reference"));
  ASSERT_EQ(stored.size(), g.logits.size());
  const double d = rel_to_range(stored, g.logits), dr = rel_to_range(reference, g.logits);
  RecordProperty("modelopt_export", fmt::format("default {:.2e}, reference backend {:.2e} of the range", d, dr));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  // The export read by this test's own dequantization (code × row scale, a dense checkpoint).
  TempDir tmp;
  const std::string dense = write_int8_dense(dir.string(), tmp.path() / "dense");
  EXPECT_LT(rel_to_range(stored, checkpoint_logits(dense, g.tokens)), 1e-5);
}

TEST(Int8Modelopt, W8A8SmoothQuantExportRunsWithTheLogitsOfModeloptsFakeQuantForward) {
  const fs::path dir = modelopt_fixture("modelopt_w8a8_sq");
  const ModeloptGolden g = modelopt_golden(dir);
  {
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_EQ(ck->get("model.layers.0.self_attn.q_proj.input_scale").shape, (Shape{}));
    EXPECT_EQ(ck->get("model.layers.0.mlp.down_proj.pre_quant_scale").shape, (Shape{136}));
    ModelLoader l(ck, modelopt_f32());
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::W8A8_SQ_PER_CHANNEL);
    const LayerReport r = l.describe(l.layer("model.layers.0.mlp.gate_up_proj"));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::Scheme::int8_sq);
    EXPECT_EQ(r.scheme.key, kernels::kInt8W8A8);
    EXPECT_EQ(kernels::scheme_name(r.scheme.key), "int8_w8a8");
  }
  const auto stored = checkpoint_logits(dir.string(), g.tokens, modelopt_f32());
  const auto reference = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(false, "reference"));
  // --override-activation-dtype: W8A16 on the same weights (pre_quant_scale still applied).
  const auto a16 = checkpoint_logits(dir.string(), g.tokens, modelopt_f32(true));
  ASSERT_EQ(stored.size(), g.logits.size());
  const double d = rel_to_range(stored, g.logits), dr = rel_to_range(reference, g.logits),
               d16 = rel_to_range(a16, g.logits);
  RecordProperty("modelopt_export", fmt::format("as stored {:.2e}, reference backend {:.2e}, W8A16 override {:.2e} "
                                                "of the range",
                                                d, dr, d16));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(dr, 1e-4);
  // The activation quantization is what the golden holds: without it the logits move visibly.
  EXPECT_GT(d16, 10 * std::max(d, 1e-6));
  // The default (int8 W8A16 kernel behind model::Linear's int8 pass) and reference agree closely.
  EXPECT_LT(max_abs_diff(stored, reference), 1e-3);
}

// Synthetic checkpoints in ModelOpt's int8 layout (model/synthetic_checkpoint.cpp): fused q/k/v
// and gate/up shards with their own row scales, and Qwen3-MoE experts on the grouped MoE kernel.
TEST(Int8, W8A16DenseAndMoeGiveTheDenseLogitsOfTheDequantizedWeights) {
  for (const char* arch : {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM"}) {
    SCOPED_TRACE(arch);
    TempDir dir;
    const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::W8A16, arch);
    const auto want = checkpoint_logits(write_int8_dense(q, dir.path() / "dense"), kTokens);
    const auto got = checkpoint_logits(q, kTokens, modelopt_f32());
    EXPECT_LT(rel_to_range(got, want), 1e-4);
    EngineOptions ref = modelopt_f32(false, "reference");
    ref.moe_backend = "reference";
    EXPECT_LT(rel_to_range(checkpoint_logits(q, kTokens, ref), want), 1e-4);
  }
}

// Synthetic SmoothQuant (pre_quant_scale 2^u, u in [-1, 1], weights divided by it): the default
// backend (int8 pass + W8A16 kernel) and `reference` agree; the override (W8A16) is another result.
TEST(Int8, W8A8SmoothQuantDefaultAndReferenceAgree) {
  TempDir dir;
  const std::string q = write_synthetic(dir.path() / "q", QuantAlgo::W8A8_SQ_PER_CHANNEL, "Qwen3ForCausalLM");
  const auto got = checkpoint_logits(q, kTokens, modelopt_f32());
  const auto ref = checkpoint_logits(q, kTokens, modelopt_f32(false, "reference"));
  const auto a16 = checkpoint_logits(q, kTokens, modelopt_f32(true));
  EXPECT_LT(rel_to_range(got, ref), 1e-4);
  EXPECT_GT(rel_to_range(a16, ref), 1e-4);
}

// A copy of fixture `name` with its tensors edited; the load error.
std::string load_error(const char* name, const std::function<bool(test::EditedTensor&)>& edit) {
  TempDir dir;
  const fs::path q = dir.path() / name;
  test::copy_dir(modelopt_fixture(name), q);
  test::edit_tensors(q, edit);
  return test::error_of([&] { CausalLM::load(q.string(), modelopt_f32()); });
}

void expect_has(const std::string& e, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "missing '" << p << "' in: " << e;
}

void set_f32(test::EditedTensor& t, size_t i, float v) { std::memcpy(t.bytes.data() + i * 4, &v, 4); }

TEST(Int8Modelopt, BadTensorsAreErrorsNamingThem) {
  const std::string w = "model.layers.0.mlp.down_proj.weight", s = "model.layers.0.mlp.down_proj.weight_scale";
  for (const char* fx : {"modelopt_w8a16", "modelopt_w8a8_sq"}) {
    SCOPED_TRACE(fx);
    std::string e = load_error(fx, [&](test::EditedTensor& t) { return t.name != s; });
    expect_has(e, {"missing tensor '" + s + "'", "an F32 scale per output channel, shape [80]"});
    e = load_error(fx, [&](test::EditedTensor& t) { return t.name != w; });
    expect_has(e, {"missing tensor '" + w + "'", "I8 weights [80, 136]"});
    e = load_error(fx, [&](test::EditedTensor& t) {
      if (t.name == w) t.dtype = DType::U8;  // same bytes, unsigned
      return true;
    });
    expect_has(e, {w, "expected dtype I8, found U8"});
    e = load_error(fx, [&](test::EditedTensor& t) {
      if (t.name == w) t.shape = {136, 80};
      return true;
    });
    expect_has(e, {w, "expected shape [80, 136], found [136, 80]"});
    e = load_error(fx, [&](test::EditedTensor& t) {
      if (t.name == s) t.shape = {80, 1};
      return true;
    });
    expect_has(e, {s, "expected shape [80], found [80, 1]"});
    e = load_error(fx, [&](test::EditedTensor& t) {
      if (t.name == s) {  // F32 -> BF16 (same count, half the bytes)
        t.dtype = DType::BF16;
        t.bytes.resize(t.bytes.size() / 2);
      }
      return true;
    });
    expect_has(e, {s, "expected dtype F32, found BF16"});
    for (float bad : {std::nanf(""), INFINITY, 0.0f, -1.0f}) {
      e = load_error(fx, [&](test::EditedTensor& t) {
        if (t.name == s) set_f32(t, 7, bad);
        return true;
      });
      expect_has(e, {s, "scale of row 7 must be finite and positive"});
    }
  }
  // W8A8_SQ_PER_CHANNEL's activation tensors.
  const std::string in = "model.layers.0.self_attn.o_proj.input_scale", pq = "model.layers.0.self_attn.o_proj.pre_quant_scale";
  std::string e = load_error("modelopt_w8a8_sq", [&](test::EditedTensor& t) { return t.name != in; });
  expect_has(e, {"missing tensor '" + in + "'", "F32 scalar"});
  e = load_error("modelopt_w8a8_sq", [&](test::EditedTensor& t) {
    if (t.name == in) {  // per channel instead of per tensor
      t.shape = {2};
      t.bytes.resize(8);
    }
    return true;
  });
  expect_has(e, {in, "expected a scalar (shape [] or [1]), found [2]"});
  for (float bad : {std::nanf(""), INFINITY, -1.0f}) {
    e = load_error("modelopt_w8a8_sq", [&](test::EditedTensor& t) {
      if (t.name == in) set_f32(t, 0, bad);
      return true;
    });
    expect_has(e, {in, "scale must be finite and positive"});
  }
  e = load_error("modelopt_w8a8_sq", [&](test::EditedTensor& t) { return t.name != pq; });
  expect_has(e, {"missing tensor '" + pq + "'", "SmoothQuant's per-input-channel scale, shape [80]"});
  e = load_error("modelopt_w8a8_sq", [&](test::EditedTensor& t) {
    if (t.name == pq) set_f32(t, 3, std::nanf(""));
    return true;
  });
  expect_has(e, {pq, "channel 3 of the pre_quant_scale must be finite and positive, found nan"});
}

}  // namespace
}  // namespace fp4lm::model::modelopt_int8_test
