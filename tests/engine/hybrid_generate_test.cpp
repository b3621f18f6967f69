// The Qwen3.5-MoE hybrid through the engine (issue 14): the seed's first smoke test in small —
// a MIXED_PRECISION checkpoint laid out as NVIDIA's Qwen3.6-35B-A3B-NVFP4 (VL nesting, mtp and
// vision tensors, FP8 attention / GDN projections, W4A16_NVFP4 experts, shared experts and
// lm_head, kv_cache_quant_algo FP8 without KV scales, config.json's quantization_config giving
// the experts 4-bit activations where hf_quant_config.json says W4A16) loads with one WARN line
// and generates; and teacher-forced evaluation of a hybrid against the float64 reference
// (tests/reference/hybrid_reference.h), across the evaluator's 64-token chunks.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/log_capture.h"
#include "common/paths.h"
#include "engine/evaluator.h"
#include "engine/generator.h"
#include "io/json_file.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"
#include "model/load/model_loader.h"
#include "synth/synthetic_checkpoint.h"

using namespace fp4lm;
using nlohmann::json;
using quant::QuantAlgo;


namespace hybrid_generate_test {
namespace {

void write_json(const std::filesystem::path& p, const json& j) { std::ofstream(p) << j.dump(2); }

// Rewrites the checkpoint's two quant configs as the 35B-A3B release has them.
void publish_as_35b(const std::string& dir, const std::map<std::string, QuantAlgo>& mixed) {
  const std::string vl = "model.language_model.";
  json layers = json::object(), fp8_targets = json::array(), nvfp4_targets = json::array();
  for (const auto& [m, a] : mixed) {
    const std::string name = m.rfind("model.", 0) == 0 ? vl + m.substr(6) : m;
    if (a == QuantAlgo::FP8) {
      layers[name] = {{"quant_algo", "FP8"}};
      fp8_targets.push_back(name);
    } else {
      layers[name] = {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
      nvfp4_targets.push_back(name);
    }
  }
  const json excl = {"mtp*", "model.visual*"};
  write_json(std::filesystem::path(dir) / "hf_quant_config.json",
             {{"producer", {{"name", "modelopt"}, {"version", "0.44.0"}}},
              {"quantization",
               {{"quant_algo", "MIXED_PRECISION"},
                {"kv_cache_quant_algo", "FP8"},  // no k_scale / v_scale tensors are stored
                {"exclude_modules", excl},
                {"quantized_layers", layers}}}});
  json cfg = io::read_json_file(dir + "/config.json");
  const json fp8 = {{"num_bits", 8}, {"type", "float"}};
  const json nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  cfg["quantization_config"] = {
      {"quant_method", "modelopt"},
      {"quant_algo", "MIXED_PRECISION"},
      {"producer", {{"name", "modelopt"}, {"version", "0.43.0"}}},
      {"kv_cache_scheme", "FP8"},
      {"ignore", excl},
      {"config_groups",
       {{"group_0", {{"weights", fp8}, {"input_activations", fp8}, {"targets", fp8_targets}}},
        {"group_1", {{"weights", nvfp4}, {"input_activations", nvfp4}, {"targets", nvfp4_targets}}}}}};
  write_json(std::filesystem::path(dir) / "config.json", cfg);
}

}  // namespace

// The 35B-A3B layout, or (moe false) the dense 27B's: the same FP8 GDN / attention projections,
// W4A16_NVFP4 on the MLP instead of the experts and shared experts.
void mixed_as_published_loads_with_one_warning_and_generates(bool moe) {
  SCOPED_TRACE(moe ? "Qwen3.6-35B-A3B layout" : "Qwen3.5-27B layout");
  synth::SyntheticOptions o;
  o.architecture = moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration";
  o.algo = QuantAlgo::MIXED_PRECISION;
  o.layers = 4;
  o.linear_value_heads = 4;  // NV/NK = 2, as 35B-A3B
  o.extra_tensors = true;
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool full = (i + 1) % o.full_attention_interval == 0;
    const std::vector<std::string> fp8 = full ? std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}
                                              : std::vector<std::string>{"in_proj_qkv", "in_proj_z", "out_proj"};
    for (const std::string& proj : fp8) o.mixed[p + (full ? "self_attn." : "linear_attn.") + proj] = QuantAlgo::FP8;
    if (moe) o.mixed[p + "mlp.experts"] = QuantAlgo::W4A16_NVFP4;
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      o.mixed[p + (moe ? "mlp.shared_expert." : "mlp.") + proj] = QuantAlgo::W4A16_NVFP4;
  }
  o.mixed["lm_head"] = QuantAlgo::W4A16_NVFP4;
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "qwen36").string();
  synth::write_synthetic_checkpoint(dir, o);
  publish_as_35b(dir, o.mixed);
  {
    auto ck = io::Checkpoint::open(dir);
    ASSERT_NE(ck->find("mtp.fc.weight"), nullptr);
    ASSERT_NE(ck->find("model.visual.blocks.0.attn.qkv.weight"), nullptr);
    ASSERT_NE(ck->find("model.language_model.layers.0.linear_attn.in_proj_qkv.input_scale"), nullptr);
    ASSERT_EQ(ck->find(moe ? "model.language_model.layers.0.mlp.experts.0.gate_proj.input_scale"
                           : "model.language_model.layers.0.mlp.gate_proj.input_scale"),
              nullptr);
  }

  std::unique_ptr<model::CausalLM> lm;
  std::string warnings;
  {
    fp4lm::test::LogCapture cap(spdlog::level::warn);
    lm = model::CausalLM::load(dir, {});
    warnings = cap.text();
  }
  EXPECT_EQ(std::count(warnings.begin(), warnings.end(), '\n'), 1) << warnings;  // exactly one WARN line
  EXPECT_NE(warnings.find("hf_quant_config.json disagree"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("NVFP4 per config.json, W4A16_NVFP4 per hf_quant_config.json -> W4A16_NVFP4"),
            std::string::npos)
      << warnings;

  model::ModelLoader l(io::Checkpoint::open(dir), {});
  EXPECT_EQ(quant::as_modelopt(l.quant_config()).kv_cache_quant_algo, "FP8");
  auto key = [&](const std::string& layer) { return l.describe(l.layer(layer)).scheme.key; };
  EXPECT_EQ(key("model.layers.0.linear_attn.in_proj_qkv").weight, kernels::WeightKey::fp8_static);
  EXPECT_EQ(key("model.layers.0.linear_attn.out_proj").weight, kernels::WeightKey::fp8_static);
  EXPECT_EQ(key("model.layers.0.linear_attn.in_proj_ba"), kernels::kUnquantized);
  EXPECT_EQ(key("model.layers.1.self_attn.qkv_proj").weight, kernels::WeightKey::fp8_static);
  if (moe) {
    EXPECT_EQ(key("model.layers.1.mlp.experts"), kernels::kNvfp4W4A16);  // the tensors decide
    EXPECT_EQ(key("model.layers.1.mlp.shared_expert.gate_up_proj"), kernels::kNvfp4W4A16);
    EXPECT_EQ(key("model.layers.1.mlp.gate"), kernels::kUnquantized);
  } else {
    EXPECT_EQ(key("model.layers.1.mlp.gate_up_proj"), kernels::kNvfp4W4A16);  // the tensors decide
    EXPECT_EQ(key("model.layers.2.mlp.down_proj"), kernels::kNvfp4W4A16);
  }
  EXPECT_EQ(key("lm_head"), kernels::kNvfp4W4A16);

  engine::RequestParams gp;
  gp.prompt = {1, 17, 5, 96};
  gp.max_tokens = 8;
  gp.ignore_eos = true;
  const engine::GenerationResult r = engine::generate(*lm, nullptr, gp);
  ASSERT_EQ(r.output_ids.size(), 8u);
  for (int32_t id : r.output_ids) EXPECT_TRUE(id >= 0 && id < lm->vocab_size());
  // Greedy is deterministic: the same tokens from a fresh run and under the activation override.
  EXPECT_EQ(engine::generate(*lm, nullptr, gp).output_ids, r.output_ids);
  model::EngineOptions over;
  over.override_activation_dtype = DType::BF16;
  auto lm16 = model::CausalLM::load(dir, over);
  EXPECT_EQ(engine::generate(*lm16, nullptr, gp).output_ids.size(), 8u);
}

TEST(HybridEngine, MixedFp8AndW4A16As35BA3BIsPublishedLoadsWithOneWarningAndGenerates) {
  mixed_as_published_loads_with_one_warning_and_generates(/*moe=*/true);
}

TEST(HybridEngine, MixedFp8AndW4A16AsDense27BIsPublishedLoadsWithOneWarningAndGenerates) {
  mixed_as_published_loads_with_one_warning_and_generates(/*moe=*/false);
}

TEST(HybridEngine, EvaluationMatchesTheFloat64ReferenceAcrossChunks) {
  using namespace model::hybrid_ref;
  for (Family family : {Family::qwen3_5_moe, Family::qwen3_next, Family::qwen3_5}) {
    Hybrid m = make_hybrid(2, 29, family);
    fp4lm::test::TempDir tmp;
    write_hybrid(m, tmp.path(), /*vl=*/false, /*fused_experts=*/true);
    std::vector<int32_t> ids;
    for (int i = 0; i < 70; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % m.vocab));  // > one 64-token chunk
    auto lm = model::CausalLM::load(tmp.path().string(), f32());
    const engine::EvalResult got = engine::evaluate(*lm, {ids});
    EXPECT_EQ(got.tokens, 69);
    const std::vector<int32_t> inputs(ids.begin(), ids.end() - 1);
    const auto logits = reference(m, inputs);
    double nll = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
      const double mx = *std::max_element(logits[t].begin(), logits[t].end());
      double sum = 0;
      for (double v : logits[t]) sum += std::exp(v - mx);
      nll += mx + std::log(sum) - logits[t][ids[t + 1]];
    }
    nll /= static_cast<double>(logits.size());
    EXPECT_NEAR(got.mean_nll(), nll, 1e-4 * nll) << static_cast<int>(family);
  }
}

}  // namespace hybrid_generate_test
