#pragma once
// The recognizer: a pushdown automaton over bytes, determinized lazily. A parse stack is a chain
// of interned nodes (position in the grammar, parent node), so equal stacks are equal ids; a
// state is the sorted set of stacks alive after the input so far (several when the grammar is
// ambiguous so far), and is interned too. Transitions state x byte -> state are computed on first
// use and cached, so walking the vocabulary trie is one table lookup per byte once warm. Node 0
// is the empty stack: a state holding it has matched a complete sentence (accepting).
// Not thread-safe: CompiledGrammar (compiled_grammar.h) serializes access.
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/structured/byte_grammar.h"

namespace fp4lm::engine::structured {

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class Automaton {
 public:
  static constexpr int32_t kDead = -1;

  explicit Automaton(ByteGrammar g);
  int32_t initial() const { return initial_; }
  int32_t next(int32_t state, uint8_t byte) {
    const size_t k = static_cast<size_t>(state) * 256 + byte;
    int32_t t = trans_[k];
    if (t == kUnknown) {
      t = compute(state, byte);
      trans_[k] = t;
    }
    return t;
  }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Accepting and nothing can follow: only end-of-sequence remains.
  bool finished(int32_t state);
  size_t num_states() const { return states_.size(); }
  const ByteGrammar& grammar() const { return g_; }

 private:
  static constexpr int32_t kUnknown = -2;
  struct Node {
    int32_t pos, parent;
  };
  int32_t node(int32_t pos, int32_t parent);
  // Adds to `out` the stacks reached from position `pos` over `parent` without consuming input.
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& out);
  int32_t intern_state(std::vector<int32_t> nodes);
  int32_t compute(int32_t state, uint8_t byte);

  ByteGrammar g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> state_ids_;
  std::vector<int32_t> trans_;
  std::vector<char> accepting_;
  std::vector<int8_t> finished_;  // -1 unknown
  std::unordered_set<uint64_t> expand_seen_;
  int32_t initial_ = 0;
};

}  // namespace fp4lm::engine::structured
