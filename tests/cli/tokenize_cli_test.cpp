// `fp4lm tokenize` / `fp4lm detokenize` end to end: output formats and exit codes.
#include <gtest/gtest.h>

#include "common/paths.h"
#include "tokenizer/tokenizer_fixtures.h"

namespace fp4lm::test::tokenize_cli_test {
namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A model directory holding only a tokenizer (GPT-2 style fixture).
struct TokenizerDir {
  TempDir dir;
  TokenizerDir() { write_file(dir / "tokenizer.json", tokenizer::fixtures::gpt2().dump()); }
  std::string path() const { return quote(dir.path().string()); }
};

TEST(TokenizeCli, PlainAndJsonIds) {
  TokenizerDir d;
  auto r = run_command(fp4lm_bin() + " tokenize --model " + d.path() + " --text " + quote("hello the world"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "259,262,267\n");
  r = run_command(fp4lm_bin() + " tokenize --json --model " + d.path() + " --text " + quote("hi<|endoftext|>"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[104,105,268]}\n");
}

TEST(TokenizeCli, AddSpecialTokensRunsThePostProcessor) {
  TokenizerDir d;
  write_file(d.dir / "tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<|endoftext|>"})");
  auto r = run_command(fp4lm_bin() + " tokenize --model " + d.path() + " --text hello");
  EXPECT_EQ(r.out, "259\n");
  r = run_command(fp4lm_bin() + " tokenize --add-special-tokens --model " + d.path() + " --text hello");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "268,259\n");
}

TEST(TokenizeCli, Detokenize) {
  TokenizerDir d;
  auto r = run_command(fp4lm_bin() + " detokenize --model " + d.path() + " --ids '259, 262,267'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello the world\n");
  r = run_command(fp4lm_bin() + " detokenize --json --skip-special-tokens --model " + d.path() + " --ids 104,268,10");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"text\":\"h\\n\"}\n");
}

TEST(TokenizeCli, RealQwen3Tokenizer) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  std::string model = quote((shared_dir() / "tokenizers/qwen3").string());
  auto r = run_command(fp4lm_bin() + " tokenize --model " + model + " --text " + quote("<|im_start|>user\nhi<|im_end|>\n"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "151644,872,198,6023,151645,198\n");
  r = run_command(fp4lm_bin() + " detokenize --model " + model + " --ids 9707,11,1879,0");
  EXPECT_EQ(r.out, "Hello, world!\n");
}

TEST(TokenizeCli, Errors) {
  TokenizerDir d;
  TempDir empty;
  auto r = run_command(fp4lm_bin() + " tokenize --model " + quote(empty.path().string()) + " --text hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((empty.path() / "tokenizer.json").string()), std::string::npos) << r.err;
  for (const char* bad : {"1,,2", "abc", "-1", "1;2", "99999999999", "5000"}) {
    r = run_command(fp4lm_bin() + " detokenize --model " + d.path() + " --ids " + quote(bad));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--ids"), std::string::npos) << r.err;
  }
  r = run_command(fp4lm_bin() + " tokenize --model " + d.path());  // --text missing
  EXPECT_EQ(r.exit_code, 2);
  write_file(d.dir / "tokenizer.json", "{\"model\": 3}");
  r = run_command(fp4lm_bin() + " tokenize --model " + d.path() + " --text hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4lm::test::tokenize_cli_test
