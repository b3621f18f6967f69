// tokenizer.json / tokenizer_config.json from GGUF metadata (engine/convert/gguf_tokenizer.h).
#include "engine/convert/gguf_tokenizer.h"

#include <optional>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::engine {
namespace {

using nlohmann::json;

// llama.cpp's token types (llama_token_type / gguf-py TokenType).
enum TokenType : int64_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

}  // namespace

json gguf_pre_tokenizer(const std::string& pre, const std::string& path) {
  // llama.cpp (llama-vocab.cpp) splits these with "\p{N}" (each digit alone) and then GPT-2's
  // regex; Hugging Face writes the same as Digits(individual_digits) + ByteLevel(use_regex).
  static const char* const digits_then_gpt2[] = {"smollm", "starcoder", "refact", "command-r", "codeshell",
                                                  "exaone", "minerva"};
  for (const char* p : digits_then_gpt2)
    if (pre == p)
      return {{"type", "Sequence"},
              {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
  // GPT-2's regex alone: ByteLevel with use_regex.
  static const char* const gpt2[] = {"gpt-2", "mpt", "olmo", "jais"};
  for (const char* p : gpt2)
    if (pre == p) return byte_level(true);
  if (pre == "llama-bpe" || pre == "llama3")  // Llama 3's regex, then ByteLevel without its own
    return {{"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Split"},
                           {"pattern",
                            {{"Regex",
                              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          byte_level(false)})}};
  fail("{}: metadata key 'tokenizer.ggml.pre': pre-tokenizer '{}' is not supported (known: smollm, starcoder, "
       "refact, command-r, codeshell, exaone, minerva, gpt-2, mpt, olmo, jais, llama-bpe)",
       path, pre);
}

GgufTokenizer gguf_tokenizer(const io::GgufFile& f, int64_t model_max_length, std::map<std::string, std::string>& used) {
  const std::string& path = f.path();
  auto mark = [&](const std::string& key, const std::string& where) {
    if (f.find(key)) used[key] = where;
  };
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    fail("{}: metadata key 'tokenizer.ggml.model': '{}' is not supported; fp4lm convert reads 'gpt2' (byte-level "
         "BPE) tokenizers only",
         path, model);
  mark("tokenizer.ggml.model", "tokenizer.json model.type BPE (byte-level)");
  if (f.find("tokenizer.ggml.add_space_prefix")) {
    if (f.get_bool("tokenizer.ggml.add_space_prefix"))
      fail("{}: metadata key 'tokenizer.ggml.add_space_prefix' is true, which a byte-level BPE tokenizer does not do",
           path);
    mark("tokenizer.ggml.add_space_prefix", "false: no prefix space (ByteLevel add_prefix_space false)");
  }

  const json& tokens = f.get_array("tokenizer.ggml.tokens", io::GgufType::STRING);
  const size_t n = tokens.size();
  if (n == 0) fail("{}: metadata key 'tokenizer.ggml.tokens' is empty", path);
  std::vector<int64_t> types(n, NORMAL);
  if (f.find("tokenizer.ggml.token_type")) {
    const json& tt = f.get_array("tokenizer.ggml.token_type", io::GgufType::I32);
    if (tt.size() != n)
      fail("{}: metadata key 'tokenizer.ggml.token_type' has {} entries, tokenizer.ggml.tokens {}", path, tt.size(), n);
    for (size_t i = 0; i < n; ++i) {
      types[i] = tt[i].get<int64_t>();
      if (types[i] < NORMAL || types[i] > UNUSED)
        fail("{}: metadata key 'tokenizer.ggml.token_type'[{}] (token '{}'): type {} is not supported here (1 normal, "
             "2 unknown, 3 control, 4 user-defined, 5 unused; 6 byte is SentencePiece's)",
             path, i, tokens[i].get<std::string>(), types[i]);
    }
    mark("tokenizer.ggml.token_type", "tokenizer.json added_tokens (control -> special, user-defined -> not special)");
  }
  json vocab = json::object();
  std::unordered_map<std::string, int64_t> ids;
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const std::string& s = tokens[i].get_ref<const std::string&>();
    if (!ids.emplace(s, static_cast<int64_t>(i)).second)
      fail("{}: metadata key 'tokenizer.ggml.tokens': token '{}' appears twice (ids {} and {})", path, s, ids[s], i);
    vocab[s] = i;
    if (types[i] == CONTROL || types[i] == USER_DEFINED || types[i] == UNKNOWN)
      added.push_back({{"id", i},
                       {"content", s},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", types[i] != USER_DEFINED}});
  }
  mark("tokenizer.ggml.tokens", "tokenizer.json model.vocab");

  json merges = json::array();
  if (f.find("tokenizer.ggml.merges")) {
    const json& m = f.get_array("tokenizer.ggml.merges", io::GgufType::STRING);
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string& s = m[i].get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: metadata key 'tokenizer.ggml.merges'[{}]: expected two tokens separated by one space, found '{}'",
             path, i, s);
      const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
      for (const std::string& part : {a, b, a + b}) {
        if (!ids.count(part))
          fail("{}: metadata key 'tokenizer.ggml.merges'[{}] '{}': '{}' is not in the vocabulary", path, i, s, part);
      }
      merges.push_back(s);
    }
    mark("tokenizer.ggml.merges", "tokenizer.json model.merges");
  }

  const std::string pre = f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "gpt-2";
  json pre_tokenizer = gguf_pre_tokenizer(pre, path);
  mark("tokenizer.ggml.pre", "tokenizer.json pre_tokenizer");

  GgufTokenizer out;
  out.vocab_size = static_cast<int64_t>(n);
  json cfg = {{"tokenizer_class", "GPT2Tokenizer"},
              {"add_prefix_space", false},
              {"clean_up_tokenization_spaces", false},
              {"model_max_length", model_max_length}};
  auto token_id = [&](const char* key) -> std::optional<int64_t> {
    if (!f.find(key)) return std::nullopt;
    const uint64_t id = f.get_uint(key);
    if (id >= n) fail("{}: metadata key '{}': token id {} is outside the vocabulary ({} tokens)", path, key, id, n);
    return static_cast<int64_t>(id);
  };
  const std::pair<const char*, const char*> named[] = {{"tokenizer.ggml.bos_token_id", "bos"},
                                                       {"tokenizer.ggml.eos_token_id", "eos"},
                                                       {"tokenizer.ggml.unknown_token_id", "unk"},
                                                       {"tokenizer.ggml.padding_token_id", "pad"}};
  out.generation_ids = json::object();
  for (const auto& [key, what] : named) {
    if (auto id = token_id(key)) {
      cfg[fmt::format("{}_token", what)] = tokens[*id];
      std::string where = fmt::format("tokenizer_config.json {}_token '{}'", what, tokens[*id].get<std::string>());
      if (std::string(what) != "unk") {
        out.generation_ids[fmt::format("{}_token_id", what)] = *id;
        where += fmt::format(", generation_config.json {}_token_id", what);
      }
      mark(key, where);
    }
  }
  // add_bos_token / add_eos_token: llama.cpp adds them on encode when true; so does a
  // TemplateProcessing post-processor.
  bool add_bos = false, add_eos = false;
  if (f.find("tokenizer.ggml.add_bos_token")) {
    add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    mark("tokenizer.ggml.add_bos_token", "tokenizer_config.json add_bos_token (and the post_processor)");
  }
  if (f.find("tokenizer.ggml.add_eos_token")) {
    add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
    mark("tokenizer.ggml.add_eos_token", "tokenizer_config.json add_eos_token (and the post_processor)");
  }
  cfg["add_bos_token"] = add_bos;
  cfg["add_eos_token"] = add_eos;
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  if (add_bos || add_eos) {
    json special = json::object();
    // [bos] $A [eos] for one sequence; the same again with $B (type id 1) for a pair.
    auto part = [&](const char* seq, int type_id) {
      json items = json::array();
      auto add_special = [&](const char* key, const char* what) {
        auto id = token_id(key);
        if (!id) fail("{}: tokenizer.ggml.add_{}_token is true but '{}' is missing", path, what, key);
        const std::string t = tokens[*id];
        items.push_back({{"SpecialToken", {{"id", t}, {"type_id", type_id}}}});
        special[t] = {{"id", t}, {"ids", {*id}}, {"tokens", {t}}};
      };
      if (add_bos) add_special("tokenizer.ggml.bos_token_id", "bos");
      items.push_back({{"Sequence", {{"id", seq}, {"type_id", type_id}}}});
      if (add_eos) add_special("tokenizer.ggml.eos_token_id", "eos");
      return items;
    };
    json single = part("A", 0), pair = part("A", 0);
    for (json& item : part("B", 1)) pair.push_back(item);
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
  }
  if (f.find("tokenizer.chat_template")) {
    cfg["chat_template"] = f.get_string("tokenizer.chat_template");
    mark("tokenizer.chat_template", "tokenizer_config.json chat_template");
  }
  out.tokenizer_config = std::move(cfg);
  out.tokenizer = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", std::move(added)},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", std::move(pre_tokenizer)},
                   {"post_processor", std::move(post)},
                   {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", false},
                     {"vocab", std::move(vocab)},
                     {"merges", std::move(merges)}}}};
  return out;
}

}  // namespace fp4lm::engine
