#include "engine/structured/automaton.h"

#include <algorithm>

namespace fp4lm::engine::structured {

Automaton::Automaton(ByteGrammar g) : g_(std::move(g)) {
  nodes_.push_back({-1, -1});  // node 0: the empty stack
  std::vector<int32_t> init;
  expand_seen_.clear();
  for (int32_t a : g_.rule_alts[static_cast<size_t>(g_.root)]) expand(a, 0, init);
  initial_ = intern_state(std::move(init));
}

int32_t Automaton::node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({pos, parent});
  return it->second;
}

void Automaton::expand(int32_t pos, int32_t parent, std::vector<int32_t>& out) {
  // The same (position, continuation) reached twice adds nothing new (ambiguous grammars).
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  if (!expand_seen_.insert(key).second) return;
  const auto& el = g_.elements[static_cast<size_t>(pos)];
  switch (el.op) {
    case ByteGrammar::Op::Bytes:
      out.push_back(node(pos, parent));
      return;
    case ByteGrammar::Op::End:
      if (parent == 0) {
        out.push_back(0);
      } else {
        const Node p = nodes_[static_cast<size_t>(parent)];
        expand(p.pos, p.parent, out);
      }
      return;
    case ByteGrammar::Op::Ref: {
      // Tail position: nothing to come back to in this rule, so the stack does not grow
      // (repetitions are right-recursive and must run in constant stack depth).
      const bool tail = g_.elements[static_cast<size_t>(pos) + 1].op == ByteGrammar::Op::End;
      const int32_t cont = tail ? parent : node(pos + 1, parent);
      for (int32_t a : g_.rule_alts[static_cast<size_t>(el.arg)]) expand(a, cont, out);
      return;
    }
  }
}

int32_t Automaton::intern_state(std::vector<int32_t> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (nodes.empty()) return kDead;
  auto it = state_ids_.find(nodes);
  if (it != state_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(states_.size());
  accepting_.push_back(nodes.front() == 0);
  finished_.push_back(-1);
  states_.push_back(nodes);
  state_ids_.emplace(std::move(nodes), id);
  trans_.resize(states_.size() * 256, kUnknown);
  return id;
}

int32_t Automaton::compute(int32_t state, uint8_t byte) {
  std::vector<int32_t> out;
  expand_seen_.clear();
  const std::vector<int32_t> cur = states_[static_cast<size_t>(state)];  // copy: interning may grow states_
  for (int32_t n : cur) {
    if (n == 0) continue;
    const Node nd = nodes_[static_cast<size_t>(n)];
    const auto& el = g_.elements[static_cast<size_t>(nd.pos)];
    if (!g_.sets[static_cast<size_t>(el.arg)].test(byte)) continue;
    expand(nd.pos + 1, nd.parent, out);
  }
  return intern_state(std::move(out));
}

bool Automaton::finished(int32_t state) {
  if (finished_[static_cast<size_t>(state)] < 0) {
    int8_t f = accepting(state) ? 1 : 0;
    if (f)
      for (int b = 0; b < 256 && f; ++b)
        if (next(state, static_cast<uint8_t>(b)) != kDead) f = 0;
    finished_[static_cast<size_t>(state)] = f;  // after next(): it may grow finished_
  }
  return finished_[static_cast<size_t>(state)] != 0;
}

}  // namespace fp4lm::engine::structured
