// `fp4lm inspect` on ModelOpt's int8 exports (tests/model/fixtures/modelopt_w8a16, modelopt_w8a8_sq;
// docs/FORMAT.md "W8A16 and W8A8_SQ_PER_CHANNEL"): the algorithm, each quantized layer's on-disk
// scheme, kernel scheme and backend; and a generation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace inspect_int8_cli_test {
namespace {

using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using nlohmann::json;

TEST(InspectInt8Cli, ModeloptInt8ExportsShowTheirAlgorithmSchemeAndBackend) {
  struct Case {
    const char* fixture;
    const char* algo;
    const char* scheme;
  };
  for (const Case& c : {Case{"modelopt_w8a16", "W8A16", "int8_w8a16"},
                        Case{"modelopt_w8a8_sq", "W8A8_SQ_PER_CHANNEL", "int8_w8a8"}}) {
    SCOPED_TRACE(c.fixture);
    const std::string dir = (fp4lm::test::source_dir() / "tests/model/fixtures" / c.fixture).string();
    auto r = run_command(fp4lm_bin() + " inspect --json --model " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["quantization"]["family"], "modelopt") << r.out;
    EXPECT_EQ(j["quantization"]["quant_algo"], c.algo) << r.out;
    int quantized = 0;
    for (const json& l : j["layers"]) {
      if (l.value("name", "") == "lm_head") {
        EXPECT_EQ(l["scheme"], "unquantized") << l.dump();
      }
      if (l["on_disk"] != c.algo) continue;
      ++quantized;
      EXPECT_EQ(l["format"], std::string("modelopt ") + c.algo) << l.dump();
      EXPECT_EQ(l["scheme"], c.scheme) << l.dump();
      // The int8 W8A16 backend where AVX2 runs, else reference.
      const std::string b = l["backend"];
      EXPECT_TRUE(b == "cpu_int8_w8a16_avx2" || b == "reference") << l.dump();
    }
    EXPECT_EQ(quantized, 4) << r.out;  // qkv, o, gate_up, down of the one layer
    auto g = run_command(fp4lm_bin() + " generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos");
    EXPECT_EQ(g.exit_code, 0) << g.err;
  }
}

}  // namespace
}  // namespace inspect_int8_cli_test
