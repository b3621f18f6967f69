#include "tokenizer/bpe.h"

#include <algorithm>
#include <mutex>
#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

constexpr size_t kCacheCapacity = 1 << 16;
constexpr size_t kMaxCachedWordBytes = 256;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint32_t hash_bytes(std::string_view s) {
  // FNV-1a: tokens are short, and this is only used to index the vocabulary.
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

void Vocab::add(std::string_view token, int32_t id) {
  if (bytes_.size() + token.size() > UINT32_MAX) fail("vocabulary too large");
  entries_.push_back({static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(token.size()), id,
                      hash_bytes(token)});
  bytes_.append(token);
}

void Vocab::finish(const std::string& where) {
  size_t cap = 16;
  while (cap < entries_.size() * 2) cap <<= 1;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  int32_t max_id = -1;
  for (const auto& e : entries_) max_id = std::max(max_id, e.id);
  // Ids index dense tables; a huge id is a broken file, not a reason to allocate gigabytes.
  if (max_id >= (1 << 28))
    fail("{}: model.vocab: token id {} is implausibly large (ids must be dense from 0)", where, max_id);
  by_id_.assign(static_cast<size_t>(max_id + 1), -1);
  for (size_t k = 0; k < entries_.size(); ++k) {
    const Entry& e = entries_[k];
    max_token_bytes_ = std::max<size_t>(max_token_bytes_, e.length);
    for (size_t i = e.hash & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] < 0) {
        slots_[i] = static_cast<int32_t>(k);
        break;
      }
      const Entry& o = entries_[static_cast<size_t>(slots_[i])];
      if (o.hash == e.hash && entry_text(o) == entry_text(e))
        fail("{}: model.vocab: token '{}' appears twice", where, entry_text(e));
    }
    int32_t& slot = by_id_[static_cast<size_t>(e.id)];
    if (slot >= 0)
      fail("{}: model.vocab: id {} is used by both '{}' and '{}'", where, e.id,
           entry_text(entries_[static_cast<size_t>(slot)]), entry_text(e));
    slot = static_cast<int32_t>(k);
  }
}

int32_t Vocab::find(std::string_view token) const {
  if (slots_.empty()) return -1;
  uint32_t h = hash_bytes(token);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    int32_t k = slots_[i];
    if (k < 0) return -1;
    const Entry& e = entries_[static_cast<size_t>(k)];
    if (e.hash == h && entry_text(e) == token) return e.id;
  }
}

std::string_view Vocab::token(int32_t id) const {
  return entry_text(entries_[static_cast<size_t>(by_id_[static_cast<size_t>(id)])]);
}

// Open addressing, linear probing: (left, right) -> (rank, merged id).
struct BpeModel::MergeTable {
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  // Keeps the first (lowest-rank) entry for a pair.
  void insert(uint64_t key, uint32_t rank, int32_t id) {
    for (uint64_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return;
      if (slots[i].key == kEmpty) {
        slots[i] = {key, rank, id};
        return;
      }
    }
  }
  const Slot* find(uint64_t key) const {
    for (uint64_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), opt_(std::move(options)) {
  if (opt_.unk_token) {
    int32_t id = vocab_.find(*opt_.unk_token);
    if (id < 0) fail("{}: model.unk_token '{}' is not in model.vocab", where, *opt_.unk_token);
    unk_id_ = id;
  }
  merges_ = std::make_unique<MergeTable>(merges.size());
  std::string joined;
  size_t prefix_len = opt_.continuing_subword_prefix.size();
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    int32_t ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia < 0 || ib < 0)
      fail("{}: model.merges[{}] ('{}' '{}'): token '{}' is not in model.vocab", where, r, a, b,
           ia < 0 ? a : b);
    // The right part loses its continuing-subword prefix when joined.
    joined.assign(a);
    if (prefix_len && b.compare(0, prefix_len, opt_.continuing_subword_prefix) == 0)
      joined.append(b, prefix_len, std::string::npos);
    else
      joined.append(b);
    int32_t ij = vocab_.find(joined);
    if (ij < 0)
      fail("{}: model.merges[{}] ('{}' '{}'): merged token '{}' is not in model.vocab", where, r,
           a, b, joined);
    merges_->insert(pair_key(ia, ib), static_cast<uint32_t>(r), ij);
  }
  merge_count_ = merges.size();

  if (opt_.continuing_subword_prefix.empty() && opt_.end_of_word_suffix.empty()) {
    small_char_ids_.assign(0x800, -1);
    std::string ch;
    for (char32_t cp = 0; cp < 0x800; ++cp) {
      ch.clear();
      utf8::append(ch, cp);
      small_char_ids_[cp] = vocab_.find(ch);
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = -1;
    if (opt_.byte_fallback) {
      byte_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b));
    }
  }
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  int32_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

size_t BpeModel::max_bytes_per_id() const {
  if (unk_id_ && opt_.fuse_unk) return 0;
  return std::max<size_t>(vocab_.max_token_bytes(), 4);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  tokenize_uncached(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();  // keep memory bounded
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<long>(start), out.end()));
  }
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    int32_t id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // Initial symbols: one per character (or per byte under byte fallback, or fused unknowns).
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool removed;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  bool last_was_unk = false;
  std::string piece;
  auto push = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, false});
  };
  for (size_t i = 0; i < word.size();) {
    size_t b = i;
    char32_t cp = utf8::next(word, i);
    int32_t id = -1;
    if (!small_char_ids_.empty() && cp < 0x800) {
      id = small_char_ids_[cp];
    } else {
      piece.clear();
      if (b > 0) piece.append(opt_.continuing_subword_prefix);
      piece.append(word.substr(b, i - b));
      if (i == word.size()) piece.append(opt_.end_of_word_suffix);
      id = vocab_.find(piece);
    }
    if (id >= 0) {
      push(id);
      last_was_unk = false;
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (size_t k = b; k < i; ++k) all = all && byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        for (size_t k = b; k < i; ++k) push(byte_ids_[static_cast<unsigned char>(word[k])]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(opt_.fuse_unk && last_was_unk)) push(*unk_id_);
      last_was_unk = true;
    }
    // Without an unk token an unknown character is dropped (as Hugging Face tokenizers do).
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Cand& o) const {  // max-heap on priority: low rank, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Cand> queue;
  for (size_t k = 0; k + 1 < sym.size(); ++k)
    if (auto* m = merges_->find(pair_key(sym[k].id, sym[k + 1].id)))
      queue.push({m->rank, static_cast<int32_t>(k), m->id});

  while (!queue.empty()) {
    Cand top = queue.top();
    queue.pop();
    Symbol& cur = sym[static_cast<size_t>(top.pos)];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(cur.next)];
    // Skip stale entries: the pair at this position changed since it was queued.
    const auto* m = merges_->find(pair_key(cur.id, right.id));
    if (!m || m->id != top.new_id || m->rank != top.rank) continue;
    cur.id = top.new_id;
    right.removed = true;
    cur.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (auto* mp = merges_->find(pair_key(sym[static_cast<size_t>(cur.prev)].id, cur.id)))
        queue.push({mp->rank, cur.prev, mp->id});
    if (cur.next >= 0)
      if (auto* mn = merges_->find(pair_key(cur.id, sym[static_cast<size_t>(cur.next)].id)))
        queue.push({mn->rank, top.pos, mn->id});
  }
  for (int32_t k = 0; k >= 0; k = sym[static_cast<size_t>(k)].next) out.push_back(sym[static_cast<size_t>(k)].id);
}

}  // namespace fp4lm::tokenizer
