// StreamDecoder: text comes out only as complete UTF-8, and the pieces add up to decode().
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"

namespace fp4lm::tokenizer::tokenizer_stream_test {
namespace {

namespace fx = fixtures;
using Strings = std::vector<std::string>;

std::unique_ptr<Tokenizer> load(const nlohmann::json& j) {
  return Tokenizer::from_json(j.dump(), "", "test/tokenizer.json");
}

Strings push_all(StreamDecoder& sd, const std::vector<int32_t>& ids) {
  Strings out;
  for (int32_t id : ids) out.push_back(sd.push(id));
  return out;
}

TEST(TokenizerStream, ByteLevelEmojiSplitOverFourTokens) {
  auto t = load(fx::gpt2());  // id == byte value for single bytes
  StreamDecoder sd(*t);
  EXPECT_EQ(push_all(sd, {259, 0xF0, 0x9F, 0x8E, 0x89, 262}), (Strings{"hello", "", "", "", "🎉", " the"}));
  EXPECT_EQ(sd.flush(), "");
}

TEST(TokenizerStream, ByteFallbackCjkAndMetaspaceSpaces) {
  auto t = load(fx::llama2());
  StreamDecoder sd(*t);
  // ▁Hello, then 日 as three <0x..> tokens, then ▁world: the leading space of the first token is
  // stripped as in decode(), later ones kept.
  EXPECT_EQ(push_all(sd, {1, 271, 3 + 0xE6, 3 + 0x97, 3 + 0xA5, 276}), (Strings{"", "Hello", "", "", "日", " world"}));
  EXPECT_EQ(sd.flush(), "");
}

TEST(TokenizerStream, IncompleteSequenceAtTheEndIsFlushedAsReplacement) {
  auto t = load(fx::gpt2());
  StreamDecoder sd(*t);
  EXPECT_EQ(sd.push('a'), "a");
  EXPECT_EQ(sd.push(0xE6), "");
  EXPECT_EQ(sd.push(0x97), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  // After a flush the decoder starts afresh.
  EXPECT_EQ(sd.push(259), "hello");
}

TEST(TokenizerStream, InvalidBytesDoNotStallTheStream) {
  auto t = load(fx::gpt2());
  StreamDecoder sd(*t);
  // A stray continuation byte can never complete; it is released with the next character.
  EXPECT_EQ(sd.push(0x97), "");
  EXPECT_EQ(sd.push('b'), "\xEF\xBF\xBD" "b");
  // A long run of bytes that never forms a character is released after a bounded delay.
  std::string got;
  for (int k = 0; k < 12; ++k) got += sd.push(0x97);
  EXPECT_FALSE(got.empty());
  got += sd.flush();
  std::string want;
  for (int k = 0; k < 12; ++k) want += "\xEF\xBF\xBD";
  EXPECT_EQ(got, want);
}

TEST(TokenizerStream, SkipsSpecialTokensByDefault) {
  auto t = load(fx::gpt2());
  StreamDecoder skip(*t);
  EXPECT_EQ(push_all(skip, {259, 268, 262}), (Strings{"hello", "", " the"}));
  StreamDecoder keep(*t, false);
  EXPECT_EQ(push_all(keep, {259, 268, 262}), (Strings{"hello", "<|endoftext|>", " the"}));
}

TEST(TokenizerStream, PiecesAreValidAndAddUpToDecode) {
  for (const auto& j : {fx::gpt2(), fx::llama2(), fx::mistral(), fx::llama3()}) {
    auto t = load(j);
    for (const std::string text : {"hello the world", "Hello é 日本 🎉👍🏽 world", "a\n\nb  c", "ÿ€𝄞x"}) {
      auto ids = t->encode(text);
      StreamDecoder sd(*t, false);
      std::string all;
      for (int32_t id : ids) {
        std::string piece = sd.push(id);
        EXPECT_TRUE(utf8::is_valid(piece));
        EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << text;
        all += piece;
      }
      all += sd.flush();
      EXPECT_EQ(all, t->decode(ids)) << text;
    }
  }
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_stream_test
