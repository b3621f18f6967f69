// Whole tokenizers built from small tokenizer.json files, one per family (tokenizer_fixtures.h);
// the expected ids are worked out by hand from the merge ranks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp4lm::tokenizer::tokenizer_families_test {
namespace {

using Ids = std::vector<int32_t>;
namespace fx = fixtures;

std::unique_ptr<Tokenizer> load(const nlohmann::json& j, const std::string& config = "") {
  return Tokenizer::from_json(j.dump(), config, "test/tokenizer.json");
}

TEST(TokenizerGpt2, MergesFollowRankOrder) {
  auto t = load(fx::gpt2());
  // "hello": l+l (rank 0) before h+e (rank 5), so e+ll, h+ell, hell+o complete the word.
  EXPECT_EQ(t->encode("hello the world"), (Ids{259, 262, 267}));
  // "hellothe" is one regex piece: hello, then t + he (no merge for t+he).
  EXPECT_EQ(t->encode("hellothe"), (Ids{259, 't', 261}));
  EXPECT_EQ(t->decode({259, 262, 267}), "hello the world");
  EXPECT_EQ(t->vocab_size(), 269u);
}

TEST(TokenizerGpt2, BytesOutsideAsciiAndControlCharacters) {
  auto t = load(fx::gpt2());
  EXPECT_EQ(t->encode("é"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t->encode("a\nb"), (Ids{'a', '\n', 'b'}));  // id == byte value in this vocab
  EXPECT_EQ(t->decode({0xC3, 0xA9, '\n'}), "é\n");
  // A lone lead byte decodes to U+FFFD, never raw invalid UTF-8.
  EXPECT_EQ(t->decode({0xE6, 'a'}), "\xEF\xBF\xBD" "a");
}

TEST(TokenizerGpt2, SpecialTokenInTextAndSkipOnDecode) {
  auto t = load(fx::gpt2());
  EXPECT_EQ(t->encode("hi<|endoftext|>hello"), (Ids{'h', 'i', 268, 259}));
  EXPECT_EQ(t->decode({'h', 'i', 268}), "hi<|endoftext|>");
  EXPECT_EQ(t->decode({'h', 'i', 268}, true), "hi");
  EXPECT_EQ(t->token_to_id("<|endoftext|>"), 268);
  EXPECT_EQ(t->id_to_token(259), "hello");
}

TEST(TokenizerGpt2, AddPrefixSpace) {
  auto j = fx::gpt2();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto t = load(j);
  EXPECT_EQ(t->encode("hello"), (Ids{' ', 259}));  // "Ġ" has id 32 (the space byte)
}

TEST(TokenizerLlama2, NormalizersByteFallbackAndBos) {
  auto t = load(fx::llama2());
  EXPECT_EQ(t->encode("Hello world"), (Ids{271, 276}));
  EXPECT_EQ(t->encode("Hello world", true), (Ids{1, 271, 276}));
  // é is not in the vocab: its two UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(t->encode("Hello é"), (Ids{271, 259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->encode(""), Ids{});
  EXPECT_EQ(t->encode("", true), Ids{1});
}

TEST(TokenizerLlama2, DecodeStripsTheLeadingSpace) {
  auto t = load(fx::llama2());
  EXPECT_EQ(t->decode({271, 276}), "Hello world");
  EXPECT_EQ(t->decode({1, 271, 276}), "<s> Hello world");
  EXPECT_EQ(t->decode({1, 271, 276}, true), "Hello world");
  EXPECT_EQ(t->decode({271, 259, 3 + 0xC3, 3 + 0xA9}), "Hello é");
  // A byte run that is not valid UTF-8: one U+FFFD per byte token.
  EXPECT_EQ(t->decode({271, 3 + 0xC3, 3 + 0xC3}), "Hello\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerLlama2, UnknownCharactersFuseIntoOneUnk) {
  auto t = load(fx::llama2(/*byte_fallback=*/false));
  EXPECT_EQ(t->encode("Hi!"), (Ids{268, 0}));  // ▁H, then "i!" -> a single <unk>
}

TEST(TokenizerLlama2, AddedTokenSplitsTheTextBeforeNormalization) {
  auto t = load(fx::llama2());
  // Each side of <s> is normalized on its own, so both get the "▁" prefix (as in transformers).
  EXPECT_EQ(t->encode("Hello<s>world"), (Ids{271, 1, 276}));
}

TEST(TokenizerMistral, MetaspacePrependsOnlyAtTheStart) {
  auto t = load(fx::mistral());
  EXPECT_EQ(t->encode("Hello world"), (Ids{271, 276}));
  // After a leading added token the text is not at offset 0: no "▁" prefix.
  EXPECT_EQ(t->encode("<s>Hello world"), (Ids{1, 260, 269, 263, 276}));
  EXPECT_EQ(t->decode({271, 276}), "Hello world");
  EXPECT_EQ(t->encode("Hello", true), (Ids{1, 271}));
}

TEST(TokenizerLlama3, SplitRegexDigitsAndIgnoreMerges) {
  auto t = load(fx::llama3());
  EXPECT_EQ(t->encode("12345"), (Ids{270, '4', '5'}));  // \p{N}{1,3}: "123" "45"
  EXPECT_EQ(t->encode("xyz"), Ids{271});               // in the vocab as a whole word
  EXPECT_EQ(t->encode("xyz", true), (Ids{400, 271}));
  EXPECT_EQ(t->encode("<|begin_of_text|>hello the world<|eot_id|>"), (Ids{400, 259, 262, 267, 401}));
  auto no_ignore = load(fx::llama3(false));
  EXPECT_EQ(no_ignore->encode("xyz"), (Ids{'x', 'y', 'z'}));
}

TEST(TokenizerConfig, AddBosFlagWithoutTemplate) {
  auto j = fx::gpt2();
  auto t = load(j, R"({"add_bos_token": true, "bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"}})");
  EXPECT_EQ(t->encode("hello", true), (Ids{268, 259}));
  EXPECT_EQ(t->encode("hello", false), Ids{259});
  EXPECT_EQ(t->bos_id(), 268);
  EXPECT_EQ(t->eos_id(), 268);
}

TEST(TokenizerConfig, LlamaClassFlagsOverrideTheTemplate) {
  auto t = load(fx::llama2(), R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false,
                                  "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"})");
  EXPECT_EQ(t->encode("Hello", true), (Ids{271, 2}));
  // Other classes keep the tokenizer.json template.
  auto q = load(fx::llama2(), R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false})");
  EXPECT_EQ(q->encode("Hello", true), (Ids{1, 271}));
}

TEST(TokenizerConfig, CleanUpTokenizationSpaces) {
  auto j = fx::gpt2();
  auto t = load(j, R"({"clean_up_tokenization_spaces": true})");
  auto ids = t->encode("hello .");
  EXPECT_EQ(t->decode(ids), "hello.");
  EXPECT_EQ(load(j)->decode(ids), "hello .");
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_families_test
