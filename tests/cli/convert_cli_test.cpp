// `fp4lm convert` end to end: exit codes (2 usage, 1 bad file) with the file and the reason on
// stderr, no output directory left behind by a failure; and, when the real model is cached
// (scripts/fetch_smollm2.sh), a whole conversion whose output `fp4lm inspect` reads.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/gguf_writer.h"
#include "common/paths.h"

namespace fp4lm::test::convert_cli_test {
namespace {

namespace fs = std::filesystem;

TEST(ConvertCli, UsageErrorsExitTwo) {
  TempDir d;
  auto r = run_fp4lm("convert --out " + (d / "o").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gguf is required"), std::string::npos) << r.err;
  GgufBuilder g;
  g.str("general.architecture", "llama");
  g.write(d / "m.gguf");
  r = run_fp4lm("convert --gguf " + (d / "m.gguf").string() + " --out " + (d / "o").string() + " --dtype fp8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--dtype: 'fp8' is not supported (use bfloat16, float16 or float32)"), std::string::npos) << r.err;
}

TEST(ConvertCli, BadFilesExitOneNamingTheFileAndLeaveNoOutput) {
  TempDir d;
  write_file(d / "junk.gguf", "GGML and then some bytes");
  auto r = run_fp4lm("convert --gguf " + (d / "junk.gguf").string() + " --out " + (d / "o").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((d / "junk.gguf").string() + ": not a GGUF file: expected the magic \"GGUF\", found \"GGML\""),
            std::string::npos)
      << r.err;
  GgufBuilder g;
  g.str("general.architecture", "gemma3");
  g.write(d / "gemma.gguf");
  r = run_fp4lm("convert --gguf " + (d / "gemma.gguf").string() + " --out " + (d / "o").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("metadata key 'general.architecture': 'gemma3' is not supported by fp4lm convert"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d / "o"));
  for (const auto& e : fs::directory_iterator(d.path())) EXPECT_EQ(e.path().filename().string().find(".o."), std::string::npos);
}

TEST(ConvertCli, TheRealModelWhenCached) {
  fs::path cache;
  if (const char* c = std::getenv("FP4LM_CACHE"); c && *c) cache = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) cache = fs::path(x) / "fp4lm";
  else if (const char* h = std::getenv("HOME"); h && *h) cache = fs::path(h) / ".cache" / "fp4lm";
  const fs::path gguf = cache / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf.string() << " is not cached: `bash scripts/fetch_smollm2.sh` fetches it";
  TempDir d;
  auto r = run_fp4lm("convert --gguf " + gguf.string() + " --out " + (d / "hf").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("LlamaForCausalLM, 272 tensors (F32 x61, Q4_1 x210, Q8_0 x1) as bfloat16, 256.6 MiB, tied "
                       "embeddings; 33 metadata keys"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err.find("WARNING"), std::string::npos) << r.err;  // every key of this file is converted
  r = run_fp4lm("convert --gguf " + gguf.string() + " --out " + (d / "hf").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already exists (pass --force to replace it)"), std::string::npos) << r.err;
  r = run_fp4lm("inspect --json --model " + (d / "hf").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"architecture\": \"LlamaForCausalLM\""), std::string::npos) << r.out.substr(0, 400);
}

}  // namespace
}  // namespace fp4lm::test::convert_cli_test
