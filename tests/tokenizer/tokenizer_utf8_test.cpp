#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer::tokenizer_utf8_test {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(TokenizerUtf8, ValidityChecks) {
  EXPECT_TRUE(utf8::is_valid("plain ascii"));
  EXPECT_TRUE(utf8::is_valid("日本 🎉 é"));
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xE6\x97"));          // truncated
  EXPECT_FALSE(utf8::is_valid("\x80"));
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::to_valid_lossy("a\xE6\x97z"), "a" + kFffd + "z");            // one truncated sequence
  EXPECT_EQ(utf8::to_valid_lossy("\xF0\x80"), kFffd + kFffd);                  // F0 needs 90..BF next
  EXPECT_EQ(utf8::to_valid_lossy("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(utf8::to_valid_lossy("\xE6\x97\xA5"), "日");
  EXPECT_EQ(utf8::to_valid_lossy("\xFF\xFE"), kFffd + kFffd);
}

TEST(TokenizerUtf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail("ab"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE6\x97"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x8E"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x8E\x89"), 0u);  // complete 🎉
  EXPECT_EQ(utf8::incomplete_tail("a\x97"), 0u);              // stray continuation: invalid, not pending
}

TEST(TokenizerUtf8, NextAndPrev) {
  std::string s = "aé日🎉";
  size_t i = 0;
  EXPECT_EQ(utf8::next(s, i), U'a');
  EXPECT_EQ(utf8::next(s, i), U'é');
  EXPECT_EQ(utf8::next(s, i), U'日');
  EXPECT_EQ(utf8::next(s, i), U'🎉');
  EXPECT_EQ(i, s.size());
  size_t start = 0;
  EXPECT_EQ(utf8::prev(s, s.size(), start), U'🎉');
  EXPECT_EQ(start, s.size() - 4);
  std::string out;
  utf8::append(out, U'🎉');
  utf8::append(out, U'é');
  EXPECT_EQ(out, "🎉é");
}

TEST(TokenizerUtf8, CharacterClasses) {
  EXPECT_TRUE(utf8::is_whitespace(U' '));
  EXPECT_TRUE(utf8::is_whitespace(U'\u3000'));
  EXPECT_FALSE(utf8::is_whitespace(U'x'));
  EXPECT_TRUE(utf8::is_numeric(U'7'));
  EXPECT_TRUE(utf8::is_numeric(U'٣'));  // Arabic-Indic digit (Nd)
  EXPECT_TRUE(utf8::is_numeric(U'½'));  // No
  EXPECT_FALSE(utf8::is_numeric(U'a'));
  EXPECT_TRUE(utf8::is_word_char(U'_'));
  EXPECT_TRUE(utf8::is_word_char(U'ж'));
  EXPECT_FALSE(utf8::is_word_char(U'-'));
}

TEST(TokenizerByteLevel, MappingIsAReversibleBijection) {
  EXPECT_EQ(byte_level::byte_to_char(' '), "Ġ");
  EXPECT_EQ(byte_level::byte_to_char('\n'), "Ċ");
  EXPECT_EQ(byte_level::byte_to_char('A'), "A");
  EXPECT_EQ(byte_level::byte_to_char(0xAD), "Ń");  // soft hyphen is not printable: U+0100 + 67
  for (int b = 0; b < 256; ++b) {
    std::string_view c = byte_level::byte_to_char(static_cast<uint8_t>(b));
    size_t i = 0;
    EXPECT_EQ(byte_level::char_to_byte(utf8::next(c, i)), b);
  }
  EXPECT_EQ(byte_level::char_to_byte(U'日'), -1);
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_utf8_test
