// `fp4lm backends` under the one ISA decision (kernels/isa.h): FP4LM_DISABLE_ISA means the same for
// every kernel family (GEMM/MoE backends of every format, attention, delta rule, SSM scan), and a model still
// runs on the portable kernels when every vector kernel is switched off.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/paths.h"


namespace backends_cli_test {
namespace {

using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using json = nlohmann::json;

json backends_with(const std::string& env) {
  auto r = run_command(env + " " + fp4lm_bin() + " backends --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

// FP4LM_DISABLE_ISA=avx2: every AVX2 and AVX-512 variant of every family is unavailable with the
// reason; only the portable ones remain, and they are the ones selected.
TEST(BackendsCli, DisableAvx2LeavesOnlyThePortableKernelsOfEveryFamily) {
  const json all = backends_with("FP4LM_DISABLE_ISA=avx2");
  std::set<std::string> vector_kinds, schemes;
  int portable = 0;
  for (const json& b : all) {
    const std::string isa = b["isa"];
    if (isa == "portable") {
      ++portable;
      EXPECT_TRUE(b["available"].get<bool>()) << b.dump();
      if (b.contains("selected")) {
        EXPECT_TRUE(b["selected"].get<bool>()) << b.dump();
      }
      continue;
    }
    ASSERT_TRUE(isa == "avx2" || isa == "avx512" || isa == "amx") << b.dump();
    EXPECT_FALSE(b["available"].get<bool>()) << b.dump();
    EXPECT_EQ(b["unavailable_reason"], "disabled by FP4LM_DISABLE_ISA=avx2") << b.dump();
    if (b.contains("selected")) {
      EXPECT_FALSE(b["selected"].get<bool>()) << b.dump();
    }
    vector_kinds.insert(b["kind"].get<std::string>() + "/" + isa);
    if (b.contains("schemes"))
      for (const json& s : b["schemes"]) schemes.insert(s.get<std::string>() + "/" + isa);
  }
  EXPECT_EQ(portable, 5);  // reference Linear, MoE, attention, delta rule, SSM scan
  // Every family's vector variants are listed: GEMM (Linear), MoE, attention, delta rule, SSM scan...
  for (const char* k : {"linear/avx2", "linear/avx512", "moe/avx2", "moe/avx512", "attention/avx2", "attention/avx512",
                        "delta_rule/avx2", "ssm_scan/avx2", "ssm_scan/avx512"})
    EXPECT_TRUE(vector_kinds.count(k)) << k;
  // ... and the GEMM/MoE backends of every weight format: NVFP4, FP8, dense.
  for (const char* s : {"nvfp4_w4a4/avx2", "nvfp4_w4a16/avx512", "fp8_w8a16/avx2", "fp8_w8a16/avx512",
                        "unquantized/avx2", "unquantized/avx512"})
    EXPECT_TRUE(schemes.count(s)) << s;
}

// FP4LM_DISABLE_ISA=avx512 switches off exactly the AVX-512 variants and the AMX ones built on
// them: the AVX2 ones are as available as without the override.
TEST(BackendsCli, DisableAvx512SwitchesOffOnlyTheAvx512Variants) {
  const json plain = backends_with(""), off = backends_with("FP4LM_DISABLE_ISA=avx512");
  ASSERT_EQ(plain.size(), off.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i]["name"], off[i]["name"]);
    if (off[i]["isa"] == "avx512" || off[i]["isa"] == "amx") {
      EXPECT_FALSE(off[i]["available"].get<bool>()) << off[i].dump();
      EXPECT_EQ(off[i]["unavailable_reason"], "disabled by FP4LM_DISABLE_ISA=avx512") << off[i].dump();
    } else {
      EXPECT_EQ(off[i]["available"], plain[i]["available"]) << off[i].dump();
      EXPECT_EQ(off[i]["unavailable_reason"], plain[i]["unavailable_reason"]) << off[i].dump();
    }
  }
}

// FP4LM_DISABLE_ISA=amx switches off exactly the AMX variants (listed on x86 builds whose
// compiler takes -mamx-*, available or not), nothing else.
TEST(BackendsCli, DisableAmxSwitchesOffOnlyTheAmxVariants) {
  const json plain = backends_with(""), off = backends_with("FP4LM_DISABLE_ISA=amx");
  ASSERT_EQ(plain.size(), off.size());
  int amx = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i]["name"], off[i]["name"]);
    if (off[i]["isa"] == "amx") {
      ++amx;
      EXPECT_FALSE(off[i]["available"].get<bool>()) << off[i].dump();
      EXPECT_EQ(off[i]["unavailable_reason"], "disabled by FP4LM_DISABLE_ISA=amx") << off[i].dump();
    } else {
      EXPECT_EQ(off[i]["available"], plain[i]["available"]) << off[i].dump();
      EXPECT_EQ(off[i]["unavailable_reason"], plain[i]["unavailable_reason"]) << off[i].dump();
    }
  }
  if (amx > 0) {
    EXPECT_EQ(amx, 4);  // cpu_w4a16_amx and cpu_dense_amx, Linear and MoE
  }
}

TEST(BackendsCli, AnUnknownDisabledIsaIsAnErrorNamingTheVariable) {
  auto r = run_command("FP4LM_DISABLE_ISA=sse9 " + fp4lm_bin() + " backends");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("FP4LM_DISABLE_ISA=sse9: not an instruction set that can be switched off (expected avx2, "
                       "avx512 or amx)"),
            std::string::npos)
      << r.err;
}

// A hybrid model (gated delta-nets, attention, NVFP4 MoE, dense layers) generates on the portable
// kernels alone: the loader picks `reference` for every layer and for attention.
TEST(BackendsCli, AModelRunsOnThePortableKernelsWhenAvx2IsDisabled) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "hybrid").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + dir + " --arch Qwen3_5MoeForCausalLM --algo NVFP4 --layers 4");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  auto r = run_command("FP4LM_DISABLE_ISA=avx2 " + fp4lm_bin() + " generate --model " + dir +
                       " --prompt-ids 1,5,9 --max-tokens 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Using 'reference' attention kernel"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Using 'reference' NVFP4 MoE backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Using 'reference' NVFP4 Linear backend"), std::string::npos) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace

}  // namespace backends_cli_test
