// `fp4lm quantize --awq` (engine/quantize/quantizer.h, quant/nvfp4_awq.h) end to end on a
// synthetic float32 Llama: every calibrated Linear stores one pre_quant_scale (shared by q/k/v and
// by gate/up), the codes are quantize_weight's of W · diag(1/pre_quant_scale), the configs say so
// (NVFP4 -> NVFP4_AWQ), and the export loaded back computes — through the W4A16 path in float32 —
// the logits of the dense checkpoint holding W_deq · diag(pre_quant_scale), within 1e-4 of their
// range. W4A4's input_scale is the max of the scaled input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/dense_reference.h"
#include "common/paths.h"
#include "core/error.h"
#include "engine/quantize/quantizer.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/nvfp4.h"

namespace fp4lm::engine::quantize_awq_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;
using test::as_f32;
using test::rel_to_range;

const std::vector<std::vector<int32_t>> kCalib = {{1, 5, 9, 13, 40, 41, 7, 99, 3}, {2, 7, 100, 250}, {1, 200, 3, 3, 3}};
const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

struct Case {
  test::TempDir tmp;
  std::string in;
  explicit Case(const std::string& arch = "LlamaForCausalLM") : in((tmp / "in").string()) {
    synth::SyntheticOptions o;
    o.architecture = arch;
    o.algo = QuantAlgo::None;
    o.dense_dtype = DType::F32;
    o.seed = 23;
    synth::write_synthetic_checkpoint(in, o);
  }
  std::string quantize(QuantAlgo algo, WeightMethod m, const std::string& name, bool awq = true, bool by_layer = true,
                       bool lm_head = false) {
    QuantizeOptions q;
    q.exp.quantize_lm_head = lm_head;
    q.model_dir = in;
    q.out_dir = (tmp / name).string();
    q.exp.algo = algo;
    q.weight_method = m;
    q.awq = awq;
    q.calibrate_by_layer = by_layer;
    q.calibration = kCalib;
    q.progress = false;
    quantize_checkpoint(q);
    return q.out_dir;
  }
};

bool ends(const std::string& s, const std::string& t) { return s.ends_with(t); }

// The dense float32 checkpoint an AWQ export stands for: W_deq · diag(pre_quant_scale).
std::string write_dense_reference(const std::string& q, const fs::path& out) {
  return test::write_dense_checkpoint(
      q, out, {".weight_scale", ".weight_scale_2", ".input_scale", ".pre_quant_scale"},
      [](const io::Checkpoint& ck, const std::string& name, const TensorView& t) -> std::optional<test::DenseTensor> {
        if (!ends(name, ".weight") || t.dtype != DType::U8) return std::nullopt;
        const std::string m = name.substr(0, name.size() - 7);
        const int64_t n = t.shape[0], k = 2 * t.shape[1];
        const float s2 = as_f32(ck.get(m + ".weight_scale_2"))[0];
        std::vector<float> w = quant::dequantize_weight(t.data, ck.get(m + ".weight_scale").data, n, k, s2);
        const std::vector<float> s = as_f32(ck.get(m + ".pre_quant_scale"));
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(r * k + j)] *= s[static_cast<size_t>(j)];
        return test::DenseTensor{{n, k}, std::move(w)};
      });
}

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

TEST(QuantizeAwq, W4A16ExportLoadsBackAsTheDenseWeightsTimesThePreQuantScale) {
  Case c;
  const std::string q = c.quantize(QuantAlgo::W4A16_NVFP4, WeightMethod::rtn, "awq");
  auto in = io::Checkpoint::open(c.in);
  auto out = io::Checkpoint::open(q);
  int modules = 0;
  for (const std::string& name : out->tensor_names()) {
    if (!ends(name, ".weight_scale_2")) continue;
    const std::string m = name.substr(0, name.size() - 15);
    ++modules;
    ASSERT_NE(out->find(m + ".pre_quant_scale"), nullptr) << m;
    const std::vector<float> pqs = as_f32(out->get(m + ".pre_quant_scale"));
    // Shared input, shared scale: q/k/v as one, gate/up as one (the loader requires it).
    for (const auto& [a, b] : {std::pair{".self_attn.k_proj", ".self_attn.q_proj"}, {".self_attn.v_proj", ".self_attn.q_proj"},
                               {".mlp.up_proj", ".mlp.gate_proj"}})
      if (ends(m, a)) {
        EXPECT_EQ(pqs, as_f32(out->get(m.substr(0, m.size() - std::string(a).size()) + b + ".pre_quant_scale"))) << m;
      }
    EXPECT_FALSE(std::all_of(pqs.begin(), pqs.end(), [](float v) { return v == 1.0f; })) << m;
  }
  EXPECT_GT(modules, 0);
  // rtn: the codes and block scales are quantize_weight's of W · diag(1/pre_quant_scale) with the
  // group's amax (o_proj and down_proj are groups of one).
  for (const std::string m : {"model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj"}) {
    const std::vector<float> pqs = as_f32(out->get(m + ".pre_quant_scale"));
    std::vector<float> w = as_f32(in->get(m + ".weight"));
    const int64_t k = static_cast<int64_t>(pqs.size()), n = static_cast<int64_t>(w.size()) / k;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(r * k + j)] *= 1.0f / pqs[static_cast<size_t>(j)];
    const quant::Nvfp4Weight ref = quant::quantize_weight(w.data(), n, k);
    const TensorView& codes = out->get(m + ".weight");
    EXPECT_EQ(std::vector<uint8_t>(static_cast<const uint8_t*>(codes.data), static_cast<const uint8_t*>(codes.data) + codes.nbytes),
              ref.codes) << m;
    EXPECT_EQ(as_f32(out->get(m + ".weight_scale_2"))[0], ref.weight_scale_2) << m;
  }
  const json hq = read_json(fs::path(q) / "hf_quant_config.json");
  EXPECT_EQ(hq["quantization"]["quant_algo"], "W4A16_NVFP4");
  EXPECT_EQ(hq["quantization"]["pre_quant_scale"], true);
  EXPECT_EQ(read_json(fs::path(q) / "config.json")["quantization_config"]["pre_quant_scale"], true);

  model::EngineOptions f32;
  f32.dtype = "float32";
  f32.override_activation_dtype = DType::F32;
  const auto want = model::checkpoint_logits(write_dense_reference(q, c.tmp / "dense"), kTokens);
  const auto got = model::checkpoint_logits(q, kTokens, f32);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_to_range(got, want), 1e-4);
}

TEST(QuantizeAwq, Nvfp4IsWrittenAsNvfp4AwqWithTheScaledInputsMaxAsInputScale) {
  Case c;
  const std::string q = c.quantize(QuantAlgo::NVFP4, WeightMethod::gptq, "awq_gptq");
  const json hq = read_json(fs::path(q) / "hf_quant_config.json");
  EXPECT_EQ(hq["quantization"]["quant_algo"], "NVFP4_AWQ");
  EXPECT_EQ(hq["quantization"]["has_zero_point"], false);
  EXPECT_EQ(hq["quantization"]["pre_quant_scale"], true);
  EXPECT_EQ(read_json(fs::path(q) / "config.json")["quantization_config"]["quant_algo"], "NVFP4_AWQ");
  // input_scale = max |x ⊙ pre_quant_scale| / 2688 over the calibration tokens, as a test
  // observer of the unquantized model sees x.
  auto out = io::Checkpoint::open(q);
  const std::string m = "model.layers.0.mlp.down_proj";
  const std::vector<float> pqs = as_f32(out->get(m + ".pre_quant_scale"));
  float amax = 0.0f;
  model::EngineOptions eo;
  eo.on_linear_built = [&](model::Linear& l) {
    if (l.spec().name != m) return;
    const int64_t k = l.in_features();
    l.set_input_observer([&amax, &pqs, k](const float* x, int64_t rows) {
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(x[t * k + j]) * pqs[static_cast<size_t>(j)]);
    });
  };
  auto lm = model::CausalLM::load(c.in, eo);
  for (const auto& s : kCalib) {
    model::SequenceState st = lm->new_sequence(static_cast<int64_t>(s.size()));
    lm->forward(st, s.data(), static_cast<int64_t>(s.size()), model::LogitsMode::none, nullptr);
  }
  ASSERT_GT(amax, 0.0f);
  EXPECT_FLOAT_EQ(as_f32(out->get(m + ".input_scale"))[0], amax / quant::kNvfp4GlobalDivisor);
  // It loads and runs W4A4.
  const auto logits = model::checkpoint_logits(q, kTokens);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
}

// Calibrating one decoder layer at a time (a pipeline stage per layer, fed the stored hidden
// states; the default with gptq or awq) gives the whole-model calibration's export byte for byte.
TEST(QuantizeAwq, CalibratingLayerByLayerGivesTheWholeModelsExport) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM", "Gemma3ForCausalLM",
                           "Gemma3ForConditionalGeneration", "NemotronHForCausalLM", "Qwen3_5MoeForConditionalGeneration"})
  for (const bool awq : {true, false}) {
    Case c(arch);
    const std::string tag = std::string(arch) + (awq ? " awq" : " gptq");
    // lm_head quantized too: the last stage holds it and calibrates its input (GPTQ, no AWQ).
    const std::string a = c.quantize(QuantAlgo::NVFP4, WeightMethod::gptq, tag + "_layers", awq, true, true);
    const std::string b = c.quantize(QuantAlgo::NVFP4, WeightMethod::gptq, tag + "_whole", awq, false, true);
    auto ca = io::Checkpoint::open(a);
    auto cb = io::Checkpoint::open(b);
    ASSERT_EQ(ca->tensor_names(), cb->tensor_names()) << tag;
    if (std::string(arch) == "LlamaForCausalLM") {
      EXPECT_NE(ca->find("lm_head.input_scale"), nullptr) << tag;
      EXPECT_EQ(ca->find("lm_head.pre_quant_scale"), nullptr) << tag;
    }
    for (const std::string& name : ca->tensor_names()) {
      const TensorView &ta = ca->get(name), &tb = cb->get(name);
      ASSERT_EQ(ta.nbytes, tb.nbytes) << name;
      EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << tag << ": " << name;
    }
  }
}

TEST(QuantizeAwq, NeedsCalibrationAndTheModeloptFormat) {
  Case c;
  QuantizeOptions q;
  q.model_dir = c.in;
  q.out_dir = (c.tmp / "x").string();
  q.exp.algo = QuantAlgo::W4A16_NVFP4;
  q.awq = true;
  q.progress = false;
  EXPECT_THROW(quantize_checkpoint(q), UsageError);
  q.calibration = kCalib;
  q.format = quant::Family::compressed_tensors;
  EXPECT_THROW(quantize_checkpoint(q), UsageError);
}

}  // namespace
}  // namespace fp4lm::engine::quantize_awq_test
