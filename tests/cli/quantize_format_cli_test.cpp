// `fp4lm quantize --format compressed-tensors` end to end through the CLI: the output is read back
// as a compressed-tensors checkpoint; an unknown --format is a usage error (exit 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace quantize_format_cli_test {


using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using nlohmann::json;

TEST(QuantizeFormatCli, CompressedTensorsOutputInspectsAsThatFamily) {
  fp4lm::test::TempDir tmp;
  const std::string in = (tmp / "in").string(), out = (tmp / "out").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + in + " --arch LlamaForCausalLM --algo none --layers 1");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  auto q = run_command(fp4lm_bin() + " quantize --model " + in + " --out " + out +
                       " --algo W4A16_NVFP4 --format compressed-tensors");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  auto r = run_command(fp4lm_bin() + " inspect --json --model " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json f = json::parse(r.out);
  EXPECT_EQ(f["quantization"]["family"], "compressed-tensors");
  EXPECT_EQ(f["quantization"]["format"], "nvfp4-pack-quantized");
  EXPECT_EQ(f["layers"][0]["format"], "compressed-tensors W4A16_NVFP4");

  auto bad = run_command(fp4lm_bin() + " quantize --model " + in + " --out " + (tmp / "x").string() +
                         " --algo W4A16_NVFP4 --format gptq");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--format: 'gptq' is not supported (use modelopt or compressed-tensors)"), std::string::npos)
      << bad.err;
}

}  // namespace quantize_format_cli_test
