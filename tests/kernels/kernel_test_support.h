#pragma once
// What every kernel-backend test shares: the registered backends to parametrize over (by
// scheme, from the registry), the one fp64 evaluation of a Linear layer the kernels are held to
// (linear_f64), building and running a backend's kernel, and the NVFP4 layer builders (random
// layers quantized with quant::quantize_weight, wrapped into LinearWeights / MoeWeights with
// shards pointing into owned vectors, kept alive).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/isa.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"
#include "core/dtype.h"
#include "kernels/weights.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels::testing {

// Whether AVX2 kernels may run here (the ISA decision every AVX2 backend's unavailable_reason makes).
inline bool have_avx2() { return isa_unavailable_reason({Isa::avx2, kAvx2Features}).empty(); }

// The registered backends of a kind whose schemes include `key` exactly, in table order, the
// `reference` oracle excluded. The kernel tests are parametrized over these lists, so a backend
// is tested (against `reference` and fp64) by registering it (ggml's test-backend-ops idea).
inline std::vector<std::string> backends_with_scheme(LayerKind kind, QuantKey key) {
  std::vector<std::string> out;
  for (const Backend* b : backends(kind)) {
    if (b->name == "reference") continue;
    for (const QuantKey& s : b->schemes)
      if (s == key) {
        out.push_back(b->name);
        break;
      }
  }
  return out;
}
inline std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// "" when the backend can run on this machine, else its own unavailable_reason.
inline std::string unavailable(const std::string& name, LayerKind kind) {
  const Backend* b = find_backend(name, kind);
  if (!b) return "not registered";
  return b->unavailable_reason ? b->unavailable_reason() : "";
}

// The registered backends of a kind whose schemes include `key` that this CPU can run, then
// `reference` (which runs every scheme).
inline std::vector<std::string> runnable_backends_with_scheme(LayerKind kind, QuantKey key) {
  std::vector<std::string> out;
  for (const std::string& n : backends_with_scheme(kind, key))
    if (unavailable(n, kind).empty()) out.push_back(n);
  out.push_back("reference");
  return out;
}

// The W4A4 backend's W4A16 sibling on the same ISA ("cpu_w4a4_avx512" -> "cpu_w4a16_avx512").
inline std::string w4a16_sibling(std::string name) {
  const size_t at = name.find("w4a4");
  return at == std::string::npos ? name : name.replace(at, 4, "w4a16");
}

// gtest parameter names: backend names are identifiers already.
struct BackendName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const { return info.param; }
};


struct LayerSpec {
  int64_t n = 0, k = 0;
  std::vector<int64_t> shard_rows;  // sums to n; each shard gets its own weight_scale_2
  bool bias = false;
  QuantKey key = kNvfp4W4A16;
  uint32_t seed = 1;
};

// Owns the quantized shards; `weights` points into them.
struct TestLayer {
  std::vector<quant::Nvfp4Weight> shards;
  LinearWeights weights;  // keepalive holds `shards` storage alive for copies
};

inline std::shared_ptr<TestLayer> make_layer(const LayerSpec& s) {
  auto layer = std::make_shared<TestLayer>();
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  LinearWeights& w = layer->weights;
  w.key = s.key;
  w.n = s.n;
  w.k = s.k;
  float max_input_scale = 0.0f;
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const int64_t rows = s.shard_rows[i];
    // Shards differ in magnitude (so their global scales differ); rows and blocks vary too.
    const float shard_mag = 0.02f * std::exp2(static_cast<float>(i) * 1.7f - 1.0f);
    std::vector<float> data(static_cast<size_t>(rows * s.k));
    for (int64_t r = 0; r < rows; ++r) {
      const float row_mag = shard_mag * std::exp2(uni(rng));
      for (int64_t b = 0; b < s.k / 16; ++b) {
        const float block_mag = row_mag * std::exp2(uni(rng) * 2.0f);
        for (int j = 0; j < 16; ++j) data[r * s.k + b * 16 + j] = normal(rng) * block_mag;
      }
    }
    layer->shards.push_back(quant::quantize_weight(data.data(), rows, s.k));
  }
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const quant::Nvfp4Weight& q = layer->shards[i];
    WeightShard sh;
    sh.name = "test.layer.shard" + std::to_string(i);
    sh.rows = s.shard_rows[i];
    const float input_scale = 0.01f * (1.0f + 0.3f * static_cast<float>(i));
    sh.view = Nvfp4View{q.codes.data(), q.scales.data(), q.weight_scale_2, input_scale};
    max_input_scale = std::max(max_input_scale, input_scale);
    w.shards.push_back(sh);
  }
  if (s.bias) {
    for (int64_t r = 0; r < s.n; ++r) w.bias.push_back(normal(rng));
  }
  w.input_scale = max_input_scale;
  return layer;
}

// LinearWeights whose keepalive owns the layer.
inline LinearWeights weights_of(const std::shared_ptr<TestLayer>& layer) {
  LinearWeights w = layer->weights;
  w.keepalive = layer;
  return w;
}

// Random activations [m, k] with per-token magnitudes, outliers and an all-zero block.
inline std::vector<float> make_activations(int64_t m, int64_t k, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t) {
    const float mag = scale * std::exp2(uni(rng) * 2.0f);
    for (int64_t j = 0; j < k; ++j) x[t * k + j] = normal(rng) * mag * (j % 97 == 5 ? 8.0f : 1.0f);
    if (k >= 32 && t % 3 == 1)
      for (int j = 16; j < 32; ++j) x[t * k + j] = 0.0f;
  }
  return x;
}

// Top-2 routing of m tokens over `experts`: token i to experts i % E (weight w0) and (3i + 1) % E
// (weight w1), so every expert sees tokens and most tokens two distinct experts.
struct Top2Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
inline Top2Routing top2_routing(int64_t m, int64_t experts, float w0 = 0.7f, float w1 = 0.3f) {
  Top2Routing r;
  for (int64_t i = 0; i < m; ++i) {
    r.ids.push_back(static_cast<int32_t>(i % experts));
    r.ids.push_back(static_cast<int32_t>((i * 3 + 1) % experts));
    r.weights.push_back(w0);
    r.weights.push_back(w1);
  }
  return r;
}

// x rounded to the activation dtype (what the kernels actually see), in float and as bytes.
inline std::vector<uint8_t> to_act(const std::vector<float>& x, DType t) {
  std::vector<uint8_t> out(x.size() * dtype_size(t));
  from_f32_n(x.data(), t, out.data(), x.size());
  return out;
}
inline std::vector<float> from_act(const void* p, DType t, size_t count) {
  std::vector<float> out(count);
  to_f32_n(p, t, out.data(), count);
  return out;
}

// Row r of W as double: e2m1 × e4m3 × the shard's global scale.
inline std::vector<double> weight_row_f64(const LinearWeights& w, int64_t r) {
  int64_t rr = r;
  const WeightShard* s = nullptr;
  for (const WeightShard& sh : w.shards) {
    if (rr < sh.rows) {
      s = &sh;
      break;
    }
    rr -= sh.rows;
  }
  const Nvfp4View& v = s->as<Nvfp4View>();
  std::vector<double> out(static_cast<size_t>(w.k));
  for (int64_t j = 0; j < w.k; ++j) {
    const uint8_t byte = v.codes[rr * (w.k / 2) + j / 2];
    const uint8_t c = (j & 1) ? byte >> 4 : byte & 0xf;
    out[j] = static_cast<double>(e2m1_to_f32(c)) * e4m3_to_f32(v.block_scales[rr * (w.k / 16) + j / 16]) *
             static_cast<double>(v.global_scale);
  }
  return out;
}

// The exact product in fp64 and the magnitude Σ|terms| (the scale of fp32 summation error).
struct Expected {
  std::vector<double> y, magnitude;
};

// The one fp64 reference loop of the kernel tests: y[t, r] = Σ_j x[t, j] · W[r, j] (+ bias[r])
// and its magnitude Σ_j |x[t, j] · W[r, j]| (+ |bias[r]|), with x [m, k] given in doubles and
// row r of W decoded to doubles by weight_row(r) (each format's own exact decoding).
template <typename WeightRow>
inline Expected linear_f64(const LinearWeights& w, const std::vector<double>& x, int64_t m, WeightRow weight_row) {
  Expected e;
  e.y.assign(static_cast<size_t>(m * w.n), 0.0);
  e.magnitude.assign(static_cast<size_t>(m * w.n), 0.0);
  for (int64_t r = 0; r < w.n; ++r) {
    const std::vector<double> row = weight_row(r);
    for (int64_t t = 0; t < m; ++t) {
      double acc = 0, mag = 0;
      for (int64_t j = 0; j < w.k; ++j) {
        const double p = x[t * w.k + j] * row[j];
        acc += p;
        mag += std::fabs(p);
      }
      if (!w.bias.empty()) {
        acc += w.bias[r];
        mag += std::fabs(w.bias[r]);
      }
      e.y[t * w.n + r] = acc;
      e.magnitude[t * w.n + r] = mag;
    }
  }
  return e;
}

// W4A16: x (already act-dtype-rounded floats) times the dequantized weights.
// W4A4: x quantized by quant::quantize_activation with w.input_scale (each token with its own
// quant::dynamic_activation_scale when w.per_token_input_scale), dequantized in fp64.
inline Expected expected_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m, bool w4a4) {
  std::vector<double> xin(x.begin(), x.end());
  if (w4a4) {
    for (int64_t t = 0; t < m; ++t) {
      const float s = w.per_token_input_scale ? quant::dynamic_activation_scale(x.data() + t * w.k, w.k) : w.input_scale;
      quant::Nvfp4Activation a = quant::quantize_activation(x.data() + t * w.k, 1, w.k, s);
      for (int64_t j = 0; j < w.k; ++j) {
        const uint8_t byte = a.codes[j / 2];
        const uint8_t c = (j & 1) ? byte >> 4 : byte & 0xf;
        xin[t * w.k + j] =
            static_cast<double>(e2m1_to_f32(c)) * e4m3_to_f32(a.scales[j / 16]) * static_cast<double>(s);
      }
    }
  }
  return linear_f64(w, xin, m, [&](int64_t r) { return weight_row_f64(w, r); });
}

// The NVFP4 backends whose W4A16 path holds x as int16 with a shared exponent per 16-block (the
// AVX2 kernels; docs/KERNELS.md, "W4A16 inner loop"). The others use x exactly.
inline bool w4a16_uses_int16_activations(const std::string& backend) {
  return backend == "cpu_w4a16_avx2" || backend == "cpu_w4a4_avx2";
}

// The stated bound of that representation, per output [m, n]: with e_b = max(floor(log2
// max|x_b|), -75) for block b, every x is replaced by a multiple of u_b = 2^(e_b - 14) at most
// u_b away (half of it except where rounding reaches 2^15 and saturates) — float32 x by two
// pieces, a multiple of u_b 2^-15 at most u_b 2^-16 away — so the dot product moves by at most
// Σ_b u_b' · Σ_{i in b} |W_i| (W dequantized; u_b' = u_b, or u_b 2^-15 for float32). Computed
// here from the definition, in fp64, independently of the kernels' code. x: act-dtype-rounded
// floats [m, k].
inline std::vector<double> int16_activation_bound(const LinearWeights& w, const std::vector<float>& x, int64_t m,
                                                  DType act) {
  const int64_t nb = w.k / 16;
  std::vector<double> unit(static_cast<size_t>(m * nb));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      double amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[t * w.k + b * 16 + j])));
      const int e = amax > 0 ? std::max(std::ilogb(amax), -75) : -75;
      unit[t * nb + b] = std::ldexp(1.0, e - 14 - (act == DType::F32 ? 15 : 0));
    }
  std::vector<double> out(static_cast<size_t>(m * w.n), 0.0);
  for (int64_t r = 0; r < w.n; ++r) {
    const std::vector<double> row = weight_row_f64(w, r);
    std::vector<double> wsum(static_cast<size_t>(nb), 0.0);
    for (int64_t j = 0; j < w.k; ++j) wsum[j / 16] += std::fabs(row[j]);
    for (int64_t t = 0; t < m; ++t) {
      double s = 0;
      for (int64_t b = 0; b < nb; ++b) s += unit[t * nb + b] * wsum[b];
      out[t * w.n + r] = s;
    }
  }
  return out;
}

// Half an ulp of the output dtype, relative (0 for F32: compared before any output rounding).
inline double output_rounding(DType t) {
  return t == DType::BF16 ? 0x1p-8 : t == DType::F16 ? 0x1p-11 : 0.0;
}

// |y - e| <= rel · Σ|terms| (fp32 summation-order error, relative to the products' magnitude)
// + half an ulp of the output dtype at e (+ f16's subnormal step); the first five misses reported.
inline void expect_within_f64_bound(const std::vector<float>& y, const Expected& e, DType act, const std::string& what,
                                    double rel) {
  int reported = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = rel * e.magnitude[i] + output_rounding(act) * std::fabs(e.y[i]) +
                       (act == DType::F16 ? 0x1p-24 : 0.0) + 1e-30;
    const double d = std::fabs(static_cast<double>(y[i]) - e.y[i]);
    if (!(d <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << y[i] << ", expected " << e.y[i] << " (|diff| " << d
                    << " > tol " << tol << ")";
  }
}

// A backend's kernel for w, asserting the oracle would accept the layer.
inline std::unique_ptr<LinearKernel> make(const std::string& backend, const LinearWeights& w, DType act,
                                          KernelOptions opt = {}) {
  const Backend* b = find_backend(backend, LayerKind::linear);
  EXPECT_NE(b, nullptr) << backend;
  LinearProblem p{w.key, act, w.n, w.k, opt};
  EXPECT_EQ(rejection_reason(*b, p), "") << backend;
  return b->make_linear(w, p);
}

// Runs the kernel on x [m, k] (act dtype bytes); y [m, n] back as float32. y starts as a 0xAB
// pattern so unwritten outputs show.
inline std::vector<float> run(const LinearKernel& kern, const std::vector<uint8_t>& x, int64_t m, int64_t n,
                              DType act, ThreadPool& pool) {
  std::vector<uint8_t> y(static_cast<size_t>(m * n) * dtype_size(act), 0xAB);
  kern.forward(x.data(), m, y.data(), pool);
  return from_act(y.data(), act, static_cast<size_t>(m * n));
}

}  // namespace fp4lm::kernels::testing

// Skips a test of a backend this machine cannot run, with the backend's own reason.
#define REQUIRE_BACKEND(name, kind)                                                             \
  if (const std::string why_ = ::fp4lm::kernels::testing::unavailable(name, kind); !why_.empty()) { \
    GTEST_SKIP() << (name) << " unavailable: " << why_;                                         \
  }                                                                                             \
  static_assert(true)

// Skips a test that needs the AVX2 backends on a CPU without them.
#define REQUIRE_AVX2()                                                                  \
  if (!::fp4lm::kernels::testing::have_avx2()) {                                        \
    GTEST_SKIP() << "AVX2 kernels unavailable here (CPU lacks AVX2/FMA/F16C, or disabled)"; \
  }                                                                                     \
  static_assert(true)
