#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer_parts.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

std::string read_text(const std::filesystem::path& path) { return io::read_text_file(path.string()); }

// transformers' clean_up_tokenization: drop the space English punctuation got from decoding.
void clean_up_spaces(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    std::string f = from;
    for (size_t pos = s.find(f); pos != std::string::npos; pos = s.find(f, pos))
      s.replace(pos, f.size(), to);
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<TokenizerParts> parts) : p_(std::move(parts)) {
  // The bound of min_ids_for_bytes: an id stands for at most `per_id` bytes of the normalized,
  // pre-tokenized text (an added token for its content), which is at least 1/shrink of the input.
  double per_id = static_cast<double>(p_->model->max_bytes_per_id());
  for (const auto& t : p_->added->tokens()) per_id = std::max(per_id, static_cast<double>(t.content.size()));
  const double shrink = (p_->normalizer ? p_->normalizer->max_shrink() : 1.0) *
                        (p_->pre_tokenizer ? p_->pre_tokenizer->max_shrink() : 1.0);
  max_bytes_per_id_ = (p_->model->max_bytes_per_id() == 0 || shrink <= 0) ? 0.0 : per_id * shrink;
}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                                std::string_view config_json,
                                                const std::string& name) {
  std::string config_name = (std::filesystem::path(name).parent_path() / "tokenizer_config.json").string();
  return std::unique_ptr<Tokenizer>(
      new Tokenizer(load_tokenizer_parts(tokenizer_json, name, config_json, config_name)));
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail("tokenizer file not found: {}", path);
  std::string text = read_text(path);
  return std::unique_ptr<Tokenizer>(new Tokenizer(load_tokenizer_parts(text, path, {}, {})));
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string& dir) {
  auto json_path = std::filesystem::path(dir) / "tokenizer.json";
  auto config_path = std::filesystem::path(dir) / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(json_path))
    fail("tokenizer file not found: {}", json_path.string());
  std::string text = read_text(json_path);
  std::string config;
  if (std::filesystem::is_regular_file(config_path)) config = read_text(config_path);
  return std::unique_ptr<Tokenizer>(
      new Tokenizer(load_tokenizer_parts(text, json_path.string(), config, config_path.string())));
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  encode_into(input, add_special_tokens, SIZE_MAX, ids);
  return ids;
}

std::optional<std::vector<int32_t>> Tokenizer::encode_at_most(std::string_view input, bool add_special_tokens,
                                                              size_t max_ids) const {
  if (min_ids_for_bytes(input.size()) > max_ids) return std::nullopt;
  std::vector<int32_t> ids;
  if (!encode_into(input, add_special_tokens, max_ids, ids)) return std::nullopt;
  return ids;
}

size_t Tokenizer::min_ids_for_bytes(size_t n_bytes) const {
  if (max_bytes_per_id_ <= 0) return 0;
  return static_cast<size_t>(static_cast<double>(n_bytes) / max_bytes_per_id_);
}

bool Tokenizer::encode_into(std::string_view input, bool add_special_tokens, size_t max_ids,
                            std::vector<int32_t>& ids) const {
  std::string repaired;
  if (!utf8::is_valid(input)) {
    repaired = utf8::to_valid_lossy(input);
    input = repaired;
  }
  ids.reserve(std::min(input.size() / 3, max_ids) + 4);
  std::vector<Piece> pieces;
  // Each non-empty piece gives at least one id, so the count of pieces alone may already say
  // the text is too long, before the model runs.
  auto tokenize_text = [&](std::string text, bool at_origin) {
    pieces.clear();
    pieces.push_back({std::move(text), at_origin});
    if (p_->pre_tokenizer) p_->pre_tokenizer->pre_tokenize(pieces);
    if (ids.size() + pieces.size() > max_ids) {
      size_t nonempty = 0;
      for (const auto& piece : pieces) nonempty += !piece.text.empty();
      if (ids.size() + nonempty > max_ids) return false;
    }
    for (const auto& piece : pieces) {
      p_->model->tokenize(piece.text, ids);
      if (ids.size() > max_ids) return false;
    }
    return true;
  };
  auto push_added = [&](int32_t id) {
    ids.push_back(id);
    return ids.size() <= max_ids;
  };

  // 1. added tokens matched in the raw text; 2. normalize the rest; 3. added tokens matched in
  // normalized text; 4. pre-tokenize and run the model on what remains.
  for (const Segment& seg : p_->added->split(input, false)) {
    if (seg.id >= 0) {
      if (!push_added(seg.id)) return false;
      continue;
    }
    std::string text(input.substr(seg.begin, seg.end - seg.begin));
    if (p_->normalizer) p_->normalizer->normalize(text);
    bool at_origin = seg.begin == 0;
    if (!p_->added->has_normalized_tokens()) {
      if (!text.empty() && !tokenize_text(std::move(text), at_origin)) return false;
      continue;
    }
    for (const Segment& sub : p_->added->split(text, true)) {
      if (sub.id >= 0 ? !push_added(sub.id)
                      : !tokenize_text(text.substr(sub.begin, sub.end - sub.begin), at_origin && sub.begin == 0))
        return false;
    }
  }
  if (add_special_tokens && p_->post_processor) p_->post_processor->process(ids);
  return ids.size() <= max_ids;
}

std::string Tokenizer::decode_raw(const int32_t* ids, size_t n, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    int32_t id = ids[k];
    // Ids naming no token are skipped, as Hugging Face does: models pad their embedding beyond
    // the vocabulary (Qwen3: 151,936 rows for 151,669 tokens) and may sample such an id.
    if (id < 0 || static_cast<size_t>(id) >= p_->id_flags.size() ||
        !(p_->id_flags[static_cast<size_t>(id)] & TokenizerParts::kPresent))
      continue;
    uint8_t f = p_->id_flags[static_cast<size_t>(id)];
    if (skip_special_tokens && (f & TokenizerParts::kSpecial)) continue;
    tokens.emplace_back(p_->token(id));
  }
  if (!p_->decoder) {  // Hugging Face joins with spaces when there is no decoder
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out.push_back(' ');
      out.append(tokens[k]);
    }
    return out;
  }
  p_->decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out.append(t);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string s = decode_raw(ids.data(), ids.size(), skip_special_tokens);
  if (p_->clean_up_spaces) clean_up_spaces(s);
  return s;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = p_->added_by_content.find(token); it != p_->added_by_content.end()) return it->second;
  return p_->model->token_to_id(token);
}

size_t Tokenizer::vocab_size() const { return p_->id_flags.size(); }

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= p_->id_flags.size() ||
      !(p_->id_flags[static_cast<size_t>(id)] & TokenizerParts::kPresent))
    return std::nullopt;
  return std::string(p_->token(id));
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < p_->id_flags.size() &&
         (p_->id_flags[static_cast<size_t>(id)] & TokenizerParts::kSpecial);
}

std::optional<int32_t> Tokenizer::bos_id() const { return p_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return p_->eos_id; }

// ---- streaming ------------------------------------------------------------------------------

namespace {
// After this many held-back tokens a trailing U+FFFD is taken as real (invalid bytes the model
// produced), not as a character still being completed: UTF-8 sequences are at most 4 bytes.
constexpr size_t kMaxHeldTokens = 8;

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens) {}

// Decodes the context tokens together with the new ones, so decoders that treat the first token
// specially (Metaspace strips its leading space) see the same text as a full decode would.
std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = tok_.decode_raw(ids_.data(), ids_.size(), skip_special_);
  size_t held = ids_.size() - prefix_index_;
  if (text.size() <= prefix_.size() || (ends_with_replacement(text) && held < kMaxHeldTokens))
    return {};
  // The context decodes the same at the front of `text` in every supported decoder; if it ever
  // does not, emit only what lies past the common part.
  size_t common = 0;
  while (common < prefix_.size() && prefix_[common] == text[common]) ++common;  // text is longer
  std::string out = text.substr(common);
  size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<long>(prefix_index_));
  prefix_ = tok_.decode_raw(ids_.data(), ids_.size(), skip_special_);
  prefix_index_ = new_prefix_index;
  return out;
}

std::string StreamDecoder::flush() {
  std::string text = tok_.decode_raw(ids_.data(), ids_.size(), skip_special_);
  size_t common = 0;
  while (common < prefix_.size() && common < text.size() && prefix_[common] == text[common]) ++common;
  std::string out = text.substr(common);
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return out;
}

}  // namespace fp4lm::tokenizer
