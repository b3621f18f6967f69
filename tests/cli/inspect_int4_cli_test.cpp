// `fp4lm inspect` and `fp4lm generate` on int4 checkpoints from the other producers (GPTQ, AWQ;
// docs/FORMAT.md §13): the family summary, the layers' int4 scheme and backend, and a generation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/int4_checkpoint_writer.h"
#include "common/paths.h"

namespace inspect_int4_cli_test {
namespace {

using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using nlohmann::json;

TEST(InspectInt4Cli, GptqAndAwqCheckpointsShowTheirConfigAndRunInt4) {
  fp4lm::test::TempDir tmp;
  const std::string dense = (tmp / "dense").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + dense + " --arch LlamaForCausalLM --algo none --hidden 128 --layers 1");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  struct Case {
    const char* name;
    fp4lm::test::Int4Producer producer;
    json qc;
    const char* describe;
  };
  const std::vector<Case> cases = {
      {"gptq", fp4lm::test::Int4Producer::gptq,
       {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", true}, {"sym", true}},
       "GPTQ int4 checkpoint (quant_method=gptq, group_size 32, symmetric, desc_act, checkpoint_format gptq)"},
      {"awq", fp4lm::test::Int4Producer::awq,
       {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"zero_point", true}, {"version", "gemm"}},
       "AWQ int4 checkpoint (quant_method=awq, group_size 32, zero points, version gemm)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fp4lm::test::Int4WriteOptions o;
    o.producer = c.producer;
    o.group = 32;
    o.symmetric = c.producer == fp4lm::test::Int4Producer::gptq;
    o.act_order = c.producer == fp4lm::test::Int4Producer::gptq;
    o.quantization_config = c.qc;
    const std::string deq = (tmp / (std::string(c.name) + "_deq")).string(), q = (tmp / c.name).string();
    fp4lm::test::write_int4_pair(dense, deq, q, o);
    auto r = run_command(fp4lm_bin() + " inspect --json --model " + q);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["quantization"]["family"], c.name) << r.out;
    EXPECT_EQ(j["quantization"]["config"], c.describe) << r.out;
    EXPECT_EQ(j["quantization"]["group_size"], 32) << r.out;
    bool int4 = false;
    for (const json& l : j["layers"])
      if (l.value("name", "") == "model.layers.0.self_attn.qkv_proj") {
        int4 = true;
        EXPECT_NE(l.dump().find("int4_w4a16"), std::string::npos) << l.dump();
        EXPECT_NE(l.dump().find("cpu_int4_w4a16"), std::string::npos) << l.dump();
      }
    EXPECT_TRUE(int4) << r.out;
    auto g = run_command(fp4lm_bin() + " generate --model " + q + " --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos");
    EXPECT_EQ(g.exit_code, 0) << g.err;
  }
}

}  // namespace
}  // namespace inspect_int4_cli_test
