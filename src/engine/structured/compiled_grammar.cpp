#include "engine/structured/compiled_grammar.h"

namespace fp4lm::engine::structured {

namespace {
// Bounds the memory of one grammar's mask cache (a mask over 151k tokens is 19 KB: 4.75 MB).
constexpr size_t kMaxCachedMasks = 256;
}  // namespace

CompiledGrammar::CompiledGrammar(ByteGrammar g, std::shared_ptr<const TokenVocabulary> vocab)
    : a_(std::move(g)), vocab_(std::move(vocab)), initial_(a_.initial()) {}

int32_t CompiledGrammar::advance(int32_t state, const std::string& bytes) {
  std::lock_guard lock(mu_);
  for (unsigned char c : bytes) {
    if (state == Automaton::kDead) break;
    state = a_.next(state, c);
  }
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  std::lock_guard lock(mu_);
  return a_.accepting(state);
}

bool CompiledGrammar::finished(int32_t state) {
  std::lock_guard lock(mu_);
  return a_.finished(state);
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(int32_t state) {
  std::lock_guard lock(mu_);
  auto it = masks_.find(state);
  if (it != masks_.end()) return it->second;
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  auto m = std::make_shared<TokenMask>();
  walk(state, *m);
  masks_.emplace(state, m);
  return m;
}

void CompiledGrammar::walk(int32_t state, TokenMask& out) {
  const TokenVocabulary& v = *vocab_;
  out.assign(static_cast<size_t>((v.size() + 63) / 64), 0);
  stack_.assign(v.max_depth() + 1, Automaton::kDead);
  stack_[0] = state;
  const size_t n = v.num_nodes();
  const uint8_t* byte = v.byte_.data();
  const uint16_t* depth = v.depth_.data();
  const int32_t* end = v.end_.data();
  const int32_t* tb = v.tok_begin_.data();
  const int32_t* ids = v.tok_ids_.data();
  int32_t* st = stack_.data();
  for (size_t i = 1; i < n;) {
    const uint16_t d = depth[i];
    const int32_t s = a_.next(st[d - 1], byte[i]);
    if (s == Automaton::kDead) {
      i = static_cast<size_t>(end[i]);  // no token under this prefix fits
      continue;
    }
    st[d] = s;
    for (int32_t k = tb[i]; k < tb[i + 1]; ++k) {
      const auto id = static_cast<uint32_t>(ids[k]);
      out[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
}

TokenMask brute_force_mask(CompiledGrammar& g, int32_t state) {
  const TokenVocabulary& v = g.vocabulary();
  TokenMask m(static_cast<size_t>((v.size() + 63) / 64), 0);
  for (int64_t id = 0; id < v.size(); ++id) {
    const std::string& b = v.bytes(static_cast<int32_t>(id));
    if (b.empty()) continue;
    if (g.advance(state, b) != Automaton::kDead) m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  return m;
}

}  // namespace fp4lm::engine::structured
