#include "engine/prefix_cache.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace fp4lm::engine {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

PrefixCache::PrefixCache(int64_t block_size) : block_(block_size) {
  if (block_size < 1) fail("prefix cache: block size must be >= 1, got {}", block_size);
}

uint64_t PrefixCache::hash_of(BlockId parent, std::span<const int32_t> tokens) const {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  if (const Block* p = get(parent)) h = p->hash;
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL;
  return h;
}

PrefixCache::BlockId PrefixCache::find(BlockId parent, std::span<const int32_t> tokens) const {
  if (parent != kNone && !contains(parent)) return kNone;
  // The hash only narrows the search: parent and tokens are compared, so a collision is a miss.
  auto [lo, hi] = by_hash_.equal_range(hash_of(parent, tokens));
  for (auto it = lo; it != hi; ++it) {
    const Block& b = blocks_.at(it->second);
    if (b.parent == parent && std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end()))
      return it->second;
  }
  return kNone;
}

std::vector<PrefixCache::BlockId> PrefixCache::match(std::span<const int32_t> tokens, int64_t max_tokens) const {
  std::vector<BlockId> chain;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  BlockId parent = kNone;
  for (int64_t b = 0; (b + 1) * block_ <= limit; ++b) {
    const BlockId id = find(parent, tokens.subspan(static_cast<size_t>(b * block_), static_cast<size_t>(block_)));
    if (id == kNone) break;
    chain.push_back(id);
    parent = id;
  }
  return chain;
}

PrefixCache::BlockId PrefixCache::insert(BlockId parent, std::span<const int32_t> tokens, std::vector<uint8_t> kv,
                                         std::vector<uint8_t> state) {
  if (static_cast<int64_t>(tokens.size()) != block_)
    fail("prefix cache: a block holds {} tokens, got {}", block_, tokens.size());
  if (parent != kNone && !contains(parent)) fail("prefix cache: parent block {} is not cached", parent);
  if (const BlockId have = find(parent, tokens); have != kNone) return have;
  const BlockId id = next_id_++;
  Block b;
  b.parent = parent;
  b.hash = hash_of(parent, tokens);
  b.tokens.assign(tokens.begin(), tokens.end());
  b.kv = std::move(kv);
  b.state = std::move(state);
  b.last_use = ++clock_;
  bytes_ += b.bytes();
  by_hash_.emplace(b.hash, id);
  if (parent != kNone) blocks_.at(parent).children.push_back(id);
  blocks_.emplace(id, std::move(b));
  return id;
}

void PrefixCache::add_state(BlockId id, std::vector<uint8_t> state) {
  auto it = blocks_.find(id);
  if (it == blocks_.end() || !it->second.state.empty()) return;
  bytes_ += state.size();
  it->second.state = std::move(state);
}

const PrefixCache::Block* PrefixCache::get(BlockId id) const {
  auto it = blocks_.find(id);
  return it == blocks_.end() ? nullptr : &it->second;
}

void PrefixCache::acquire(std::span<const BlockId> ids) {
  for (BlockId id : ids)
    if (auto it = blocks_.find(id); it != blocks_.end()) {
      ++it->second.refs;
      it->second.last_use = ++clock_;
    }
}

void PrefixCache::release(std::span<const BlockId> ids) {
  for (auto r = ids.rbegin(); r != ids.rend(); ++r)
    if (auto it = blocks_.find(*r); it != blocks_.end()) {
      if (it->second.refs > 0) --it->second.refs;
      it->second.last_use = ++clock_;
    }
}

void PrefixCache::erase_subtree(BlockId id) {
  auto it = blocks_.find(id);
  if (it == blocks_.end()) return;
  const std::vector<BlockId> children = it->second.children;
  for (BlockId c : children) erase_subtree(c);
  it = blocks_.find(id);
  Block& b = it->second;
  if (b.parent != kNone)
    if (auto p = blocks_.find(b.parent); p != blocks_.end()) std::erase(p->second.children, id);
  auto [lo, hi] = by_hash_.equal_range(b.hash);
  for (auto h = lo; h != hi; ++h)
    if (h->second == id) {
      by_hash_.erase(h);
      break;
    }
  bytes_ -= b.bytes();
  ++evictions_;
  blocks_.erase(it);
}

bool PrefixCache::shrink_to(size_t target, bool referenced_too) {
  while (bytes_ > target) {
    // The least recently used block (unreferenced first). A scan: evictions are rare next to
    // lookups, and a pool holds thousands of blocks, not millions.
    BlockId victim = kNone;
    bool victim_free = false;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (const auto& [id, b] : blocks_) {
      const bool free = b.refs == 0;
      if (!free && !referenced_too) continue;
      if (victim == kNone || (free && !victim_free) || (free == victim_free && b.last_use < oldest)) {
        victim = id;
        victim_free = free;
        oldest = b.last_use;
      }
    }
    if (victim == kNone) return false;
    erase_subtree(victim);
  }
  return true;
}

}  // namespace fp4lm::engine
