#include "engine/structured/matcher.h"

#include <limits>

#include "engine/structured/byte_grammar.h"

namespace fp4lm::engine::structured {

std::shared_ptr<CompiledGrammar> GrammarCompiler::compile(const StructuredSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
  }
  auto g = std::make_shared<CompiledGrammar>(lower(to_grammar(spec)), vocab_);
  // The first state's mask (a walk of most of the vocabulary trie) now, on the compiling thread (an
  // API thread checking the request), rather than in the engine step every stream waits for.
  g->mask(g->initial());
  std::lock_guard lock(mu_);
  lru_.emplace_front(key, g);
  if (lru_.size() > capacity_) lru_.pop_back();
  return g;
}

void GrammarMatcher::apply(float* logits, int64_t vocab, const std::vector<int64_t>& end_ids) {
  const auto m = g_->mask(state_);
  const TokenMask& bits = *m;
  const int64_t n = std::min<int64_t>(vocab, static_cast<int64_t>(bits.size()) * 64);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // End-of-sequence ids are special tokens (not in the trie): decided after the mask.
  std::vector<std::pair<int64_t, float>> ends;
  for (int64_t id : end_ids)
    if (id >= 0 && id < vocab) ends.emplace_back(id, logits[id]);
  bool any = false;
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[static_cast<size_t>(w)];
    any = any || word != 0;
    if (word == ~uint64_t{0}) continue;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 64);
    for (int64_t i = w * 64; i < end; ++i)
      if (!((word >> (i & 63)) & 1)) logits[i] = kNegInf;
  }
  for (int64_t i = n; i < vocab; ++i) logits[i] = kNegInf;
  const bool allow_end = g_->accepting(state_) || !any;
  for (const auto& [id, value] : ends) logits[id] = allow_end ? value : kNegInf;
}

bool GrammarMatcher::accept(int32_t token) {
  const TokenVocabulary& v = g_->vocabulary();
  if (token < 0 || token >= v.size()) return false;
  const std::string& b = v.bytes(token);
  if (b.empty()) return false;
  const int32_t next = g_->advance(state_, b);
  if (next == Automaton::kDead) return false;
  state_ = next;
  return true;
}

}  // namespace fp4lm::engine::structured
