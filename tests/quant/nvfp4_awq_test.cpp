// AWQ for NVFP4 (quant/nvfp4_awq.h): ModelOpt's awq_lite scale rule on hand-computed values, the
// H form of the output error against the error computed from the inputs themselves, and on a
// layer whose input has a few large channels (what AWQ is for) the chosen scales cut the output
// error on the calibration inputs well below plain rounding's.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "quant/nvfp4.h"
#include "quant/nvfp4_awq.h"

namespace fp4lm::quant::nvfp4_awq_test {
namespace {

// y = x · (deq · diag(1/s))^T - x · W^T summed squared over the m tokens: the error AWQ's search
// measures (ModelOpt: x · diag(1/s) fed to Q(W · diag(s))), computed from x directly.
double direct_error(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n, int64_t k,
                    const std::vector<float>* s) {
  std::vector<float> ws = w;
  if (s)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) ws[static_cast<size_t>(r * k + c)] *= (*s)[static_cast<size_t>(c)];
  const std::vector<float> deq = dequantize_weight(quantize_weight(ws.data(), n, k));
  double e = 0.0;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double y = 0.0, ref = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double xv = x[static_cast<size_t>(t * k + c)];
        const double sc = s ? (*s)[static_cast<size_t>(c)] : 1.0;
        y += (xv / sc) * deq[static_cast<size_t>(r * k + c)];
        ref += xv * w[static_cast<size_t>(r * k + c)];
      }
      e += (y - ref) * (y - ref);
    }
  return e;
}

std::vector<double> gram(const std::vector<float>& x, int64_t m, int64_t k) {
  std::vector<double> h(static_cast<size_t>(k * k), 0.0);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        h[static_cast<size_t>(i * k + j)] += static_cast<double>(x[static_cast<size_t>(t * k + i)]) * x[static_cast<size_t>(t * k + j)];
  return h;
}

TEST(AwqScale, IsModelOptsRuleNormalizedByTheGeometricMeanOfItsExtremes) {
  const std::vector<float> act = {4.0f, 1.0f, 0.25f, 9.0f}, wmag = {1.0f, 0.25f, 1.0f, 0.5f};
  // alpha 0.5: sqrt(a) / sqrt(w) = {2, 2, 0.5, 3*sqrt(2)}; max*min = 4.2426 * 0.5.
  const std::vector<float> s = awq_scale(act.data(), wmag.data(), 4, 0.5f);
  const double raw[4] = {2.0, 2.0, 0.5, 3.0 * std::sqrt(2.0)};
  const double norm = std::sqrt(raw[3] * raw[2]);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(s[static_cast<size_t>(c)], raw[c] / norm, 1e-6) << c;
  // alpha 0: 1 / w, clamped to [1e-4, 1e4] before normalizing.
  const std::vector<float> zero_w = {1.0f, 0.0f, 1.0f, 1.0f};
  const std::vector<float> s0 = awq_scale(act.data(), zero_w.data(), 4, 0.0f);
  EXPECT_NEAR(s0[1] / s0[0], 1e4, 1.0);
  EXPECT_NEAR(s0[0] * s0[1], 1.0, 1e-6);  // max * min normalized to 1
}

TEST(AwqWeightMagnitude, IsTheRowMeanOfEachElementOverItsBlockAmax) {
  std::vector<float> w(2 * 32, 1.0f);
  w[0] = -4.0f;   // row 0, block 0: amax 4, every other element 0.25 of it
  w[32 + 17] = 2.0f;  // row 1, block 1: amax 2
  const std::vector<float> m = awq_weight_magnitude(w.data(), 2, 32);
  EXPECT_NEAR(m[0], (1.0 + 1.0) / 2, 1e-6);
  EXPECT_NEAR(m[1], (0.25 + 1.0) / 2, 1e-6);
  EXPECT_NEAR(m[17], (1.0 + 1.0) / 2, 1e-6);
  EXPECT_NEAR(m[18], (1.0 + 0.5) / 2, 1e-6);
}

// A layer whose input has four channels 30x larger than the rest (the activation outliers of real
// LLMs): the H form equals the error over the tokens, and the chosen scales cut it well below
// round-to-nearest's — on the very calibration inputs, checked without H.
TEST(AwqSearch, ChosenScalesReduceTheOutputErrorOnTheCalibrationInputs) {
  const int64_t m = 96, n = 24, k = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; ++c)
      x[static_cast<size_t>(t * k + c)] = nd(rng) * (c % 16 == 3 ? 30.0f : 1.0f);
  for (float& v : w) v = nd(rng) * 0.05f;
  const std::vector<double> h = gram(x, m, k);
  std::vector<float> act(static_cast<size_t>(k), 0.0f);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; ++c) act[static_cast<size_t>(c)] += std::fabs(x[static_cast<size_t>(t * k + c)]) / m;

  const AwqSearch r = awq_search(w.data(), n, k, act.data(), h.data());
  ASSERT_EQ(r.error.size(), static_cast<size_t>(kAwqAlphaSteps + 1));
  const double plain = direct_error(x, m, w, n, k, nullptr);
  EXPECT_NEAR(r.error_unscaled, plain, 1e-3 * plain);
  const double chosen = direct_error(x, m, w, n, k, &r.scale);
  const double best = *std::min_element(r.error.begin(), r.error.end());
  EXPECT_NEAR(best, chosen, 1e-3 * chosen);
  EXPECT_EQ(r.error[static_cast<size_t>(std::lround(r.alpha * kAwqAlphaSteps))], best);
  EXPECT_GT(r.alpha, 0.0f);
  EXPECT_LT(chosen, 0.7 * plain) << "alpha " << r.alpha;
  // Every alpha's H-form error is that alpha's error over the tokens.
  std::vector<float> wmag = awq_weight_magnitude(w.data(), n, k);
  for (int i = 0; i <= kAwqAlphaSteps; i += 5) {
    const std::vector<float> s = awq_scale(act.data(), wmag.data(), k, static_cast<float>(i) / kAwqAlphaSteps);
    const double e = direct_error(x, m, w, n, k, &s);
    EXPECT_NEAR(r.error[static_cast<size_t>(i)], e, 1e-3 * e) << i;
  }
}

TEST(AwqSearch, RejectsBadStatistics) {
  std::vector<float> w(16 * 16, 0.1f), act(16, 1.0f);
  std::vector<double> h(16 * 16, 0.0);
  act[3] = NAN;
  EXPECT_THROW(awq_search(w.data(), 16, 16, act.data(), h.data()), std::exception);
  EXPECT_THROW(awq_search(w.data(), 16, 8, act.data(), h.data()), std::exception);
}

}  // namespace
}  // namespace fp4lm::quant::nvfp4_awq_test
