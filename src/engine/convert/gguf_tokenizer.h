#pragma once
// A GGUF file's tokenizer metadata (tokenizer.ggml.*, tokenizer.chat_template) as the Hugging Face
// files that describe the same tokenizer: tokenizer.json and tokenizer_config.json. Only
// llama.cpp's "gpt2" model (byte-level BPE, the vocabulary stored in its byte-level spelling) is
// converted; its pre-tokenizer comes from tokenizer.ggml.pre, the name llama.cpp gives each
// model's split regexes (see gguf_pre_tokenizer). Token types: CONTROL -> special added tokens,
// USER_DEFINED -> added tokens that are not special, NORMAL / UNUSED -> the vocabulary only.
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace fp4lm::engine {

struct GgufTokenizer {
  nlohmann::json tokenizer;         // tokenizer.json
  nlohmann::json tokenizer_config;  // tokenizer_config.json (chat template, bos/eos/unk/pad)
  nlohmann::json generation_ids;    // bos_token_id / eos_token_id / pad_token_id for generation_config.json
  int64_t vocab_size = 0;
};

// `used` gets one entry per metadata key read (key -> where it went). Error naming the key on a
// tokenizer this cannot express (another tokenizer.ggml.model, an unknown pre-tokenizer, token
// types or ids out of range, merges naming tokens not in the vocabulary, duplicate tokens).
GgufTokenizer gguf_tokenizer(const io::GgufFile& f, int64_t model_max_length, std::map<std::string, std::string>& used);

// The tokenizer.json "pre_tokenizer" for llama.cpp's pre-tokenizer name (tokenizer.ggml.pre),
// written as Hugging Face writes it for those models; Error for a name not known here.
nlohmann::json gguf_pre_tokenizer(const std::string& pre, const std::string& path);

}  // namespace fp4lm::engine
