// GPTQ in the NVFP4 grid (quant/nvfp4_gptq.h) against plain references: the factor against H's
// inverse, identity H against round-to-nearest (no error to feed back), and on correlated inputs
// an output error ||X W^T - X Q^T||^2 below round-to-nearest's.
#include "quant/nvfp4_gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/nvfp4_scale_search.h"

namespace fp4lm::quant::nvfp4_gptq_test {
namespace {

// X[m, k] with correlated channels (x = z A, A random with a decaying spectrum) and H = X^T X.
struct Inputs {
  int64_t m, k;
  std::vector<float> x;
  std::vector<double> h;
};
Inputs correlated_inputs(int64_t m, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(k * k)), z(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) a[static_cast<size_t>(i * k + j)] = nd(rng) / (1.0f + 0.2f * static_cast<float>(i));
  for (float& v : z) v = nd(rng);
  Inputs in{m, k, std::vector<float>(static_cast<size_t>(m * k), 0.0f), std::vector<double>(static_cast<size_t>(k * k), 0.0)};
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        in.x[static_cast<size_t>(t * k + j)] += z[static_cast<size_t>(t * k + i)] * a[static_cast<size_t>(i * k + j)];
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        in.h[static_cast<size_t>(i * k + j)] +=
            static_cast<double>(in.x[static_cast<size_t>(t * k + i)]) * in.x[static_cast<size_t>(t * k + j)];
  return in;
}

std::vector<float> random_weights(int64_t n, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = nd(rng);
  return w;
}

// ||X W^T - X Q^T||^2 in double.
double output_error(const Inputs& in, const std::vector<float>& w, const std::vector<float>& q, int64_t n) {
  double e = 0;
  for (int64_t t = 0; t < in.m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double d = 0;
      for (int64_t c = 0; c < in.k; ++c)
        d += static_cast<double>(in.x[static_cast<size_t>(t * in.k + c)]) *
             (static_cast<double>(w[static_cast<size_t>(r * in.k + c)]) - q[static_cast<size_t>(r * in.k + c)]);
      e += d * d;
    }
  return e;
}

TEST(Nvfp4Gptq, FactorIsTheCholeskyOfTheInverse) {
  const Inputs in = correlated_inputs(200, 32, 1);
  const GptqFactor f = gptq_factor(in.h.data(), in.k, 0.01);
  const int64_t k = in.k;
  // (U^T U) (H + damp I) = I, and U is upper triangular with a positive diagonal.
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_GT(f.u[static_cast<size_t>(i * k + i)], 0.0);
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ(f.u[static_cast<size_t>(i * k + j)], 0.0);
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        double uu = 0;  // (U^T U)[i, l]
        for (int64_t p = 0; p <= std::min(i, l); ++p) uu += f.u[static_cast<size_t>(p * k + i)] * f.u[static_cast<size_t>(p * k + l)];
        s += uu * (in.h[static_cast<size_t>(l * k + j)] + (l == j ? f.damp : 0.0));
      }
      EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-8) << i << "," << j;
    }
}

TEST(Nvfp4Gptq, DiagonalHIsRoundToNearest) {
  // Uncorrelated inputs: U is diagonal, no error reaches another column: the amax/6 rule's export
  // and the searched one, byte for byte.
  const int64_t n = 8, k = 64;
  std::vector<double> h(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) h[static_cast<size_t>(i * k + i)] = 3.0 + static_cast<double>(i % 5);
  const std::vector<float> w = random_weights(n, k, 2);
  const Nvfp4Weight rtn = quantize_weight(w.data(), n, k);
  const Nvfp4Weight g = gptq_quantize_weight(w.data(), n, k, h.data(), std::nullopt, {.scale_search = false});
  EXPECT_EQ(g.codes, rtn.codes);
  EXPECT_EQ(g.scales, rtn.scales);
  EXPECT_EQ(g.weight_scale_2, rtn.weight_scale_2);
  const Nvfp4Weight srch = quantize_weight_searched(w.data(), n, k, std::nullopt);
  const Nvfp4Weight gs = gptq_quantize_weight(w.data(), n, k, h.data(), std::nullopt, {.scale_search = true});
  EXPECT_EQ(gs.codes, srch.codes);
  EXPECT_EQ(gs.scales, srch.scales);
}

TEST(Nvfp4Gptq, LowerOutputErrorThanRoundToNearestOnCorrelatedInputs) {
  const int64_t n = 24, k = 96;
  const Inputs in = correlated_inputs(400, k, 3);
  const std::vector<float> w = random_weights(n, k, 4);
  const double e_rtn = output_error(in, w, dequantize_weight(quantize_weight(w.data(), n, k)), n);
  const double e_srch = output_error(in, w, dequantize_weight(quantize_weight_searched(w.data(), n, k, std::nullopt)), n);
  for (bool search : {false, true}) {
    const Nvfp4Weight g = gptq_quantize_weight(w.data(), n, k, in.h.data(), std::nullopt, {.scale_search = search});
    const double e = output_error(in, w, dequantize_weight(g), n);
    EXPECT_LT(e, 0.8 * e_rtn) << "scale_search " << search << ": gptq " << e << " rtn " << e_rtn;
    if (search) {
      EXPECT_LT(e, e_srch);
    }
  }
}

TEST(Nvfp4Gptq, ActOrderAlsoBeatsRoundToNearestAndKeepsTheSearchedScales) {
  const int64_t n = 24, k = 96;
  const Inputs in = correlated_inputs(400, k, 3);
  const std::vector<float> w = random_weights(n, k, 4);
  const Nvfp4Weight srch = quantize_weight_searched(w.data(), n, k, std::nullopt);
  const double e_rtn = output_error(in, w, dequantize_weight(quantize_weight(w.data(), n, k)), n);
  const Nvfp4Weight g = gptq_quantize_weight(w.data(), n, k, in.h.data(), std::nullopt, {.scale_search = true, .act_order = true});
  EXPECT_EQ(g.scales, srch.scales);  // static groups: the scales come from the original weights
  EXPECT_LT(output_error(in, w, dequantize_weight(g), n), 0.8 * e_rtn);
  // The order is by decreasing H[c, c].
  const GptqFactor f = gptq_factor(in.h.data(), k, 0.01, true);
  ASSERT_EQ(f.perm.size(), static_cast<size_t>(k));
  for (size_t i = 1; i < f.perm.size(); ++i)
    EXPECT_GE(in.h[static_cast<size_t>(f.perm[i - 1] * k + f.perm[i - 1])], in.h[static_cast<size_t>(f.perm[i] * k + f.perm[i])]);
}

TEST(Nvfp4Gptq, RowsAreIndependent) {
  // Quantizing rows in two parts gives the whole matrix's bytes (what the quantizer's threads do).
  const int64_t n = 10, k = 48;
  const Inputs in = correlated_inputs(100, k, 6);
  const std::vector<float> w = random_weights(n, k, 7);
  const GptqFactor f = gptq_factor(in.h.data(), k);
  const float s2 = amax(w.data(), w.size()) / kNvfp4GlobalDivisor;
  const Nvfp4Weight all = gptq_quantize_rows(w.data(), n, k, f, s2);
  const Nvfp4Weight a = gptq_quantize_rows(w.data(), 3, k, f, s2), b = gptq_quantize_rows(w.data() + 3 * k, n - 3, k, f, s2);
  std::vector<uint8_t> codes = a.codes, scales = a.scales;
  codes.insert(codes.end(), b.codes.begin(), b.codes.end());
  scales.insert(scales.end(), b.scales.begin(), b.scales.end());
  EXPECT_EQ(codes, all.codes);
  EXPECT_EQ(scales, all.scales);
}

TEST(Nvfp4Gptq, Errors) {
  std::vector<double> h = {1, 0, 0, std::nan("")};
  EXPECT_THROW(gptq_factor(h.data(), 2), Error);
  std::vector<double> zero(16 * 16, 0.0);  // no signal: damping alone, still a factor
  EXPECT_NO_THROW(gptq_factor(zero.data(), 16));
  const GptqFactor f = gptq_factor(zero.data(), 16);
  std::vector<float> w(32, 0.1f);
  EXPECT_THROW(gptq_quantize_rows(w.data(), 1, 32, f, 1.0f), Error);  // factor for k = 16
  EXPECT_THROW(gptq_quantize_rows(w.data(), 2, 16, f, 0.0f), Error);
}

}  // namespace
}  // namespace fp4lm::quant::nvfp4_gptq_test
