// Quantized KV caches as checkpoints declare them (model/state/kv_quant.h, docs/FORMAT.md §12 "KV cache
// formats"): each row format against a plain float64 statement of its rule and hand-worked
// blocks; tiny models whose logits with the quantized cache match a float64 reference forward that
// applies the same rule to K and V; the bytes a token costs; batch invariance; the load errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/state/kv_cache.h"
#include "model/state/kv_quant.h"
#include "reference/logits_check.h"
#include "model/sequence_chunk.h"
#include "model/state/state_bytes.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::kv_quant_test {
namespace {

using test::error_of;
using test::TempDir;
using Vec = std::vector<double>;

// ---- the rules in float64, written from docs/FORMAT.md, not from the engine's code ----
namespace ref {

// E4M3FN: 3 mantissa bits, normal exponents -6 .. 8, subnormal step 2^-9, round to nearest even,
// saturating at 448.
double e4m3(double a) {
  if (a <= 0) return 0;
  if (a >= 448) return 448;
  int ex = 0;
  std::frexp(a, &ex);  // a = m · 2^ex, m in [0.5, 1)
  const int e = std::max(ex - 1, -6);
  const double step = std::ldexp(1.0, e - 3);
  return std::min(std::nearbyint(a / step) * step, 448.0);
}

// E2M1 magnitude of |y| by ModelOpt's thresholds (round to nearest, ties to the even code).
double e2m1(double y) {
  const double a = std::abs(y);
  const double m = a <= 0.25 ? 0 : a < 0.75 ? 0.5 : a <= 1.25 ? 1 : a < 1.75 ? 1.5 : a <= 2.5 ? 2 : a < 3.5 ? 3
                 : a <= 5 ? 4 : 6;
  return y < 0 ? -m : m;
}

// One row through NVFP4 (x − b when `bias`, b added back): per 16-block sf = e4m3(min(bamax/(6s),
// 448)), value = e2m1(x / (sf · s)) · sf · s, 0 where sf is 0.
Vec nvfp4(const Vec& x, double s, const Vec* bias = nullptr) {
  Vec y = x;
  if (bias)
    for (size_t i = 0; i < y.size(); ++i) y[i] -= (*bias)[i];
  Vec out(y.size());
  for (size_t b = 0; b < y.size(); b += 16) {
    double bamax = 0;
    for (size_t i = b; i < b + 16; ++i) bamax = std::max(bamax, std::abs(y[i]));
    const double sf = e4m3(std::min(bamax / (6 * s), 448.0));
    for (size_t i = b; i < b + 16; ++i) out[i] = sf == 0 ? 0 : e2m1(y[i] / (sf * s)) * sf * s;
  }
  if (bias)
    for (size_t i = 0; i < out.size(); ++i) out[i] += (*bias)[i];
  return out;
}

// INT8: clamp(round-half-even(x / s), -128, 127) · s.
Vec int8(const Vec& x, double s) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = std::clamp(std::nearbyint(x[i] / s), -128.0, 127.0) * s;
  return out;
}

}  // namespace ref

// The engine's row format: quantize, then dequantize.
std::vector<float> qdq(KvQuant q, const std::vector<float>& x, float s, const std::vector<float>* bias = nullptr) {
  const int64_t hd = static_cast<int64_t>(x.size());
  std::vector<uint8_t> bytes(kv_quant_row_bytes(q, hd));
  kv_quantize_row(q, x.data(), hd, s, bias ? bias->data() : nullptr, bytes.data());
  std::vector<float> out(x.size());
  kv_dequantize_row(q, bytes.data(), hd, s, bias ? bias->data() : nullptr, out.data());
  return out;
}

Vec widen(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

TEST(KvQuantRow, RowBytes) {
  EXPECT_EQ(kv_quant_row_bytes(KvQuant::nvfp4, 128), 64u + 8u);
  EXPECT_EQ(kv_quant_row_bytes(KvQuant::nvfp4_affine, 64), 32u + 4u);
  EXPECT_EQ(kv_quant_row_bytes(KvQuant::int8, 80), 80u);
  const std::string e = error_of([] { kv_quant_row_bytes(KvQuant::nvfp4, 72); });
  EXPECT_NE(e.find("NVFP4 format needs head_dim a multiple of 16"), std::string::npos) << e;
}

TEST(KvQuantRow, RandomRowsMatchTheFloat64Rule) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int64_t checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(64), b(64);
    // Blocks of very different magnitudes, so block scales span the E4M3 range (subnormals too).
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i / 16) * 3 - 6);
    for (float& v : b) v = 0.3f * nd(rng);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::abs(v));
    const float s = amax / 448.0f * (trial % 3 == 0 ? 0.05f : 1.0f);  // some rows clamp at sf = 448
    const Vec want = ref::nvfp4(widen(x), s);
    const std::vector<float> got = qdq(KvQuant::nvfp4, x, s);
    const Vec bias = widen(b);
    const Vec want_a = ref::nvfp4(widen(x), s, &bias);
    const std::vector<float> got_a = qdq(KvQuant::nvfp4_affine, x, s, &b);
    const float s8 = amax / 127.0f * (trial % 3 == 0 ? 0.5f : 1.0f);
    const Vec want8 = ref::int8(widen(x), s8);
    const std::vector<float> got8 = qdq(KvQuant::int8, x, s8);
    for (size_t i = 0; i < x.size(); ++i) {
      // float32 rounds the product e2m1 · sf · s once (and the bias add once more).
      ASSERT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-30) << trial << " " << i;
      ASSERT_NEAR(got_a[i], want_a[i], 1e-6 * (std::abs(want_a[i]) + std::abs(b[i])) + 1e-30) << trial << " " << i;
      ASSERT_NEAR(got8[i], want8[i], 1e-6 * std::abs(want8[i]) + 1e-30) << trial << " " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 200 * 64);
}

TEST(KvQuantRow, HandWorkedNvfp4Blocks) {
  // s = 1; block 0's amax is 6: sf = e4m3(1) = 1, codes by the E2M1 thresholds. Block 1's amax
  // is 0.6: sf = e4m3(0.1) = 0.1015625 (1.625 · 2^-4), so 0.6 → 5.91 → 6 → 0.609375. The blocks
  // do not share a scale across the edge at element 16.
  std::vector<float> x(32, 0.0f);
  const float b0[16] = {6, 3, 0.25f, 0.26f, -1.75f, 1.25f, -0.7f, 4.9f, 5.1f, 0, 0, 0, 0, 0, 0, -6};
  const float w0[16] = {6, 3, 0, 0.5f, -2, 1, -0.5f, 4, 6, 0, 0, 0, 0, 0, 0, -6};
  std::copy(b0, b0 + 16, x.begin());
  x[16] = 0.6f;
  x[17] = -0.05f;  // 0.05 / 0.1015625 = 0.49 → 0.5 → -0.05078125
  x[31] = 0.3f;    // 2.95 → 3 → 0.3046875
  std::vector<uint8_t> bytes(kv_quant_row_bytes(KvQuant::nvfp4, 32));
  kv_quantize_row(KvQuant::nvfp4, x.data(), 32, 1.0f, nullptr, bytes.data());
  EXPECT_EQ(bytes[16], 0x38);  // E4M3 1.0
  EXPECT_EQ(bytes[17], 0x1D);  // E4M3 0.1015625: exponent 3 (2^-4), mantissa 5
  EXPECT_EQ(bytes[0], 0x7 | (0x5 << 4));  // element 0 (6: code 7) in the low nibble, element 1 (3: code 5) high
  std::vector<float> y(32);
  kv_dequantize_row(KvQuant::nvfp4, bytes.data(), 32, 1.0f, nullptr, y.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], w0[i]) << i;
  EXPECT_EQ(y[16], 0.609375f);
  EXPECT_EQ(y[17], -0.05078125f);
  EXPECT_EQ(y[31], 0.3046875f);
  for (int i = 18; i < 31; ++i) EXPECT_EQ(y[i], 0.0f) << i;
}

TEST(KvQuantRow, ZeroBlocksAndClamping) {
  // An all-zero block: scale byte 0, codes 0, read back as exact zeros (also with a tiny scale).
  std::vector<float> z(16, 0.0f);
  std::vector<uint8_t> bytes(kv_quant_row_bytes(KvQuant::nvfp4, 16));
  kv_quantize_row(KvQuant::nvfp4, z.data(), 16, 1e-30f, nullptr, bytes.data());
  for (uint8_t b : bytes) EXPECT_EQ(b, 0);
  EXPECT_EQ(qdq(KvQuant::nvfp4, z, 0.5f), z);
  // Values far above the scale's range: sf clamps at 448 and the codes at ±6, so x = ±10 with
  // s = 0.001 reads back as ±6 · 448 · 0.001 = ±2.688.
  std::vector<float> big(16, 10.0f);
  big[3] = -10.0f;
  const std::vector<float> y = qdq(KvQuant::nvfp4, big, 0.001f);
  EXPECT_FLOAT_EQ(y[0], 2.688f);
  EXPECT_FLOAT_EQ(y[3], -2.688f);
  // A block below the smallest E4M3 scale (2^-9 · 6 · s): sf rounds to 0, codes 0.
  std::vector<float> tiny(16, 1e-4f);
  EXPECT_EQ(qdq(KvQuant::nvfp4, tiny, 1.0f), std::vector<float>(16, 0.0f));
  // INT8, s = 0.5: ties to even (0.25 → 0.5 → 0, 0.75 → 1.5 → 2), clamped at -128 / 127.
  const std::vector<float> x8 = {0.25f, 0.75f, 100.0f, -100.0f, -0.25f, 63.5f};
  const std::vector<float> y8 = qdq(KvQuant::int8, x8, 0.5f);
  EXPECT_EQ(y8, (std::vector<float>{0.0f, 1.0f, 63.5f, -64.0f, -0.0f, 63.5f}));
  // NVFP4_AFFINE: a value equal to its bias is exact; the bias moves the block's range.
  std::vector<float> xa(16, 2.0f), ba(16, 2.0f);
  xa[0] = 2.6f;  // x − b = 0.6 → sf 0.1015625 (s = 1) → 0.609375 + 2
  const std::vector<float> ya = qdq(KvQuant::nvfp4_affine, xa, 1.0f, &ba);
  EXPECT_FLOAT_EQ(ya[0], 2.609375f);
  for (int i = 1; i < 16; ++i) EXPECT_EQ(ya[i], 2.0f);
}

TEST(KvQuantRow, NonFiniteValuesAreAnError) {
  std::vector<float> x(16, 1.0f);
  x[5] = std::nanf("");
  std::vector<uint8_t> bytes(16);
  for (KvQuant q : {KvQuant::nvfp4, KvQuant::int8}) {
    const std::string e = error_of([&] { kv_quantize_row(q, x.data(), 16, 1.0f, nullptr, bytes.data()); });
    EXPECT_NE(e.find("K/V element 5 is nan"), std::string::npos) << e;
  }
}

// ---- whole models ----

const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29, 7, 54};

struct Calibration {
  std::vector<double> k_amax, v_amax;  // per layer
  std::vector<Vec> k_mean, v_mean;     // per layer, [kv_heads * head_dim]: ModelOpt's "mean" bias
};

Calibration calibrate(const test::TinyModel& m) {
  const int64_t layers = m.config["num_hidden_layers"];
  Calibration c{std::vector<double>(layers), std::vector<double>(layers), std::vector<Vec>(layers),
                std::vector<Vec>(layers)};
  std::vector<int64_t> n(static_cast<size_t>(layers));
  test::naive::forward(m, kTokens, [&](int64_t l, Vec& k, Vec& v) {
    const size_t i = static_cast<size_t>(l);
    if (c.k_mean[i].empty()) c.k_mean[i].assign(k.size(), 0.0), c.v_mean[i].assign(v.size(), 0.0);
    for (size_t j = 0; j < k.size(); ++j) {
      c.k_amax[i] = std::max(c.k_amax[i], std::abs(k[j]));
      c.v_amax[i] = std::max(c.v_amax[i], std::abs(v[j]));
      c.k_mean[i][j] += k[j];
      c.v_mean[i][j] += v[j];
    }
    ++n[i];
  });
  for (size_t i = 0; i < c.k_mean.size(); ++i)
    for (size_t j = 0; j < c.k_mean[i].size(); ++j) {
      c.k_mean[i][j] /= static_cast<double>(n[i]);
      c.v_mean[i][j] /= static_cast<double>(n[i]);
    }
  return c;
}

struct Scales {
  std::vector<float> k, v;
  std::vector<std::vector<float>> kb, vb;
};

// The tensors an export writes for `q` (ModelOpt's names and shapes: k_scale / v_scale scalars,
// amax / 448 for NVFP4, amax / 127 for INT8; k_bias / v_bias [1, kv_heads, 1, head_dim]), added to
// `m`, and hf_quant_config.json declaring the format.
Scales add_kv_tensors(test::TinyModel& m, KvQuant q, const std::filesystem::path& dir) {
  const Calibration c = calibrate(m);
  const int64_t layers = m.config["num_hidden_layers"], kvh = m.config["num_key_value_heads"],
                hd = m.config["head_dim"];
  const double bound = q == KvQuant::int8 ? 127.0 : 448.0;
  Scales s;
  for (int64_t l = 0; l < layers; ++l) {
    const size_t i = static_cast<size_t>(l);
    const std::string p = fmt::format("model.layers.{}.self_attn", l);
    s.k.push_back(static_cast<float>(c.k_amax[i] / bound));
    s.v.push_back(static_cast<float>(c.v_amax[i] / bound));
    m.w[p + ".k_proj.k_scale"] = {{}, {s.k.back()}};
    m.w[p + ".v_proj.v_scale"] = {{}, {s.v.back()}};
    s.kb.emplace_back(c.k_mean[i].begin(), c.k_mean[i].end());
    s.vb.emplace_back(c.v_mean[i].begin(), c.v_mean[i].end());
    if (q == KvQuant::nvfp4_affine) {
      m.w[p + ".k_proj.k_bias"] = {{1, kvh, 1, hd}, s.kb.back()};
      m.w[p + ".v_proj.v_bias"] = {{1, kvh, 1, hd}, s.vb.back()};
    }
  }
  test::write_tiny_model(m, dir);
  const nlohmann::json j = {{"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}},
                            {"quantization", {{"quant_algo", nullptr}, {"kv_cache_quant_algo", kv_quant_name(q)}}}};
  std::ofstream(dir / "hf_quant_config.json") << j.dump(2);
  return s;
}

// The float64 reference with the format applied to each position's K and V (per KV head row; the
// engine's K/V are float32, so the row is rounded to float32 first).
std::vector<Vec> reference(const test::TinyModel& m, KvQuant q, const Scales& s) {
  const int64_t kvh = m.config["num_key_value_heads"], hd = m.config["head_dim"];
  return test::naive::forward(m, kTokens, [&](int64_t l, Vec& k, Vec& v) {
    const size_t i = static_cast<size_t>(l);
    for (int kv = 0; kv < 2; ++kv) {
      Vec& x = kv == 0 ? k : v;
      const double scale = kv == 0 ? s.k[i] : s.v[i];
      const std::vector<float>& bias = kv == 0 ? s.kb[i] : s.vb[i];
      for (int64_t h = 0; h < kvh; ++h) {
        Vec row(static_cast<size_t>(hd)), b(static_cast<size_t>(hd));
        for (int64_t j = 0; j < hd; ++j) {
          row[j] = static_cast<float>(x[h * hd + j]);
          b[j] = bias[h * hd + j];
        }
        const Vec y = q == KvQuant::int8 ? ref::int8(row, scale)
                                         : ref::nvfp4(row, scale, q == KvQuant::nvfp4_affine ? &b : nullptr);
        std::copy(y.begin(), y.end(), x.begin() + h * hd);
      }
    }
  });
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

struct Case {
  const char* arch;
  KvQuant quant;
  int64_t window;  // Mistral's sliding window (a ring smaller than the sequence), 0: none
};

class QuantizedKvCache : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizedKvCache, LogitsMatchTheFloat64ReferenceWithTheSameRule) {
  const Case c = GetParam();
  TempDir dir;
  test::TinyModel m = test::make_tiny_model(c.arch);
  if (c.window > 0) m.config["sliding_window"] = c.window;
  const Scales s = add_kv_tensors(m, c.quant, dir.path());
  test::LogCapture log;
  auto lm = CausalLM::load(dir.path().string(), f32());
  EXPECT_EQ(lm->kv_quant(), c.quant);
  EXPECT_EQ(log.count(fmt::format("KV cache: {} (", kv_quant_name(c.quant))), 1) << log.text();
  const std::vector<Vec> want = reference(m, c.quant, s);
  const std::vector<float> got = all_logits(*lm, kTokens);
  const double d = max_rel_diff(got, want);
  RecordProperty("max_rel_diff", fmt::format("{:.3g}", d));
  EXPECT_LT(d, 1e-4);
  EXPECT_LT(max_rel_diff(prefill_then_decode_logits(*lm, kTokens, 6), want), 1e-4);
  // The cache is really quantized: the unquantized reference is much further off.
  const double plain = max_rel_diff(got, test::naive::forward(m, kTokens));
  RecordProperty("vs_unquantized", fmt::format("{:.3g}", plain));
  EXPECT_GT(plain, 10 * d);
  EXPECT_GT(plain, 1e-3);
  // Every tensor of the checkpoint consumed (the scales and biases by the cache).
  EXPECT_TRUE(lm->tensor_usage().unused_quantization.empty());
  EXPECT_TRUE(lm->tensor_usage().ignored.empty());
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedKvCache,
                         ::testing::Values(Case{"Qwen3ForCausalLM", KvQuant::nvfp4, 0},
                                           Case{"Qwen3ForCausalLM", KvQuant::nvfp4_affine, 0},
                                           Case{"Qwen3ForCausalLM", KvQuant::int8, 0},
                                           Case{"MistralForCausalLM", KvQuant::nvfp4, 4},
                                           Case{"LlamaForCausalLM", KvQuant::int8, 0}),
                         [](const auto& info) {
                           return std::string(info.param.arch).substr(0, 5) +
                                  std::string(kv_quant_name(info.param.quant)) +
                                  (info.param.window ? "Window" : "");
                         });

TEST(QuantizedKvCacheBytes, ATokenCostsTheFormatsRowBytes) {
  // Qwen3 tiny: 3 layers × 2 KV heads × head_dim 16; per token K and V of every head.
  for (KvQuant q : {KvQuant::nvfp4, KvQuant::nvfp4_affine, KvQuant::int8}) {
    TempDir dir;
    test::TinyModel m = test::make_tiny_model("Qwen3ForCausalLM");
    add_kv_tensors(m, q, dir.path());
    test::LogCapture log;
    auto lm = CausalLM::load(dir.path().string(), f32());
    const size_t row = q == KvQuant::int8 ? 16 : 8 + 1;
    const size_t per_token = 3 * 2 * 2 * row;
    EXPECT_EQ(state_bytes_per_position(lm->state_layout(), lm->kv_dtype()), per_token);
    EXPECT_EQ(lm->sequence_bytes(64), 64 * per_token);
    EXPECT_EQ(lm->new_sequence(64).reserved_bytes(), 64 * per_token);
    EXPECT_EQ(lm->kv_format_name(), kv_quant_name(q));
    EXPECT_EQ(log.count(fmt::format("{} KV cache: {} bytes per token", kv_quant_name(q), per_token)), 1) << log.text();
  }
}

TEST(QuantizedKvCacheBatch, ASequencesLogitsDoNotDependOnItsBatch) {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("Qwen3ForCausalLM");
  add_kv_tensors(m, KvQuant::nvfp4_affine, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const int64_t vocab = lm->vocab_size();
  const std::vector<int32_t> a = {1, 17, 5, 96, 40, 40, 3}, b = {1, 80, 29, 7, 54};
  auto alone = [&](const std::vector<int32_t>& t) {
    SequenceState st = lm->new_sequence();
    std::vector<float> out(t.size() * static_cast<size_t>(vocab));
    lm->forward(st, t.data(), static_cast<int64_t>(t.size()) - 1, LogitsMode::all, out.data());
    lm->forward(st, &t.back(), 1, LogitsMode::last, out.data() + (t.size() - 1) * vocab);
    return out;
  };
  const std::vector<float> wa = alone(a), wb = alone(b);
  SequenceState sa = lm->new_sequence(), sb = lm->new_sequence();
  std::vector<float> ga(wa.size()), gb(wb.size());
  std::vector<SequenceChunk> prefill = {
      {&sa, a.data(), static_cast<int64_t>(a.size()) - 1, LogitsMode::all, ga.data()},
      {&sb, b.data(), static_cast<int64_t>(b.size()) - 1, LogitsMode::all, gb.data()}};
  lm->forward(prefill);
  std::vector<SequenceChunk> decode = {{&sa, &a.back(), 1, LogitsMode::last, ga.data() + (a.size() - 1) * vocab},
                                       {&sb, &b.back(), 1, LogitsMode::last, gb.data() + (b.size() - 1) * vocab}};
  lm->forward(decode);
  EXPECT_TRUE(bit_identical(ga, wa));
  EXPECT_TRUE(bit_identical(gb, wb));
}

// Writes the tiny Qwen3 with `q`'s tensors, lets `edit` change its weights, and returns the load error.
std::string load_error(KvQuant q, const std::function<void(test::TinyWeights&)>& edit,
                       const char* arch = "Qwen3ForCausalLM") {
  TempDir dir;
  test::TinyModel m = test::make_tiny_model(arch);
  add_kv_tensors(m, q, dir.path());
  edit(m.w);
  test::write_tiny_model(m, dir.path());
  return error_of([&] { CausalLM::load(dir.path().string(), f32()); });
}

TEST(QuantizedKvCacheErrors, AMissingScaleOrABadBiasIsAnErrorNamingTheTensor) {
  std::string e = load_error(KvQuant::nvfp4, [](test::TinyWeights& w) {
    w.erase("model.layers.1.self_attn.k_proj.k_scale");
  });
  EXPECT_NE(e.find("the NVFP4 KV cache needs the scale tensor 'model.layers.1.self_attn.k_proj.k_scale' or "
                   "'model.layers.1.self_attn.k_scale'"),
            std::string::npos)
      << e;
  e = load_error(KvQuant::int8, [](test::TinyWeights& w) { w.erase("model.layers.2.self_attn.v_proj.v_scale"); });
  EXPECT_NE(e.find("INT8 KV cache needs the scale tensor 'model.layers.2.self_attn.v_proj.v_scale'"), std::string::npos)
      << e;
  e = load_error(KvQuant::nvfp4_affine, [](test::TinyWeights& w) {
    test::TinyTensor& t = w.at("model.layers.0.self_attn.k_proj.k_bias");
    t.shape = {1, 2, 16};  // the sequence axis dropped
  });
  EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.k_proj.k_bias' must be float32/bfloat16/float16 of shape "
                   "[1, 2, 1, 16] or [2, 16]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("found F32 [1, 2, 16]"), std::string::npos) << e;
  e = load_error(KvQuant::nvfp4_affine, [](test::TinyWeights& w) { w.erase("model.layers.2.self_attn.v_proj.v_bias"); });
  EXPECT_NE(e.find("the NVFP4_AFFINE KV cache needs the bias tensor 'model.layers.2.self_attn.v_proj.v_bias'"),
            std::string::npos)
      << e;
  // A negative scale.
  e = load_error(KvQuant::nvfp4, [](test::TinyWeights& w) { w.at("model.layers.0.self_attn.v_proj.v_scale").v = {-1}; });
  EXPECT_NE(e.find("'model.layers.0.self_attn.v_proj.v_scale' = -1 is not a positive finite scale"), std::string::npos)
      << e;
}

TEST(QuantizedKvCacheErrors, LayerKindsAndShapesThatCannotRunTheFormatAreNamed) {
  // Llama tiny: head_dim 8, not a multiple of NVFP4's 16-element block.
  std::string e = load_error(KvQuant::nvfp4, [](test::TinyWeights&) {}, "LlamaForCausalLM");
  EXPECT_NE(e.find("the NVFP4 format needs head_dim a multiple of 16 (its block size), found 8"), std::string::npos)
      << e;
  // Multi-head latent attention caches its latent: refused by name, the format and the layer kind.
  TempDir dir;
  test::TinyModel m = test::make_tiny_model("DeepseekV3ForCausalLM");
  test::write_tiny_model(m, dir.path());
  const nlohmann::json j = {{"quantization", {{"quant_algo", nullptr}, {"kv_cache_quant_algo", "NVFP4"}}}};
  std::ofstream(dir.path() / "hf_quant_config.json") << j.dump(2);
  e = error_of([&] { CausalLM::load(dir.path().string(), f32()); });
  EXPECT_NE(e.find("the checkpoint declares a NVFP4 KV cache, but multi-head latent attention caches its latent"),
            std::string::npos)
      << e;
  // An explicit --kv-cache-dtype runs that cache instead (the latent in bfloat16 here).
  EngineOptions o = f32();
  o.kv_cache_dtype = "bfloat16";
  EXPECT_NO_THROW(CausalLM::load(dir.path().string(), o));
}

}  // namespace
}  // namespace fp4lm::model::kv_quant_test
