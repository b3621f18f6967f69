// MiniMax-M3 through the binary (the engine's scheduler, prefill then decode steps): on the tiny
// transformers checkpoints of tests/model/fixtures/minimax_m3 (scripts/make_minimax_m3_goldens.py),
// `fp4lm generate --prompt-ids` at temperature 0 prints transformers' float64 greedy continuation,
// which runs past the selector's budget (6 / 9 positions); the wrapper refuses an image.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace fp4lm::minimax_m3_cli_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& kind) {
  return (test::source_dir() / "tests/model/fixtures/minimax_m3" / kind).string();
}

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t v : ids) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

void greedy(const std::string& kind) {
  const json g = json::parse(test::read_file(fixture(kind) + "/golden.json"));
  const auto r = test::run_fp4lm("generate --model " + fixture(kind) + " --prompt-ids " +
                                 ids_arg(g["prompt"].get<std::vector<int32_t>>()) +
                                 " --temperature 0 --ignore-eos --json --dtype float32 --max-tokens " +
                                 std::to_string(g["greedy"].size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"], g["greedy"]) << r.out;
}

TEST(MiniMaxM3Cli, TextModelGreedyEqualsTransformers) { greedy("text"); }
TEST(MiniMaxM3Cli, WrapperGreedyEqualsTransformers) { greedy("wrapper"); }

TEST(MiniMaxM3Cli, WrapperRefusesAnImage) {
  const auto r = test::run_fp4lm("generate --model " + fixture("wrapper") + " --prompt-ids 5,88 --max-tokens 1 --image " +
                                 (test::source_dir() / "tests/vision/data/rgb_56x84.png").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has no vision tower fp4lm runs: it does not accept image inputs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4lm::minimax_m3_cli_test
