#pragma once
// The BPE model: turns one pre-tokenized word into token ids by applying merges in rank order.
// Merges live in a flat hash table keyed by the (left id, right id) pair; results for recent
// words are cached. Thread-safe: encode may run concurrently from several threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fp4lm::tokenizer {

// A string -> id map that accepts string_view keys without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The model vocabulary, token <-> id. All token bytes live in one buffer and the index is an
// open-addressing table of ids: building it for 150k tokens costs a few milliseconds, where a
// node-based map spends most of the tokenizer's load time in allocation and cache misses.
class Vocab {
 public:
  // Loading: add every (token, id), then finish() (which rejects a repeated token or id).
  void add(std::string_view token, int32_t id);
  void finish(const std::string& where);

  int32_t find(std::string_view token) const;  // -1 when absent
  bool has_id(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < by_id_.size() && by_id_[static_cast<size_t>(id)] >= 0;
  }
  std::string_view token(int32_t id) const;  // requires has_id(id)
  size_t size() const { return entries_.size(); }
  size_t max_token_bytes() const { return max_token_bytes_; }
  int32_t max_id() const { return static_cast<int32_t>(by_id_.size()) - 1; }

 private:
  struct Entry {
    uint32_t offset, length;
    int32_t id;
    uint32_t hash;
  };
  std::string bytes_;
  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;  // entry index or -1
  std::vector<int32_t> by_id_;  // id -> entry index or -1
  size_t mask_ = 0;
  size_t max_token_bytes_ = 0;
  std::string_view entry_text(const Entry& e) const { return {bytes_.data() + e.offset, e.length}; }
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
  bool ignore_merges = false;  // a word that is itself in the vocab is one token
};

class BpeModel {
 public:
  // `vocab`: token -> id. `merges`: pairs in priority order (rank = index). Throws fp4lm::Error
  // (prefixed with `where`) when a merge names a token not in the vocab.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& where);
  ~BpeModel();

  // Appends the ids of `word` to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;
  // The same without consulting or filling the cache (benchmark baseline, tests).
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const Vocab& vocab() const { return vocab_; }
  size_t merge_count() const { return merge_count_; }
  // The most input bytes one id can stand for: its token's length (affixes and "<0xXX>" only
  // overstate it), at least one code point for the unknown token, and 0 (no bound) when
  // runs of unknown characters fuse into one unknown token.
  size_t max_bytes_per_id() const;

 private:
  struct MergeTable;
  Vocab vocab_;
  BpeOptions opt_;
  std::optional<int32_t> unk_id_;
  std::unique_ptr<MergeTable> merges_;
  size_t merge_count_ = 0;
  std::vector<int32_t> small_char_ids_;  // code point < 0x800 -> id (or -1), when no affixes
  int32_t byte_ids_[256];                // <0xXX> token ids for byte fallback (or -1)

  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace fp4lm::tokenizer
