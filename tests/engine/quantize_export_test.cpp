// `fp4lm quantize` export (issue 7): W4A16_NVFP4 and NVFP4 layouts, bit-exactness against the
// reference quantizer, shared scales, exclusions, config files, shards, and failure handling.
// Inputs are random-weight unquantized checkpoints written by the library's synthetic writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/dense_reference.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "core/error.h"
#include "engine/quantize/quantizer.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/layers/compressed_attention.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/export_format.h"
#include "quant/nvfp4.h"

using namespace fp4lm;
using engine::QuantizeOptions;
using synth::SyntheticOptions;
using quant::QuantAlgo;
namespace fs = std::filesystem;
using nlohmann::json;

namespace quantize_export_test {
namespace {

using fp4lm::test::error_of;

synth::SyntheticOptions source(const std::string& arch, DType dtype = DType::BF16) {
  synth::SyntheticOptions o;
  o.architecture = arch;
  o.algo = QuantAlgo::None;
  o.dense_dtype = dtype;
  o.seed = 7;
  return o;
}

struct Case {
  fp4lm::test::TempDir tmp;
  std::string in, out;
  explicit Case(const synth::SyntheticOptions& o) : in((tmp / "in").string()), out((tmp / "out").string()) {
    synth::write_synthetic_checkpoint(in, o);
  }
  QuantizeOptions options(QuantAlgo algo) const {
    QuantizeOptions q;
    q.model_dir = in;
    q.out_dir = out;
    q.exp.algo = algo;
    q.progress = false;
    return q;
  }
};

std::vector<float> f32(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

float scalar(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  EXPECT_EQ(t.dtype, DType::F32) << name;
  EXPECT_TRUE(t.shape.empty()) << name << " should be 0-d";
  float v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

std::vector<uint8_t> bytes(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  const auto* p = static_cast<const uint8_t*>(t.data);
  return {p, p + t.nbytes};
}

std::string scheme_of(const model::ModelLoader& l, const std::string& layer) {
  return std::string(kernels::scheme_name(l.describe(l.layer(layer)).scheme.key));
}


}  // namespace

TEST(QuantizeExport, W4A16CheckpointLoadsThroughTheOracleWithW4A16Schemes) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  model::ModelLoader l(io::Checkpoint::open(c.out), {});
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::W4A16_NVFP4);
  for (const model::LayerSpec& s : l.layers()) {
    const std::string want = s.router || s.name == "lm_head" ? "unquantized" : "nvfp4_w4a16";
    EXPECT_EQ(scheme_of(l, s.name), want) << s.name;
  }
  // And the weights themselves pass the methods' load rules.
  for (const model::LayerSpec& s : l.layers()) {
    auto r = l.describe(s);
    if (s.kind == kernels::LayerKind::linear) EXPECT_NO_THROW(l.linear_weights(s, r.scheme)) << s.name;
    else EXPECT_NO_THROW(l.moe_weights(s, r.scheme)) << s.name;
  }
}

TEST(QuantizeExport, PackedCodesAndScalesEqualTheReferenceQuantizerWithGroupAmax) {
  for (const char* arch : {"Qwen3MoeForCausalLM", "LlamaForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM"}) {
    Case c(source(arch));
    engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
    auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
    const engine::ExportPlan plan = engine::make_export_plan(*in, {QuantAlgo::W4A16_NVFP4, {}, false});
    ASSERT_FALSE(plan.groups.empty());
    for (const engine::QuantGroup& g : plan.groups) {
      std::vector<std::vector<float>> ws;
      float gamax = 0;
      for (const std::string& m : g.modules) {
        ws.push_back(f32(*in, m + ".weight"));
        gamax = std::max(gamax, quant::amax(ws.back().data(), ws.back().size()));
      }
      EXPECT_EQ(engine::group_weight_amax(*in, g), gamax) << g.modules[0];
      for (size_t i = 0; i < g.modules.size(); ++i) {
        const std::string& m = g.modules[i];
        quant::Nvfp4Weight ref = quant::quantize_weight(ws[i].data(), g.rows[i], g.in_features, gamax);
        ASSERT_EQ(out->get(m + ".weight").dtype, DType::U8) << m;
        EXPECT_EQ(out->get(m + ".weight").shape, (Shape{g.rows[i], g.in_features / 2})) << m;
        EXPECT_EQ(out->get(m + ".weight_scale").dtype, DType::F8_E4M3) << m;
        EXPECT_EQ(out->get(m + ".weight_scale").shape, (Shape{g.rows[i], g.in_features / 16})) << m;
        EXPECT_EQ(bytes(*out, m + ".weight"), ref.codes) << arch << " " << m;
        EXPECT_EQ(bytes(*out, m + ".weight_scale"), ref.scales) << arch << " " << m;
        EXPECT_EQ(scalar(*out, m + ".weight_scale_2"), ref.weight_scale_2) << arch << " " << m;
      }
    }
  }
}

TEST(QuantizeExport, FusedGroupsShareWeightScale2AndOProjDownProjKeepTheirOwn) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
  auto s2 = [&](const std::string& m) { return scalar(*out, m + ".weight_scale_2"); };
  auto own = [&](const std::string& m) {
    auto w = f32(*in, m + ".weight");
    return quant::amax(w.data(), w.size()) / quant::kNvfp4GlobalDivisor;
  };
  const std::string a = "model.layers.1.self_attn.";
  EXPECT_EQ(s2(a + "q_proj"), s2(a + "k_proj"));
  EXPECT_EQ(s2(a + "q_proj"), s2(a + "v_proj"));
  const float qkv_max = std::max({own(a + "q_proj"), own(a + "k_proj"), own(a + "v_proj")});
  EXPECT_EQ(s2(a + "q_proj"), qkv_max);
  // Random weights: the shards' own amaxes differ, so sharing is visible.
  EXPECT_TRUE(own(a + "q_proj") != qkv_max || own(a + "k_proj") != qkv_max);
  EXPECT_EQ(s2(a + "o_proj"), own(a + "o_proj"));
  const std::string e = "model.layers.0.mlp.experts.";
  for (int x = 0; x < 4; ++x) {
    const std::string p = e + std::to_string(x) + ".";
    EXPECT_EQ(s2(p + "gate_proj"), s2(p + "up_proj")) << x;
    EXPECT_EQ(s2(p + "gate_proj"), std::max(own(p + "gate_proj"), own(p + "up_proj"))) << x;
    EXPECT_EQ(s2(p + "down_proj"), own(p + "down_proj")) << x;
  }
  // Experts are separate groups: each has its own global scale.
  EXPECT_NE(s2(e + "0.gate_proj"), s2(e + "1.gate_proj"));
}

TEST(QuantizeExport, W4A16WritesNoInputScaleAndCopiesTheRestInItsDtype) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
  for (const std::string& n : out->tensor_names()) EXPECT_EQ(n.find("input_scale"), std::string::npos) << n;
  for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                        "model.layers.0.mlp.gate.weight", "model.layers.0.self_attn.q_norm.weight",
                        "model.layers.1.input_layernorm.weight"}) {
    ASSERT_NE(out->find(n), nullptr) << n;
    EXPECT_EQ(out->get(n).dtype, in->get(n).dtype) << n;
    EXPECT_EQ(bytes(*out, n), bytes(*in, n)) << n;
  }
  // Nothing dropped: every input tensor is either copied or replaced by its quantized form.
  for (const std::string& n : in->tensor_names()) EXPECT_NE(out->find(n), nullptr) << n;
}

TEST(QuantizeExport, Fp16AndFp32InputsQuantizeFromTheirOwnValues) {
  for (DType d : {DType::F16, DType::F32}) {
    Case c(source("LlamaForCausalLM", d));
    engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
    auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
    const std::string m = "model.layers.0.self_attn.o_proj";
    auto w = f32(*in, m + ".weight");
    auto ref = quant::quantize_weight(w.data(), 64, 64);
    EXPECT_EQ(bytes(*out, m + ".weight"), ref.codes) << dtype_name(d);
    EXPECT_EQ(out->get("model.norm.weight").dtype, d);
  }
}

TEST(QuantizeExport, ConfigFilesFollowTheModelOptLayout) {
  Case c(source("Qwen3MoeForCausalLM"));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.producer_version = "9.8.7";
  engine::quantize_checkpoint(q);
  json h = io::read_json_file(c.out + "/hf_quant_config.json");
  // model.embed_tokens first, as ModelOpt lists it (scripts/validate_modelopt.py).
  std::vector<std::string> excl = {"model.embed_tokens", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate",
                                   "lm_head"};
  EXPECT_EQ(h, (json{{"producer", {{"name", "fp4lm"}, {"version", "9.8.7"}}},
                     {"quantization",
                      {{"quant_algo", "W4A16_NVFP4"},
                       {"kv_cache_quant_algo", nullptr},
                       {"group_size", 16},
                       {"exclude_modules", excl}}}}));
  json cfg = io::read_json_file(c.out + "/config.json");
  json orig = io::read_json_file(c.in + "/config.json");
  json qc = cfg["quantization_config"];
  cfg.erase("quantization_config");
  EXPECT_EQ(cfg, orig);  // nothing else changes
  json fp4 = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  EXPECT_EQ(qc, (json{{"quant_method", "modelopt"},
                      {"quant_algo", "W4A16_NVFP4"},
                      {"config_groups", {{"group_0", {{"weights", fp4}, {"targets", {"Linear"}}}}}},
                      {"ignore", excl},
                      {"producer", {{"name", "fp4lm"}, {"version", "9.8.7"}}}}));
  EXPECT_EQ(fp4lm::test::read_file(c.out + "/generation_config.json"), fp4lm::test::read_file(c.in + "/generation_config.json"));

  // NVFP4 adds input_activations; checked on the config builder (calibration is tested apart).
  json n = quant::quantization_config_json(QuantAlgo::NVFP4, excl, "1");
  EXPECT_EQ(n["config_groups"]["group_0"]["input_activations"], fp4);
  EXPECT_EQ(n["quant_algo"], "NVFP4");
}

TEST(QuantizeExport, InFeaturesNotAMultipleOf16StayUnquantizedAndListed) {
  synth::SyntheticOptions o = source("LlamaForCausalLM");
  o.intermediate = 40;  // down_proj in_features 40
  Case c(o);
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
  for (int i = 0; i < 2; ++i) {
    const std::string d = "model.layers." + std::to_string(i) + ".mlp.down_proj";
    EXPECT_EQ(out->get(d + ".weight").dtype, DType::BF16);
    EXPECT_EQ(bytes(*out, d + ".weight"), bytes(*in, d + ".weight"));
    EXPECT_EQ(out->find(d + ".weight_scale"), nullptr);
    EXPECT_EQ(out->get("model.layers." + std::to_string(i) + ".mlp.gate_proj.weight").dtype, DType::U8);
  }
  model::ModelLoader l(out, {});
  const auto& ex = quant::as_modelopt(l.quant_config()).exclude_modules;
  EXPECT_NE(std::find(ex.begin(), ex.end(), "model.layers.0.mlp.down_proj"), ex.end());
  EXPECT_EQ(scheme_of(l, "model.layers.0.mlp.down_proj"), "unquantized");
  EXPECT_EQ(scheme_of(l, "model.layers.0.mlp.gate_up_proj"), "nvfp4_w4a16");
}

// An architecture's default exclusions are kept unquantized, not only listed: DeepSeek-V3.2's
// kv_b_proj (as DeepSeek-V3's); its sparse indexer's Linears are quantized as ModelOpt's config
// leaves them, and the output loads.
TEST(QuantizeExport, DefaultExclusionsStayUnquantizedAndTheIndexerIsQuantized) {
  Case c(source("DeepseekV32ForCausalLM"));
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  auto in = io::Checkpoint::open(c.in), out = io::Checkpoint::open(c.out);
  const std::string p = "model.layers.1.self_attn.";
  EXPECT_EQ(out->get(p + "kv_b_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(bytes(*out, p + "kv_b_proj.weight"), bytes(*in, p + "kv_b_proj.weight"));
  EXPECT_EQ(out->find(p + "kv_b_proj.weight_scale"), nullptr);
  for (const char* m : {"indexer.wq_b", "indexer.wk", "indexer.weights_proj"})
    EXPECT_EQ(out->get(p + m + ".weight").dtype, DType::U8) << m;
  EXPECT_EQ(out->get(p + "indexer.k_norm.bias").dtype, DType::BF16);
  model::ModelLoader l(out, {});
  const auto& ex = quant::as_modelopt(l.quant_config()).exclude_modules;
  EXPECT_EQ(std::count(ex.begin(), ex.end(), p + "kv_b_proj"), 1);
  EXPECT_EQ(scheme_of(l, p + "indexer.wk"), "nvfp4_w4a16");
}

TEST(QuantizeExport, ExcludePatternsKeepWholeFusedGroupsAndMoeLayers) {
  Case c(source("Qwen3MoeForCausalLM"));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.exp.exclude = {"*.1.self_attn.k_proj", "model.layers.1.mlp.experts.2.*"};
  engine::quantize_checkpoint(q);
  model::ModelLoader l(io::Checkpoint::open(c.out), {});
  // k_proj alone matched, but q/k/v are one engine layer: all three stay unquantized.
  EXPECT_EQ(scheme_of(l, "model.layers.1.self_attn.qkv_proj"), "unquantized");
  EXPECT_EQ(scheme_of(l, "model.layers.0.self_attn.qkv_proj"), "nvfp4_w4a16");
  EXPECT_EQ(l.checkpoint().get("model.layers.1.self_attn.q_proj.weight").dtype, DType::BF16);
  // One expert matched: the whole experts layer stays unquantized, listed by its container.
  EXPECT_EQ(scheme_of(l, "model.layers.1.mlp.experts"), "unquantized");
  EXPECT_EQ(scheme_of(l, "model.layers.0.mlp.experts"), "nvfp4_w4a16");
  // In ModelOpt's summarized form: q/k/v by name (o_proj is quantized), and layer 1's whole MLP
  // (router and experts, nothing of it quantized) as "model.layers.1.mlp*".
  const auto& ex = quant::as_modelopt(l.quant_config()).exclude_modules;
  for (const char* m : {"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
                        "model.layers.1.self_attn.v_proj", "model.layers.1.mlp*"})
    EXPECT_NE(std::find(ex.begin(), ex.end(), m), ex.end()) << m;
  EXPECT_TRUE(quant::is_excluded(ex, "model.layers.1.mlp.experts.0.gate_proj"));
  EXPECT_FALSE(quant::is_excluded(ex, "model.layers.0.mlp.experts.0.gate_proj"));
}

TEST(QuantizeExport, LmHeadIsQuantizedOnlyWhenAskedAndNeverWhenTied) {
  Case c(source("Qwen3MoeForCausalLM"));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.exp.quantize_lm_head = true;
  engine::quantize_checkpoint(q);
  model::ModelLoader l(io::Checkpoint::open(c.out), {});
  EXPECT_EQ(scheme_of(l, "lm_head"), "nvfp4_w4a16");
  const auto& ex = quant::as_modelopt(l.quant_config()).exclude_modules;
  EXPECT_EQ(std::find(ex.begin(), ex.end(), "lm_head"), ex.end());

  synth::SyntheticOptions t = source("LlamaForCausalLM");
  t.tie_word_embeddings = true;
  Case tied(t);
  QuantizeOptions qt = tied.options(QuantAlgo::W4A16_NVFP4);
  qt.exp.quantize_lm_head = true;
  engine::quantize_checkpoint(qt);
  model::ModelLoader lt(io::Checkpoint::open(tied.out), {});
  EXPECT_EQ(scheme_of(lt, "lm_head"), "unquantized");
  EXPECT_EQ(lt.checkpoint().get("model.embed_tokens.weight").dtype, DType::BF16);
}

// DeepSeek-V4 under DeepSeek's native names (embed.weight, head.weight, layers.N.*; the form of
// the published checkpoints): the plan reaches head.weight as the engine's lm_head, the output
// keeps the stored names, and the loader reads an exclusion or a quantized module named as stored
// ("head") as lm_head. Both outputs run.
TEST(QuantizeExport, DeepseekV4NativeNamesArePlannedByTheEnginesAndWrittenAsStored) {
  const std::string src = (fp4lm::test::source_dir() / "tests/model/fixtures/deepseek_v4").string();
  auto in = io::Checkpoint::open(src);
  ASSERT_NE(in->find("head.weight"), nullptr);
  ASSERT_EQ(in->find("lm_head.weight"), nullptr);
  for (const bool head : {false, true}) {
    fp4lm::test::TempDir tmp;
    QuantizeOptions q;
    q.model_dir = src;
    q.out_dir = (tmp / "out").string();
    q.exp.algo = QuantAlgo::W4A16_NVFP4;
    q.exp.quantize_lm_head = head;
    q.progress = false;
    engine::quantize_checkpoint(q);
    auto out = io::Checkpoint::open(q.out_dir);
    EXPECT_EQ(out->find("lm_head.weight"), nullptr) << "head " << head;
    EXPECT_EQ(out->find("model.layers.0.attn.wkv.weight"), nullptr);
    EXPECT_EQ(out->get("layers.0.attn.wkv.weight").dtype, DType::U8);
    EXPECT_EQ(bytes(*out, "embed.weight"), bytes(*in, "embed.weight"));
    const json ex = io::read_json_file(q.out_dir + "/hf_quant_config.json")["quantization"]["exclude_modules"];
    if (head) {
      EXPECT_EQ(out->get("head.weight").dtype, DType::U8);
      EXPECT_NE(out->find("head.weight_scale"), nullptr);
      EXPECT_EQ(std::count(ex.begin(), ex.end(), "head"), 0);
    } else {
      EXPECT_EQ(bytes(*out, "head.weight"), bytes(*in, "head.weight"));
      EXPECT_EQ(std::count(ex.begin(), ex.end(), "head"), 1) << ex.dump();
    }
    model::ModelLoader l(out, {});
    EXPECT_EQ(scheme_of(l, "lm_head"), head ? "nvfp4_w4a16" : "unquantized");
    EXPECT_EQ(scheme_of(l, "model.layers.0.attn.wkv"), "nvfp4_w4a16");
    // Its wo_a runs grouped on the stored NVFP4 bytes: no float32 copy in inspect's estimate.
    EXPECT_EQ(model::deepseek_v4_wo_a_float_bytes(l, 0), 0u);
    // It runs: the logits of the weights it wrote, dequantized (e2m1 × E4M3 × weight_scale_2) into
    // a float32 checkpoint, up to float32 rounding; and the 4-bit weights did change them.
    const std::string dense = fp4lm::test::write_dense_checkpoint(
        q.out_dir, tmp / "dense", {".weight_scale", ".weight_scale_2"},
        [](const io::Checkpoint& ck, const std::string& name,
           const TensorView& t) -> std::optional<fp4lm::test::DenseTensor> {
          if (!name.ends_with(".weight") || t.dtype != DType::U8) return std::nullopt;
          const std::string m = name.substr(0, name.size() - 7);
          const int64_t n = t.shape[0], k = 2 * t.shape[1];
          const float s2 = fp4lm::test::as_f32(ck.get(m + ".weight_scale_2"))[0];
          return fp4lm::test::DenseTensor{
              {n, k}, quant::dequantize_weight(t.data, static_cast<const uint8_t*>(ck.get(m + ".weight_scale").data),
                                               n, k, s2)};
        });
    model::EngineOptions o;
    o.dtype = "float32";
    const std::vector<int32_t> toks = {3, 17, 42, 8, 61, 5, 29, 90};
    auto run = [&](const std::string& dir) {
      auto lm = model::CausalLM::load(dir, o);
      model::SequenceState s = lm->new_sequence();
      std::vector<float> v(toks.size() * static_cast<size_t>(lm->vocab_size()));
      lm->forward(s, toks.data(), static_cast<int64_t>(toks.size()), model::LogitsMode::all, v.data());
      return v;
    };
    const std::vector<float> got = run(q.out_dir);
    EXPECT_LT(fp4lm::test::rel_to_range(got, run(dense)), 1e-5) << "head " << head;
    EXPECT_GT(fp4lm::test::rel_to_range(got, run(src)), 1e-3) << "head " << head;
    // The quantized grouped wo_a runs one NVFP4 kernel per group (the dense one: float32 rows):
    // steps, chunks and batches past the window (8), the CSA (4) and HCA (16) blocks and the top-k.
    if (!head) {
      std::vector<int32_t> longer;
      for (int32_t i = 0; i < 40; ++i) longer.push_back((i * 37 + 3) % 96);
      model::expect_steps_chunks_and_batches_match_one_forward(q.out_dir, o, longer);
    }
  }
}

TEST(QuantizeExport, ShardsAboveTheLimitWithAnIndexHoldTheSameTensors) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.out_dir = (c.tmp / "sharded").string();
  q.max_shard_bytes = 20000;
  engine::QuantizeSummary s = engine::quantize_checkpoint(q);
  ASSERT_GT(s.shard_files.size(), 2u);
  EXPECT_EQ(s.shard_files[0], "model-00001-of-" + fmt::format("{:05d}", s.shard_files.size()) + ".safetensors");
  EXPECT_FALSE(fs::exists(q.out_dir + "/model.safetensors"));
  json idx = io::read_json_file(q.out_dir + "/model.safetensors.index.json");
  auto one = io::Checkpoint::open(c.out), many = io::Checkpoint::open(q.out_dir);
  EXPECT_EQ(one->tensor_names(), many->tensor_names());
  EXPECT_EQ(idx["weight_map"].size(), many->tensor_names().size());
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), s.tensor_bytes);
  for (const std::string& n : one->tensor_names()) EXPECT_EQ(bytes(*one, n), bytes(*many, n)) << n;
  for (const std::string& f : s.shard_files) {
    // Each shard respects the limit unless it holds one tensor larger than it.
    auto sf = io::SafetensorsFile::open(q.out_dir + "/" + f);
    size_t sum = 0;
    for (const auto& t : sf->tensors()) sum += t.view.nbytes;
    EXPECT_TRUE(sum <= q.max_shard_bytes || sf->tensors().size() == 1) << f;
  }
}

TEST(QuantizeExport, ExistingOutNeedsForceAndTheInputIsNeverTheOutput) {
  Case c(source("LlamaForCausalLM"));
  fs::create_directories(c.out);
  fp4lm::test::write_file(c.out + "/keep.txt", "x");
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(c.options(QuantAlgo::W4A16_NVFP4)); }).find("already exists"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(c.out + "/keep.txt"));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.force = true;
  engine::quantize_checkpoint(q);
  EXPECT_FALSE(fs::exists(c.out + "/keep.txt"));
  EXPECT_TRUE(fs::exists(c.out + "/hf_quant_config.json"));
  q.out_dir = c.in;
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("is the input checkpoint"), std::string::npos);
  EXPECT_TRUE(fs::exists(c.in + "/model.safetensors"));
  q.out_dir = c.tmp.path().string();  // the input lives inside it: --force would delete the input
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("inside the output directory"), std::string::npos);
  EXPECT_TRUE(fs::exists(c.in + "/model.safetensors"));
}

TEST(QuantizeExport, AnInterruptedRunLeavesNoOutAndNoTemporaryFiles) {
  Case c(source("Qwen3MoeForCausalLM"));
  QuantizeOptions q = c.options(QuantAlgo::W4A16_NVFP4);
  q.max_shard_bytes = 20000;  // interrupt after a shard has been completed
  int n = 0;
  q.after_tensor = [&](const std::string&) {
    if (++n == 60) throw Error("simulated interruption");
  };
  EXPECT_EQ(error_of([&] { engine::quantize_checkpoint(q); }), "simulated interruption");
  EXPECT_FALSE(fs::exists(c.out));
  for (const auto& e : fs::directory_iterator(c.tmp.path())) EXPECT_EQ(e.path().filename(), "in") << e.path();

  // With --force over an existing OUT, an interruption leaves the old OUT as it was.
  fs::create_directories(c.out);
  fp4lm::test::write_file(c.out + "/old.txt", "old");
  n = 0;
  q.force = true;
  EXPECT_EQ(error_of([&] { engine::quantize_checkpoint(q); }), "simulated interruption");
  EXPECT_EQ(fp4lm::test::read_file(c.out + "/old.txt"), "old");
}

TEST(QuantizeExport, BadInputsGiveClearErrors) {
  Case c(source("LlamaForCausalLM"));
  // NVFP4 without calibration: a usage error, before anything is read.
  QuantizeOptions q = c.options(QuantAlgo::NVFP4);
  EXPECT_THROW(engine::quantize_checkpoint(q), UsageError);
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("calibration"), std::string::npos);
  EXPECT_FALSE(fs::exists(c.out));

  // Unsupported export algorithm.
  q = c.options(QuantAlgo::FP8);
  EXPECT_THROW(engine::quantize_checkpoint(q), UsageError);

  // Unknown architecture.
  json cfg = io::read_json_file(c.in + "/config.json");
  cfg["architectures"] = {"GPTBigCodeForCausalLM"};
  fp4lm::test::TempDir t2;
  synth::write_synthetic_checkpoint((t2 / "m").string(), source("LlamaForCausalLM"));
  fp4lm::test::write_file(t2 / "m" / "config.json", cfg.dump());
  q = c.options(QuantAlgo::W4A16_NVFP4);
  q.model_dir = (t2 / "m").string();
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("GPTBigCodeForCausalLM"), std::string::npos);
  EXPECT_FALSE(fs::exists(c.out));

  // An already quantized checkpoint.
  synth::SyntheticOptions qo = source("LlamaForCausalLM");
  qo.algo = QuantAlgo::NVFP4;
  synth::write_synthetic_checkpoint((t2 / "q").string(), qo);
  q.model_dir = (t2 / "q").string();
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("already quantized"), std::string::npos);

  // A missing weight names the tensor.
  q.model_dir = c.in;
  fp4lm::test::TempDir t3;
  fs::copy(c.in, t3 / "m", fs::copy_options::recursive);
  {
    io::SafetensorsWriter w;
    auto f = io::SafetensorsFile::open(c.in + "/model.safetensors");
    for (const auto& e : f->tensors())
      if (e.name != "model.layers.1.self_attn.v_proj.weight")
        w.add(e.name, e.view.dtype, e.view.shape, e.view.data, e.view.nbytes);
    w.write((t3 / "m" / "model.safetensors").string());
  }
  q.model_dir = (t3 / "m").string();
  EXPECT_NE(error_of([&] { engine::quantize_checkpoint(q); }).find("model.layers.1.self_attn.v_proj.weight"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(c.out));
}

TEST(QuantizeExport, ByteSizesAndShardAssignment) {
  EXPECT_EQ(quant::parse_byte_size("5GB", "--max-shard-size"), 5'000'000'000ull);
  EXPECT_EQ(quant::parse_byte_size("2GiB", "--max-shard-size"), 2ull << 30);
  EXPECT_EQ(quant::parse_byte_size("500mb", "--max-shard-size"), 500'000'000ull);
  EXPECT_EQ(quant::parse_byte_size("1234", "--max-shard-size"), 1234ull);
  EXPECT_EQ(quant::parse_byte_size("64KiB", "--max-shard-size"), 65536ull);
  for (const char* bad : {"", "GB", "5XB", "-5GB", "0", "1.5GB", "99999999999999999999"})
    EXPECT_THROW(quant::parse_byte_size(bad, "--max-shard-size"), UsageError) << bad;
  quant::ShardLayout l = quant::assign_shards({40, 40, 30, 100, 10}, 100);
  EXPECT_EQ(l.shard_of, (std::vector<size_t>{0, 0, 1, 2, 3}));
  EXPECT_EQ(l.files.back(), "model-00004-of-00004.safetensors");
  EXPECT_EQ(quant::assign_shards({40, 40}, 100).files, std::vector<std::string>{"model.safetensors"});
}

}  // namespace quantize_export_test
