// CPU feature detection: internally consistent, and consistent with what this binary was
// compiled for (a binary built with -mavx2 can only be running on a CPU that has AVX2).
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <utility>

namespace fp4lm::cpu_features_test {
namespace {

bool mentions(const std::string& desc, const std::string& word) {
  // Whole-word match in the space-separated list.
  return (" " + desc + " ").find(" " + word + " ") != std::string::npos;
}

using F = CpuFeature;

TEST(CpuFeatures, ImpliedFeaturesAreConsistent) {
  const CpuFeatures& f = cpu_features();
  const std::pair<F, F> implies[] = {{F::avx2, F::avx},         {F::fma, F::avx},          {F::f16c, F::avx},
                                     {F::avx_vnni, F::avx2},    {F::avx512f, F::avx2},     {F::avx512bw, F::avx512f},
                                     {F::avx512vl, F::avx512f}, {F::avx512vbmi, F::avx512f}, {F::avx512vnni, F::avx512f},
                                     {F::avx512bf16, F::avx512f}};
  for (auto [feature, base] : implies)
    EXPECT_TRUE(!f.has(feature) || f.has(base)) << cpu_feature_name(feature) << " without " << cpu_feature_name(base);
  EXPECT_GE(f.logical_cores, 1);
  EXPECT_GE(f.physical_cores, 1);
}

TEST(CpuFeatures, DetectedOnceAndStable) {
  EXPECT_EQ(&cpu_features(), &cpu_features());
}

TEST(CpuFeatures, DescribeListsExactlyTheDetectedFeatures) {
  const CpuFeatures& f = cpu_features();
  const std::string d = f.describe();
  ASSERT_FALSE(d.empty());
  const std::pair<F, const char*> flags[] = {
      {F::sse42, "sse4.2"},        {F::avx, "avx"},           {F::avx2, "avx2"},
      {F::fma, "fma"},             {F::f16c, "f16c"},         {F::avx_vnni, "avx-vnni"},
      {F::avx512f, "avx512f"},     {F::avx512bw, "avx512bw"}, {F::avx512vl, "avx512vl"},
      {F::avx512vbmi, "avx512vbmi"}, {F::avx512vnni, "avx512vnni"}, {F::avx512bf16, "avx512bf16"},
      {F::amx_tile, "amx-tile"},     {F::amx_bf16, "amx-bf16"},   {F::amx_int8, "amx-int8"}};
  bool any = false;
  for (auto [feature, name] : flags) {
    EXPECT_EQ(cpu_feature_name(feature), name);
    EXPECT_EQ(mentions(d, name), f.has(feature)) << name << " in '" << d << "'";
    any = any || f.has(feature);
  }
  if (!any) {
    EXPECT_EQ(d, "none");
  }
  std::cout << "[ note ] cpu: " << d << "\n";
}

TEST(CpuFeatureSet, SetOperations) {
  constexpr CpuFeatureSet avx2{F::avx2, F::fma, F::f16c};
  constexpr CpuFeatureSet avx512{F::avx2, F::fma, F::f16c, F::avx512f, F::avx512bw};
  static_assert(avx512.contains(avx2) && !avx2.contains(avx512));
  static_assert(avx512.minus(avx2) == CpuFeatureSet{F::avx512f, F::avx512bw});
  static_assert(avx2.minus(avx512).empty() && CpuFeatureSet{}.empty());
  EXPECT_EQ(avx512.minus(avx2).names(), "avx512f avx512bw");
  EXPECT_EQ(CpuFeatureSet{}.names(), "none");
  EXPECT_EQ((CpuFeatureSet{F::f16c, F::sse42}.names()), "sse4.2 f16c");  // CpuFeature order, not insertion order
}

TEST(CpuFeatures, AgreesWithCompileTimeTarget) {
  const CpuFeatures& f = cpu_features();
#ifdef __AVX__
  EXPECT_TRUE(f.has(F::avx));
#endif
#ifdef __AVX2__
  EXPECT_TRUE(f.has(F::avx2));
#endif
#ifdef __FMA__
  EXPECT_TRUE(f.has(F::fma));
#endif
#ifdef __F16C__
  EXPECT_TRUE(f.has(F::f16c));
#endif
#ifdef __AVX512F__
  EXPECT_TRUE(f.has(F::avx512f));
#endif
#ifdef __AVX512VBMI__
  EXPECT_TRUE(f.has(F::avx512vbmi));
#endif
#ifdef __AVX512BF16__
  EXPECT_TRUE(f.has(F::avx512bf16));
#endif
  (void)f;
}

}  // namespace
}  // namespace fp4lm::cpu_features_test
