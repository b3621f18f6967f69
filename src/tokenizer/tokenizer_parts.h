#pragma once
// The components a Tokenizer is made of; filled by the tokenizer.json loader.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"

namespace fp4lm::tokenizer {

struct TokenizerParts {
  std::string source;  // file name for messages
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<AddedVocabulary> added;

  // Flags per id; added tokens by id (index into added->tokens(), or -1) and by content.
  enum : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4 };
  std::vector<uint8_t> id_flags;
  std::vector<int32_t> added_index;
  TokenMap added_by_content;

  // The text of a present id.
  std::string_view token(int32_t id) const {
    int32_t a = added_index[static_cast<size_t>(id)];
    if (a >= 0) return added->tokens()[static_cast<size_t>(a)].content;
    return model->vocab().token(id);
  }

  bool clean_up_spaces = false;  // tokenizer_config.json clean_up_tokenization_spaces
  std::optional<int32_t> bos_id, eos_id;
};

// Builds the parts from tokenizer.json text (+ optional tokenizer_config.json text).
// Throws fp4lm::Error naming `json_name` / `config_name` on malformed or unsupported content.
std::unique_ptr<TokenizerParts> load_tokenizer_parts(std::string_view tokenizer_json,
                                                     const std::string& json_name,
                                                     std::string_view config_json,
                                                     const std::string& config_name);

}  // namespace fp4lm::tokenizer
