// `fp4lm generate --temperature 0` on the tiny Gemma 3n fixtures (scripts/make_gemma3n_goldens.py):
// output_ids equal to transformers' generate (greedy, float32 activations), for Gemma3nForCausalLM
// and for Gemma3nForConditionalGeneration fed text.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace fp4lm::gemma3n_cli_test {
namespace {

using nlohmann::json;

TEST(Gemma3nCli, GreedyOutputIdsEqualTransformers) {
  for (const std::string kind : {"causal", "conditional"}) {
    const auto dir = test::source_dir() / "tests/model/fixtures/gemma3n" / kind;
    std::ifstream in(dir / "golden.json");
    const json g = json::parse(in);
    std::string ids;
    for (const auto& v : g["tokens"]) ids += (ids.empty() ? "" : ",") + std::to_string(v.get<int>());
    const auto r = test::run_fp4lm("generate --model " + dir.string() + " --prompt-ids " + ids + " --max-tokens " +
                                   std::to_string(g["greedy"].size()) +
                                   " --temperature 0 --ignore-eos --json --dtype float32");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["output_ids"], g["greedy"]) << kind;
  }
}

}  // namespace
}  // namespace fp4lm::gemma3n_cli_test
