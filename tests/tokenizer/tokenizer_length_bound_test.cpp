// The server rejects an over-long prompt before tokenizing all of it: Tokenizer::min_ids_for_bytes
// (a lower bound from the text's size alone) and Tokenizer::encode_at_most (stops at a limit).
// Both must never reject a prompt that fits: the bound is checked against real encodings of
// the texts that come closest to it (the longest tokens, the normalizer's largest shrink).
#include <gtest/gtest.h>

#include "common/paths.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp4lm::tokenizer::tokenizer_length_bound_test {
namespace {

using Ids = std::vector<int32_t>;
namespace fx = fixtures;

std::unique_ptr<Tokenizer> load(const nlohmann::json& j) {
  return Tokenizer::from_json(j.dump(), "", "test/tokenizer.json");
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t k = 0; k < n; ++k) out += s;
  return out;
}

// Texts that make few ids per byte: the longest tokens repeated, and the characters the
// normalizer shrinks most (KELVIN SIGN, Hangul jamo, MATHEMATICAL BOLD CAPITAL A, full-width).
std::vector<std::string> dense_texts() {
  return {repeat(" ", 128 * 40) + "x",
          repeat(std::string("//").append(112, '-'), 30),
          repeat("\xE2\x84\xAA", 500),                              // U+212A KELVIN SIGN
          repeat("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", 300),      // U+1100 U+1161 U+11A8 -> one syllable
          repeat("\xF0\x9D\x90\x80", 400),                          // U+1D400
          repeat("\xEF\xBC\xA1", 400),                              // U+FF21 FULLWIDTH A
          "Hello, world! " + repeat("the quick brown fox ", 50),
          repeat("\n", 3000),
          repeat("0123456789", 200)};
}

void expect_bounds_hold(const Tokenizer& t, const std::string& name) {
  for (const std::string& text : dense_texts()) {
    SCOPED_TRACE(name + ", text of " + std::to_string(text.size()) + " bytes starting '" + text.substr(0, 12) + "'");
    const Ids ids = t.encode(text, true);
    EXPECT_LE(t.min_ids_for_bytes(text.size()), ids.size());
    ASSERT_FALSE(ids.empty());
    // The limit is inclusive: exactly ids.size() fits, one fewer does not.
    EXPECT_EQ(t.encode_at_most(text, true, ids.size()), ids);
    EXPECT_EQ(t.encode_at_most(text, true, ids.size() - 1), std::nullopt);
    EXPECT_EQ(t.encode_at_most(text, true, 0), std::nullopt);
  }
}

TEST(TokenizerLengthBound, Qwen3BoundNeverExceedsTheRealCount) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  auto t = Tokenizer::from_dir((test::shared_dir() / "tokenizers/qwen3").string());
  expect_bounds_hold(*t, "qwen3");
  // The longest Qwen3 token is 128 spaces, 256 bytes in GPT-2's byte alphabet ("Ġ" is 2 bytes),
  // and NFC may shrink a text 4x (the bound assumes the worst Unicode form): 1024 bytes per id,
  // where 128 spaces really make one id.
  EXPECT_EQ(t->min_ids_for_bytes(1024 * 1000), 1000u);
  EXPECT_GE(t->encode(repeat(" ", 128 * 40) + "x").size(), 40u);
  // An 8 MB prompt for a 4096-token context is refused from its size alone.
  EXPECT_GT(t->min_ids_for_bytes(8u << 20), 4096u);
}

TEST(TokenizerLengthBound, FamiliesBoundAndLimit) {
  expect_bounds_hold(*load(fx::gpt2()), "gpt2");
  expect_bounds_hold(*load(fx::llama2()), "llama2");
  expect_bounds_hold(*load(fx::mistral()), "mistral");
  expect_bounds_hold(*load(fx::llama3()), "llama3");
}

TEST(TokenizerLengthBound, PipelinesThatCanDropTextHaveNoBound) {
  nlohmann::json strip = fx::gpt2();
  strip["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  EXPECT_EQ(load(strip)->min_ids_for_bytes(1 << 20), 0u);

  nlohmann::json ws = fx::gpt2();
  ws["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  EXPECT_EQ(load(ws)->min_ids_for_bytes(1 << 20), 0u);

  nlohmann::json removed = fx::gpt2();
  removed["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}};
  EXPECT_EQ(load(removed)->min_ids_for_bytes(1 << 20), 0u);

  // Without byte fallback, Llama 2's unknown characters fuse into one <unk> of any length.
  EXPECT_EQ(load(fx::llama2(/*byte_fallback=*/false))->min_ids_for_bytes(1 << 20), 0u);
  // encode_at_most still stops at the limit there.
  auto t = load(strip);
  const std::string text = repeat("ab ", 100);
  const Ids ids = t->encode(text);
  EXPECT_EQ(t->encode_at_most(text, false, ids.size()), ids);
  EXPECT_EQ(t->encode_at_most(text, false, ids.size() - 1), std::nullopt);
}

TEST(TokenizerLengthBound, UnicodeNormalizersShrinkNoMoreThanTheyDeclare) {
  using F = UnicodeNormalizer::Form;
  for (F form : {F::NFC, F::NFD, F::NFKC, F::NFKD}) {
    UnicodeNormalizer n(form);
    for (const std::string& text : dense_texts()) {
      std::string s = text;
      n.normalize(s);
      EXPECT_GE(static_cast<double>(s.size()) * n.max_shrink(), static_cast<double>(text.size()))
          << "form " << static_cast<int>(form) << " on '" << text.substr(0, 12) << "'";
    }
  }
  LowercaseNormalizer lower;
  std::string kelvin = repeat("\xE2\x84\xAA", 10);
  lower.normalize(kelvin);
  EXPECT_EQ(kelvin, repeat("k", 10));  // the 3x case the declared 4x covers
  EXPECT_GE(lower.max_shrink(), 3.0);
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_length_bound_test
