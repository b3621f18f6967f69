#pragma once
// Small tokenizer.json files built in tests, one per family the loader must handle:
// GPT-2 (byte-level BPE), Llama 2 (sentencepiece BPE with byte fallback, Prepend/Replace
// normalizers), Mistral (Metaspace pre-tokenizer), Llama 3 (Split regex + ByteLevel,
// ignore_merges, BOS template).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::tokenizer::fixtures {

using json = nlohmann::json;

// GPT-2's byte -> character rule, written out independently of the library: printable Latin-1
// bytes stand for themselves, the others take U+0100 + n in byte order.
inline std::string byte_char(unsigned b) {
  auto printable = [](unsigned x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE); };
  unsigned cp = b;
  if (!printable(b)) {
    unsigned n = 0;
    for (unsigned k = 0; k < b; ++k) n += !printable(k);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

inline json added_token(int id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// Byte-level vocab: ids 0..255 are the byte characters (id = byte value), then these merges:
//   256 ll, 257 ell, 258 hell, 259 hello, 260 Ġt, 261 he, 262 Ġthe, 263 Ġw, 264 or, 265 Ġwor,
//   266 ld, 267 Ġworld; added token 268 <|endoftext|>.
inline json gpt2() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"},    {"e", "ll"},  {"h", "ell"},   {"hell", "o"}, {"Ġ", "t"},    {"h", "e"},
      {"Ġt", "he"}, {"Ġ", "w"},  {"o", "r"},     {"Ġw", "or"},  {"l", "d"},     {"Ġwor", "ld"}};
  json m = json::array();
  int id = 256;
  for (auto& [a, b] : merges) {
    vocab[a + b] = id++;
    m.push_back(a + " " + b);  // the older "a b" string form
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({added_token(268, "<|endoftext|>", true)})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                     {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", m}}}};
}

// Sentencepiece-style vocab: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, 259 ▁, 260 H, 261 e,
// 262 l, 263 o, 264 w, 265 r, 266 d, then merges:
//   267 ll, 268 ▁H, 269 ell, 270 ▁Hell, 271 ▁Hello, 272 ▁w, 273 or, 274 ▁wor, 275 ▁worl, 276 ▁world
inline json sentencepiece_model(bool byte_fallback) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  int id = 259;
  for (const char* t : {"▁", "H", "e", "l", "o", "w", "r", "d"}) vocab[t] = id++;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"}, {"▁", "H"}, {"e", "ll"}, {"▁H", "ell"}, {"▁Hell", "o"},
      {"▁", "w"}, {"o", "r"}, {"▁w", "or"}, {"▁wor", "l"}, {"▁worl", "d"}};
  json m = json::array();
  for (auto& [a, b] : merges) {
    vocab[a + b] = id++;
    m.push_back(json::array({a, b}));  // the newer [a, b] pair form
  }
  return {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", byte_fallback},
          {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}};
}

inline json sentencepiece_added() {
  return json::array({added_token(0, "<unk>", true), added_token(1, "<s>", true), added_token(2, "</s>", true)});
}

inline json bos_template() {
  return {{"type", "TemplateProcessing"},
          {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
          {"pair", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
}

// Llama 2 as converted by transformers: Prepend/Replace normalizers, no pre-tokenizer.
inline json llama2(bool byte_fallback = true) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", sentencepiece_added()},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({
              {{"type", "Prepend"}, {"prepend", "▁"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", bos_template()},
          {"decoder", {{"type", "Sequence"}, {"decoders", json::array({
              {{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"model", sentencepiece_model(byte_fallback)}};
}

// Mistral / newer Llama 2 conversions: a Metaspace pre-tokenizer and decoder instead.
inline json mistral() {
  json j = llama2();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({
      {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}}})}};
  return j;
}

// Llama 3 style: GPT-2 bytes + merges "1 2" and "12 3", Split with the Llama 3 regex
// then ByteLevel without regex, ignore_merges, and a BOS template.
//   ids: gpt2() ids, then 269 "12", 270 "123", 271 "xyz" (reachable only through ignore_merges);
//   added: 400 <|begin_of_text|>, 401 <|eot_id|>.
inline json llama3(bool ignore_merges = true) {
  json j = gpt2();
  json& model = j["model"];
  model["vocab"]["12"] = 269;
  model["vocab"]["123"] = 270;
  model["vocab"]["xyz"] = 271;
  model["merges"].push_back("1 2");
  model["merges"].push_back("12 3");
  model["ignore_merges"] = ignore_merges;
  j["added_tokens"] = json::array({added_token(400, "<|begin_of_text|>", true), added_token(401, "<|eot_id|>", true)});
  const char* pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({
      {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  j["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({
      {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
      {{"type", "TemplateProcessing"},
       {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
       {"pair", json::array()},
       {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {400}}, {"tokens", {"<|begin_of_text|>"}}}}}}}})}};
  return j;
}

}  // namespace fp4lm::tokenizer::fixtures
