// Token masks: the trie walk against a brute-force check (every token fed byte by byte) on
// random reachable states, with a small vocabulary and with the real Qwen3 tokenizer; and what
// applying a mask does to a logits row.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/paths.h"
#include "engine/structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine::structured::structured_mask_test {
namespace {

bool allowed(const TokenMask& m, int64_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

// Walks `steps` random allowed tokens from the initial state, comparing the mask at each state.
void compare_on_random_walk(GrammarCompiler& c, const StructuredSpec& spec, int steps, uint32_t seed) {
  auto g = c.compile(spec);
  GrammarMatcher m(g);
  std::mt19937 rng(seed);
  for (int step = 0; step < steps; ++step) {
    const auto mask = m.mask();
    const TokenMask brute = brute_force_mask(*g, m.state());
    ASSERT_EQ(*mask, brute) << "step " << step << " state " << m.state();
    std::vector<int32_t> ids;
    for (int64_t id = 0; id < c.vocabulary().size(); ++id)
      if (allowed(*mask, id)) ids.push_back(static_cast<int32_t>(id));
    if (ids.empty()) return;  // complete, or a dead end of a small vocabulary
    ASSERT_TRUE(m.accept(ids[rng() % ids.size()]));
  }
}

TEST(StructuredMask, TrieWalkEqualsBruteForceOnASmallVocabulary) {
  const std::vector<std::string> toks = {"", "{", "}", "\"", "a", "ab", "\"a", "\":", ":", " ", "1", "12", "-",
                                         "\xC3", "\xA9", "\xC3\xA9", "true", "tr", "ue", ",", "\"}", "{\"", "b\"",
                                         "\n", "  ", "null", "[", "]", "0", "e", "."};
  GrammarCompiler c(std::make_shared<TokenVocabulary>(toks, 40));
  const StructuredSpec schema{StructuredSpec::Kind::JsonSchema,
                              R"({"type":"object","properties":{"a":{"type":"string"},"ab":{"type":"number"},
                                  "b":{"type":"array","items":{"type":"boolean"}}},"required":["a"]})",
                              {},
                              ""};
  for (uint32_t seed = 1; seed <= 20; ++seed) compare_on_random_walk(c, schema, 25, seed);
  const StructuredSpec obj{StructuredSpec::Kind::JsonObject, "", {}, ""};
  for (uint32_t seed = 1; seed <= 20; ++seed) compare_on_random_walk(c, obj, 25, seed);
  const StructuredSpec re{StructuredSpec::Kind::Regex, "(ab|\xC3\xA9)+[0-9]{1,3}", {}, ""};
  for (uint32_t seed = 1; seed <= 10; ++seed) compare_on_random_walk(c, re, 10, seed);
}

TEST(StructuredMask, CompilingComputesTheFirstStatesMask) {
  // So the engine step that samples a request's first token finds it cached.
  const std::vector<std::string> toks = {"", "{", "}", "\"", "a", " "};
  GrammarCompiler c(std::make_shared<TokenVocabulary>(toks, 6));
  const auto g = c.compile(StructuredSpec{StructuredSpec::Kind::JsonObject, "", {}, ""});
  EXPECT_EQ(g->cached_masks(), 1u);
  EXPECT_EQ(*g->mask(g->initial()), brute_force_mask(*g, g->initial()));
  EXPECT_EQ(g->cached_masks(), 1u);
}

TEST(StructuredMask, ApplyKeepsAllowedLogitsAndEndsOnlyWhenComplete) {
  const std::vector<std::string> toks = {"", "a", "b", "ab", "c"};  // id 0: EOS (special: no bytes)
  GrammarCompiler c(std::make_shared<TokenVocabulary>(toks, 6));    // id 5: beyond the tokenizer
  GrammarMatcher m(c.compile({StructuredSpec::Kind::Regex, "ab?", {}, ""}));
  const std::vector<float> raw = {0.5f, 1.0f, 2.0f, -3.0f, 4.0f, 7.0f};
  const float ninf = -std::numeric_limits<float>::infinity();
  auto row = raw;
  m.apply(row.data(), 6, {0});
  EXPECT_EQ(row, (std::vector<float>{ninf, 1.0f, ninf, -3.0f, ninf, ninf}));
  ASSERT_TRUE(m.accept(1));  // "a": complete, "b" may follow
  row = raw;
  m.apply(row.data(), 6, {0});
  EXPECT_EQ(row, (std::vector<float>{0.5f, ninf, 2.0f, ninf, ninf, ninf}));
  EXPECT_FALSE(m.accept(4));  // "c" does not fit: refused, state kept
  ASSERT_TRUE(m.accept(2));
  EXPECT_TRUE(m.finished());
  row = raw;
  m.apply(row.data(), 6, {0});
  EXPECT_EQ(row, (std::vector<float>{0.5f, ninf, ninf, ninf, ninf, ninf}));
}

std::unique_ptr<tokenizer::Tokenizer> qwen3() {
  for (const auto& dir : {fp4lm::test::shared_dir() / "tokenizers/qwen3", std::filesystem::path("/work/shared/tokenizers/qwen3")})
    if (std::filesystem::exists(dir / "tokenizer.json")) return tokenizer::Tokenizer::from_dir(dir.string());
  return nullptr;
}

TEST(StructuredMask, TrieWalkEqualsBruteForceWithTheQwen3Tokenizer) {
  auto tok = qwen3();
  if (!tok) GTEST_SKIP() << "no Qwen3 tokenizer at ../shared/tokenizers/qwen3";
  auto vocab = std::make_shared<TokenVocabulary>(*tok, 151936);
  // Byte-level tokens map back to their bytes, partial UTF-8 included.
  EXPECT_EQ(vocab->bytes(*tok->token_to_id("Ġworld")), " world");
  EXPECT_EQ(vocab->bytes(*tok->token_to_id("Ã")), "\xC3");
  EXPECT_TRUE(vocab->bytes(*tok->token_to_id("<|im_end|>")).empty());
  EXPECT_TRUE(vocab->bytes(151935).empty());  // embedding padding row
  GrammarCompiler c(vocab);
  const StructuredSpec schema{StructuredSpec::Kind::JsonSchema,
                              R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
                                  "population":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","bé"]}}},
                                  "required":["city","population"]})",
                              {},
                              ""};
  for (uint32_t seed = 1; seed <= 3; ++seed) compare_on_random_walk(c, schema, 12, seed);
  const StructuredSpec grammar{StructuredSpec::Kind::Grammar, "root ::= (\"yes\" | \"no\") \" \" [a-zé]+ \".\"", {}, ""};
  for (uint32_t seed = 1; seed <= 2; ++seed) compare_on_random_walk(c, grammar, 8, seed);
}

}  // namespace
}  // namespace fp4lm::engine::structured::structured_mask_test
