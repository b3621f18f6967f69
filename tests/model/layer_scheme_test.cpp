// Per-layer schemes, --override-activation-dtype, Linear/MoE methods' load rules and the oracle's
// choice, on checkpoints written by the library's own synthetic writer (issue 3).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "common/error_of.h"
#include "common/checkpoint_edit.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "kernels/cpu/reference/math.h"
#include "kernels/registry.h"
#include "model/load/model_loader.h"
#include "model/quant_method/quant_method.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/nvfp4.h"

using namespace fp4lm;
using namespace fp4lm::model;
using kernels::LayerKind;
using quant::QuantAlgo;

namespace {

using fp4lm::test::error_of;

// The first available backend of a kind that claims `preferred`'s schemes, else reference.
// The oracle's pick for a family of CPU backends on this machine: the best ISA it runs
// ("cpu_w4a4" -> cpu_w4a4_avx512, else cpu_w4a4_avx2), else the reference.
std::string expected_backend(const std::string& family, LayerKind kind) {
  // "_avx512_gemm": the W4A16 GEMM variant (kernels/cpu/avx512/nvfp4_w4a16_gemm.cpp), first where it runs.
  for (const char* isa : {"_avx512_gemm", "_avx512", "_avx2"}) {
    const kernels::Backend* b = kernels::find_backend(family + isa, kind);
    if (b && (!b->unavailable_reason || b->unavailable_reason().empty())) return family + isa;
  }
  return "reference";
}

struct Fixture {
  test::TempDir tmp;
  std::string dir;
  explicit Fixture(const synth::SyntheticOptions& o) : dir((tmp / "ckpt").string()) { synth::write_synthetic_checkpoint(dir, o); }
  ModelLoader loader(EngineOptions opts = {}) const { return ModelLoader(io::Checkpoint::open(dir), opts); }
};

synth::SyntheticOptions moe(QuantAlgo algo) {
  synth::SyntheticOptions o;
  o.architecture = "Qwen3MoeForCausalLM";
  o.algo = algo;
  return o;
}

synth::SyntheticOptions dense(QuantAlgo algo, const std::string& arch = "LlamaForCausalLM") {
  synth::SyntheticOptions o;
  o.architecture = arch;
  o.algo = algo;
  return o;
}

EngineOptions with_override(DType d) {
  EngineOptions e;
  e.override_activation_dtype = d;
  return e;
}


}  // namespace

TEST(LayerScheme, Nvfp4SelectsW4A4Method) {
  Fixture f(dense(QuantAlgo::NVFP4));
  ModelLoader l = f.loader();
  LayerReport r = l.describe(l.layer("model.layers.0.self_attn.qkv_proj"));
  EXPECT_EQ(r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::NVFP4));
  EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A4);
  EXPECT_EQ(r.selection.backend->name, expected_backend("cpu_w4a4", LayerKind::linear));
  EXPECT_EQ(r.scheme.act_dtype, DType::BF16);  // the checkpoint's torch_dtype
  // Excluded lm_head and the loaded kernel agree with describe().
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);
  auto lin = l.load_linear("model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(lin->backend(), r.selection.backend->name);
}

TEST(LayerScheme, W4A16CheckpointSelectsW4A16Method) {
  Fixture f(dense(QuantAlgo::W4A16_NVFP4, "Qwen3ForCausalLM"));
  ModelLoader l = f.loader();
  for (const char* name : {"model.layers.0.self_attn.qkv_proj", "model.layers.1.mlp.down_proj"}) {
    LayerReport r = l.describe(l.layer(name));
    EXPECT_EQ(r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::W4A16_NVFP4));
    EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A16) << name;
    EXPECT_EQ(r.selection.backend->name, expected_backend("cpu_w4a16", LayerKind::linear));
  }
  // W4A16 files carry no input_scale and load without one.
  EXPECT_NO_THROW(l.load_linear("model.layers.0.mlp.gate_up_proj"));
}

TEST(LayerScheme, MoeOnW4A16HasNoActivationKeyAndPicksW4A16MoeBackend) {
  Fixture f(moe(QuantAlgo::W4A16_NVFP4));
  ModelLoader l = f.loader();
  LayerReport r = l.describe(l.layer("model.layers.0.mlp.experts"));
  EXPECT_EQ(r.scheme.key.act, kernels::ActKey::none);
  EXPECT_EQ(r.selection.backend->name, expected_backend("cpu_w4a16", LayerKind::moe));
  EXPECT_NE(std::find(r.selection.candidates.begin(), r.selection.candidates.end(), "reference"),
            r.selection.candidates.end());
  EXPECT_NO_THROW(l.load_moe("model.layers.0.mlp.experts"));
}

TEST(LayerScheme, OverrideTurnsEveryNvfp4LayerIntoW4A16) {
  for (DType d : {DType::BF16, DType::F16}) {
    synth::SyntheticOptions o = moe(QuantAlgo::NVFP4);
    o.quantize_lm_head = true;
    Fixture f(o);
    ModelLoader l = f.loader(with_override(d));
    for (const LayerSpec& s : l.layers()) {
      LayerReport r = l.describe(s);
      if (s.router) {
        EXPECT_EQ(r.scheme.key, kernels::kUnquantized) << s.name;
        continue;
      }
      EXPECT_EQ(r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::NVFP4)) << s.name;  // what is on disk is unchanged
      EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A16) << s.name;
      EXPECT_EQ(r.scheme.act_dtype, d) << s.name;
      std::string want = expected_backend("cpu_w4a16", s.kind);
      EXPECT_EQ(r.selection.backend->name, want) << s.name;
    }
    // input_scale tensors are on disk; W4A16 ignores them and lm_head loads quantized.
    EXPECT_NO_THROW(l.load_linear("lm_head"));
    EXPECT_NO_THROW(l.load_moe("model.layers.1.mlp.experts"));
  }
}

TEST(LayerScheme, OverrideAutoLeavesW4A4Unchanged) {
  Fixture f(moe(QuantAlgo::NVFP4));
  EngineOptions autoopt;
  autoopt.override_activation_dtype = parse_override_activation_dtype("auto");
  ModelLoader a = f.loader(autoopt), plain = f.loader();
  for (const LayerSpec& s : plain.layers()) {
    LayerReport ra = a.describe(s), rp = plain.describe(s);
    EXPECT_EQ(ra.scheme.key, rp.scheme.key) << s.name;
    EXPECT_EQ(ra.scheme.act_dtype, rp.scheme.act_dtype) << s.name;
    EXPECT_EQ(ra.selection.backend, rp.selection.backend) << s.name;
  }
  EXPECT_EQ(plain.describe(plain.layer("model.layers.0.mlp.experts")).scheme.key, kernels::kNvfp4W4A4);
}

TEST(LayerScheme, W4A16CheckpointStaysW4A16UnderOverride) {
  Fixture f(dense(QuantAlgo::W4A16_NVFP4));
  ModelLoader l = f.loader(with_override(DType::F16));
  LayerReport r = l.describe(l.layer("model.layers.0.self_attn.o_proj"));
  EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A16);
  EXPECT_EQ(r.scheme.act_dtype, DType::BF16);  // the override only retargets NVFP4 W4A4 layers
}

TEST(LayerScheme, MixedPrecisionOverrideAppliesToItsNvfp4LayersOnly) {
  synth::SyntheticOptions o = dense(QuantAlgo::MIXED_PRECISION, "Qwen3ForCausalLM");
  o.mixed = {{"model.layers.0.self_attn.q_proj", QuantAlgo::NVFP4},
             {"model.layers.0.self_attn.k_proj", QuantAlgo::NVFP4},
             {"model.layers.0.self_attn.v_proj", QuantAlgo::NVFP4},
             {"model.layers.0.mlp.gate_proj", QuantAlgo::W4A16_NVFP4},
             {"model.layers.0.mlp.up_proj", QuantAlgo::W4A16_NVFP4},
             {"model.layers.1.self_attn.o_proj", QuantAlgo::FP8},
             {"lm_head", QuantAlgo::NVFP4}};
  Fixture f(o);
  ModelLoader plain = f.loader();
  auto key = [&](ModelLoader& l, const char* n) { return l.describe(l.layer(n)).scheme; };
  EXPECT_EQ(key(plain, "model.layers.0.self_attn.qkv_proj").key, kernels::kNvfp4W4A4);
  EXPECT_EQ(key(plain, "model.layers.0.mlp.gate_up_proj").key, kernels::kNvfp4W4A16);  // inferred from gate + up
  EXPECT_EQ(key(plain, "model.layers.0.mlp.down_proj").key, kernels::kUnquantized);     // unlisted sibling
  EXPECT_EQ(key(plain, "model.layers.1.self_attn.o_proj").key, kernels::kFp8);
  EXPECT_EQ(key(plain, "lm_head").key, kernels::kNvfp4W4A4);
  ModelLoader over = f.loader(with_override(DType::BF16));
  EXPECT_EQ(key(over, "model.layers.0.self_attn.qkv_proj").key, kernels::kNvfp4W4A16);
  EXPECT_EQ(key(over, "model.layers.0.self_attn.qkv_proj").act_dtype, DType::BF16);
  EXPECT_EQ(key(over, "lm_head").key, kernels::kNvfp4W4A16);
  EXPECT_EQ(key(over, "model.layers.1.self_attn.o_proj").key, kernels::kFp8);
  EXPECT_EQ(key(over, "model.layers.0.mlp.down_proj").key, kernels::kUnquantized);
  // Every layer loads (FP8 runs on the reference backend).
  for (const LayerSpec& s : over.layers())
    if (s.kind == LayerKind::linear) {
      EXPECT_NO_THROW(over.load_linear(s.name)) << s.name;
    }
}

TEST(LayerScheme, MixedPrecisionShardsThatDisagreeAreAnError) {
  synth::SyntheticOptions o = dense(QuantAlgo::NVFP4);
  Fixture f(o);
  // Rewrite the quant config so q_proj is NVFP4 but k_proj / v_proj are W4A16_NVFP4.
  quant::ModeloptConfig q;
  q.algo = QuantAlgo::MIXED_PRECISION;
  q.source_path = "test";
  q.quantized_layers = {{"model.layers.0.self_attn.q_proj", {QuantAlgo::NVFP4, 16}},
                        {"model.layers.0.self_attn.k_proj", {QuantAlgo::W4A16_NVFP4, 16}},
                        {"model.layers.0.self_attn.v_proj", {QuantAlgo::W4A16_NVFP4, 16}}};
  ModelConfig mc = parse_model_config(synth::synthetic_config_json(o), "c");
  auto plan = plan_layers(mc);
  std::string e = error_of([&] { layer_on_disk_scheme(q, plan[0]); });
  EXPECT_NE(e.find("the shards of model.layers.0.self_attn.qkv_proj resolve to different"), std::string::npos) << e;
  // An experts container key covers each expert.
  synth::SyntheticOptions m = moe(QuantAlgo::MIXED_PRECISION);
  m.mixed = {{"model.layers.0.mlp.experts", QuantAlgo::NVFP4}};
  Fixture fm(m);
  ModelLoader lm = fm.loader();
  EXPECT_EQ(lm.describe(lm.layer("model.layers.0.mlp.experts")).scheme.key, kernels::kNvfp4W4A4);
  EXPECT_EQ(lm.describe(lm.layer("model.layers.1.mlp.experts")).scheme.key, kernels::kUnquantized);
  EXPECT_NO_THROW(lm.load_moe("model.layers.0.mlp.experts"));
}

TEST(LayerScheme, ExclusionExactDotBoundaryGlobAndPartialShards) {
  synth::SyntheticOptions o = dense(QuantAlgo::NVFP4);
  o.layers = 2;
  o.exclude = {"model.layers.1", "*.o_proj"};
  Fixture f(o);
  ModelLoader l = f.loader();
  EXPECT_EQ(l.describe(l.layer("model.layers.1.mlp.gate_up_proj")).scheme.key, kernels::kUnquantized);
  EXPECT_EQ(l.describe(l.layer("model.layers.0.self_attn.o_proj")).scheme.key, kernels::kUnquantized);
  EXPECT_EQ(l.describe(l.layer("model.layers.0.self_attn.qkv_proj")).scheme.key, kernels::kNvfp4W4A4);
  // The unquantized layers really are stored dense, and load.
  EXPECT_NO_THROW(l.load_linear("model.layers.1.mlp.gate_up_proj"));

  quant::ModeloptConfig q;
  q.algo = QuantAlgo::NVFP4;
  q.source_path = "test";
  q.exclude_modules = {"model.layers.0.self_attn.k_proj"};
  auto plan = plan_layers(parse_model_config(synth::synthetic_config_json(o), "c"));
  std::string e = error_of([&] { layer_on_disk_scheme(q, plan[0]); });
  EXPECT_NE(e.find("some but not all shards of model.layers.0.self_attn.qkv_proj are excluded"), std::string::npos)
      << e;
  // Dot boundary: model.layers.1 must not exclude model.layers.10.
  synth::SyntheticOptions big = o;
  big.layers = 11;
  big.exclude = {"model.layers.1"};
  Fixture fb(big);
  ModelLoader lb = fb.loader();
  EXPECT_EQ(lb.describe(lb.layer("model.layers.1.self_attn.qkv_proj")).scheme.key, kernels::kUnquantized);
  EXPECT_EQ(lb.describe(lb.layer("model.layers.10.self_attn.qkv_proj")).scheme.key, kernels::kNvfp4W4A4);
}

TEST(LinearMethod, ScalarScalesMayBe0dOr1Element) {
  Fixture f(dense(QuantAlgo::NVFP4));
  test::edit_tensors(f.dir, [](test::EditedTensor& t) {
    if (t.name.find("k_proj.weight_scale_2") != std::string::npos || t.name.find("k_proj.input_scale") != std::string::npos)
      t.shape = {1};
    return true;
  });
  ModelLoader l = f.loader();
  const LayerSpec& s = l.layer("model.layers.0.self_attn.qkv_proj");
  auto w = l.linear_weights(s, l.describe(s).scheme);
  EXPECT_GT(w.shards[1].as<kernels::Nvfp4View>().global_scale, 0.0f);
  EXPECT_GT(w.input_scale, 0.0f);
}

TEST(LinearMethod, MissingZeroOrBadScalesRejectedNamingTheTensor) {
  struct Case {
    const char* tensor;
    std::function<bool(test::EditedTensor&)> edit;
    const char* message;
  };
  auto zero = [](test::EditedTensor& t) {
    float z = 0;
    std::memcpy(t.bytes.data(), &z, 4);
    return true;
  };
  auto inf = [](test::EditedTensor& t) {
    float z = INFINITY;
    std::memcpy(t.bytes.data(), &z, 4);
    return true;
  };
  const std::string p = "model.layers.0.self_attn.v_proj";
  std::vector<Case> cases = {
      {"weight_scale_2", [](test::EditedTensor&) { return false; }, "missing tensor"},
      {"weight_scale", [](test::EditedTensor&) { return false; }, "missing tensor"},
      {"input_scale", [](test::EditedTensor&) { return false; }, "missing tensor"},
      {"weight_scale_2", zero, "scale is zero"},
      {"input_scale", inf, "finite"},
      {"weight_scale", [](test::EditedTensor& t) { t.dtype = DType::U8; return true; }, "expected dtype F8_E4M3, found U8"},
      {"weight", [](test::EditedTensor& t) { t.shape = {t.shape[0] * 2, t.shape[1] / 2}; return true; }, "expected shape"},
      {"weight_scale_2", [](test::EditedTensor& t) { t.dtype = DType::I32; return true; }, "expected dtype F32"},
  };
  for (const Case& c : cases) {
    Fixture f(dense(QuantAlgo::NVFP4));
    const std::string target = p + "." + c.tensor;
    test::edit_tensors(f.dir, [&](test::EditedTensor& t) { return t.name == target ? c.edit(t) : true; });
    std::string e = error_of([&] { f.loader().load_linear("model.layers.0.self_attn.qkv_proj"); });
    EXPECT_NE(e.find(target), std::string::npos) << c.tensor << ": " << e;
    EXPECT_NE(e.find(c.message), std::string::npos) << c.tensor << ": " << e;
  }
}

TEST(LinearMethod, W4A16NeverNeedsInputScale) {
  Fixture f(dense(QuantAlgo::NVFP4));
  test::edit_tensors(f.dir, [](test::EditedTensor& t) { return t.name.find("input_scale") == std::string::npos; });
  EXPECT_NE(error_of([&] { f.loader().load_linear("model.layers.0.self_attn.o_proj"); }).find("input_scale"),
            std::string::npos);
  EXPECT_NO_THROW(f.loader(with_override(DType::BF16)).load_linear("model.layers.0.self_attn.o_proj"));
}

TEST(MoeMethod, ExpertInputScaleFallsBackToMaxOfOthers) {
  Fixture f(moe(QuantAlgo::NVFP4));
  const std::string e1 = "model.layers.0.mlp.experts.1.";
  float others = 0;
  test::edit_tensors(f.dir, [&](test::EditedTensor& t) {
    if (t.name.rfind("model.layers.0.mlp.experts.", 0) == 0 && t.name.find("up_proj.input_scale") != std::string::npos &&
        t.name.rfind(e1, 0) != 0) {
      float v;
      std::memcpy(&v, t.bytes.data(), 4);
      others = std::max(others, v);
    }
    if (t.name == e1 + "gate_proj.input_scale") return false;  // missing
    if (t.name == e1 + "up_proj.input_scale") {                // zero
      float z = 0;
      std::memcpy(t.bytes.data(), &z, 4);
    }
    return true;
  });
  ModelLoader l = f.loader();
  const LayerSpec& s = l.layer("model.layers.0.mlp.experts");
  auto w = l.moe_weights(s, l.describe(s).scheme);
  EXPECT_EQ(w.w13[1].input_scale, others);
  EXPECT_GT(w.w13[0].input_scale, 0.0f);
  EXPECT_NO_THROW(l.load_moe("model.layers.0.mlp.experts"));
}

TEST(Oracle, ForcedBackendErrors) {
  Fixture f(dense(QuantAlgo::W4A16_NVFP4));
  EngineOptions o;
  o.linear_backend = "no_such_backend";
  try {
    f.loader(o);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown Linear backend 'no_such_backend'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos);
  }
  // A W4A4 backend cannot run a W4A16 layer (it needs activation key nvfp4_dynamic): on a W4A16
  // checkpoint it can run no Linear layer at all, which is an error when the loader is built.
  if (kernels::find_backend("cpu_w4a4_avx2", LayerKind::linear)) {
    o.linear_backend = "cpu_w4a4_avx2";
    std::string e = error_of([&] { f.loader(o); });
    EXPECT_NE(e.find("forced Linear backend 'cpu_w4a4_avx2' (linear_backend) can run no Linear layer of the model: "
                     "it cannot run layer model.layers.0.self_attn.qkv_proj"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("does not support scheme nvfp4_w4a16"), std::string::npos) << e;
  }
  // Forcing reference always works.
  o.linear_backend = "reference";
  ModelLoader r = f.loader(o);
  EXPECT_EQ(r.describe(r.layer("model.layers.0.self_attn.qkv_proj")).selection.backend->name, "reference");
}

TEST(Oracle, ForcedBackendAppliesWhereItCanOthersKeepTheOraclesChoice) {
  synth::SyntheticOptions so = moe(QuantAlgo::NVFP4);
  so.exclude = {"model.layers.1.self_attn.*"};
  Fixture f(so);
  if (!kernels::find_backend("cpu_w4a16_avx2", LayerKind::linear)->unavailable_reason().empty())
    GTEST_SKIP() << "the AVX2 backends are unavailable on this CPU";
  EngineOptions o;
  o.linear_backend = "cpu_w4a16_avx2";
  o.moe_backend = "reference";
  test::LogCapture logs(spdlog::level::info);
  ModelLoader l = f.loader(o);  // excluded (unquantized) layers no longer make it unloadable
  EXPECT_EQ(logs.count("keep the oracle's choice"), 1) << logs.text();
  EXPECT_NE(logs.text().find("linear_backend cpu_w4a16_avx2 runs "), std::string::npos) << logs.text();
  const ModelLoader plain = f.loader();
  int forced = 0, kept = 0;
  for (const LayerSpec& s : l.layers()) {
    LayerReport r = l.describe(s);
    if (s.kind == LayerKind::moe) {
      EXPECT_EQ(r.selection.backend->name, "reference") << s.name;
      continue;
    }
    if (r.scheme.key.weight == kernels::WeightKey::nvfp4_static) {
      EXPECT_EQ(r.selection.backend->name, "cpu_w4a16_avx2") << s.name;
      EXPECT_TRUE(r.selection.forced_rejection.empty());
      ++forced;
    } else {  // lm_head, routers, the excluded attention of layer 1
      EXPECT_EQ(r.selection.backend, plain.describe(s).selection.backend) << s.name;
      EXPECT_NE(r.selection.forced_rejection.find("does not support scheme unquantized"), std::string::npos);
      ++kept;
    }
  }
  EXPECT_GT(forced, 0);
  EXPECT_GT(kept, 0);
  for (const LayerSpec& s : l.layers())
    if (s.kind == LayerKind::linear) {
      EXPECT_NO_THROW(l.load_linear(s.name)) << s.name;
    }
}

TEST(Oracle, W4A4BackendsAcceptOnlyTheExactPairW4A16OnlyTheWeightKey) {
  for (const kernels::Backend* b : kernels::backends(LayerKind::linear)) {
    if (b->name == "reference") continue;
    if (b->weight_key_only) {  // W4A16 (NVFP4 weights) or W8A16 (FP8 weights): any activation key
      const kernels::QuantKey k = b->schemes.front();
      EXPECT_EQ(k.act, kernels::ActKey::none) << b->name;
      EXPECT_TRUE(b->supports({k.weight, kernels::ActKey::nvfp4_dynamic}) && b->supports({k.weight, kernels::ActKey::fp8_static}))
          << b->name;
    } else if (b->supports(kernels::kNvfp4W4A4)) {
      EXPECT_FALSE(b->supports(kernels::kNvfp4W4A16)) << b->name;
    }
  }
  kernels::LinearProblem p{kernels::kNvfp4W4A16, DType::BF16, 64, 64, {}};
  auto s = kernels::select_linear(p, "x");
  EXPECT_TRUE(s.backend->weight_key_only || s.backend->name == "reference");
  EXPECT_EQ(s.candidates.back(), "reference");
  std::string msg = kernels::selection_message(s, LayerKind::moe, p.key);
  EXPECT_EQ(msg.rfind("Using '" + s.backend->name + "' NVFP4 MoE backend out of potential backends: [", 0), 0u) << msg;
}

TEST(FusedScales, FusedLayerDequantizesToEachShardsOwnWeightsExactly) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"}) {
    synth::SyntheticOptions o = dense(QuantAlgo::NVFP4, arch);
    o.distinct_shard_scales = true;
    Fixture f(o);
    ModelLoader l = f.loader();
    std::vector<std::pair<kernels::LinearWeights, std::vector<std::string>>> cases;
    const LayerSpec& qkv = l.layer("model.layers.0.self_attn.qkv_proj");
    cases.push_back({l.linear_weights(qkv, l.describe(qkv).scheme), qkv.shards});
    if (std::string(arch) != "LlamaForCausalLM") {
      const LayerSpec& m = l.layer(std::string(arch) == "MixtralForCausalLM" ? "model.layers.0.block_sparse_moe.experts"
                                                                             : "model.layers.0.mlp.experts");
      auto mw = l.moe_weights(m, l.describe(m).scheme);
      std::string b = m.shards[0] + ".2.";
      cases.push_back({mw.w13[2], {b + m.expert_proj[0], b + m.expert_proj[1]}});
    } else {
      const LayerSpec& gu = l.layer("model.layers.1.mlp.gate_up_proj");
      cases.push_back({l.linear_weights(gu, l.describe(gu).scheme), gu.shards});
    }
    const io::Checkpoint& ck = l.checkpoint();
    for (auto& [w, shards] : cases) {
      ASSERT_EQ(w.shards.size(), shards.size());
      EXPECT_NE(w.shards[0].as<kernels::Nvfp4View>().global_scale, w.shards[1].as<kernels::Nvfp4View>().global_scale)
          << "fixture must differ";
      int64_t row0 = 0;
      std::vector<float> row(static_cast<size_t>(w.k));
      for (const std::string& m : shards) {
        const TensorView& codes = ck.get(m + ".weight");
        float s2;
        std::memcpy(&s2, ck.get(m + ".weight_scale_2").data, 4);
        auto own = quant::dequantize_weight(codes.data, ck.get(m + ".weight_scale").data, codes.shape[0], w.k, s2);
        for (int64_t r = 0; r < codes.shape[0]; ++r) {
          kernels::reference_weight_row(w, row0 + r, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), own.data() + r * w.k, sizeof(float) * w.k)) << m << " row " << r;
        }
        row0 += codes.shape[0];
      }
    }
  }
}

namespace fp4lm::model::layer_scheme_test {
namespace {

// Every (family, scheme) has a method, and the key that method chooses is for the weights its
// views hold (resolve_scheme checks the same at load, once per layer).
TEST(QuantMethods, EachFormatsMethodAgreesWithTheKeyItChooses) {
  using quant::Scheme;
  for (quant::Family f : {quant::Family::modelopt, quant::Family::compressed_tensors})
    for (Scheme s : {Scheme::unquantized, Scheme::nvfp4, Scheme::nvfp4_a16, Scheme::fp8, Scheme::fp8_a16,
                     Scheme::fp8_dynamic}) {
      const QuantMethod& m = quant_method({f, s});
      EXPECT_EQ(m.key({f, s}, {"x"}, {}).weight, m.weight_key()) << quant::scheme_name(s);
    }
  EXPECT_EQ(&quant_method({quant::Family::compressed_tensors, Scheme::nvfp4}), &compressed_tensors_nvfp4_method());
  EXPECT_EQ(&quant_method({quant::Family::modelopt, Scheme::nvfp4}), &nvfp4_method());
}

// Format detection by tensor names lives in the methods: each family's names.
TEST(QuantMethods, DetectionReadsEachFamilysNames) {
  std::map<std::string, DType> t = {{"a.weight", DType::U8},          {"a.weight_scale", DType::F8_E4M3},
                                    {"a.input_scale", DType::F32},     {"b.weight_packed", DType::U8},
                                    {"b.weight_scale", DType::F8_E4M3}, {"c.weight", DType::F8_E4M3},
                                    {"d.weight", DType::BF16}};
  TensorLookup look = [&](const std::string& n) -> std::optional<DType> {
    auto it = t.find(n);
    return it == t.end() ? std::nullopt : std::optional<DType>(it->second);
  };
  using quant::Family;
  using quant::Scheme;
  EXPECT_EQ(detect_scheme(Family::modelopt, look, "a"), Scheme::nvfp4);
  EXPECT_EQ(detect_scheme(Family::compressed_tensors, look, "a"), Scheme::unquantized);  // not its names
  EXPECT_EQ(detect_scheme(Family::compressed_tensors, look, "b"), Scheme::nvfp4_a16);
  EXPECT_EQ(detect_scheme(Family::modelopt, look, "c"), Scheme::fp8);
  EXPECT_EQ(detect_scheme(Family::compressed_tensors, look, "c"), Scheme::fp8);
  EXPECT_EQ(detect_scheme(Family::modelopt, look, "d"), Scheme::unquantized);
}

}  // namespace
}  // namespace fp4lm::model::layer_scheme_test
