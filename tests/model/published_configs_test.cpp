// Checkpoints whose config files have the exact shapes NVIDIA's and Qwen's published releases
// carry (issue 11, docs/FORMAT.md §7): each loads with the right scheme and backend per layer.
// The weights come from the synthetic writer; only the config files are rewritten.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "core/log.h"
#include "io/json_file.h"
#include "kernels/registry.h"
#include "model/load/model_loader.h"
#include "synth/synthetic_checkpoint.h"

using namespace fp4lm;
using namespace fp4lm::model;
using kernels::LayerKind;
using nlohmann::json;
using quant::QuantAlgo;


namespace published_configs_test {
namespace {

void write_json(const std::filesystem::path& p, const json& j) {
  std::ofstream(p) << j.dump(2);
}

// Replaces the checkpoint's quant configs: hf_quant_config.json (null: removed) and config.json's
// quantization_config (null: removed).
void set_quant_configs(const std::string& dir, const json& hf, const json& qc) {
  const std::filesystem::path d(dir);
  if (hf.is_null()) std::filesystem::remove(d / "hf_quant_config.json");
  else write_json(d / "hf_quant_config.json", hf);
  json cfg = io::read_json_file((d / "config.json").string());
  if (qc.is_null()) cfg.erase("quantization_config");
  else cfg["quantization_config"] = qc;
  write_json(d / "config.json", cfg);
}

bool available(const std::string& name, LayerKind kind) {
  const kernels::Backend* b = kernels::find_backend(name, kind);
  return b && (!b->unavailable_reason || b->unavailable_reason().empty());
}

std::string fp8_backend(LayerKind kind) {
  for (const char* n : {"cpu_fp8_w8a16_avx512", "cpu_fp8_w8a16_avx2"})
    if (available(n, kind)) return n;
  return "reference";
}

struct Ckpt {
  test::TempDir tmp;
  std::string dir;
  explicit Ckpt(const synth::SyntheticOptions& o) : dir((tmp / "ckpt").string()) { synth::write_synthetic_checkpoint(dir, o); }
  ModelLoader loader(EngineOptions opts = {}) const { return ModelLoader(io::Checkpoint::open(dir), opts); }
};

// Every layer loads (parameters validated, kernel built).
void load_all(ModelLoader& l) {
  for (const LayerSpec& s : l.layers()) {
    if (s.kind == LayerKind::linear) {
      EXPECT_NO_THROW(l.load_linear(s.name)) << s.name;
    } else {
      EXPECT_NO_THROW(l.load_moe(s.name)) << s.name;
    }
  }
}

json modelopt_producer(const char* version) { return {{"name", "modelopt"}, {"version", version}}; }

}  // namespace

TEST(PublishedCheckpoints, Fp8WithoutGroupSizeRunsOnTheFp8W8A16Backend) {
  synth::SyntheticOptions o;
  o.architecture = "LlamaForCausalLM";
  o.algo = QuantAlgo::FP8;
  Ckpt c(o);
  set_quant_configs(c.dir,
                    {{"producer", modelopt_producer("0.15.0")},
                     {"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}}}},
                    nullptr);
  ModelLoader l = c.loader();
  LayerReport r = l.describe(l.layer("model.layers.0.self_attn.qkv_proj"));
  EXPECT_EQ(r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::FP8));
  EXPECT_EQ(r.scheme.key, kernels::kFp8);  // input_scale on disk: W8A8 as stored, run as W8A16
  EXPECT_EQ(r.selection.backend->name, fp8_backend(LayerKind::linear));
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);
  load_all(l);

  // Weight-only FP8 (no input_scale anywhere) resolves to fp8_w8a16 and loads.
  test::edit_tensors(c.dir, [](test::EditedTensor& t) { return t.name.find("input_scale") == std::string::npos; });
  ModelLoader wo = c.loader();
  EXPECT_EQ(wo.describe(wo.layer("model.layers.1.mlp.down_proj")).scheme.key, kernels::kFp8W8A16);
  load_all(wo);
}

TEST(PublishedCheckpoints, Fp8PerChannelWeightScaleLoads) {
  synth::SyntheticOptions o;
  o.architecture = "LlamaForCausalLM";
  o.algo = QuantAlgo::FP8;
  Ckpt c(o);
  // Replace o_proj's scalar weight_scale with a per-channel one of the same value.
  test::edit_tensors(c.dir, [](test::EditedTensor& t) {
    if (t.name == "model.layers.0.self_attn.o_proj.weight_scale") {
      float v;
      std::memcpy(&v, t.bytes.data(), 4);
      t.shape = {64, 1};
      t.bytes.resize(64 * 4);
      for (int i = 0; i < 64; ++i) std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    }
    return true;
  });
  ModelLoader l = c.loader();
  const LayerSpec& s = l.layer("model.layers.0.self_attn.o_proj");
  auto w = l.linear_weights(s, l.describe(s).scheme);
  ASSERT_EQ(w.shards[0].as<kernels::Fp8View>().row_scales.size(), 64u);
  EXPECT_NO_THROW(l.load_linear(s.name));
  // A per-channel scale of the wrong length is an error naming the tensor.
  test::edit_tensors(c.dir, [](test::EditedTensor& t) {
    if (t.name == "model.layers.0.self_attn.o_proj.weight_scale") t.shape = {32, 2};
    return true;
  });
  ModelLoader bad = c.loader();
  std::string e = test::error_of([&] { bad.load_linear("model.layers.0.self_attn.o_proj"); });
  EXPECT_NE(e.find("model.layers.0.self_attn.o_proj.weight_scale"), std::string::npos) << e;
}

TEST(PublishedCheckpoints, NemotronStyleMinimalFileExcludesWhatIsStoredUnquantized) {
  synth::SyntheticOptions o;
  o.architecture = "Qwen3MoeForCausalLM";
  o.algo = QuantAlgo::NVFP4;
  Ckpt c(o);
  set_quant_configs(c.dir,
                    {{"producer", modelopt_producer("0.23.0")},
                     {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", "FP8"}}}},
                    nullptr);
  ModelLoader l = c.loader();
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).group_size, 16);
  EXPECT_EQ(l.describe(l.layer("model.layers.0.self_attn.qkv_proj")).scheme.key, kernels::kNvfp4W4A4);
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.experts")).scheme.key, kernels::kNvfp4W4A4);
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);  // stored bf16
  EXPECT_EQ(l.describe(l.layer("model.layers.0.mlp.gate")).scheme.key, kernels::kUnquantized);
  load_all(l);
}

TEST(PublishedCheckpoints, ConfigJsonWithoutQuantMethodAndStringKvCacheScheme) {
  synth::SyntheticOptions o;
  o.architecture = "Qwen3ForCausalLM";
  o.algo = QuantAlgo::NVFP4;
  Ckpt c(o);
  json nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  set_quant_configs(c.dir, nullptr,
                    {{"config_groups", {{"group_0", {{"weights", nvfp4}, {"input_activations", nvfp4}, {"targets", {"Linear"}}}}}},
                     {"ignore", {"lm_head"}},
                     {"kv_cache_scheme", "FP8"},
                     {"producer", modelopt_producer("0.37.0")}});
  ModelLoader l = c.loader();
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::NVFP4);
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).kv_cache_quant_algo, "FP8");
  EXPECT_EQ(l.describe(l.layer("model.layers.1.mlp.gate_up_proj")).scheme.key, kernels::kNvfp4W4A4);
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);
  load_all(l);
}

TEST(PublishedCheckpoints, MixedFp8AndW4A16AsQwen36IsPublishedWithDisagreeingFiles) {
  synth::SyntheticOptions o;
  o.architecture = "Qwen3MoeForCausalLM";
  o.algo = QuantAlgo::MIXED_PRECISION;
  o.layers = 2;
  json layers = json::object();
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      o.mixed[p + "self_attn." + proj] = QuantAlgo::FP8;
      layers[p + "self_attn." + proj] = {{"quant_algo", "FP8"}};
    }
    o.mixed[p + "mlp.experts"] = QuantAlgo::W4A16_NVFP4;
    layers[p + "mlp.experts"] = {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
  }
  o.mixed["lm_head"] = QuantAlgo::W4A16_NVFP4;
  layers["lm_head"] = {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
  Ckpt c(o);
  // hf_quant_config.json as published: no group_size, W4A16 experts. config.json's
  // config_groups (an older producer) give the experts 4-bit activations.
  json hf = {{"producer", modelopt_producer("0.44.0")},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"},
               {"kv_cache_quant_algo", "FP8"},
               {"exclude_modules", {"mtp*"}},
               {"quantized_layers", layers}}}};
  json fp8 = {{"num_bits", 8}, {"type", "float"}}, nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  json attn = json::array(), experts = json::array();
  for (const auto& [m, v] : layers.items()) (v["quant_algo"] == "FP8" ? attn : experts).push_back(m);
  json qc = {{"quant_method", "modelopt"},
             {"quant_algo", "MIXED_PRECISION"},
             {"producer", modelopt_producer("0.43.0")},
             {"kv_cache_scheme", "FP8"},
             {"ignore", {"mtp*"}},
             {"config_groups",
              {{"group_0", {{"weights", fp8}, {"input_activations", fp8}, {"targets", attn}}},
               {"group_1", {{"weights", nvfp4}, {"input_activations", nvfp4}, {"targets", experts}}}}}};
  set_quant_configs(c.dir, hf, qc);

  test::LogCapture logs(spdlog::level::warn);
  ModelLoader l = c.loader();
  const std::string text = logs.text();
  EXPECT_EQ(logs.count("disagree"), 1) << text;  // ONE warning, naming both files and the choice
  EXPECT_NE(text.find("config.json: quantization_config and "), std::string::npos) << text;
  EXPECT_NE(text.find("hf_quant_config.json disagree"), std::string::npos) << text;
  EXPECT_NE(text.find("module(s) NVFP4 per config.json, W4A16_NVFP4 per hf_quant_config.json -> W4A16_NVFP4"),
            std::string::npos)
      << text;

  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerReport attn_r = l.describe(l.layer(p + "self_attn.qkv_proj"));
    EXPECT_EQ(attn_r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::FP8));
    EXPECT_EQ(attn_r.selection.backend->name, fp8_backend(LayerKind::linear));
    EXPECT_EQ(l.describe(l.layer(p + "self_attn.o_proj")).scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::FP8));
    LayerReport moe_r = l.describe(l.layer(p + "mlp.experts"));
    EXPECT_EQ(moe_r.scheme.on_disk.scheme, quant::scheme_of(QuantAlgo::W4A16_NVFP4));  // the tensors decide: no input_scale
    EXPECT_EQ(moe_r.scheme.key, kernels::kNvfp4W4A16);
    EXPECT_EQ(l.describe(l.layer(p + "mlp.gate")).scheme.key, kernels::kUnquantized);
  }
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kNvfp4W4A16);
  load_all(l);
}

}  // namespace published_configs_test
