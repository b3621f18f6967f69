#pragma once
// Structured outputs for one request: compiles specs (cached by spec, per vocabulary) and tracks
// each request's automaton state as its tokens are sampled.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/structured/compiled_grammar.h"
#include "engine/structured/spec.h"

namespace fp4lm::engine::structured {

// Compiles specs against one vocabulary, keeping the last `capacity` compiled grammars (so their
// transition tables and masks stay warm across requests). Thread-safe.
class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 16)
      : vocab_(std::move(vocab)), capacity_(capacity) {}
  // GrammarError naming the problem.
  std::shared_ptr<CompiledGrammar> compile(const StructuredSpec& spec);
  const TokenVocabulary& vocabulary() const { return *vocab_; }

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<CompiledGrammar>>> lru_;  // most recent first
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> g) : g_(std::move(g)), state_(g_->initial()) {}

  // Sets every logit the grammar forbids to -inf, leaving the allowed ones untouched. `end_ids`
  // (EOS and stop token ids) are allowed only where the output so far is complete; when no token
  // can continue (the grammar cannot be met with this vocabulary) they are allowed so the request
  // still ends.
  void apply(float* logits, int64_t vocab, const std::vector<int64_t>& end_ids);
  // The allowed-token bitset for the current state (end ids not included).
  std::shared_ptr<const TokenMask> mask() { return g_->mask(state_); }
  // Advances over a sampled token; false when the token does not fit (state unchanged).
  bool accept(int32_t token);
  bool accepting() { return g_->accepting(state_); }
  // Complete and nothing may follow.
  bool finished() { return g_->finished(state_); }
  int32_t state() const { return state_; }

 private:
  std::shared_ptr<CompiledGrammar> g_;
  int32_t state_;
};

}  // namespace fp4lm::engine::structured
