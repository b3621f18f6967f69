#pragma once
// The tokenizer of a Hugging Face checkpoint, read from its tokenizer.json (+ the add_bos/add_eos
// flags of tokenizer_config.json): normalizer -> added tokens -> pre-tokenizer -> BPE ->
// post-processor for encode, and the decoder chain for decode. See docs/TOKENIZER.md for the
// supported components. All methods are const and safe to call from several threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4lm::tokenizer {

struct TokenizerParts;  // the pipeline components (tokenizer_parts.h)

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  static std::unique_ptr<Tokenizer> from_dir(const std::string& dir);
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json_path);
  // From JSON text; `config_json` may be empty. `name` labels error messages.
  static std::unique_ptr<Tokenizer> from_json(std::string_view tokenizer_json,
                                              std::string_view config_json,
                                              const std::string& name = "tokenizer.json");
  ~Tokenizer();

  // Invalid UTF-8 in `text` is replaced by U+FFFD first. `add_special_tokens` runs the
  // post-processor (e.g. inserts BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // encode(), or std::nullopt as soon as the text is known to need more than `max_ids` ids: the
  // model (BPE) never runs past the limit, so rejecting an over-long prompt costs little more
  // than its pre-tokenization.
  std::optional<std::vector<int32_t>> encode_at_most(std::string_view text, bool add_special_tokens,
                                                     size_t max_ids) const;
  // A lower bound on the ids encode() gives for any text of `n_bytes` bytes, from the longest
  // token and the most the normalizer and pre-tokenizer can shrink a text; 0 when they can drop
  // text without bound (e.g. Strip, Whitespace). Rejects a huge prompt before tokenizing it.
  size_t min_ids_for_bytes(size_t n_bytes) const;
  // Ids that name no token (e.g. the padding rows of a model's embedding) are skipped, as in
  // Hugging Face tokenizers; check with id_to_token() to reject them instead.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // One past the largest token id (model vocabulary and added tokens).
  size_t vocab_size() const;

  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // BOS / EOS token ids named by tokenizer_config.json (bos_token, eos_token), when present.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::unique_ptr<TokenizerParts> parts);
  std::string decode_raw(const int32_t* ids, size_t n, bool skip_special_tokens) const;
  // false when `max_ids` was exceeded (ids then incomplete).
  bool encode_into(std::string_view text, bool add_special_tokens, size_t max_ids, std::vector<int32_t>& ids) const;
  std::unique_ptr<TokenizerParts> p_;
  double max_bytes_per_id_ = 0;  // input bytes one id can stand for, shrinking included; 0 = unbounded
};

// Incremental detokenization for generation: push() returns the new text once it is complete
// UTF-8 (so a character spread over several byte tokens is printed whole, never as garbage),
// and flush() returns whatever is still held back.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // the tokens of the last emission (context) + pending ones
  std::string prefix_;        // decode of the context tokens
  size_t prefix_index_ = 0;   // number of context tokens at the front of ids_
};

}  // namespace fp4lm::tokenizer
