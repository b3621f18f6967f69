// Broken or unsupported tokenizer.json / tokenizer_config.json files fail with an fp4lm::Error
// that names the file and what is wrong.
#include <gtest/gtest.h>

#include <random>

#include "common/paths.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp4lm::tokenizer::tokenizer_malformed_test {
namespace {

namespace fx = fixtures;
using json = nlohmann::json;

// The error message of loading `text`, or "" if it loaded.
std::string load_error(const std::string& text, const std::string& config = "") {
  try {
    Tokenizer::from_json(text, config, "dir/tokenizer.json");
  } catch (const fp4lm::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(text, ...)                                                 \
  do {                                                                              \
    std::string msg_ = load_error(text);                                            \
    for (const char* want_ : {__VA_ARGS__})                                         \
      EXPECT_NE(msg_.find(want_), std::string::npos) << "message: " << msg_;        \
  } while (0)

TEST(TokenizerMalformed, NotJson) {
  EXPECT_ERROR_HAS("", "dir/tokenizer.json", "invalid JSON");
  EXPECT_ERROR_HAS("{\"model\": {", "dir/tokenizer.json", "invalid JSON");
  std::string full = fx::gpt2().dump();
  EXPECT_ERROR_HAS(full.substr(0, full.size() / 2), "dir/tokenizer.json", "invalid JSON");  // truncated
  EXPECT_ERROR_HAS(full + "}", "dir/tokenizer.json", "invalid JSON");                     // trailing junk
  EXPECT_ERROR_HAS("[1, 2]", "dir/tokenizer.json", "top level");
}

// Nesting is bounded while parsing (io::kMaxJsonDepth) in tokenizer.json and in
// tokenizer_config.json: a deeply nested `Sequence` is a clear error, not a stack overflow or an
// allocation storm in the recursive component builders; moderately nested ones still load.
TEST(TokenizerMalformed, DeeplyNestedSequenceIsRefused) {
  // Built as text: a DOM this deep is what the limit exists to avoid.
  auto nested = [](int levels) {
    std::string n = R"({"type": "Lowercase"})";
    std::string open, close;
    for (int i = 0; i < levels; ++i) {
      open += R"({"type": "Sequence", "normalizers": [)";
      close += "]}";
    }
    json j = fx::gpt2();
    j["normalizer"] = nullptr;
    std::string text = j.dump();
    const std::string key = "\"normalizer\":null";
    const size_t at = text.find(key);
    return text.substr(0, at) + "\"normalizer\":" + open + n + close + text.substr(at + key.size());
  };
  EXPECT_EQ(load_error(nested(30)), "");
  EXPECT_ERROR_HAS(nested(100000), "dir/tokenizer.json: invalid JSON: nested deeper than 128 levels");
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_ERROR_HAS("{\"x\": " + deep + "}", "dir/tokenizer.json: invalid JSON: nested deeper than 128 levels");
  std::string msg;
  try {
    Tokenizer::from_json(fx::gpt2().dump(), "{\"x\": " + deep + "}", "dir/tokenizer.json");
  } catch (const fp4lm::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("tokenizer_config.json: invalid JSON: nested deeper than 128 levels"), std::string::npos) << msg;
}

TEST(TokenizerMalformed, MissingOrWrongModel) {
  json j = fx::gpt2();
  j.erase("model");
  EXPECT_ERROR_HAS(j.dump(), "dir/tokenizer.json", "missing field 'model'");
  j = fx::gpt2();
  j["model"]["type"] = "Unigram";
  EXPECT_ERROR_HAS(j.dump(), "unsupported model type 'Unigram'", "dir/tokenizer.json", "BPE");
  j = fx::gpt2();
  j["model"].erase("vocab");
  EXPECT_ERROR_HAS(j.dump(), "model", "missing field 'vocab'");
  j = fx::gpt2();
  j["model"]["vocab"] = json::array();
  EXPECT_ERROR_HAS(j.dump(), "model.vocab", "expected an object");
  j = fx::gpt2();
  j["model"]["dropout"] = 0.1;
  EXPECT_ERROR_HAS(j.dump(), "dropout");
}

TEST(TokenizerMalformed, BadVocabEntries) {
  json j = fx::gpt2();
  j["model"]["vocab"]["bad"] = "seven";
  EXPECT_ERROR_HAS(j.dump(), "model.vocab['bad']", "expected an integer id");
  j = fx::gpt2();
  j["model"]["vocab"]["neg"] = -3;
  EXPECT_ERROR_HAS(j.dump(), "model.vocab['neg']", "out of range");
  j = fx::gpt2();
  j["model"]["vocab"]["dup"] = 5;  // id 5 already belongs to a byte character
  EXPECT_ERROR_HAS(j.dump(), "id 5 is used by both");
  j = fx::gpt2();
  j["model"]["vocab"]["huge"] = 2000000000;
  EXPECT_ERROR_HAS(j.dump(), "model.vocab", "implausibly large");
  j = fx::gpt2();
  j["added_tokens"].push_back(fx::added_token(1999999999, "<big>", true));
  EXPECT_ERROR_HAS(j.dump(), "implausibly large");
}

TEST(TokenizerMalformed, BadMerges) {
  json j = fx::gpt2();
  j["model"]["merges"].push_back("nospace");
  EXPECT_ERROR_HAS(j.dump(), "model.merges[12]", "two tokens separated by one space");
  j = fx::gpt2();
  j["model"]["merges"].push_back(json::array({"a"}));
  EXPECT_ERROR_HAS(j.dump(), "model.merges[12]", "pair of 2 strings");
  j = fx::gpt2();
  j["model"]["merges"].push_back(42);
  EXPECT_ERROR_HAS(j.dump(), "model.merges[12]", "found number");
  j = fx::gpt2();
  j["model"]["merges"].push_back("Ġ zzz");
  EXPECT_ERROR_HAS(j.dump(), "model.merges[12]", "'zzz' is not in model.vocab");
  j = fx::gpt2();
  j["model"]["merges"] = "a b";
  EXPECT_ERROR_HAS(j.dump(), "model.merges", "expected an array");
}

TEST(TokenizerMalformed, UnsupportedComponentsAreNamed) {
  json j = fx::gpt2();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_ERROR_HAS(j.dump(), "dir/tokenizer.json", "unsupported pre_tokenizer type 'BertPreTokenizer'");
  j = fx::gpt2();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "Precompiled"}}})}};
  EXPECT_ERROR_HAS(j.dump(), "unsupported normalizer type 'Precompiled'", "normalizer.normalizers[1]");
  j = fx::gpt2();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_ERROR_HAS(j.dump(), "unsupported decoder type 'WordPiece'");
  j = fx::gpt2();
  j["post_processor"] = {{"type", "Mystery"}};
  EXPECT_ERROR_HAS(j.dump(), "unsupported post_processor type 'Mystery'");
  j = fx::gpt2();
  j["truncation"] = {{"max_length", 10}};
  EXPECT_ERROR_HAS(j.dump(), "truncation");
}

TEST(TokenizerMalformed, BadComponentFields) {
  json j = fx::gpt2();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer.pattern", "cannot compile regex");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer.behavior", "Sideways");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", "x"}, {"behavior", "Isolated"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer.pattern");
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", "yes"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer.add_prefix_space", "expected true or false");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "__"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer.replacement", "exactly one character");
  j["pre_tokenizer"] = {{"kind", "ByteLevel"}};
  EXPECT_ERROR_HAS(j.dump(), "pre_tokenizer", "missing field 'type'");
  j = fx::llama2();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<bos>";
  EXPECT_ERROR_HAS(j.dump(), "post_processor.single[0]", "'<bos>' is not in special_tokens");
  j = fx::llama2();
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {99999};
  EXPECT_ERROR_HAS(j.dump(), "post_processor", "99999 is not in the vocabulary");
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {-4};
  EXPECT_ERROR_HAS(j.dump(), "special_tokens.<s>.ids", "non-negative");
}

// Random byte corruptions of a valid file either still load (and then encode and decode) or
// fail with fp4lm::Error; never another exception or a crash (run under ASan in CI).
TEST(TokenizerMalformed, RandomCorruptionsFailCleanly) {
  std::mt19937 rng(12345);
  const std::string files[] = {fx::gpt2().dump(), fx::llama2().dump(), fx::llama3().dump()};
  const char junk[] = "{}[]\",:0123456789-. \\aeE\xc3\xa9\xff";
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = files[static_cast<size_t>(trial) % 3];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[pos] = junk[rng() % (sizeof(junk) - 1)]; break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        default: text.insert(pos, 1, junk[rng() % (sizeof(junk) - 1)]); break;
      }
    }
    try {
      auto t = Tokenizer::from_json(text, "", "fuzz/tokenizer.json");
      auto ids = t->encode("hello the world <s> Hello é 12345 <|endoftext|>", true);
      (void)t->decode(ids);
      ++loaded;
    } catch (const fp4lm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz/tokenizer.json"), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(loaded, 0);
}

TEST(TokenizerMalformed, BadAddedTokens) {
  json j = fx::gpt2();
  j["added_tokens"].push_back({{"content", "<x>"}});
  EXPECT_ERROR_HAS(j.dump(), "added_tokens[1]", "missing field 'id'");
  j = fx::gpt2();
  j["added_tokens"] = {{"content", "<x>"}};
  EXPECT_ERROR_HAS(j.dump(), "added_tokens", "expected an array");
  j = fx::gpt2();
  j["added_tokens"].push_back({{"id", 300}, {"content", ""}});
  EXPECT_ERROR_HAS(j.dump(), "added_tokens[1].content", "empty");
}

TEST(TokenizerMalformed, BadConfig) {
  std::string ok = fx::gpt2().dump();
  auto cfg_error = [&](const std::string& cfg) {
    try {
      Tokenizer::from_json(ok, cfg, "dir/tokenizer.json");
    } catch (const fp4lm::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(cfg_error("{nope").find("dir/tokenizer_config.json: invalid JSON"), std::string::npos);
  EXPECT_NE(cfg_error(R"({"bos_token": "<nope>"})").find("bos_token"), std::string::npos);
  EXPECT_NE(cfg_error(R"({"add_bos_token": true})").find("no bos_token"), std::string::npos);
  EXPECT_NE(cfg_error(R"({"bos_token": 3})").find("bos_token"), std::string::npos);
}

TEST(TokenizerMalformed, MissingFilesNameThePath) {
  test::TempDir dir;
  try {
    Tokenizer::from_dir(dir.path().string());
    FAIL() << "expected an error";
  } catch (const fp4lm::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "tokenizer.json").string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_file((dir.path() / "nope.json").string()), fp4lm::Error);
  // A directory with a valid file loads, with or without tokenizer_config.json.
  test::write_file(dir / "tokenizer.json", fx::gpt2().dump());
  EXPECT_EQ(Tokenizer::from_dir(dir.path().string())->encode("hello"), std::vector<int32_t>{259});
  test::write_file(dir / "tokenizer_config.json", "[");
  EXPECT_THROW(Tokenizer::from_dir(dir.path().string()), fp4lm::Error);
  EXPECT_EQ(Tokenizer::from_file((dir / "tokenizer.json").string())->encode("hello"), std::vector<int32_t>{259});
}

}  // namespace
}  // namespace fp4lm::tokenizer::tokenizer_malformed_test
