// `fp4lm quantize` on Gemma 4 and Gemma 3 checkpoints (issue 21, item 6): what ModelOpt's default
// NVFP4 config and export write for them (scripts/validate_modelopt.py compares with
// nvidia-modelopt 0.47 bit for bit; docs/QUANTIZE.md) — every Linear of the language model
// quantized, keys doubling as values (q_proj and k_proj alone) sharing one weight_scale_2, the
// fused experts written per expert, and exclude_modules in ModelOpt's summarized form: the routers
// as "…router*", the vision / audio towers and their embedders as one wildcard each, the
// projector's bare parameter not listed. Models from tests/model/gemma_reference.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "engine/quantize/quantizer.h"
#include "model/gemma_reference.h"
#include "model/model_loader.h"

namespace fp4lm::engine {
namespace {

using model::gemma_ref::Gemma;
using nlohmann::json;
using quant::QuantAlgo;
using test::TempDir;

QuantizeOptions options(const TempDir& tmp, QuantAlgo algo) {
  QuantizeOptions q;
  q.model_dir = (tmp / "in").string();
  q.out_dir = (tmp / "out").string();
  q.exp.algo = algo;
  q.progress = false;
  if (algo == QuantAlgo::NVFP4) q.calibration = {{2, 17, 5, 96, 40, 40, 3, 62, 11, 80}, {7, 50, 29, 2, 9, 1}};
  return q;
}

std::string scheme(const model::ModelLoader& l, const std::string& layer) {
  return std::string(kernels::scheme_name(l.describe(l.layer(layer)).scheme.key));
}

float f32_scalar(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  EXPECT_EQ(t.dtype, DType::F32) << name;
  return *static_cast<const float*>(t.data);
}

TEST(QuantizeGemma, Gemma4MoeVlWritesModelOptsLayoutAndExclusions) {
  TempDir tmp;
  const Gemma m = model::gemma_ref::make_gemma4_moe();
  model::gemma_ref::write_gemma(m, tmp / "in", /*vl=*/true, /*fused_experts=*/true);
  const QuantizeOptions q = options(tmp, QuantAlgo::W4A16_NVFP4);
  const QuantizeSummary s = quantize_checkpoint(q);

  std::vector<std::string> want = {"model.language_model.embed_tokens"};
  for (int64_t l = 0; l < m.layers; ++l) want.push_back(fmt::format("model.language_model.layers.{}.router*", l));
  for (const char* e : {"lm_head", "model.audio_tower*", "model.embed_audio*", "model.embed_vision*", "model.vision_tower*"})
    want.push_back(e);
  EXPECT_EQ(s.exclude_modules, want);
  const json h = json::parse(test::read_file(tmp / "out" / "hf_quant_config.json"));
  EXPECT_EQ(h["quantization"]["exclude_modules"], json(want));
  EXPECT_EQ(json::parse(test::read_file(tmp / "out" / "config.json"))["quantization_config"]["ignore"], json(want));

  auto out = io::Checkpoint::open(q.out_dir);
  const std::string p = "model.language_model.layers.";
  // The fused experts, per expert; the towers copied as they were.
  EXPECT_EQ(out->find(p + "0.experts.gate_up_proj"), nullptr);
  EXPECT_EQ(out->get(p + "0.experts.5.down_proj.weight").dtype, DType::U8);
  EXPECT_EQ(out->get(p + "0.router.proj.weight").dtype, DType::F32);
  EXPECT_EQ(out->get("model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight").dtype, DType::F32);
  // Layer 1 is full: keys double as values, q_proj and k_proj share the group's global scale.
  EXPECT_EQ(out->find(p + "1.self_attn.v_proj.weight"), nullptr);
  EXPECT_EQ(f32_scalar(*out, p + "1.self_attn.q_proj.weight_scale_2"),
            f32_scalar(*out, p + "1.self_attn.k_proj.weight_scale_2"));
  EXPECT_EQ(f32_scalar(*out, p + "0.self_attn.q_proj.weight_scale_2"),
            f32_scalar(*out, p + "0.self_attn.v_proj.weight_scale_2"));

  model::ModelLoader l(io::Checkpoint::open(q.out_dir), {});
  EXPECT_EQ(scheme(l, "model.layers.0.router.proj"), "unquantized");
  for (const char* layer : {"model.layers.0.experts", "model.layers.1.self_attn.qkv_proj", "model.layers.1.self_attn.o_proj",
                            "model.layers.3.mlp.gate_up_proj", "model.layers.3.mlp.down_proj"})
    EXPECT_EQ(scheme(l, layer), "nvfp4_w4a16") << layer;
  EXPECT_EQ(scheme(l, "lm_head"), "unquantized");
}

TEST(QuantizeGemma, Gemma4MoeCalibratesEveryLinearAndSharesTheExpertsInputScale) {
  TempDir tmp;
  const Gemma m = model::gemma_ref::make_gemma4_moe();
  model::gemma_ref::write_gemma(m, tmp / "in");
  const QuantizeOptions q = options(tmp, QuantAlgo::NVFP4);
  const QuantizeSummary s = quantize_checkpoint(q);
  EXPECT_EQ(s.calibration_tokens, 16);
  auto out = io::Checkpoint::open(q.out_dir);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const char* mod : {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"})
      EXPECT_GT(f32_scalar(*out, p + mod + ".input_scale"), 0.0f) << p << mod;
    // One value per projection kind for all experts of a layer (the block input, and the down
    // projections' input), as ModelOpt writes them.
    for (int64_t e = 1; e < m.experts; ++e) {
      EXPECT_EQ(f32_scalar(*out, fmt::format("{}experts.{}.gate_proj.input_scale", p, e)),
                f32_scalar(*out, p + "experts.0.gate_proj.input_scale"));
      EXPECT_EQ(f32_scalar(*out, fmt::format("{}experts.{}.down_proj.input_scale", p, e)),
                f32_scalar(*out, p + "experts.0.down_proj.input_scale"));
    }
    EXPECT_EQ(out->find(p + "router.proj.input_scale"), nullptr);
  }
}

TEST(QuantizeGemma, Gemma3VlListsTheVisionTowerButNotTheProjectorsParameter) {
  TempDir tmp;
  model::gemma_ref::write_gemma(model::gemma_ref::make_gemma3(), tmp / "in", /*vl=*/true);
  const QuantizeSummary s = quantize_checkpoint(options(tmp, QuantAlgo::W4A16_NVFP4));
  EXPECT_EQ(s.exclude_modules,
            (std::vector<std::string>{"model.language_model.embed_tokens", "lm_head", "model.vision_tower*"}));
  auto out = io::Checkpoint::open((tmp / "out").string());
  EXPECT_EQ(out->get("model.multi_modal_projector.mm_input_projection_weight").dtype, DType::F32);
  EXPECT_EQ(out->get("model.language_model.layers.0.self_attn.k_proj.weight").dtype, DType::U8);
}

}  // namespace
}  // namespace fp4lm::engine
