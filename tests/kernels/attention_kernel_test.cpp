// The attention kernel variants (kernels/attention.h: reference, avx2, avx512) against an fp64
// evaluation of the same cached values and against `reference`: head_dim 64/128/256 and sizes
// that are not a multiple of the vector width, GQA groups 1-16 (beyond one 8-head block), lengths
// 1..700 across the 16-position padding and the reference's 64-row blocks, every KV dtype (FP8 with
// scales), decode (one row) and prefill (rows with causal masking), score ranges of hundreds
// (softmax stability); bit-identical results however rows and heads are split over calls; an FP8
// cache equal bit for bit to a float32 cache of its dequantized values; a sliding window's ring
// read in place equal bit for bit to the window copied out; argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"
#include "kernels/attention.h"

namespace fp4lm::kernels::attention_kernel_test {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// One KV head's cache plane pair (`len` positions) and a call's queries.
struct Problem {
  DType dt = DType::BF16;
  int64_t hd = 128, group = 4, pos0 = 0, rows = 1;
  float k_scale = 1.0f, v_scale = 1.0f;
  std::vector<uint8_t> keys, values;
  std::vector<float> kf, vf;  // the cached values as float32 (what every variant reads)
  std::vector<float> q;      // [rows, group, hd]

  int64_t len() const { return pos0 + rows; }
  AttentionCall call(float* out) const {
    AttentionCall c;
    c.q = q.data();
    c.q_stride = group * hd;
    c.out = out;
    c.out_stride = group * hd;
    c.rows = rows;
    c.pos0 = pos0;
    c.group = group;
    c.head_dim = hd;
    c.kv_dtype = dt;
    c.keys = keys.data();
    c.values = values.data();
    c.k_scale = k_scale;
    c.v_scale = v_scale;
    return c;
  }
};

// Stores x in dtype dt at element i of `bytes`; returns the value read back.
float store(std::vector<uint8_t>& bytes, DType dt, size_t i, float x, float scale) {
  switch (dt) {
    case DType::F32:
      std::memcpy(bytes.data() + 4 * i, &x, 4);
      return x;
    case DType::BF16: {
      const uint16_t h = f32_to_bf16(x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      return bf16_to_f32(h);
    }
    case DType::F16: {
      const uint16_t h = f32_to_f16(x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      return f16_to_f32(h);
    }
    default: {
      const uint8_t code = f32_to_e4m3(x / scale);
      bytes[i] = code;
      return e4m3_to_f32(code) * scale;
    }
  }
}

// Keys and values N(0, 1) (FP8: scales chosen so they use E4M3's range, subnormals included);
// queries N(0, q_sigma), so scores spread over about ±q_sigma × sqrt(head_dim) × 3.
Problem make_problem(DType dt, int64_t hd, int64_t group, int64_t pos0, int64_t rows, float q_sigma, uint32_t seed) {
  Problem p;
  p.dt = dt;
  p.hd = hd;
  p.group = group;
  p.pos0 = pos0;
  p.rows = rows;
  if (dt == DType::F8_E4M3) {
    p.k_scale = 0.0125f;
    p.v_scale = 0.03f;
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = static_cast<size_t>(p.len() * hd);
  p.keys.resize(n * dtype_size(dt));
  p.values.resize(p.keys.size());
  p.kf.resize(n);
  p.vf.resize(n);
  for (size_t i = 0; i < n; ++i) {
    p.kf[i] = store(p.keys, dt, i, normal(rng), p.k_scale);
    p.vf[i] = store(p.values, dt, i, normal(rng), p.v_scale);
  }
  p.q.resize(static_cast<size_t>(rows * group * hd));
  for (float& x : p.q) x = normal(rng) * q_sigma;
  return p;
}

// The fp64 evaluation of one (row, head) over the cached values, and a bound on how far a
// float32 evaluation by the rule of kernels/attention.h may be from it, per output element:
// with u = 2^-24, a score's error is at most δs = (hd + 2) u Σ_d |q_d k_d| / sqrt(hd) (a dot
// product of hd terms in any summation order, the scaling); s − max then moves by 2 δs, and exp
// adds at most 4 u (vector exp: a degree-7 polynomial, truncation < 1e-8, plus roundings), so
// each weight has relative error ρ <= 2 δs + 4 u + (its rounding); normalising turns relative
// weight errors ρ into at most 2 ρ max|v|. The sums over len positions (weights and weighted
// values, any order) add (len + 1) u max|v| each; the final scaling one u. The bound is that
// sum, doubled for second-order terms.
struct Expected {
  std::vector<double> o;    // [hd]
  std::vector<double> tol;  // [hd]
};

Expected fp64_head(const Problem& p, int64_t i, int64_t j) {
  const int64_t len = p.pos0 + i + 1, hd = p.hd;
  const float* q = p.q.data() + (i * p.group + j) * hd;
  std::vector<double> s(static_cast<size_t>(len));
  double mx = -INFINITY, ds = 0;
  for (int64_t t = 0; t < len; ++t) {
    double d = 0, a = 0;
    for (int64_t e = 0; e < hd; ++e) {
      d += static_cast<double>(q[e]) * p.kf[t * hd + e];
      a += std::fabs(static_cast<double>(q[e]) * p.kf[t * hd + e]);
    }
    s[t] = d / std::sqrt(static_cast<double>(hd));
    mx = std::max(mx, s[t]);
    ds = std::max(ds, static_cast<double>(hd + 2) * kU * a / std::sqrt(static_cast<double>(hd)) + kU * std::fabs(s[t]));
  }
  double sum = 0;
  for (double& x : s) sum += x = std::exp(x - mx);
  const double rho = 2 * ds + 6 * kU;
  Expected e;
  e.o.assign(static_cast<size_t>(hd), 0.0);
  e.tol.assign(static_cast<size_t>(hd), 0.0);
  for (int64_t d = 0; d < hd; ++d) {
    double acc = 0, vmax = 0;
    for (int64_t t = 0; t < len; ++t) {
      acc += s[t] * p.vf[t * hd + d];
      vmax = std::max(vmax, std::fabs(static_cast<double>(p.vf[t * hd + d])));
    }
    e.o[d] = acc / sum;
    e.tol[d] = 2 * vmax * (2 * rho + 2 * static_cast<double>(len + 1) * kU + kU) + 1e-30;
  }
  return e;
}

std::vector<float> run(const AttentionKernel& k, const Problem& p) {
  std::vector<float> out(p.q.size(), NAN);
  run_attention(k, p.call(out.data()));
  return out;
}

std::string dtype_label(DType dt) { return std::string(dtype_name(dt)); }

struct Case {
  int64_t hd, group, pos0, rows;
  float q_sigma;
};

// Decode at lengths across the 16-position padding and the reference's 64-row blocks, prefill
// rows with causal masking, head_dim not a multiple of 8 or 16, groups of one to two head blocks.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {128, 8, 0, 1, 1.0f},    {128, 8, 15, 1, 1.0f},  {128, 8, 16, 1, 1.0f},   {128, 4, 63, 1, 1.0f},
      {128, 4, 64, 1, 1.0f},   {128, 8, 499, 1, 1.0f}, {128, 2, 699, 1, 0.5f},  {64, 1, 100, 1, 1.0f},
      {64, 2, 0, 20, 1.0f},    {64, 4, 60, 9, 1.0f},   {256, 2, 30, 5, 1.0f},   {256, 1, 257, 1, 1.0f},
      {40, 8, 33, 3, 1.0f},    {13, 4, 17, 4, 1.0f},   {24, 16, 70, 2, 1.0f},   {128, 12, 40, 3, 1.0f},
      {128, 8, 200, 1, 12.0f},  // scores over about ±400: the max subtraction must hold
      {72, 3, 5, 6, 30.0f},
  };
  return c;
}

class AttentionKernelTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  const AttentionKernel& kernel() {
    const AttentionKernel* k = find_attention_kernel(std::get<0>(GetParam()));
    EXPECT_NE(k, nullptr);
    return *k;
  }
  void SetUp() override {
    const AttentionKernel* k = find_attention_kernel(std::get<0>(GetParam()));
    ASSERT_NE(k, nullptr);
    if (std::string why = k->unavailable_reason(); !why.empty()) GTEST_SKIP() << k->name << ": " << why;
  }
};

TEST_P(AttentionKernelTest, MatchesFp64AndReference) {
  const DType dt = std::get<1>(GetParam());
  const AttentionKernel& ref = *find_attention_kernel("reference");
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    const Problem p = make_problem(dt, c.hd, c.group, c.pos0, c.rows, c.q_sigma, seed++);
    const std::vector<float> got = run(kernel(), p), want = run(ref, p);
    double worst = 0;  // the largest error as a fraction of the bound
    for (int64_t i = 0; i < p.rows; ++i)
      for (int64_t j = 0; j < p.group; ++j) {
        const Expected e = fp64_head(p, i, j);
        for (int64_t d = 0; d < p.hd; ++d) {
          const size_t at = static_cast<size_t>((i * p.group + j) * p.hd + d);
          ASSERT_TRUE(std::isfinite(got[at]));
          const double err = std::fabs(got[at] - e.o[d]);
          worst = std::max(worst, err / e.tol[d]);
          ASSERT_LE(err, e.tol[d]) << "fp64: hd " << c.hd << " group " << c.group << " pos0 " << c.pos0 << " row " << i
                                   << " head " << j << " dim " << d << ": " << got[at] << " vs " << e.o[d];
          // Both within the bound of fp64, so within twice it of each other.
          ASSERT_LE(std::fabs(got[at] - want[at]), 2 * e.tol[d])
              << "reference: hd " << c.hd << " group " << c.group << " row " << i << " head " << j << " dim " << d;
        }
      }
    RecordProperty("worst_hd" + std::to_string(c.hd) + "_g" + std::to_string(c.group) + "_p" + std::to_string(c.pos0),
                   std::to_string(worst));
  }
}

// Each (row, head) is computed the same way whatever else the call holds: a prefill call equals
// one decode call per row, and a whole group equals one call per head, bit for bit. (The model
// splits its (KV head, row) tasks over threads in such calls, so results do not depend on the
// thread count or the batch.)
TEST_P(AttentionKernelTest, SplittingRowsAndHeadsChangesNoBit) {
  const DType dt = std::get<1>(GetParam());
  for (const Case& c : {Case{128, 8, 40, 7, 1.0f}, Case{40, 12, 3, 5, 2.0f}, Case{64, 3, 70, 2, 1.0f}}) {
    const Problem p = make_problem(dt, c.hd, c.group, c.pos0, c.rows, c.q_sigma, 77);
    const std::vector<float> whole = run(kernel(), p);
    std::vector<float> split(whole.size(), NAN);
    for (int64_t i = 0; i < p.rows; ++i)
      for (int64_t j = 0; j < p.group; ++j) {
        AttentionCall call = p.call(split.data());
        call.rows = 1;
        call.pos0 = p.pos0 + i;
        call.group = 1;
        call.q = p.q.data() + (i * p.group + j) * p.hd;
        call.out = split.data() + (i * p.group + j) * p.hd;
        run_attention(kernel(), call);
      }
    EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
        << "hd " << c.hd << " group " << c.group;
  }
}

// A sliding window's ring read in place (ring_first / ring_rows) gives the bits of the same
// positions copied out contiguously: windows that wrap at every offset, in prefill (several rows)
// and decode, across the reference's 64-row blocks and the 64-position value blocks.
TEST_P(AttentionKernelTest, RingViewEqualsTheContiguousWindow) {
  const DType dt = std::get<1>(GetParam());
  const size_t es = dtype_size(dt);
  for (const Case& c : {Case{128, 8, 90, 1, 1.0f}, Case{40, 4, 20, 6, 1.0f}, Case{13, 2, 150, 3, 1.0f}}) {
    const Problem p = make_problem(dt, c.hd, c.group, c.pos0, c.rows, c.q_sigma, 31);
    const std::vector<float> want = run(kernel(), p);
    const int64_t len = p.len(), row_bytes = p.hd * static_cast<int64_t>(es);
    for (int64_t ring : {len, len + 1, len + 37}) {
      for (int64_t first : {int64_t{0}, int64_t{1}, len / 2, ring - 1}) {
        // Position t at ring row (first + t) mod ring; other rows hold garbage.
        std::vector<uint8_t> keys(static_cast<size_t>(ring * row_bytes), 0x7b), values(keys.size(), 0x3c);
        for (int64_t t = 0; t < len; ++t) {
          const int64_t r = (first + t) % ring;
          std::memcpy(keys.data() + r * row_bytes, p.keys.data() + t * row_bytes, static_cast<size_t>(row_bytes));
          std::memcpy(values.data() + r * row_bytes, p.values.data() + t * row_bytes, static_cast<size_t>(row_bytes));
        }
        std::vector<float> got(want.size(), NAN);
        AttentionCall call = p.call(got.data());
        call.keys = keys.data();
        call.values = values.data();
        call.ring_first = first;
        call.ring_rows = ring;
        run_attention(kernel(), call);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << "hd " << c.hd << " len " << len << " ring " << ring << " first " << first;
      }
    }
  }
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const AttentionKernel* k : attention_kernels()) names.emplace_back(k->name);
  return names;
}

class AttentionVariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  const AttentionKernel& kernel() { return *find_attention_kernel(GetParam()); }
  void SetUp() override {
    const AttentionKernel* k = find_attention_kernel(GetParam());
    ASSERT_NE(k, nullptr);
    if (std::string why = k->unavailable_reason(); !why.empty()) GTEST_SKIP() << k->name << ": " << why;
  }
};

// An FP8 cache attends over code × scale rounded once: the same bits as a float32 cache holding
// those values (vector body and scalar tail of head_dim).
TEST_P(AttentionVariantTest, Fp8CacheEqualsFloat32CacheOfItsValues) {
  for (const Case& c : {Case{128, 8, 90, 3, 1.0f}, Case{13, 2, 20, 2, 1.0f}}) {
    const Problem p8 = make_problem(DType::F8_E4M3, c.hd, c.group, c.pos0, c.rows, c.q_sigma, 5);
    Problem p32 = p8;
    p32.dt = DType::F32;
    p32.k_scale = p32.v_scale = 1.0f;
    p32.keys.resize(p8.kf.size() * 4);
    p32.values.resize(p32.keys.size());
    std::memcpy(p32.keys.data(), p8.kf.data(), p32.keys.size());
    std::memcpy(p32.values.data(), p8.vf.data(), p32.values.size());
    const std::vector<float> a = run(kernel(), p8), b = run(kernel(), p32);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "hd " << c.hd;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionVariantTest, ::testing::ValuesIn(variant_names()),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Variants, AttentionKernelTest,
                         ::testing::Combine(::testing::ValuesIn(variant_names()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::F8_E4M3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + dtype_label(std::get<1>(info.param));
                         });

TEST(AttentionKernels, TableEndsWithReferenceAndTheChoiceIsAvailable) {
  const auto all = attention_kernels();
  ASSERT_FALSE(all.empty());
  EXPECT_STREQ(all.back()->name, "reference");
  EXPECT_EQ(all.back()->unavailable_reason(), "");
  EXPECT_EQ(attention_kernel().unavailable_reason(), "");
  // Without FP4LM_ATTENTION_KERNEL the choice is the first available variant.
  if (!std::getenv("FP4LM_ATTENTION_KERNEL")) {
    for (const AttentionKernel* k : all)
      if (k->unavailable_reason().empty()) {
        EXPECT_EQ(k, &attention_kernel());
        break;
      }
  }
  EXPECT_EQ(find_attention_kernel("no_such_variant"), nullptr);
}

TEST(AttentionKernels, RejectsBadCalls) {
  Problem p = make_problem(DType::BF16, 16, 2, 3, 1, 1.0f, 9);
  std::vector<float> out(p.q.size());
  const AttentionKernel& ref = *find_attention_kernel("reference");
  AttentionCall c = p.call(out.data());
  c.kv_dtype = DType::I32;
  EXPECT_NE(fp4lm::test::error_of([&] { run_attention(ref, c); }).find("KV dtype I32"), std::string::npos);
  c = p.call(out.data());
  c.head_dim = 0;
  EXPECT_THROW(run_attention(ref, c), Error);
  c = p.call(out.data());
  c.q_stride = 16;
  EXPECT_NE(fp4lm::test::error_of([&] { run_attention(ref, c); }).find("q stride 16"), std::string::npos);
  c = p.call(out.data());
  c.ring_rows = 3;  // positions [0, 4) do not fit a ring of 3 rows
  EXPECT_NE(fp4lm::test::error_of([&] { run_attention(ref, c); }).find("ring of 3 rows from row 0"), std::string::npos);
  c.ring_rows = 8;
  c.ring_first = 8;
  EXPECT_NE(fp4lm::test::error_of([&] { run_attention(ref, c); }).find("ring of 8 rows from row 8"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::kernels::attention_kernel_test
