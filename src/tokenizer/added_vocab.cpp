#include "tokenizer/added_vocab.h"

#include <algorithm>
#include <array>
#include <utility>

#include "tokenizer/normalizers.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

// A byte trie; `token` is the index in tokens_ of the token ending at the node (or -1).
struct AddedVocabulary::Trie {
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;
  };
  std::vector<Node> nodes{1};
  std::array<bool, 256> first_byte{};  // quick rejection of positions where nothing can start

  void insert(std::string_view s, int32_t token) {
    if (s.empty()) return;
    first_byte[static_cast<unsigned char>(s[0])] = true;
    int32_t n = 0;
    for (unsigned char c : s) {
      int32_t child = find_child(n, c);
      if (child < 0) {
        child = static_cast<int32_t>(nodes.size());
        nodes[static_cast<size_t>(n)].children.emplace_back(c, child);
        nodes.emplace_back();
      }
      n = child;
    }
    // The first token listed with a given content wins.
    if (nodes[static_cast<size_t>(n)].token < 0) nodes[static_cast<size_t>(n)].token = token;
  }
  int32_t find_child(int32_t n, unsigned char c) const {
    for (const auto& [k, v] : nodes[static_cast<size_t>(n)].children)
      if (k == c) return v;
    return -1;
  }
  // The longest token starting at text[i]: (token index, length) or (-1, 0).
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t i) const {
    int32_t best = -1;
    size_t best_len = 0;
    int32_t n = 0;
    for (size_t k = i; k < text.size(); ++k) {
      n = find_child(n, static_cast<unsigned char>(text[k]));
      if (n < 0) break;
      if (nodes[static_cast<size_t>(n)].token >= 0) {
        best = nodes[static_cast<size_t>(n)].token;
        best_len = k + 1 - i;
      }
    }
    return {best, best_len};
  }
  bool empty() const { return nodes.size() == 1; }
};

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)), raw_(std::make_unique<Trie>()), normalized_(std::make_unique<Trie>()) {
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const auto& t = tokens_[k];
    if (t.normalized && normalizer) {
      std::string n = t.content;
      normalizer->normalize(n);
      normalized_->insert(n, static_cast<int32_t>(k));
    } else if (t.normalized) {
      normalized_->insert(t.content, static_cast<int32_t>(k));
    } else {
      raw_->insert(t.content, static_cast<int32_t>(k));
    }
  }
}

AddedVocabulary::~AddedVocabulary() = default;

bool AddedVocabulary::has_normalized_tokens() const { return !normalized_->empty(); }

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized_tokens) const {
  const Trie& trie = normalized_tokens ? *normalized_ : *raw_;
  std::vector<Segment> out;
  size_t emitted = 0;  // end of the last segment pushed
  if (!trie.empty()) {
    for (size_t i = 0; i < text.size();) {
      if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      auto [tok, len] = trie.longest_at(text, i);
      if (tok < 0) {
        ++i;
        continue;
      }
      const AddedToken& t = tokens_[static_cast<size_t>(tok)];
      size_t start = i, stop = i + len;
      i = stop;  // matches never overlap, even when one is discarded below
      if (t.single_word) {
        size_t prev_start;
        bool word_before = start > 0 && utf8::is_word_char(utf8::prev(text, start, prev_start));
        size_t j = stop;
        bool word_after = stop < text.size() && utf8::is_word_char(utf8::next(text, j));
        if (word_before || word_after) continue;
      }
      if (t.lstrip) {
        while (start > emitted) {
          size_t p;
          if (!utf8::is_whitespace(utf8::prev(text, start, p))) break;
          start = std::max(p, emitted);
        }
      }
      if (t.rstrip) {
        while (stop < text.size()) {
          size_t j = stop;
          if (!utf8::is_whitespace(utf8::next(text, j))) break;
          stop = j;
        }
        i = stop;
      }
      if (emitted < start) out.push_back({emitted, start, -1});
      out.push_back({start, stop, t.id});
      emitted = stop;
    }
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
  return out;
}

}  // namespace fp4lm::tokenizer
