// `fp4lm inspect` names the producer (issue 24 item 6): the config family, each layer's on-disk
// format and what runs it, for a ModelOpt checkpoint and the same weights in compressed-tensors'
// form; an unsupported scheme of a known family is an error naming the scheme and the module.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/compressed_tensors_writer.h"
#include "common/paths.h"

using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using nlohmann::json;


namespace inspect_family_cli_test {
namespace {

json inspect_json(const std::string& dir) {
  auto r = run_command(fp4lm_bin() + " inspect --json --model " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

}  // namespace

TEST(InspectCli, CompressedTensorsFamilyAndFormats) {
  fp4lm::test::TempDir tmp;
  const std::string mo = (tmp / "modelopt").string(), ct = (tmp / "ct").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + mo + " --arch Qwen3MoeForCausalLM --algo NVFP4 --layers 2");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  fp4lm::test::write_compressed_tensors(
      mo, ct,
      {fp4lm::test::ct_config("nvfp4-pack-quantized", {{"group_0", fp4lm::test::ct_nvfp4_group({"Linear"}, true)}},
                              {"lm_head", "re:.*mlp\\.gate$"})});

  const json m = inspect_json(mo), c = inspect_json(ct);
  EXPECT_EQ(m["quantization"]["family"], "modelopt");
  EXPECT_EQ(m["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(c["quantization"]["family"], "compressed-tensors");
  EXPECT_EQ(c["quantization"]["format"], "nvfp4-pack-quantized");
  EXPECT_EQ(c["quantization"]["config_groups"][0]["scheme"], "NVFP4");
  EXPECT_EQ(c["quantization"]["config_groups"][0]["targets"], json({"Linear"}));
  EXPECT_EQ(c["quantization"]["ignore"], json({"lm_head", "re:.*mlp\\.gate$"}));
  ASSERT_EQ(m["layers"].size(), c["layers"].size());
  for (size_t i = 0; i < c["layers"].size(); ++i) {
    const json &lm = m["layers"][i], &lc = c["layers"][i];
    const bool router = lc["name"].get<std::string>().ends_with("mlp.gate");
    const bool head = lc["name"] == "lm_head";
    EXPECT_EQ(lc["format"], router || head ? "unquantized" : "compressed-tensors NVFP4") << lc["name"];
    EXPECT_EQ(lm["format"], router || head ? "unquantized" : "modelopt NVFP4") << lm["name"];
    EXPECT_EQ(lc["scheme"], lm["scheme"]) << lc["name"];  // the same key runs both
    EXPECT_EQ(lc["backend"], lm["backend"]) << lc["name"];
  }
  auto human = run_command(fp4lm_bin() + " inspect --model " + ct);
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("config family       compressed-tensors"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("NVFP4 W4A4 (nvfp4-pack-quantized)"), std::string::npos) << human.out;
}

TEST(InspectCli, UnsupportedCompressedTensorsSchemeNamesSchemeAndModule) {
  fp4lm::test::TempDir tmp;
  const std::string mo = (tmp / "modelopt").string(), ct = (tmp / "ct").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + mo + " --arch LlamaForCausalLM --algo W4A16_NVFP4 --layers 1");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  // INT8 (INT4 W4A16 is read: docs/FORMAT.md §13).
  json int4 = {{"targets", {"Linear"}},
               {"weights", {{"num_bits", 8}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}}},
               {"format", "pack-quantized"}};
  fp4lm::test::write_compressed_tensors(mo, ct, {fp4lm::test::ct_config("pack-quantized", {{"group_0", int4}}, {"lm_head"})});
  auto r = run_command(fp4lm_bin() + " inspect --model " + ct);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("8-bit integer weights"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(module model.layers.0.self_attn.q_proj)"), std::string::npos) << r.err;
}

}  // namespace inspect_family_cli_test
