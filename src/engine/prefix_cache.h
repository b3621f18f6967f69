#pragma once
// Automatic prefix caching, vLLM's semantics: a prompt is cut into full blocks of block_size
// tokens; a block is known by its tokens and its parent (the block before it), hashed together,
// so a block stands for the whole prefix up to its end. A new prompt reuses the longest chain of
// cached blocks it starts with. Blocks are reference-counted by the running sequences whose
// prompts contain them and, when unreferenced, evicted least recently used first.
//
// fp4lm's KV cache is one contiguous region per sequence (attention reads it directly), so this
// cache is a pool of copies: a block holds the bytes of its positions' K/V as the model's
// StepModel::save_positions wrote them (and, for models with a recurrent state, the state at the
// block's end when one was saved there); a hit copies them into the new sequence's own region.
// A sequence therefore never needs a pool block after its hit: the reference count orders
// eviction (unreferenced blocks go first; referenced ones only when admission needs the memory).
// The pool stores bytes without looking at them, so the scheduler's tests run it on a fake model.
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace fp4lm::engine {

class PrefixCache {
 public:
  using BlockId = uint64_t;  // never reused: a stale id (an evicted block) is simply unknown
  static constexpr BlockId kNone = 0;

  struct Block {
    BlockId parent = kNone;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // block_size tokens
    std::vector<uint8_t> kv;      // the positions' K/V (StepModel::save_positions)
    std::vector<uint8_t> state;   // the recurrent state at the block's end; empty: none saved
    int64_t refs = 0;
    uint64_t last_use = 0;
    std::vector<BlockId> children;
    size_t bytes() const { return kv.size() + state.size(); }
  };

  explicit PrefixCache(int64_t block_size);
  int64_t block_size() const { return block_; }

  // The chain of cached blocks that `tokens` starts with, at most max_tokens tokens of it
  // (whole blocks): index i is the block of tokens [i·B, (i+1)·B).
  std::vector<BlockId> match(std::span<const int32_t> tokens, int64_t max_tokens) const;
  // The cached block after `parent` (kNone: the first block) holding `tokens`; kNone if absent.
  BlockId find(BlockId parent, std::span<const int32_t> tokens) const;
  // Adds that block (its parent must be cached); returns its id.
  BlockId insert(BlockId parent, std::span<const int32_t> tokens, std::vector<uint8_t> kv,
                 std::vector<uint8_t> state = {});
  // Attaches a recurrent-state snapshot to a cached block that has none.
  void add_state(BlockId id, std::vector<uint8_t> state);
  const Block* get(BlockId id) const;  // null for an unknown (evicted) id
  bool contains(BlockId id) const { return get(id) != nullptr; }

  // A running sequence takes / drops a reference on each of `ids` (unknown ids are skipped);
  // both count as a use for LRU. Released in reverse order, so a chain's parents stay more
  // recently used than its children.
  void acquire(std::span<const BlockId> ids);
  void release(std::span<const BlockId> ids);

  // Evicts blocks until bytes() <= target: least recently used unreferenced blocks first, each
  // with the blocks that continue it (unreachable without it); referenced ones too, in the
  // same order, only when `referenced_too`. Returns whether bytes() <= target.
  bool shrink_to(size_t target, bool referenced_too);

  size_t bytes() const { return bytes_; }
  size_t size() const { return blocks_.size(); }
  int64_t evictions() const { return evictions_; }

 private:
  uint64_t hash_of(BlockId parent, std::span<const int32_t> tokens) const;
  void erase_subtree(BlockId id);

  int64_t block_;
  std::unordered_map<BlockId, Block> blocks_;
  std::unordered_multimap<uint64_t, BlockId> by_hash_;
  BlockId next_id_ = 1;
  uint64_t clock_ = 0;
  size_t bytes_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace fp4lm::engine
