// The real Qwen3 tokenizer (../shared/tokenizers/qwen3) against golden encodings produced by an
// independent implementation of Hugging Face tokenizers.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::tokenizer::tokenizer_qwen3_test {
namespace {

const Tokenizer& qwen3() {
  static std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_dir((test::shared_dir() / "tokenizers/qwen3").string());
  return *tok;
}

TEST(TokenizerQwen3, GoldenEncodeAndDecode) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/golden_encode.jsonl");
  std::ifstream in(test::shared_dir() / "tokenizers/qwen3/golden_encode.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    std::string text = j["text"];
    auto want = j["ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE("text: " + text);
    EXPECT_EQ(qwen3().encode(text), want);
    EXPECT_EQ(qwen3().decode(want), j["decoded"].get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 18);
}

TEST(TokenizerQwen3, VocabAndSpecialTokens) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const auto& t = qwen3();
  EXPECT_EQ(t.vocab_size(), 151669u);
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(t.token_to_id("Hello"), 9707);
  EXPECT_EQ(t.token_to_id("no-such-token-xyz"), std::nullopt);
  EXPECT_EQ(t.eos_id(), 151645);  // eos_token <|im_end|> in tokenizer_config.json
  EXPECT_EQ(t.bos_id(), std::nullopt);
  EXPECT_TRUE(t.is_special(151644));
  EXPECT_FALSE(t.is_special(9707));
  // Qwen3 adds no BOS even with add_special_tokens.
  EXPECT_EQ(t.encode("Hello, world!", true), (std::vector<int32_t>{9707, 11, 1879, 0}));
  // skip_special_tokens drops the chat markers.
  EXPECT_EQ(t.decode({151644, 872, 198, 6023, 151645}, true), "user\nhi");
  // Ids without a token (the embedding is padded to 151,936 rows) are skipped, as in HF.
  EXPECT_EQ(t.decode({9707, 151669, 151935, -1, 0}), "Hello!");
  EXPECT_EQ(t.id_to_token(151669), std::nullopt);
}

TEST(TokenizerQwen3, RoundTripsMixedScriptText) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const std::string text =
      "Grüße aus Köln! Привет, мир. 東京は晴れ。 مرحبا بالعالم 🙂👩‍💻 x=1e-9;\r\n\tend  ";
  auto ids = qwen3().encode(text);
  EXPECT_GT(ids.size(), 20u);
  EXPECT_EQ(qwen3().decode(ids), text);
}

TEST(TokenizerQwen3, InvalidUtf8InputIsReplaced) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  auto ids = qwen3().encode("a\xff" "b");
  EXPECT_EQ(qwen3().decode(ids), "a\xEF\xBF\xBD" "b");
}

TEST(TokenizerQwen3, StreamingDecodeMatchesFullDecode) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  const std::string text = "emoji 🎉🚀 test 👍🏽 日本語のテキスト <|im_end|> done";
  auto ids = qwen3().encode(text);
  StreamDecoder sd(qwen3(), /*skip_special_tokens=*/false);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = sd.push(id);
    // Every emitted piece is complete UTF-8 on its own.
    size_t pos = 0;
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "id " << id;
    (void)pos;
    streamed += piece;
  }
  streamed += sd.flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_qwen3_test
