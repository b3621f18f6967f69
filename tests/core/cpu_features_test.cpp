// CPU feature detection: internally consistent, and consistent with what this binary was
// compiled for (a binary built with -mavx2 can only be running on a CPU that has AVX2).
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <utility>

namespace fp4lm {
namespace {

bool mentions(const std::string& desc, const std::string& word) {
  // Whole-word match in the space-separated list.
  return (" " + desc + " ").find(" " + word + " ") != std::string::npos;
}

TEST(CpuFeatures, ImpliedFeaturesAreConsistent) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(!f.avx2 || f.avx) << "avx2 without avx";
  EXPECT_TRUE(!f.fma || f.avx) << "fma without avx";
  EXPECT_TRUE(!f.f16c || f.avx) << "f16c without avx";
  EXPECT_TRUE(!f.avx_vnni || f.avx2) << "avx_vnni without avx2";
  EXPECT_TRUE(!f.avx512f || f.avx2) << "avx512f without avx2";
  EXPECT_TRUE(!f.avx512bw || f.avx512f) << "avx512bw without avx512f";
  EXPECT_TRUE(!f.avx512vl || f.avx512f) << "avx512vl without avx512f";
  EXPECT_TRUE(!f.avx512vbmi || f.avx512f) << "avx512vbmi without avx512f";
  EXPECT_TRUE(!f.avx512vnni || f.avx512f) << "avx512vnni without avx512f";
  EXPECT_TRUE(!f.avx512bf16 || f.avx512f) << "avx512bf16 without avx512f";
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
  const std::pair<bool, const char*> flags[] = {
      {f.sse42, "sse4.2"},        {f.avx, "avx"},           {f.avx2, "avx2"},
      {f.fma, "fma"},             {f.f16c, "f16c"},         {f.avx_vnni, "avx-vnni"},
      {f.avx512f, "avx512f"},     {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"},
      {f.avx512vbmi, "avx512vbmi"}, {f.avx512vnni, "avx512vnni"}, {f.avx512bf16, "avx512bf16"}};
  bool any = false;
  for (auto [on, name] : flags) {
    EXPECT_EQ(mentions(d, name), on) << name << " in '" << d << "'";
    any = any || on;
  }
  if (!any) {
    EXPECT_EQ(d, "none");
  }
  std::cout << "[ note ] cpu: " << d << "\n";
}

TEST(CpuFeatures, AgreesWithCompileTimeTarget) {
  const CpuFeatures& f = cpu_features();
#ifdef __AVX__
  EXPECT_TRUE(f.avx);
#endif
#ifdef __AVX2__
  EXPECT_TRUE(f.avx2);
#endif
#ifdef __FMA__
  EXPECT_TRUE(f.fma);
#endif
#ifdef __F16C__
  EXPECT_TRUE(f.f16c);
#endif
#ifdef __AVX512F__
  EXPECT_TRUE(f.avx512f);
#endif
#ifdef __AVX512VBMI__
  EXPECT_TRUE(f.avx512vbmi);
#endif
#ifdef __AVX512BF16__
  EXPECT_TRUE(f.avx512bf16);
#endif
  (void)f;
}

}  // namespace
}  // namespace fp4lm
