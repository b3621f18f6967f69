// Normalizers, pre-tokenizers, decoders and added-token matching, one at a time.
#include <gtest/gtest.h>

#include "tokenizer/added_vocab.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"

namespace fp4lm::tokenizer::tokenizer_components_test {
namespace {

using Strings = std::vector<std::string>;

std::unique_ptr<Regex> lit(const std::string& s) { return std::make_unique<Regex>(s, true, "test"); }
std::unique_ptr<Regex> re(const std::string& s) { return std::make_unique<Regex>(s, false, "test"); }

Strings run(const PreTokenizer& p, const std::string& text, bool at_origin = true) {
  std::vector<Piece> pieces{{text, at_origin}};
  p.pre_tokenize(pieces);
  Strings out;
  for (auto& q : pieces) out.push_back(q.text);
  return out;
}

std::string norm(const Normalizer& n, std::string s) {
  n.normalize(s);
  return s;
}

TEST(TokenizerNormalizers, UnicodeForms) {
  using F = UnicodeNormalizer::Form;
  EXPECT_EQ(norm(UnicodeNormalizer(F::NFC), "e\u0301"), "é");
  EXPECT_EQ(norm(UnicodeNormalizer(F::NFD), "é"), "e\u0301");
  EXPECT_EQ(norm(UnicodeNormalizer(F::NFKC), "ﬁ①"), "fi1");
  EXPECT_EQ(norm(UnicodeNormalizer(F::NFC), "ﬁ"), "ﬁ");  // compatibility forms only under NFK*
  EXPECT_EQ(norm(UnicodeNormalizer(F::NFKD), "ǅ"), "Dz\u030C");
}

TEST(TokenizerNormalizers, ReplacePrependStripLowercaseSequence) {
  EXPECT_EQ(norm(ReplaceNormalizer(lit(" "), "▁"), "a b  c"), "a▁b▁▁c");
  EXPECT_EQ(norm(ReplaceNormalizer(re(" +"), "_"), "a b  c"), "a_b_c");
  EXPECT_EQ(norm(PrependNormalizer("▁"), "hey"), "▁hey");
  EXPECT_EQ(norm(PrependNormalizer("▁"), ""), "");  // nothing to prefix
  EXPECT_EQ(norm(StripNormalizer(true, false), "  a b \n"), "a b \n");
  EXPECT_EQ(norm(StripNormalizer(true, true), "\u3000 a b \n"), "a b");
  EXPECT_EQ(norm(LowercaseNormalizer(), "HeLLo ÄÖ"), "hello äö");
  std::vector<std::unique_ptr<Normalizer>> parts;
  parts.push_back(std::make_unique<PrependNormalizer>("▁"));
  parts.push_back(std::make_unique<ReplaceNormalizer>(lit(" "), "▁"));
  EXPECT_EQ(norm(SequenceNormalizer(std::move(parts)), "Hello world"), "▁Hello▁world");
}

// The five behaviours on the example from the tokenizers documentation.
TEST(TokenizerPreTokenizers, SplitBehaviors) {
  auto split = [](SplitBehavior b, bool invert = false) {
    return run(SplitPreTokenizer(lit("-"), b, invert), "the-final--countdown");
  };
  EXPECT_EQ(split(SplitBehavior::Removed), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::Isolated), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::MergedWithPrevious), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::MergedWithNext), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::Contiguous), (Strings{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::Removed, true), (Strings{"-", "-", "-"}));
}

TEST(TokenizerPreTokenizers, SplitRegexWithUnicodeClasses) {
  SplitPreTokenizer p(re(R"(\p{L}+|\p{N}+|\s+)"), SplitBehavior::Isolated, false);
  EXPECT_EQ(run(p, "Ünï 42 日本!"), (Strings{"Ünï", " ", "42", " ", "日本", "!"}));
}

TEST(TokenizerPreTokenizers, Digits) {
  EXPECT_EQ(run(DigitsPreTokenizer(true), "Call 123 now"), (Strings{"Call ", "1", "2", "3", " now"}));
  EXPECT_EQ(run(DigitsPreTokenizer(false), "Call 123 now"), (Strings{"Call ", "123", " now"}));
}

TEST(TokenizerPreTokenizers, ByteLevel) {
  EXPECT_EQ(run(ByteLevelPreTokenizer(true, true), "Hello my friend"), (Strings{"ĠHello", "Ġmy", "Ġfriend"}));
  EXPECT_EQ(run(ByteLevelPreTokenizer(false, true), "it's 42\n"), (Strings{"it", "'s", "Ġ42", "Ċ"}));
  EXPECT_EQ(run(ByteLevelPreTokenizer(false, false), "a b é"), (Strings{"aĠbĠÃ©"}));
}

TEST(TokenizerPreTokenizers, Metaspace) {
  using P = MetaspacePreTokenizer::Prepend;
  EXPECT_EQ(run(MetaspacePreTokenizer("▁", P::Always, true), "Hey friend!"), (Strings{"▁Hey", "▁friend!"}));
  EXPECT_EQ(run(MetaspacePreTokenizer("▁", P::Always, false), "Hey friend!"), (Strings{"▁Hey▁friend!"}));
  EXPECT_EQ(run(MetaspacePreTokenizer("▁", P::Never, true), "Hey  you"), (Strings{"Hey", "▁", "▁you"}));
  EXPECT_EQ(run(MetaspacePreTokenizer("▁", P::First, false), "Hey", true), (Strings{"▁Hey"}));
  EXPECT_EQ(run(MetaspacePreTokenizer("▁", P::First, false), "Hey", false), (Strings{"Hey"}));
}

TEST(TokenizerPreTokenizers, WhitespaceAndSequence) {
  EXPECT_EQ(run(WhitespacePreTokenizer(true), "Hi, you!  ok"), (Strings{"Hi", ",", "you", "!", "ok"}));
  EXPECT_EQ(run(WhitespacePreTokenizer(false), "Hi, you!  ok"), (Strings{"Hi,", "you!", "ok"}));
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  parts.push_back(std::make_unique<WhitespacePreTokenizer>(false));
  parts.push_back(std::make_unique<DigitsPreTokenizer>(true));
  EXPECT_EQ(run(SequencePreTokenizer(std::move(parts)), "ab12 c"), (Strings{"ab", "1", "2", "c"}));
}

Strings chain(const Decoder& d, Strings tokens) {
  d.decode_chain(tokens);
  return tokens;
}

TEST(TokenizerDecoders, ByteFallback) {
  ByteFallbackDecoder d;
  EXPECT_EQ(chain(d, {"a", "<0xE6>", "<0x97>", "<0xA5>", "b"}), (Strings{"a", "日", "b"}));
  EXPECT_EQ(chain(d, {"<0xE6>", "<0x97>", "x"}), (Strings{"\xEF\xBF\xBD", "\xEF\xBF\xBD", "x"}));
  EXPECT_EQ(chain(d, {"<0x4G>", "<0x41>"}), (Strings{"<0x4G>", "A"}));  // not a byte token
}

TEST(TokenizerDecoders, MetaspaceStripFuseReplace) {
  EXPECT_EQ(chain(MetaspaceDecoder("▁", true), {"▁Hey", "▁friend"}), (Strings{"Hey", " friend"}));
  EXPECT_EQ(chain(MetaspaceDecoder("▁", false), {"▁Hey", "▁friend"}), (Strings{" Hey", " friend"}));
  EXPECT_EQ(chain(StripDecoder(" ", 1, 0), {"  a ", " b"}), (Strings{" a ", "b"}));
  EXPECT_EQ(chain(StripDecoder("x", 0, 2), {"axxx"}), (Strings{"ax"}));
  EXPECT_EQ(chain(FuseDecoder(), {"a", "b", "c"}), (Strings{"abc"}));
  EXPECT_EQ(chain(ReplaceDecoder(lit("▁"), " "), {"▁a▁b"}), (Strings{" a b"}));
}

TEST(TokenizerDecoders, ByteLevel) {
  ByteLevelDecoder d;
  EXPECT_EQ(chain(d, {"Hello", "Ġworld", "Ċ"}), (Strings{"Hello world\n"}));
  EXPECT_EQ(chain(d, {"Ã", "©"}), (Strings{"é"}));  // one character from two tokens
  // A token with characters outside the byte alphabet (an added token with a space) is kept.
  EXPECT_EQ(chain(d, {"a", "<my token>"}), (Strings{"a<my token>"}));
}

std::vector<std::tuple<std::string, int32_t>> segments(const AddedVocabulary& v, const std::string& text, bool normalized = false) {
  std::vector<std::tuple<std::string, int32_t>> out;
  for (auto s : v.split(text, normalized)) out.emplace_back(text.substr(s.begin, s.end - s.begin), s.id);
  return out;
}

AddedToken tok(const std::string& content, int32_t id) {
  AddedToken t;
  t.content = content;
  t.id = id;
  t.normalized = false;
  return t;
}

using Segs = std::vector<std::tuple<std::string, int32_t>>;

TEST(TokenizerAddedTokens, LongestMatchFirst) {
  AddedVocabulary v({tok("<a>", 1), tok("<a>b", 2), tok("<", 3)}, nullptr);
  EXPECT_EQ(segments(v, "x<a>by<a>z<"), (Segs{{"x", -1}, {"<a>b", 2}, {"y", -1}, {"<a>", 1}, {"z", -1}, {"<", 3}}));
  EXPECT_EQ(segments(v, "plain"), (Segs{{"plain", -1}}));
}

TEST(TokenizerAddedTokens, LstripRstrip) {
  AddedToken l = tok("<m>", 5);
  l.lstrip = true;
  AddedToken r = tok("<n>", 6);
  r.rstrip = true;
  AddedVocabulary v({l, r}, nullptr);
  EXPECT_EQ(segments(v, "a  <m> b"), (Segs{{"a", -1}, {"  <m>", 5}, {" b", -1}}));
  EXPECT_EQ(segments(v, "a <n>  b"), (Segs{{"a ", -1}, {"<n>  ", 6}, {"b", -1}}));
}

TEST(TokenizerAddedTokens, SingleWord) {
  AddedToken w = tok("ab", 7);
  w.single_word = true;
  AddedVocabulary v({w}, nullptr);
  // Inside "cab" and "abc" the token touches a word character: not matched there.
  EXPECT_EQ(segments(v, "ab cab abc ab."), (Segs{{"ab", 7}, {" cab abc ", -1}, {"ab", 7}, {".", -1}}));
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchNormalizedText) {
  AddedToken n = tok("ÉCOLE", 9);
  n.normalized = true;
  LowercaseNormalizer lower;
  AddedVocabulary v({n, tok("<raw>", 10)}, &lower);
  EXPECT_TRUE(v.has_normalized_tokens());
  // Normalized tokens are looked up in the normalized text only; raw ones in the raw text.
  EXPECT_EQ(segments(v, "une école<raw>", true), (Segs{{"une ", -1}, {"école", 9}, {"<raw>", -1}}));
  EXPECT_EQ(segments(v, "une école<raw>", false), (Segs{{"une école", -1}, {"<raw>", 10}}));
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_components_test
