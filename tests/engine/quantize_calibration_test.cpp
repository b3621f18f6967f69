// NVFP4 (W4A4) calibration in `fp4lm quantize` (issue 7): input_scale = max |x| / 2688 of each
// quantized layer's input over the calibration tokens, one per fused group, one per projection
// kind shared by all experts of a MoE layer (w2 from silu(gate)·up of the routed experts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/error_of.h"
#include "common/paths.h"
#include "core/error.h"
#include "engine/quantize/quantizer.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "model/load/model_loader.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/nvfp4.h"

using namespace fp4lm;
using engine::QuantizeOptions;
using synth::SyntheticOptions;
using quant::QuantAlgo;
namespace fs = std::filesystem;

namespace quantize_calibration_test {
namespace {

using fp4lm::test::error_of;

const std::vector<std::vector<int32_t>> kCalib = {{1, 5, 9, 13, 40, 41, 7}, {2, 7, 100}, {1, 200, 3, 3, 3}};

synth::SyntheticOptions source(const std::string& arch) {
  synth::SyntheticOptions o;
  o.architecture = arch;
  o.algo = QuantAlgo::None;
  o.dense_dtype = DType::F32;  // float32 activations: the observed inputs are exact float32
  o.seed = 11;
  return o;
}

struct Case {
  fp4lm::test::TempDir tmp;
  std::string in, out;
  explicit Case(const synth::SyntheticOptions& o) : in((tmp / "in").string()), out((tmp / "out").string()) {
    synth::write_synthetic_checkpoint(in, o);
  }
  QuantizeOptions options() const {
    QuantizeOptions q;
    q.model_dir = in;
    q.out_dir = out;
    q.exp.algo = QuantAlgo::NVFP4;
    q.calibration = kCalib;
    q.progress = false;
    return q;
  }
};

float scalar(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  EXPECT_EQ(t.dtype, DType::F32) << name;
  EXPECT_TRUE(t.shape.empty()) << name;
  float v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

std::vector<float> f32(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

// Runs the unquantized model over kCalib with the test's own observers (independent of the
// quantizer's bookkeeping) and returns max |x| per Linear layer, plus the raw MoE inputs.
struct Observed {
  std::map<std::string, float> linear;
  std::map<std::string, std::vector<std::pair<std::vector<float>, std::vector<int32_t>>>> moe;  // (x row, ids)
};
Observed observe(const std::string& dir) {
  Observed o;
  model::EngineOptions eo;
  eo.on_linear_built = [&](model::Linear& l) {
    const std::string n = l.spec().name;
    const int64_t k = l.in_features();
    l.set_input_observer([&o, n, k](const float* x, int64_t m) {
      for (int64_t i = 0; i < m * k; ++i) o.linear[n] = std::max(o.linear[n], std::fabs(x[i]));
    });
  };
  eo.on_moe_built = [&](model::FusedMoe& f) {
    const std::string n = f.spec().name;
    const int64_t h = f.spec().hidden;
    f.set_input_observer([&o, n, h](const float* x, int64_t m, const int32_t* ids, int64_t top_k) {
      for (int64_t i = 0; i < m; ++i)
        o.moe[n].push_back({std::vector<float>(x + i * h, x + (i + 1) * h),
                            std::vector<int32_t>(ids + i * top_k, ids + (i + 1) * top_k)});
    });
  };
  auto lm = model::CausalLM::load(dir, eo);
  for (const auto& s : kCalib) {
    model::SequenceState c = lm->new_sequence(static_cast<int64_t>(s.size()));
    lm->forward(c, s.data(), static_cast<int64_t>(s.size()), model::LogitsMode::none, nullptr);
  }
  return o;
}


// The checkpoint at `dir` loads with the default engine options and gives finite logits for a
// 4-token prompt.
void expect_runs_with_finite_logits(const std::string& dir, const std::string& arch) {
  auto lm = model::CausalLM::load(dir, {});
  model::SequenceState cache = lm->new_sequence(8);
  std::vector<int32_t> ids = {1, 5, 9, 77};
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(cache, ids.data(), 4, model::LogitsMode::last, logits.data());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << arch;
}

}  // namespace

TEST(QuantizeCalibration, DenseInputScalesAreTheObservedMaxOver2688SharedByFusedGroups) {
  Case c(source("Qwen3ForCausalLM"));
  engine::quantize_checkpoint(c.options());
  auto out = io::Checkpoint::open(c.out), in = io::Checkpoint::open(c.in);
  const Observed obs = observe(c.in);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const float qkv = obs.linear.at(p + "self_attn.qkv_proj") / quant::kNvfp4GlobalDivisor;
    for (const char* s : {"q_proj", "k_proj", "v_proj"}) EXPECT_EQ(scalar(*out, p + "self_attn." + s + ".input_scale"), qkv);
    EXPECT_EQ(scalar(*out, p + "self_attn.o_proj.input_scale"),
              obs.linear.at(p + "self_attn.o_proj") / quant::kNvfp4GlobalDivisor);
    const float gu = obs.linear.at(p + "mlp.gate_up_proj") / quant::kNvfp4GlobalDivisor;
    EXPECT_EQ(scalar(*out, p + "mlp.gate_proj.input_scale"), gu);
    EXPECT_EQ(scalar(*out, p + "mlp.up_proj.input_scale"), gu);
    EXPECT_EQ(scalar(*out, p + "mlp.down_proj.input_scale"),
              obs.linear.at(p + "mlp.down_proj") / quant::kNvfp4GlobalDivisor);
  }
  // Independently of any observer: layer 0's q/k/v input is RMSNorm(embedding) with unit norm
  // weights, so its max is computable from the embedding table alone.
  const auto emb = f32(*in, "model.embed_tokens.weight");
  const int64_t h = 64;
  double mx = 0;
  for (const auto& s : kCalib)
    for (int32_t t : s) {
      double ss = 0;
      for (int64_t j = 0; j < h; ++j) ss += double(emb[t * h + j]) * emb[t * h + j];
      const double r = 1.0 / std::sqrt(ss / h + 1e-6);
      for (int64_t j = 0; j < h; ++j) mx = std::max(mx, std::fabs(emb[t * h + j] * r));
    }
  EXPECT_NEAR(scalar(*out, "model.layers.0.self_attn.q_proj.input_scale") * quant::kNvfp4GlobalDivisor, mx, 1e-5 * mx);
  // lm_head is not quantized by default: no scales for it.
  EXPECT_EQ(out->find("lm_head.input_scale"), nullptr);
}

TEST(QuantizeCalibration, ExpertsShareOneInputScalePerProjectionKindFromRoutedTokens) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options());
  auto out = io::Checkpoint::open(c.out), in = io::Checkpoint::open(c.in);
  const Observed obs = observe(c.in);
  for (int l = 0; l < 2; ++l) {
    const std::string box = "model.layers." + std::to_string(l) + ".mlp.experts";
    const auto& rows = obs.moe.at(box);
    // Brute force in float64: max |x| and max |silu(x·w1ᵀ)·(x·w3ᵀ)| over routed (token, expert).
    double ax = 0, ah = 0;
    for (const auto& [x, ids] : rows) {
      for (float v : x) ax = std::max(ax, double(std::fabs(v)));
      for (int32_t e : ids) {
        const auto w1 = f32(*in, box + "." + std::to_string(e) + ".gate_proj.weight");
        const auto w3 = f32(*in, box + "." + std::to_string(e) + ".up_proj.weight");
        const size_t H = x.size(), I = w1.size() / H;
        for (size_t r = 0; r < I; ++r) {
          double g = 0, u = 0;
          for (size_t k = 0; k < H; ++k) g += double(x[k]) * w1[r * H + k], u += double(x[k]) * w3[r * H + k];
          ah = std::max(ah, std::fabs(g / (1 + std::exp(-g)) * u));
        }
      }
    }
    const float s13 = scalar(*out, box + ".0.gate_proj.input_scale");
    const float s2 = scalar(*out, box + ".0.down_proj.input_scale");
    EXPECT_EQ(s13, static_cast<float>(ax) / quant::kNvfp4GlobalDivisor) << box;
    EXPECT_NEAR(s2 * quant::kNvfp4GlobalDivisor, ah, 1e-5 * ah) << box;
    for (int e = 0; e < 4; ++e) {
      const std::string p = box + "." + std::to_string(e) + ".";
      EXPECT_EQ(scalar(*out, p + "gate_proj.input_scale"), s13) << p;
      EXPECT_EQ(scalar(*out, p + "up_proj.input_scale"), s13) << p;
      EXPECT_EQ(scalar(*out, p + "down_proj.input_scale"), s2) << p;
    }
  }
  // The router stays unquantized and carries no scales.
  EXPECT_EQ(out->find("model.layers.0.mlp.gate.input_scale"), nullptr);
  EXPECT_EQ(out->get("model.layers.0.mlp.gate.weight").dtype, DType::F32);
}

TEST(QuantizeCalibration, ExpertsNeverRoutedToTakeTheMaxOfTheOthers) {
  synth::SyntheticOptions o = source("Qwen3MoeForCausalLM");
  o.experts = 8;
  o.top_k = 1;
  Case c(o);
  QuantizeOptions q = c.options();
  q.calibration = {{1, 5}};  // two tokens, top-1: at most 2 of 8 experts per layer see input
  engine::quantize_checkpoint(q);
  auto out = io::Checkpoint::open(c.out);
  for (int l = 0; l < 2; ++l) {
    const std::string box = "model.layers." + std::to_string(l) + ".mlp.experts.";
    std::set<float> s13, s2;
    for (int e = 0; e < 8; ++e) {
      s13.insert(scalar(*out, box + std::to_string(e) + ".gate_proj.input_scale"));
      s2.insert(scalar(*out, box + std::to_string(e) + ".down_proj.input_scale"));
    }
    ASSERT_EQ(s13.size(), 1u);
    ASSERT_EQ(s2.size(), 1u);
    EXPECT_GT(*s13.begin(), 0.0f);
    EXPECT_GT(*s2.begin(), 0.0f);
  }
}

TEST(QuantizeCalibration, Nvfp4CheckpointRunsAsW4A4AndAsW4A16UnderTheOverride) {
  Case c(source("Qwen3MoeForCausalLM"));
  engine::quantize_checkpoint(c.options());
  for (bool override16 : {false, true}) {
    model::EngineOptions eo;
    if (override16) eo.override_activation_dtype = DType::BF16;
    model::ModelLoader l(io::Checkpoint::open(c.out), eo);
    EXPECT_EQ(quant::as_modelopt(l.quant_config()).algo, QuantAlgo::NVFP4);
    for (const model::LayerSpec& s : l.layers()) {
      const std::string want =
          s.router || s.name == "lm_head" ? "unquantized" : (override16 ? "nvfp4_w4a16" : "nvfp4_w4a4");
      EXPECT_EQ(kernels::scheme_name(l.describe(s).scheme.key), want) << s.name;
    }
    // The whole model loads and produces finite logits.
    auto lm = model::CausalLM::load(c.out, eo);
    model::SequenceState cache = lm->new_sequence(8);
    std::vector<int32_t> ids = {1, 5, 9};
    std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
    lm->forward(cache, ids.data(), 3, model::LogitsMode::last, logits.data());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(QuantizeCalibration, QuantizedLmHeadIsCalibratedOnTheFinalNormOutput) {
  Case c(source("LlamaForCausalLM"));
  QuantizeOptions q = c.options();
  q.exp.quantize_lm_head = true;
  engine::quantize_checkpoint(q);
  auto out = io::Checkpoint::open(c.out);
  const Observed obs = observe(c.in);  // LogitsMode::none: lm_head unobserved there
  EXPECT_EQ(obs.linear.count("lm_head"), 0u);
  const float s = scalar(*out, "lm_head.input_scale");
  EXPECT_GT(s, 0.0f);
  EXPECT_TRUE(std::isfinite(s));
  model::ModelLoader l(out, {});
  EXPECT_EQ(kernels::scheme_name(l.describe(l.layer("lm_head")).scheme.key), "nvfp4_w4a4");
}

TEST(QuantizeCalibration, BadCalibrationDataIsAnErrorAndLeavesNoOut) {
  Case c(source("LlamaForCausalLM"));
  QuantizeOptions q = c.options();
  q.calibration = {{1, 2, 999}};  // vocab 256
  const std::string e = error_of([&] { engine::quantize_checkpoint(q); });
  EXPECT_NE(e.find("999"), std::string::npos) << e;
  EXPECT_NE(e.find("vocabulary"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(c.out));
}

TEST(QuantizeCalibration, EveryArchitectureQuantizesToNvfp4AndRunsAsW4A4) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                           "MixtralForCausalLM", "Qwen2MoeForCausalLM"}) {
    Case c(source(arch));
    engine::quantize_checkpoint(c.options());
    model::ModelLoader l(io::Checkpoint::open(c.out), {});
    int w4a4 = 0;
    for (const model::LayerSpec& s : l.layers()) {
      const std::string scheme(kernels::scheme_name(l.describe(s).scheme.key));
      EXPECT_EQ(scheme, s.router || s.name == "lm_head" ? "unquantized" : "nvfp4_w4a4") << arch << " " << s.name;
      w4a4 += scheme == "nvfp4_w4a4";
    }
    EXPECT_GE(w4a4, 6) << arch;  // 2 layers x (qkv, o, mlp or experts)
    ASSERT_NO_FATAL_FAILURE(expect_runs_with_finite_logits(c.out, arch));
  }
}

// The hybrids (issue 14): ModelOpt's default exclusions for the family — routers, the GDN's
// in_proj_b / in_proj_a and conv1d, shared_expert_gate, the mtp and vision tensors — stay in
// bf16 and are listed; everything else is NVFP4 W4A4, and the result loads and runs. The VL
// form keeps its stored names (model.language_model.*).
TEST(QuantizeCalibration, HybridsKeepModelOptsDefaultExclusionsAndRunAsW4A4) {
  for (const char* arch : {"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3NextForCausalLM",
                           "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}) {
    synth::SyntheticOptions o = source(arch);
    o.layers = 4;
    o.extra_tensors = true;
    Case c(o);
    engine::QuantizeSummary sum = engine::quantize_checkpoint(c.options());
    const bool vl = std::string(arch).ends_with("ConditionalGeneration");
    const bool next = std::string(arch) == "Qwen3NextForCausalLM";
    const bool moe = std::string(arch).find("Moe") != std::string::npos || next;
    const std::string p = vl ? "model.language_model.layers." : "model.layers.";
    auto listed = [&](const std::string& m) {
      return std::find(sum.exclude_modules.begin(), sum.exclude_modules.end(), m) != sum.exclude_modules.end();
    };
    for (const std::string& m : {p + "0.linear_attn.conv1d", std::string("mtp*"), std::string("lm_head")})
      EXPECT_TRUE(listed(m)) << arch << " " << m;
    if (moe) {
      for (const std::string& m : {p + "0.mlp.gate", p + "0.mlp.shared_expert_gate", p + "1.mlp.gate"})
        EXPECT_TRUE(listed(m)) << arch << " " << m;
    }
    if (next) {
      EXPECT_TRUE(listed(p + "0.linear_attn.in_proj_ba")) << arch;
    } else {
      EXPECT_TRUE(listed(p + "0.linear_attn.in_proj_b")) << arch;
      EXPECT_TRUE(listed(p + "0.linear_attn.in_proj_a")) << arch;
    }
    EXPECT_EQ(listed("model.visual*"), vl) << arch;
    auto out = io::Checkpoint::open(c.out);
    EXPECT_EQ(out->get("mtp.fc.weight").dtype, DType::F32);  // copied in the source's dtype
    EXPECT_EQ(out->get(p + "0.linear_attn.conv1d.weight").dtype, DType::F32);
    EXPECT_EQ(out->get(p + "0.linear_attn.out_proj.weight").dtype, DType::U8) << arch;
    EXPECT_EQ(out->get(p + (moe ? "0.mlp.experts.1.down_proj.weight" : "0.mlp.down_proj.weight")).dtype, DType::U8)
        << arch;
    EXPECT_GT(scalar(*out, p + "1.self_attn.q_proj.input_scale"), 0.0f) << arch;
    if (vl) {
      EXPECT_EQ(out->find("model.layers.0.input_layernorm.weight"), nullptr);  // stored names kept
      EXPECT_NE(out->find(p + "0.input_layernorm.weight"), nullptr);
    }

    model::ModelLoader l(io::Checkpoint::open(c.out), {});
    for (const model::LayerSpec& s : l.layers()) {
      const std::string scheme(kernels::scheme_name(l.describe(s).scheme.key));
      EXPECT_EQ(scheme, s.router || s.name == "lm_head" ? "unquantized" : "nvfp4_w4a4") << arch << " " << s.name;
    }
    ASSERT_NO_FATAL_FAILURE(expect_runs_with_finite_logits(c.out, arch));
  }
}

// Nemotron-H with Nemotron 3's (latent) MoE layers: ModelOpt's default exclusions (every Mamba
// conv1d, the routers, the mtp tensors, lm_head) stay unquantized and are listed; the relu²
// experts (per-expert Linears) share one input_scale per projection over the block, the max over
// every routed token as for fused experts, so experts no calibration token chose get it too;
// everything else (Mamba in/out_proj, attention, latent projections, shared expert) is W4A4;
// the embedding is listed by its stored name and the router written in float32, as ModelOpt does.
TEST(QuantizeCalibration, NemotronHMoeQuantizesAsModelOptAndRunsAsW4A4) {
  synth::SyntheticOptions o = source("NemotronHForCausalLM");
  o.layers = 6;
  o.hybrid_pattern = "ME*EM-";
  o.experts = 8;
  o.top_k = 1;
  o.moe_latent = 32;
  o.extra_tensors = true;
  o.dense_dtype = DType::BF16;  // as published: the router too, which the export widens to float32
  Case c(o);
  QuantizeOptions q = c.options();
  q.calibration = {{1, 5, 9}};  // three tokens, top-1: at most 3 of 8 experts per layer see input
  engine::QuantizeSummary sum = engine::quantize_checkpoint(q);
  auto listed = [&](const std::string& m) {
    return std::find(sum.exclude_modules.begin(), sum.exclude_modules.end(), m) != sum.exclude_modules.end();
  };
  for (const std::string m : {"backbone.embeddings", "backbone.layers.0.mixer.conv1d", "backbone.layers.4.mixer.conv1d",
                              "backbone.layers.1.mixer.gate", "backbone.layers.3.mixer.gate", "mtp*", "lm_head"})
    EXPECT_TRUE(listed(m)) << m;
  EXPECT_FALSE(listed("backbone.embed_tokens"));
  auto out = io::Checkpoint::open(c.out);
  EXPECT_EQ(out->get("backbone.layers.0.mixer.conv1d.weight").dtype, DType::BF16);  // as stored
  // The router as transformers keeps it and ModelOpt writes it: float32 (the source's bfloat16
  // values, exactly).
  auto src = io::Checkpoint::open(c.in);
  ASSERT_EQ(src->get("backbone.layers.1.mixer.gate.weight").dtype, DType::BF16);
  const TensorView& g = out->get("backbone.layers.1.mixer.gate.weight");
  ASSERT_EQ(g.dtype, DType::F32);
  const TensorView& gs = src->get("backbone.layers.1.mixer.gate.weight");
  for (int64_t k = 0; k < g.numel(); ++k)
    ASSERT_EQ(reinterpret_cast<const float*>(g.data)[k], bf16_to_f32(reinterpret_cast<const uint16_t*>(gs.data)[k]));
  for (const char* m : {"0.mixer.in_proj", "1.mixer.fc1_latent_proj", "1.mixer.shared_experts.down_proj",
                        "2.mixer.q_proj", "5.mixer.up_proj"})
    EXPECT_EQ(out->get(std::string("backbone.layers.") + m + ".weight").dtype, DType::U8) << m;
  for (int l : {1, 3}) {
    const std::string box = "backbone.layers." + std::to_string(l) + ".mixer.experts.";
    std::set<float> up, down;
    for (int e = 0; e < 8; ++e) {
      up.insert(scalar(*out, box + std::to_string(e) + ".up_proj.input_scale"));
      down.insert(scalar(*out, box + std::to_string(e) + ".down_proj.input_scale"));
    }
    ASSERT_EQ(up.size(), 1u) << box;
    ASSERT_EQ(down.size(), 1u) << box;
    EXPECT_GT(*up.begin(), 0.0f);
    EXPECT_GT(*down.begin(), 0.0f);
  }
  model::ModelLoader l(io::Checkpoint::open(c.out), {});
  for (const model::LayerSpec& s : l.layers()) {
    const std::string scheme(kernels::scheme_name(l.describe(s).scheme.key));
    EXPECT_EQ(scheme, s.router || s.name == "lm_head" ? "unquantized" : "nvfp4_w4a4") << s.name;
  }
  ASSERT_NO_FATAL_FAILURE(expect_runs_with_finite_logits(c.out, "NemotronHForCausalLM"));
}

}  // namespace quantize_calibration_test
