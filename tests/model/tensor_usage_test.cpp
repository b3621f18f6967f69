// The load rule (model/load/tensor_usage.h): every tensor of a checkpoint is consumed or on the
// documented ignore list; an unconsumed quantization tensor is an error naming it, unconsumed
// model tensors one WARN line.
#include <gtest/gtest.h>

#include <cstring>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/load/tensor_usage.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::tensor_usage_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::string write(const TempDir& dir, QuantAlgo algo, const std::string& arch = "Qwen3ForCausalLM",
                  bool extra = false) {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.extra_tensors = extra;
  const std::string d = (dir.path() / "ck").string();
  synth::write_synthetic_checkpoint(d, s);
  return d;
}

test::EditedTensor f32_tensor(const std::string& name, Shape shape, float value = 0.0f) {
  test::EditedTensor t{name, DType::F32, shape, {}};
  const std::vector<float> v(static_cast<size_t>(shape_numel(shape)), value);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void add(const std::string& dir, std::vector<test::EditedTensor> extra) {
  test::edit_tensors(dir, [](test::EditedTensor&) { return true; }, std::move(extra));
}

TEST(TensorUsage, EveryTensorOfASyntheticCheckpointIsConsumed) {
  for (QuantAlgo algo : {QuantAlgo::None, QuantAlgo::NVFP4, QuantAlgo::W4A16_NVFP4, QuantAlgo::FP8}) {
    TempDir dir;
    const std::string d = write(dir, algo);
    test::LogCapture log(spdlog::level::warn);
    auto lm = CausalLM::load(d, f32());
    const TensorUsage& u = lm->tensor_usage();
    EXPECT_TRUE(u.unused_quantization.empty()) << quant::algo_name(algo) << ": " << u.unused_quantization.front();
    EXPECT_TRUE(u.unused_model.empty()) << quant::algo_name(algo) << ": " << u.unused_model.front();
    EXPECT_TRUE(u.ignored.empty()) << quant::algo_name(algo);
    EXPECT_EQ(log.count("not used by the model"), 0) << log.text();
  }
}

TEST(TensorUsage, AnUnknownQuantizerTensorIsAnErrorNamingIt) {
  TempDir dir;
  const std::string d = write(dir, QuantAlgo::NVFP4);
  // A quantizer buffer fp4lm reads nowhere (ModelOpt's real-quant double scale), and an unknown scale.
  add(d, {f32_tensor("model.layers.0.self_attn.q_proj.weight_quantizer._double_scale", {}),
          f32_tensor("model.layers.1.mlp.down_proj.output_scale", {})});
  const std::string e = test::error_of([&] { CausalLM::load(d, f32()); });
  EXPECT_NE(e.find("2 quantization tensor(s) that no layer of the model consumes"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight_quantizer._double_scale"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.1.mlp.down_proj.output_scale"), std::string::npos) << e;
}

TEST(TensorUsage, UnusedModelTensorsAreOneWarnLineListingThem) {
  TempDir dir;
  const std::string d = write(dir, QuantAlgo::None);
  add(d, {f32_tensor("model.layers.0.mlp.extra_gate.weight", {4, 4}), f32_tensor("score.weight", {2, 64})});
  test::LogCapture log(spdlog::level::warn);
  auto lm = CausalLM::load(d, f32());
  EXPECT_EQ(log.count("2 tensor(s) of the checkpoint were not used by the model: [model.layers.0.mlp.extra_gate."
                      "weight, score.weight]"),
            1)
      << log.text();
  EXPECT_EQ(lm->tensor_usage().unused_model, (std::vector<std::string>{"model.layers.0.mlp.extra_gate.weight",
                                                                        "score.weight"}));
}

TEST(TensorUsage, TheDocumentedIgnoreListLoadsSilently) {
  TempDir dir;
  // extra_tensors: mtp.* and, for the VL wrapper, model.visual.*.
  const std::string d = write(dir, QuantAlgo::NVFP4, "Qwen3_5MoeForConditionalGeneration", true);
  add(d, {f32_tensor("model.language_model.rotary_emb.inv_freq", {8}),
          f32_tensor("model.language_model.layers.0.self_attn.k_proj.k_scale", {}),
          f32_tensor("model.language_model.layers.0.self_attn.v_proj.v_scale", {})});
  test::LogCapture log(spdlog::level::warn);
  auto lm = CausalLM::load(d, f32());
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_quantization.empty());
  EXPECT_TRUE(u.unused_model.empty()) << u.unused_model.front();
  size_t ignored = 0;
  for (const auto& [why, names] : u.ignored) ignored += names.size();
  EXPECT_EQ(ignored, 3u + 3u + 1u);  // inv_freq + k/v scales, 3 mtp.*, model.visual.*
  EXPECT_EQ(log.count("not used by the model"), 0) << log.text();
}

TEST(TensorUsage, KvScalesAreConsumedByAnFp8CacheAndIgnoredOtherwise) {
  TempDir dir;
  const std::string d = write(dir, QuantAlgo::FP8);
  add(d, {f32_tensor("model.layers.0.self_attn.k_proj.k_scale", {}, 1.0f),
          f32_tensor("model.layers.0.self_attn.v_proj.v_scale", {}, 1.0f)});
  EngineOptions o = f32();
  auto plain = CausalLM::load(d, o);
  EXPECT_EQ(plain->tensor_usage().ignored.size(), 1u);
  o.kv_cache_dtype = "fp8";
  auto fp8 = CausalLM::load(d, o);
  EXPECT_TRUE(fp8->tensor_usage().ignored.empty());
}

TEST(TensorUsage, QuantizationTensorNames) {
  for (const char* q : {"a.weight_scale", "a.weight_scale_2", "a.input_scale", "a.pre_quant_scale", "a.qweight",
                        "a.qzeros", "a.scales", "a.g_idx", "a.weight_packed", "a.weight_zero_point",
                        "a.weight_quantizer._amax", "a.input_quantizer._pre_quant_scale", "a.k_bias",
                        "e.gate_up_proj_blocks", "e.gate_up_proj_scales"})
    EXPECT_TRUE(is_quantization_tensor(q)) << q;
  for (const char* m : {"a.weight", "a.bias", "model.norm.weight", "a.e_score_correction_bias", "a.A_log", "a.sinks"})
    EXPECT_FALSE(is_quantization_tensor(m)) << m;
}

}  // namespace
}  // namespace fp4lm::model::tensor_usage_test
