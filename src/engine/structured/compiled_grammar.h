#pragma once
// A compiled structured-output constraint, shared by every request that uses the same spec: the
// automaton plus, per automaton state, the token mask over one vocabulary (a mask is a pure
// function of the state, so caching it is exact and the result does not depend on which requests
// share the batch). Thread-safe (one mutex; masks are computed under it).
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/token_vocabulary.h"

namespace fp4lm::engine::structured {

using TokenMask = std::vector<uint64_t>;  // bit i: token id i allowed

class CompiledGrammar {
 public:
  CompiledGrammar(ByteGrammar g, std::shared_ptr<const TokenVocabulary> vocab);

  int32_t initial() const { return initial_; }
  // The state after `bytes`, or Automaton::kDead.
  int32_t advance(int32_t state, const std::string& bytes);
  bool accepting(int32_t state);
  bool finished(int32_t state);
  // The tokens allowed next: those whose bytes keep the automaton alive. End-of-sequence is the
  // caller's (allowed where accepting()).
  std::shared_ptr<const TokenMask> mask(int32_t state);
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  size_t cached_masks() const { return masks_.size(); }

 private:
  void walk(int32_t state, TokenMask& out);

  std::mutex mu_;
  Automaton a_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  int32_t initial_;
  std::unordered_map<int32_t, std::shared_ptr<const TokenMask>> masks_;
  std::vector<int32_t> stack_;
};

// Brute force: feeds every token byte by byte (tests check the trie walk against it).
TokenMask brute_force_mask(CompiledGrammar& g, int32_t state);

}  // namespace fp4lm::engine::structured
