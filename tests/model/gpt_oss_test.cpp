// GptOssForCausalLM against a plain float64 forward written from transformers' modeling_gpt_oss:
// attention sinks, alternating sliding-window / full layers (a window the sequence outgrows, so
// the ring wraps), YaRN RoPE without truncation (cos/sin × its attention factor), q/k/v/o
// biases, the router's bias and softmax over the top-k logits, the experts' biases and clamped
// SwiGLU on interleaved gate/up, experts stored input-major (transformers' dequantized layout) or
// as MXFP4 blocks/scales (OpenAI's). Plus prefill/decode agreement, bf16, config keys and the
// errors for bad tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>

#include "common/error_of.h"
#include "common/paths.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "reference/tiny_models.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/mxfp4.h"

namespace fp4lm::model::gpt_oss_test {
namespace {

using test::TempDir;
using nlohmann::json;
using Vec = std::vector<double>;

const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29};

using F32Tensor = test::TinyTensor;

// A tiny gpt-oss: 3 layers (sliding, full, sliding; window 4), hidden 64, 4 heads of 16 over 2
// KV heads, 4 experts of 32 (top 2). Weights are kept as float (for the reference: MXFP4
// experts decoded) plus, for MXFP4, the bytes written.
struct TinyGptOss {
  json config;
  std::map<std::string, F32Tensor> w;             // what the reference reads
  std::map<std::string, std::vector<uint8_t>> u8;  // MXFP4 blocks / scales as written
  std::map<std::string, Shape> u8_shape;
  bool mxfp4 = false;
};

constexpr int64_t kHidden = 64, kLayers = 3, kHeads = 4, kKv = 2, kHd = 16, kExperts = 4, kTopK = 2, kInter = 32,
                  kVocab = 97, kWindow = 4;

TinyGptOss make_tiny(bool mxfp4, uint64_t seed = 5) {
  TinyGptOss m;
  m.mxfp4 = mxfp4;
  m.config = {{"architectures", {"GptOssForCausalLM"}},
              {"model_type", "gpt_oss"},
              {"vocab_size", kVocab},
              {"hidden_size", kHidden},
              {"num_hidden_layers", kLayers},
              {"num_attention_heads", kHeads},
              {"num_key_value_heads", kKv},
              {"head_dim", kHd},
              {"intermediate_size", kInter},
              {"num_local_experts", kExperts},
              {"num_experts_per_tok", kTopK},
              {"max_position_embeddings", 2048},
              {"rms_norm_eps", 1e-5},
              {"sliding_window", kWindow},
              {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}},
              {"attention_bias", true},
              {"swiglu_limit", 7.0},
              {"rope_theta", 500.0},
              {"rope_scaling",
               {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                {"truncate", false}, {"original_max_position_embeddings", 64}}},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"},
              {"eos_token_id", 2},
              {"torch_dtype", "float32"}};
  if (mxfp4)
    m.config["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  std::mt19937_64 rng(seed);
  auto randn = [&](Shape shape, double sd) {
    std::normal_distribution<float> d(0.0f, static_cast<float>(sd));
    F32Tensor t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (float& x : t.v) x = d(rng);
    return t;
  };
  auto norm = [&](int64_t n) {
    F32Tensor t = randn({n}, 0.1);
    for (float& x : t.v) x += 1.0f;
    return t;
  };
  m.w["model.embed_tokens.weight"] = randn({kVocab, kHidden}, 1.0);
  m.w["model.norm.weight"] = norm(kHidden);
  m.w["lm_head.weight"] = randn({kVocab, kHidden}, 0.125);
  const double s_in = 1.0 / std::sqrt(static_cast<double>(kHidden));
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    m.w[p + "input_layernorm.weight"] = norm(kHidden);
    m.w[p + "post_attention_layernorm.weight"] = norm(kHidden);
    for (auto [proj, rows] : {std::pair{"q_proj", kHeads * kHd}, {"k_proj", kKv * kHd}, {"v_proj", kKv * kHd}}) {
      m.w[p + "self_attn." + proj + ".weight"] = randn({rows, kHidden}, s_in * 2);
      m.w[p + "self_attn." + proj + ".bias"] = randn({rows}, 0.3);
    }
    m.w[p + "self_attn.o_proj.weight"] = randn({kHidden, kHeads * kHd}, 1.0 / std::sqrt(kHeads * kHd));
    m.w[p + "self_attn.o_proj.bias"] = randn({kHidden}, 0.1);
    m.w[p + "self_attn.sinks"] = randn({kHeads}, 1.5);
    m.w[p + "mlp.router.weight"] = randn({kExperts, kHidden}, s_in * 3);
    m.w[p + "mlp.router.bias"] = randn({kExperts}, 0.5);
    const std::string e = p + "mlp.experts.";
    // Input-major as transformers holds them: gate_up_proj [E, D, 2I], down_proj [E, I, D].
    auto experts = [&](const std::string& name, int64_t in, int64_t out, double sd) {
      if (!mxfp4) {
        m.w[e + name] = randn({kExperts, in, out}, sd);
        return;
      }
      std::vector<uint8_t> codes(static_cast<size_t>(kExperts * out * in / 2)), scales(static_cast<size_t>(kExperts * out * in / 32));
      for (auto& b : codes) b = static_cast<uint8_t>(rng());
      for (auto& b : scales) b = static_cast<uint8_t>(122 + rng() % 3);
      const std::vector<float> deq = quant::dequantize_mxfp4(codes.data(), scales.data(), kExperts * out, in);
      F32Tensor t{{kExperts, in, out}, std::vector<float>(deq.size())};  // transposed to the reference's layout
      for (int64_t x = 0; x < kExperts; ++x)
        for (int64_t r = 0; r < out; ++r)
          for (int64_t c = 0; c < in; ++c) t.v[(x * in + c) * out + r] = deq[(x * out + r) * in + c];
      m.w[e + name] = t;
      m.u8[e + name + "_blocks"] = codes;
      m.u8_shape[e + name + "_blocks"] = {kExperts, out, in / 32, 16};
      m.u8[e + name + "_scales"] = scales;
      m.u8_shape[e + name + "_scales"] = {kExperts, out, in / 32};
    };
    experts("gate_up_proj", kHidden, 2 * kInter, s_in * 3);
    experts("down_proj", kInter, kHidden, 1.0 / std::sqrt(kInter));
    m.w[e + "gate_up_proj_bias"] = randn({kExperts, 2 * kInter}, 0.5);
    m.w[e + "down_proj_bias"] = randn({kExperts, kHidden}, 0.1);
  }
  return m;
}

void write_tiny(const TinyGptOss& m, const std::filesystem::path& dir, DType dense = DType::F32) {
  std::filesystem::create_directories(dir);
  io::SafetensorsWriter st;
  for (const auto& [name, t] : m.w) {
    const bool quantized_param = m.mxfp4 && (name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj"));
    if (quantized_param) continue;
    std::vector<uint8_t> bytes(t.v.size() * dtype_size(dense));
    from_f32_n(t.v.data(), dense, bytes.data(), t.v.size());
    st.add(name, dense, t.shape, std::move(bytes));
  }
  for (const auto& [name, bytes] : m.u8) st.add(name, DType::U8, m.u8_shape.at(name), bytes);
  st.write((dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << m.config.dump(2);
}

// ---- the float64 forward (modeling_gpt_oss) ----

using test::naive::matvec;

Vec rms(const Vec& x, const F32Tensor& w) { return test::naive::rms_norm(x, w.v.data(), 0, x.size(), 1e-5); }

// HF _compute_yarn_parameters with truncate = false: the ramp between the unrounded correction
// dims; attention_factor 0.1 ln(factor) + 1 multiplies cos and sin.
Vec yarn_inv_freq(const json& c, double& attention_factor) {
  const auto& s = c["rope_scaling"];
  const double theta = c["rope_theta"], factor = s["factor"], orig = s["original_max_position_embeddings"];
  auto corr = [&](double rot) { return kHd * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(theta)); };
  const double lo = std::max(corr(s["beta_fast"].get<double>()), 0.0);
  const double hi = std::min(corr(s["beta_slow"].get<double>()), kHd - 1.0);
  Vec f(kHd / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    const double base = std::pow(theta, -2.0 * static_cast<double>(i) / kHd);
    const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
    f[i] = base / factor * ramp + base * (1 - ramp);
  }
  attention_factor = 0.1 * std::log(factor) + 1.0;
  return f;
}

void rope(double* v, int64_t pos, const Vec& f, double af) {
  const int64_t half = kHd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = v[i], b = v[i + half], ang = static_cast<double>(pos) * f[i];
    const double cs = std::cos(ang) * af, sn = std::sin(ang) * af;
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

std::vector<Vec> reference_forward(const TinyGptOss& m, const std::vector<int32_t>& tokens) {
  const auto& w = m.w;
  double af = 1;
  const Vec f = yarn_inv_freq(m.config, af);
  const size_t n = tokens.size();
  const double alpha = 1.702, limit = m.config["swiglu_limit"];
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = w.at("model.embed_tokens.weight").v.data() + tokens[t] * kHidden;
    h[t] = Vec(e, e + kHidden);
  }
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const bool sliding = m.config["layer_types"][l] == "sliding_attention";
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec x = rms(h[t], w.at(p + "input_layernorm.weight"));
      auto proj = [&](const std::string& name) {
        return matvec(w.at(p + "self_attn." + name + ".weight"), x, &w.at(p + "self_attn." + name + ".bias"));
      };
      q[t] = proj("q_proj"), k[t] = proj("k_proj"), v[t] = proj("v_proj");
      for (int64_t hh = 0; hh < kHeads; ++hh) rope(q[t].data() + hh * kHd, static_cast<int64_t>(t), f, af);
      for (int64_t hh = 0; hh < kKv; ++hh) rope(k[t].data() + hh * kHd, static_cast<int64_t>(t), f, af);
    }
    const F32Tensor& sinks = w.at(p + "self_attn.sinks");
    for (size_t t = 0; t < n; ++t) {
      Vec attn(kHeads * kHd, 0.0);
      const size_t lo = sliding && t + 1 > kWindow ? t + 1 - kWindow : 0;
      for (int64_t hh = 0; hh < kHeads; ++hh) {
        const int64_t g = hh / (kHeads / kKv);
        Vec s(t + 1, 0.0);
        double mx = sinks.v[hh];
        for (size_t u = lo; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < kHd; ++i) d += q[t][hh * kHd + i] * k[u][g * kHd + i];
          s[u] = d / std::sqrt(static_cast<double>(kHd));
          mx = std::max(mx, s[u]);
        }
        double sum = std::exp(sinks.v[hh] - mx);  // the sink: in the denominator, never in the output
        for (size_t u = lo; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
        for (size_t u = lo; u <= t; ++u)
          for (int64_t i = 0; i < kHd; ++i) attn[hh * kHd + i] += s[u] / sum * v[u][g * kHd + i];
      }
      const Vec o = matvec(w.at(p + "self_attn.o_proj.weight"), attn, &w.at(p + "self_attn.o_proj.bias"));
      for (int64_t i = 0; i < kHidden; ++i) h[t][i] += o[i];
    }
    for (size_t t = 0; t < n; ++t) {
      const Vec x = rms(h[t], w.at(p + "post_attention_layernorm.weight"));
      const Vec logits = matvec(w.at(p + "mlp.router.weight"), x, &w.at(p + "mlp.router.bias"));
      std::vector<int> order(kExperts);
      for (int e = 0; e < kExperts; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
      double z = 0;
      for (int j = 0; j < kTopK; ++j) z += std::exp(logits[order[j]] - logits[order[0]]);
      const std::string e = p + "mlp.experts.";
      const F32Tensor &gu = w.at(e + "gate_up_proj"), &gb = w.at(e + "gate_up_proj_bias"), &dn = w.at(e + "down_proj"),
                      &db = w.at(e + "down_proj_bias");
      for (int j = 0; j < kTopK; ++j) {
        const int ex = order[j];
        const double weight = std::exp(logits[ex] - logits[order[0]]) / z;
        Vec a(kInter);
        for (int64_t c = 0; c < kInter; ++c) {
          double gate = gb.v[ex * 2 * kInter + 2 * c], up = gb.v[ex * 2 * kInter + 2 * c + 1];
          for (int64_t d = 0; d < kHidden; ++d) {
            gate += x[d] * gu.v[(ex * kHidden + d) * 2 * kInter + 2 * c];
            up += x[d] * gu.v[(ex * kHidden + d) * 2 * kInter + 2 * c + 1];
          }
          gate = std::min(gate, limit);
          up = std::clamp(up, -limit, limit);
          a[c] = (up + 1) * gate / (1 + std::exp(-alpha * gate));
        }
        for (int64_t d = 0; d < kHidden; ++d) {
          double y = db.v[ex * kHidden + d];
          for (int64_t c = 0; c < kInter; ++c) y += a[c] * dn.v[(ex * kInter + c) * kHidden + d];
          h[t][d] += weight * y;
        }
      }
    }
  }
  std::vector<Vec> out(n);
  for (size_t t = 0; t < n; ++t) out[t] = matvec(w.at("lm_head.weight"), rms(h[t], w.at("model.norm.weight")), nullptr);
  return out;
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

class GptOssTest : public ::testing::TestWithParam<bool> {};  // MXFP4 experts?

TEST_P(GptOssTest, LogitsMatchFloat64ReferenceForward) {
  TempDir dir;
  const TinyGptOss m = make_tiny(GetParam());
  write_tiny(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  EXPECT_EQ(lm->config().architecture, "GptOssForCausalLM");
  const double d = max_rel_diff(all_logits(*lm, kTokens), reference_forward(m, kTokens));
  EXPECT_LT(d, 2e-5);
}

// Decode one token at a time and prefill in chunks of 3 (the window-4 rings wrap) agree with one batch.
TEST_P(GptOssTest, PrefillChunksAndDecodeStepsAgreeWithOneBatch) {
  TempDir dir;
  write_tiny(make_tiny(GetParam()), dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const std::vector<float> batch = all_logits(*lm, kTokens);
  SequenceState s = lm->new_sequence();
  std::vector<float> step(kVocab);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    lm->forward(s, &kTokens[t], 1, LogitsMode::last, step.data());
    for (int64_t v = 0; v < kVocab; ++v) ASSERT_NEAR(step[v], batch[t * kVocab + v], 1e-4) << "position " << t;
  }
  LoadOptions lo;
  lo.prefill_chunk = 3;
  auto chunked = CausalLM::load(dir.path().string(), f32(), lo);
  const std::vector<float> c = all_logits(*chunked, kTokens);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], batch[i], 1e-4) << "index " << i;
}

TEST_P(GptOssTest, Bfloat16StaysCloseToFloat64) {
  TempDir dir;
  TinyGptOss m = make_tiny(GetParam());
  for (auto& [name, t] : m.w)  // the weights as bf16 stores them, so only the activations differ
    for (float& x : t.v) x = bf16_to_f32(f32_to_bf16(x));
  write_tiny(m, dir.path(), DType::BF16);
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = CausalLM::load(dir.path().string(), o);
  // bf16 activations (the weights are the reference's): a few percent (measured 0.09 with float
  // experts: the clamps and the top-2 routing amplify roundings).
  const double d = max_rel_diff(all_logits(*lm, kTokens), reference_forward(m, kTokens));
  EXPECT_LT(d, 0.15);
  EXPECT_GT(d, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Experts, GptOssTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Mxfp4" : "Unquantized"; });

// Each quirk matters: without it the engine's logits leave the reference's tolerance.
TEST(GptOss, TheReferenceSeesEveryQuirk) {
  const TinyGptOss base = make_tiny(false);
  const auto want = reference_forward(base, kTokens);
  auto differs = [&](auto&& mutate) {
    TinyGptOss m = base;
    mutate(m);
    TempDir dir;
    write_tiny(m, dir.path());
    auto lm = CausalLM::load(dir.path().string(), f32());
    return max_rel_diff(all_logits(*lm, kTokens), want);
  };
  // Sinks all -inf-like: no sink effect; the reference (with sinks) disagrees.
  EXPECT_GT(differs([](TinyGptOss& m) {
              for (int64_t l = 0; l < kLayers; ++l)
                for (float& x : m.w[fmt::format("model.layers.{}.self_attn.sinks", l)].v) x = -1000.0f;
            }),
            1e-3);
  // Every layer full attention.
  EXPECT_GT(differs([](TinyGptOss& m) { m.config["layer_types"] = {"full_attention", "full_attention", "full_attention"}; }), 1e-3);
  // A limit no value reaches (no clamp).
  EXPECT_GT(differs([](TinyGptOss& m) { m.config["swiglu_limit"] = 1000.0; }), 1e-4);
  // Truncated YaRN ramp.
  EXPECT_GT(differs([](TinyGptOss& m) { m.config["rope_scaling"]["truncate"] = true; }), 1e-4);
}

TEST(GptOss, ConfigDefaultsAndErrors) {
  TempDir dir;
  TinyGptOss m = make_tiny(false);
  // Without layer_types: even layers sliding (transformers' default), which is this model's list.
  m.config.erase("layer_types");
  write_tiny(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  EXPECT_EQ(lm->config().attention.is(AttentionKind::sliding), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(lm->config().attention[0].window, kWindow);
  EXPECT_EQ(lm->config().attention[1].window, 0);
  EXPECT_FLOAT_EQ(lm->config().gpt_oss.swiglu_alpha, 1.702);

  auto load_error = [&](auto&& mutate) {
    TinyGptOss bad = make_tiny(false);
    mutate(bad);
    TempDir d;
    write_tiny(bad, d.path());
    return test::error_of([&] { CausalLM::load(d.path().string(), f32()); });
  };
  EXPECT_NE(load_error([](TinyGptOss& b) { b.config["layer_types"] = {"sliding_attention", "full_attention"}; })
                .find("layer_types must list one type per layer (3)"),
            std::string::npos);
  EXPECT_NE(load_error([](TinyGptOss& b) { b.config["layer_types"][1] = "chunked_attention"; }).find("layer_types[1]"),
            std::string::npos);
  EXPECT_NE(load_error([](TinyGptOss& b) { b.w.erase("model.layers.1.self_attn.sinks"); })
                .find("model.layers.1.self_attn.sinks"),
            std::string::npos);
  EXPECT_NE(load_error([](TinyGptOss& b) { b.w.erase("model.layers.2.mlp.experts.down_proj_bias"); })
                .find("model.layers.2.mlp.experts.down_proj_bias"),
            std::string::npos);
  EXPECT_NE(load_error([](TinyGptOss& b) { b.w["model.layers.0.mlp.experts.gate_up_proj"].shape = {2 * kExperts, kHidden, kInter}; })
                .find("model.layers.0.mlp.experts.gate_up_proj"),
            std::string::npos);
}

TEST(GptOss, Mxfp4TensorErrorsNameTheTensor) {
  auto load_error = [&](auto&& mutate) {
    TinyGptOss bad = make_tiny(true);
    mutate(bad);
    TempDir d;
    write_tiny(bad, d.path());
    return test::error_of([&] { CausalLM::load(d.path().string(), f32()); });
  };
  const std::string scales = "model.layers.1.mlp.experts.down_proj_scales";
  EXPECT_NE(load_error([&](TinyGptOss& b) { b.u8_shape[scales] = {kExperts, kHidden / 2, 2 * kInter / 32}; }).find(scales),
            std::string::npos);
  EXPECT_NE(load_error([&](TinyGptOss& b) {
              b.u8.erase(scales);
              b.u8_shape.erase(scales);
            }).find(scales),
            std::string::npos);
  // A NaN scale (0xFF) is named with its row.
  const std::string e = load_error([&](TinyGptOss& b) { b.u8[scales][5] = 0xFF; });
  EXPECT_NE(e.find("down_proj[0]"), std::string::npos) << e;
}

// The synthetic writer (fp4lm synth, the replicas) writes both layouts; they load and generate.
TEST(GptOss, SyntheticCheckpointsLoadInBothLayouts) {
  for (bool mx : {false, true}) {
    TempDir dir;
    synth::SyntheticOptions o;
    o.architecture = "GptOssForCausalLM";
    o.algo = quant::QuantAlgo::None;
    o.mxfp4_experts = mx;
    o.layers = 2;
    synth::write_synthetic_checkpoint(dir.path().string(), o);
    auto lm = CausalLM::load(dir.path().string(), f32());
    const std::vector<float> l = all_logits(*lm, {1, 2, 3, 4, 5, 6});
    for (float x : l) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(lm->config().attention.is(AttentionKind::sliding), (std::vector<bool>{true, false}));
  }
}

}  // namespace
}  // namespace fp4lm::model::gpt_oss_test
