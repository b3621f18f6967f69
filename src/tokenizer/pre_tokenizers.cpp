#include "tokenizer/pre_tokenizers.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

// GPT-2's word pattern (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Span {
  size_t b, e;
  bool is_match;
};

// Applies fn(piece, out) to every piece, replacing the list.
template <typename Fn>
void split_each(std::vector<Piece>& pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) fn(p, out);
  pieces = std::move(out);
}

}  // namespace

void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<Piece>& out) {
  const std::string& s = piece.text;
  // The whole text as alternating non-match / match spans.
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), false});
  if (invert)
    for (auto& sp : spans) sp.is_match = !sp.is_match;

  // Regroup per behaviour; `keep` false marks spans to drop.
  std::vector<Span> groups;
  groups.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& sp : spans)
        if (!sp.is_match) groups.push_back(sp);
      break;
    case SplitBehavior::Isolated:
      groups = spans;
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.is_match && !prev_match && !groups.empty())
          groups.back().e = sp.e;
        else
          groups.push_back(sp);
        prev_match = sp.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const auto& sp = spans[k];
        if (sp.is_match && !prev_match && !groups.empty())
          groups.back().b = sp.b;
        else
          groups.push_back(sp);
        prev_match = sp.is_match;
      }
      std::reverse(groups.begin(), groups.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      int prev_kind = -1;
      for (const auto& sp : spans) {
        if (prev_kind == static_cast<int>(sp.is_match) && !groups.empty())
          groups.back().e = sp.e;
        else
          groups.push_back(sp);
        prev_kind = static_cast<int>(sp.is_match);
      }
      break;
    }
  }
  for (const auto& g : groups) {
    if (g.b == g.e) continue;
    out.push_back({s.substr(g.b, g.e - g.b), piece.at_origin && g.b == 0});
  }
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space) {
  if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, false, "ByteLevel pre-tokenizer");
}

void ByteLevelPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  if (add_prefix_space_ || regex_) {
    split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q = p;
      if (add_prefix_space_ && (q.text.empty() || q.text[0] != ' ')) q.text = " " + q.text;
      if (regex_)
        split_piece(q, regex_->find_all(q.text), SplitBehavior::Isolated, false, out);
      else
        out.push_back(std::move(q));
    });
  }
  for (auto& p : pieces) {
    std::string mapped;
    byte_level::encode(p.text, mapped);
    p.text = std::move(mapped);
  }
}

void SplitPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    split_piece(p, pattern_->find_all(p.text), behavior_, invert_, out);
  });
}

void DigitsPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t i = 0; i < p.text.size();) {
      size_t b = i;
      bool num = utf8::is_numeric(utf8::next(p.text, i));
      if (num) matches.emplace_back(b, i);
    }
    split_piece(p, matches, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous,
                false, out);
  });
}

void MetaspacePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    Piece q;
    q.at_origin = p.at_origin;
    q.text.reserve(p.text.size() + 8);
    for (char c : p.text) {
      if (c == ' ')
        q.text.append(replacement_);
      else
        q.text.push_back(c);
    }
    bool starts = q.text.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (scheme_ == Prepend::Always || (scheme_ == Prepend::First && p.at_origin)))
      q.text.insert(0, replacement_);
    if (!split_) {
      if (!q.text.empty()) out.push_back(std::move(q));
      return;
    }
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t pos = q.text.find(replacement_); pos != std::string::npos;
         pos = q.text.find(replacement_, pos + replacement_.size()))
      matches.emplace_back(pos, pos + replacement_.size());
    split_piece(q, matches, SplitBehavior::MergedWithNext, false, out);
  });
}

WhitespacePreTokenizer::WhitespacePreTokenizer(bool split_punctuation)
    : regex_(std::make_unique<Regex>(split_punctuation ? R"(\w+|[^\w\s]+)" : R"(\S+)", false,
                                     "Whitespace pre-tokenizer")) {}

void WhitespacePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    split_piece(p, regex_->find_all(p.text), SplitBehavior::Removed, true, out);
  });
}

}  // namespace fp4lm::tokenizer
