// Incremental text of a generated sequence: whole UTF-8 characters only, stop strings held
// back across token boundaries and cut from the output.
#include <gtest/gtest.h>

#include "../tokenizer/tokenizer_fixtures.h"
#include "engine/text_stream.h"

namespace fp4lm::engine::text_stream_test {
namespace {

std::unique_ptr<tokenizer::Tokenizer> byte_tokenizer() {
  return tokenizer::Tokenizer::from_json(tokenizer::fixtures::gpt2().dump(), "");
}

// In the fixture's byte-level vocabulary, id b is the single byte b.
std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

TEST(TextStream, NeverSplitsAUtf8Character) {
  auto tok = byte_tokenizer();
  TextStream ts(tok.get(), {}, true);
  const std::string s = "h\xC3\xA9\xE2\x82\xAC!";  // h é € !
  std::vector<std::string> pieces;
  for (int32_t id : bytes_of(s)) {
    EXPECT_FALSE(ts.push(id));
    pieces.push_back(ts.take());
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"h", "", "\xC3\xA9", "", "", "\xE2\x82\xAC", "!"}));
  EXPECT_FALSE(ts.finish());
  EXPECT_EQ(ts.take(), "");
}

TEST(TextStream, HoldsBackAPossibleStopStringAndCutsItOut) {
  auto tok = byte_tokenizer();
  TextStream ts(tok.get(), {"o w"}, true);
  std::string shown;
  bool stopped = false;
  for (int32_t id : bytes_of("hello world")) {
    stopped = ts.push(id);
    const std::string piece = ts.take();
    EXPECT_EQ(piece.find('o'), std::string::npos) << "no part of a possible stop string is shown early";
    shown += piece;
    if (stopped) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(shown, "hell");
  EXPECT_EQ(ts.stop_reason(), "o w");
}

TEST(TextStream, ReleasesHeldTextWhenTheStopStringDoesNotFollow) {
  auto tok = byte_tokenizer();
  TextStream ts(tok.get(), {"lo!", "xyz"}, true);
  std::string shown;
  for (int32_t id : bytes_of("hello")) {
    ASSERT_FALSE(ts.push(id));
    shown += ts.take();
  }
  EXPECT_EQ(shown, "hel");  // "lo" may still become "lo!"
  EXPECT_FALSE(ts.finish());
  shown += ts.take();
  EXPECT_EQ(shown, "hello");
}

TEST(TextStream, TheEarliestStopStringWins) {
  auto tok = byte_tokenizer();
  TextStream ts(tok.get(), {"cd", "bcde"}, true);
  std::string shown;
  for (int32_t id : bytes_of("abcdef")) {
    bool stop = ts.push(id);
    shown += ts.take();
    if (stop) break;
  }
  EXPECT_EQ(shown, "ab");
  EXPECT_EQ(ts.stop_reason(), "cd");
}

TEST(TextStream, WithoutATokenizerThereIsNoText) {
  TextStream ts(nullptr, {}, true);
  EXPECT_FALSE(ts.push(5));
  EXPECT_EQ(ts.take(), "");
}

}  // namespace
}  // namespace fp4lm::engine::text_stream_test
