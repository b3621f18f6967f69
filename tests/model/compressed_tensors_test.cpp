// compressed-tensors checkpoints (docs/FORMAT.md §7): the same quantized weights written in
// ModelOpt's form and in compressed-tensors' (tests/common/compressed_tensors_writer.h) give
// bit-identical logits — NVFP4 W4A4 and W4A16, FP8 W8A8 / W8A16 / dynamic, dense and MoE, shared
// and distinct shard scales, mixed-precision with several groups — and every bad input is an
// Error naming the module, tensor or scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/checkpoint_edit.h"
#include "common/compressed_tensors_writer.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::compressed_tensors_test {
namespace {

using nlohmann::json;
using quant::QuantAlgo;
using quant::Scheme;
using test::TempDir;
namespace fs = std::filesystem;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::vector<float> logits_of(const std::string& dir, EngineOptions o = {}) {
  return checkpoint_logits(dir, kTokens, o);
}

// The routers' and lm_head's exclusions in compressed-tensors' spelling: a name and a "re:".
const json kIgnore = {"lm_head", "re:.*mlp\\.gate$"};

struct Pair {
  std::string modelopt, ct;
  int canonicalized = 0;
};

Pair write_pair(const TempDir& dir, synth::SyntheticOptions s, const json& qc, bool drop_input_scales = false) {
  Pair p{(dir.path() / "modelopt").string(), (dir.path() / "ct").string()};
  synth::write_synthetic_checkpoint(p.modelopt, s);
  p.canonicalized = test::write_compressed_tensors(p.modelopt, p.ct, {qc, drop_input_scales});
  return p;
}

synth::SyntheticOptions synth(const std::string& arch, QuantAlgo algo) {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.seed = 11;
  return s;
}

struct Case {
  const char* arch;
  bool distinct;
};

class CtBitIdentical : public ::testing::TestWithParam<Case> {};

TEST_P(CtBitIdentical, Nvfp4W4A4AndW4A16AndOverride) {
  for (bool w4a4 : {true, false}) {
    TempDir dir;
    synth::SyntheticOptions s = synth(GetParam().arch, w4a4 ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4);
    s.distinct_shard_scales = GetParam().distinct;
    const Pair p = write_pair(dir, s, test::ct_config("nvfp4-pack-quantized",
                                                      {{"group_0", test::ct_nvfp4_group({"Linear"}, w4a4)}}, kIgnore));
    ModelLoader l(io::Checkpoint::open(p.ct), {});
    const LayerSpec& spec = l.layers().front();
    EXPECT_EQ(l.describe(spec).scheme.on_disk, (quant::DiskFormat{quant::Family::compressed_tensors,
                                                                  w4a4 ? Scheme::nvfp4 : Scheme::nvfp4_a16}));
    EXPECT_EQ(l.describe(spec).scheme.key, w4a4 ? kernels::kNvfp4W4A4 : kernels::kNvfp4W4A16);
    const auto mo = logits_of(p.modelopt), ct = logits_of(p.ct);
    EXPECT_TRUE(bit_identical(mo, ct)) << "w4a4=" << w4a4 << " canonicalized scales: " << p.canonicalized;
    if (!w4a4) continue;
    // --override-activation-dtype bfloat16: W4A16 in bf16 from either form.
    EngineOptions o;
    o.override_activation_dtype = DType::BF16;
    const auto mo_bf16 = logits_of(p.modelopt, o), ct_bf16 = logits_of(p.ct, o);
    EXPECT_TRUE(bit_identical(mo_bf16, ct_bf16));
    EXPECT_FALSE(bit_identical(ct_bf16, ct));  // the override changed what runs
    ModelLoader lo(io::Checkpoint::open(p.ct), o);
    EXPECT_EQ(lo.describe(lo.layers().front()).scheme.key, kernels::kNvfp4W4A16);
  }
}

TEST_P(CtBitIdentical, Fp8StaticWeightOnlyAndDynamic) {
  struct Fp8Case {
    const char* act;
    kernels::QuantKey key;
  };
  for (const Fp8Case c : {Fp8Case{"static", kernels::kFp8}, Fp8Case{"none", kernels::kFp8W8A16},
                          Fp8Case{"dynamic", kernels::kFp8W8A16}}) {
    TempDir dir;
    synth::SyntheticOptions s = synth(GetParam().arch, QuantAlgo::FP8);
    s.distinct_shard_scales = GetParam().distinct;
    const bool drop = std::string(c.act) != "static";
    const Pair p = write_pair(
        dir, s, test::ct_config("float-quantized", {{"group_0", test::ct_fp8_group({"Linear"}, "tensor", c.act)}}, kIgnore),
        drop);
    ModelLoader l(io::Checkpoint::open(p.ct), {});
    EXPECT_EQ(l.describe(l.layers().front()).scheme.key, c.key) << c.act;
    // ModelOpt's FP8 without input_scale runs W8A16: the same weights, the same kernels.
    EXPECT_TRUE(bit_identical(logits_of(p.modelopt), logits_of(p.ct))) << c.act;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CtBitIdentical,
                         ::testing::Values(Case{"LlamaForCausalLM", false}, Case{"LlamaForCausalLM", true},
                                           Case{"Qwen3MoeForCausalLM", false}, Case{"Qwen3MoeForCausalLM", true}),
                         [](const auto& info) {
                           return std::string(info.param.arch).substr(0, 5) + (info.param.distinct ? "Distinct" : "Shared");
                         });

// compressed-tensors writes FP8 weight scales in the model's dtype: a per-tensor BF16 [1] and a
// per-channel BF16 [N, 1] scale run as the same values given in F32 (ModelOpt's form: [] / [N]).
TEST(CompressedTensors, Fp8Bf16PerTensorAndPerChannelWeightScales) {
  for (bool per_channel : {false, true}) {
    TempDir dir;
    const Pair p = write_pair(dir, synth("LlamaForCausalLM", QuantAlgo::FP8),
                              test::ct_config("float-quantized",
                                              {{"g", test::ct_fp8_group({"Linear"}, per_channel ? "channel" : "tensor",
                                                                        "none")}},
                                              kIgnore),
                              true);
    auto rewrite = [&](const std::string& d, bool ct) {
      std::map<std::string, int64_t> rows;  // module -> N
      test::edit_tensors(d, [&](test::EditedTensor& t) {
        if (t.name.ends_with(".weight") && t.dtype == DType::F8_E4M3) rows[t.name.substr(0, t.name.size() - 7)] = t.shape[0];
        return true;
      });
      test::edit_tensors(d, [&](test::EditedTensor& t) {
        if (!t.name.ends_with(".weight_scale") || t.dtype != DType::F32) return true;
        float v;
        std::memcpy(&v, t.bytes.data(), sizeof v);
        uint16_t b = 0;
        from_f32_n(&v, DType::BF16, &b, 1);  // the value both forms hold: v rounded to bf16
        const int64_t n = per_channel ? rows.at(t.name.substr(0, t.name.size() - 13)) : 1;
        if (ct) {
          t.dtype = DType::BF16;
          t.shape = per_channel ? Shape{n, 1} : Shape{1};
          t.bytes.resize(static_cast<size_t>(n) * 2);
          for (int64_t r = 0; r < n; ++r) std::memcpy(t.bytes.data() + 2 * r, &b, 2);
        } else {
          float f = 0;
          to_f32_n(&b, DType::BF16, &f, 1);
          t.shape = per_channel ? Shape{n} : Shape{};
          t.bytes.resize(static_cast<size_t>(n) * 4);
          for (int64_t r = 0; r < n; ++r) std::memcpy(t.bytes.data() + 4 * r, &f, 4);
        }
        return true;
      });
    };
    rewrite(p.modelopt, false);
    rewrite(p.ct, true);
    ModelLoader l(io::Checkpoint::open(p.ct), {});
    EXPECT_EQ(l.describe(l.layers().front()).scheme.key, kernels::kFp8W8A16);
    EXPECT_TRUE(bit_identical(logits_of(p.modelopt), logits_of(p.ct))) << "per_channel=" << per_channel;
  }
}

// mixed-precision: several groups, targets by "re:" and by full name, "re:" ignore entries.
TEST(CompressedTensors, MixedPrecisionGroupsTargetsAndIgnore) {
  TempDir dir;
  synth::SyntheticOptions s = synth("Qwen3MoeForCausalLM", QuantAlgo::MIXED_PRECISION);
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) s.mixed[p + "self_attn." + proj] = QuantAlgo::FP8;
    s.mixed[p + "mlp.experts"] = i == 0 ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4;
  }
  json groups = {{"attn", test::ct_fp8_group({"re:.*self_attn\\.(q|k|v|o)_proj$"}, "tensor", "static")},
                 {"experts0", test::ct_nvfp4_group({"re:model\\.layers\\.0\\.mlp\\.experts\\."}, true)},
                 {"experts1", test::ct_nvfp4_group({"re:model\\.layers\\.1\\.mlp\\.experts\\."}, false)}};
  const Pair p = write_pair(dir, s, test::ct_config("mixed-precision", groups, kIgnore));
  ModelLoader l(io::Checkpoint::open(p.ct), {});
  auto scheme = [&](const std::string& name) { return l.describe(l.layer(name)).scheme; };
  EXPECT_EQ(scheme("model.layers.0.self_attn.qkv_proj").on_disk.scheme, Scheme::fp8);
  EXPECT_EQ(scheme("model.layers.0.self_attn.qkv_proj").key, kernels::kFp8);
  EXPECT_EQ(scheme("model.layers.0.mlp.experts").key, kernels::kNvfp4W4A4);
  EXPECT_EQ(scheme("model.layers.1.mlp.experts").key, kernels::kNvfp4W4A16);
  EXPECT_EQ(scheme("model.layers.0.mlp.gate").on_disk.scheme, Scheme::unquantized);  // ignored by "re:"
  EXPECT_EQ(scheme("lm_head").on_disk.scheme, Scheme::unquantized);
  EXPECT_TRUE(bit_identical(logits_of(p.modelopt), logits_of(p.ct)));
}

// An expert calibration never reached: compressed-tensors' converter writes 1.0 where 1/amax was
// NaN/inf. fp4lm gives it the max of the other experts' scales, as for a ModelOpt expert without
// input_scale — the two forms stay bit-identical.
TEST(CompressedTensors, UncalibratedExpertPlaceholderTakesTheOthersMax) {
  TempDir dir;
  const Pair p = write_pair(dir, synth("Qwen3MoeForCausalLM", QuantAlgo::NVFP4),
                            test::ct_config("nvfp4-pack-quantized", {{"g", test::ct_nvfp4_group({"Linear"}, true)}}, kIgnore));
  const std::string e1 = "model.layers.0.mlp.experts.1.";
  test::edit_tensors(p.modelopt, [&](test::EditedTensor& t) { return t.name.rfind(e1, 0) != 0 || t.name.find("input_scale") == std::string::npos; });
  test::edit_tensors(p.ct, [&](test::EditedTensor& t) {
    if (t.name.rfind(e1, 0) == 0 && t.name.find("input_global_scale") != std::string::npos) {
      const float one = 1.0f;
      std::memcpy(t.bytes.data(), &one, sizeof one);
    }
    return true;
  });
  EXPECT_TRUE(bit_identical(logits_of(p.modelopt), logits_of(p.ct)));
}

std::string load_error(const std::string& dir) {
  return test::error_of([&] {
    ModelLoader l(io::Checkpoint::open(dir), {});
    for (const LayerSpec& s : l.layers())
      s.kind == kernels::LayerKind::linear ? (void)l.load_linear(s.name) : (void)l.load_moe(s.name);
  });
}

void set_quantization_config(const std::string& dir, const json& qc) {
  std::ifstream in(fs::path(dir) / "config.json");
  json c = json::parse(in);
  c["quantization_config"] = qc;
  std::ofstream(fs::path(dir) / "config.json") << c.dump(2);
}

TEST(CompressedTensorsBad, MissingOrMisshapenTensorsNameThem) {
  TempDir dir;
  const Pair p = write_pair(dir, synth("LlamaForCausalLM", QuantAlgo::NVFP4),
                            test::ct_config("nvfp4-pack-quantized", {{"g", test::ct_nvfp4_group({"Linear"}, true)}}, kIgnore));
  const std::string m = "model.layers.0.self_attn.q_proj";
  TempDir d2;
  test::copy_dir(p.ct, d2.path());
  test::edit_tensors(d2.path(), [&](test::EditedTensor& t) { return t.name != m + ".weight_global_scale"; });
  std::string e = load_error(d2.path().string());
  EXPECT_NE(e.find("missing tensor '" + m + ".weight_global_scale'"), std::string::npos) << e;

  TempDir d3;
  test::copy_dir(p.ct, d3.path());
  test::edit_tensors(d3.path(), [&](test::EditedTensor& t) {
    if (t.name == m + ".weight_packed") t.shape = {t.shape[0] * 2, t.shape[1] / 2};
    return true;
  });
  e = load_error(d3.path().string());
  EXPECT_NE(e.find(m + ".weight_packed"), std::string::npos) << e;
  EXPECT_NE(e.find("expected shape"), std::string::npos) << e;

  TempDir d4;  // a W4A4 layer without input_global_scale
  test::copy_dir(p.ct, d4.path());
  test::edit_tensors(d4.path(), [&](test::EditedTensor& t) { return t.name != m + ".input_global_scale"; });
  e = load_error(d4.path().string());
  EXPECT_NE(e.find(m + ".input_global_scale"), std::string::npos) << e;
}

TEST(CompressedTensorsBad, UnsupportedSchemesNameTheGroupAndModule) {
  TempDir dir;
  const Pair p = write_pair(dir, synth("LlamaForCausalLM", QuantAlgo::NVFP4),
                            test::ct_config("nvfp4-pack-quantized", {{"g", test::ct_nvfp4_group({"Linear"}, true)}}, kIgnore));
  json int4 = test::ct_nvfp4_group({"Linear"}, false);
  // INT8 pack-quantized (INT4 W4A16 is read: tests/model/int4_checkpoints_test.cpp).
  int4["weights"] = {{"num_bits", 8}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}, {"symmetric", true}};
  int4["format"] = "pack-quantized";
  set_quantization_config(p.ct, test::ct_config("pack-quantized", {{"group_0", int4}}, kIgnore));
  std::string e = load_error(p.ct);
  EXPECT_NE(e.find("config_groups['group_0']"), std::string::npos) << e;
  EXPECT_NE(e.find("8-bit integer weights"), std::string::npos) << e;
  EXPECT_NE(e.find("module model.layers.0.self_attn.q_proj"), std::string::npos) << e;

  json block = test::ct_fp8_group({"Linear"}, "block", "dynamic");
  set_quantization_config(p.ct, test::ct_config("float-quantized", {{"group_0", block}}, kIgnore));
  e = load_error(p.ct);
  EXPECT_NE(e.find("block-wise FP8"), std::string::npos) << e;

  for (const char* method : {"bitsandbytes", "hqq"}) {
    set_quantization_config(p.ct, {{"quant_method", method}, {"bits", 4}, {"group_size", 128}});
    e = load_error(p.ct);
    EXPECT_NE(e.find(std::string("unsupported quant_method '") + method + "'"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::compressed_tensors_test
