#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "tokenizer/bpe.h"

namespace fp4lm::tokenizer::bpe_model_test {
namespace {

using Ids = std::vector<int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;

Vocab make_vocab(const std::vector<std::string>& tokens) {
  Vocab v;
  for (size_t i = 0; i < tokens.size(); ++i) v.add(tokens[i], static_cast<int32_t>(i));
  v.finish("test");
  return v;
}

Ids tokenize(const BpeModel& m, std::string_view word) {
  Ids out;
  m.tokenize(word, out);
  return out;
}

TEST(BpeModel, LowerRankMergesFirstNotLeftToRight) {
  // ids: a0 b1 c2 ab3 bc4
  BpeModel m(make_vocab({"a", "b", "c", "ab", "bc"}), Merges{{"b", "c"}, {"a", "b"}}, {}, "test");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{0, 4}));  // b+c has rank 0
  BpeModel m2(make_vocab({"a", "b", "c", "ab", "bc"}), Merges{{"a", "b"}, {"b", "c"}}, {}, "test");
  EXPECT_EQ(tokenize(m2, "abc"), (Ids{3, 2}));
}

TEST(BpeModel, RepeatedPairsMergeLeftmostFirst) {
  // "aaa": a+a at positions 0 and 1 tie on rank; the leftmost wins.
  BpeModel m(make_vocab({"a", "aa"}), Merges{{"a", "a"}}, {}, "test");
  EXPECT_EQ(tokenize(m, "aaa"), (Ids{1, 0}));
  EXPECT_EQ(tokenize(m, "aaaa"), (Ids{1, 1}));
}

TEST(BpeModel, CacheGivesTheSameAnswer) {
  BpeModel m(make_vocab({"a", "b", "ab"}), Merges{{"a", "b"}}, {}, "test");
  for (int k = 0; k < 3; ++k) EXPECT_EQ(tokenize(m, "abab"), (Ids{2, 2}));
  Ids out;
  m.tokenize_uncached("abab", out);
  EXPECT_EQ(out, (Ids{2, 2}));
}

TEST(BpeModel, UnknownCharacters) {
  BpeOptions opt;
  opt.unk_token = "<unk>";
  opt.fuse_unk = false;
  BpeModel m(make_vocab({"<unk>", "a"}), {}, opt, "test");
  EXPECT_EQ(tokenize(m, "aéé"), (Ids{1, 0, 0}));
  opt.fuse_unk = true;
  BpeModel fused(make_vocab({"<unk>", "a"}), {}, opt, "test");
  EXPECT_EQ(tokenize(fused, "ééaé"), (Ids{0, 1, 0}));
  // Without an unk token the character is dropped.
  BpeModel none(make_vocab({"a"}), {}, {}, "test");
  EXPECT_EQ(tokenize(none, "aéa"), (Ids{0, 0}));
}

TEST(BpeModel, ByteFallbackNeedsEveryByte) {
  BpeOptions opt;
  opt.byte_fallback = true;
  opt.unk_token = "<unk>";
  // é = C3 A9: both byte tokens exist; 日 = E6 97 A5: <0x97> is missing, so <unk>.
  BpeModel m(make_vocab({"<unk>", "<0xC3>", "<0xA9>", "<0xE6>", "<0xA5>", "x"}), {}, opt, "test");
  EXPECT_EQ(tokenize(m, "xé"), (Ids{5, 1, 2}));
  EXPECT_EQ(tokenize(m, "日"), (Ids{0}));
}

TEST(BpeModel, ContinuingSubwordPrefixAndSuffix) {
  BpeOptions opt;
  opt.continuing_subword_prefix = "##";
  // ids: a0 ##b1 ##c2 ab3 ab##c? no: merged "ab" + "##c" -> "abc"
  BpeModel m(make_vocab({"a", "##b", "##c", "ab", "abc"}), Merges{{"a", "##b"}, {"ab", "##c"}}, opt, "test");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{4}));
  EXPECT_EQ(tokenize(m, "ac"), (Ids{0, 2}));
  BpeOptions sfx;
  sfx.end_of_word_suffix = "</w>";
  BpeModel s(make_vocab({"a", "b</w>", "ab</w>"}), Merges{{"a", "b</w>"}}, sfx, "test");
  EXPECT_EQ(tokenize(s, "ab"), (Ids{2}));
}

TEST(BpeModel, IgnoreMerges) {
  BpeOptions opt;
  opt.ignore_merges = true;
  BpeModel m(make_vocab({"x", "y", "z", "xyz"}), {}, opt, "test");
  EXPECT_EQ(tokenize(m, "xyz"), Ids{3});
  EXPECT_EQ(tokenize(m, "zyx"), (Ids{2, 1, 0}));
}

TEST(BpeModel, BadMergesAndVocabAreReported) {
  EXPECT_THROW(BpeModel(make_vocab({"a", "b"}), Merges{{"a", "q"}}, {}, "f.json"), fp4lm::Error);
  EXPECT_THROW(BpeModel(make_vocab({"a", "b"}), Merges{{"a", "b"}}, {}, "f.json"), fp4lm::Error);  // no "ab"
  BpeOptions opt;
  opt.unk_token = "<unk>";
  EXPECT_THROW(BpeModel(make_vocab({"a"}), {}, opt, "f.json"), fp4lm::Error);
  try {
    BpeModel(make_vocab({"a", "b"}), Merges{{"a", "b"}}, {}, "f.json");
  } catch (const fp4lm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.json: model.merges[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'ab'"), std::string::npos) << e.what();
  }
  Vocab dup;
  dup.add("a", 0);
  dup.add("a", 1);
  EXPECT_THROW(dup.finish("f.json"), fp4lm::Error);
  Vocab dup_id;
  dup_id.add("a", 0);
  dup_id.add("b", 0);
  EXPECT_THROW(dup_id.finish("f.json"), fp4lm::Error);
}

TEST(BpeModel, ConcurrentEncodeIsConsistent) {
  BpeModel m(make_vocab({"a", "b", "c", "ab", "abc"}), Merges{{"a", "b"}, {"ab", "c"}}, {}, "test");
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 2000; ++k) {
        std::string w = std::string(static_cast<size_t>(k % 7 + 1), 'a') + "bc";
        Ids out;
        m.tokenize(w, out);
        if (out.back() != 4 || out.size() != static_cast<size_t>(k % 7 + 1)) ++bad[static_cast<size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace fp4lm::tokenizer::bpe_model_test
