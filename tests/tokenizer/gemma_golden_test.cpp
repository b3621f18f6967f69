// Gemma's tokenizer layout and chat templates against Hugging Face `tokenizers` and Jinja2 (issue
// 21, item 5). tests/tokenizer/fixtures/gemma/ was written by scripts/make_gemma_tokenizer_goldens.py
// (tokenizers 0.23.3, Jinja2 3.1.6; its prompts also equal transformers 5.24's renderer): a small
// BPE laid out as Gemma 3 / Gemma 4 ship theirs (byte fallback, no pre-tokenizer, the " " -> "▁"
// normalizer, Replace + ByteFallback + Fuse decoder, "<bos> $A", Gemma's special tokens), with
// golden encodes / decodes, and Google's Gemma 3 and Gemma 4 chat templates (Gemma 4's first form
// and its revision; README there) rendered and encoded for conversations with system / developer
// turns, content parts, tools, tool calls and responses (Gemma's own and OpenAI-style `tool`
// messages), thinking, and the roles-must-alternate error.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::tokenizer::gemma_golden_test {
namespace {

const std::string kDir = std::string(FP4LM_SOURCE_DIR) + "/tests/tokenizer/fixtures/gemma/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<nlohmann::ordered_json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

std::unique_ptr<Tokenizer> gemma_style() {
  return Tokenizer::from_json(read_file(kDir + "tokenizer.json"), read_file(kDir + "tokenizer_config.json"),
                              kDir + "tokenizer.json");
}

using Ids = std::vector<int32_t>;

TEST(GemmaTokenizerGolden, EncodeAndDecodeMatchHuggingFaceTokenizers) {
  auto tok = gemma_style();
  int texts = 0, id_lists = 0;
  for (const auto& row : read_jsonl(kDir + "golden_tokenize.jsonl")) {
    const Ids ids_special = row.contains("text") ? row["ids_special"].get<Ids>() : row["ids"].get<Ids>();
    if (row.contains("text")) {
      const std::string text = row["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false), row["ids"].get<Ids>()) << text;
      EXPECT_EQ(tok->encode(text, true), ids_special) << text;
      // Streaming detokenization (special tokens skipped) gives the whole decode.
      StreamDecoder sd(*tok);
      std::string streamed;
      for (int32_t id : ids_special) streamed += sd.push(id);
      streamed += sd.flush();
      EXPECT_EQ(streamed, row["decoded_skip"].get<std::string>()) << text;
      ++texts;
    } else {
      ++id_lists;
    }
    EXPECT_EQ(tok->decode(ids_special, false), row["decoded"].get<std::string>()) << row.dump();
    EXPECT_EQ(tok->decode(ids_special, true), row["decoded_skip"].get<std::string>()) << row.dump();
  }
  EXPECT_EQ(texts, 30);
  EXPECT_EQ(id_lists, 8);
  EXPECT_EQ(tok->bos_id(), tok->token_to_id("<bos>"));
  EXPECT_EQ(tok->eos_id(), tok->token_to_id("<eos>"));
}

TEST(GemmaChatTemplateGolden, GemmaThreeAndFourRenderAndEncodeAsJinja2AndTokenizers) {
  auto tok = gemma_style();
  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, int> rendered;
  int errors = 0;
  for (const auto& row : read_jsonl(kDir + "golden_chat.jsonl")) {
    const std::string name = row["template"].get<std::string>(), what = name + " / " + row["name"].get<std::string>();
    auto it = templates.find(name);
    if (it == templates.end()) it = templates.emplace(name, ChatTemplate(read_file(kDir + name), "<bos>", "<eos>")).first;
    ChatOptions opts;
    opts.add_generation_prompt = row["add_generation_prompt"].get<bool>();
    for (const auto& [k, v] : row["kwargs"].items()) {
      if (k == "enable_thinking") opts.enable_thinking = v.get<bool>();
      else opts.extra[k] = nlohmann::json(v);
    }
    if (row.contains("error")) {
      const std::string err = test::error_of([&] { it->second.render_ordered(row["messages"], row["tools"], opts); });
      EXPECT_NE(err.find(row["error"].get<std::string>()), std::string::npos) << what << ": " << err;
      ++errors;
      continue;
    }
    const std::string prompt = it->second.render_ordered(row["messages"], row["tools"], opts);
    EXPECT_EQ(prompt, row["prompt"].get<std::string>()) << what;
    EXPECT_EQ(tok->encode(prompt, false), row["ids"].get<Ids>()) << what;
    ++rendered[name];
  }
  EXPECT_EQ(rendered["gemma3_chat_template.jinja"], 5);
  EXPECT_EQ(rendered["gemma4_chat_template.jinja"], 9);
  EXPECT_EQ(rendered["gemma4_revised_chat_template.jinja"], 13);
  EXPECT_EQ(errors, 1);
}

}  // namespace
}  // namespace fp4lm::tokenizer::gemma_golden_test
