#pragma once
// The byte-level grammar the matcher runs: rules are alternatives of element sequences, and an
// element is a byte set, a reference to a rule, or the end of the alternative. Everything lives
// in one flat array so a parse position is an index (the shape of llama.cpp's GBNF engine, our
// own code). Built from an ExprGrammar by lower(): character classes become UTF-8 byte
// sequences, repetitions become right-recursive helper rules. Left recursion is rejected (the
// matcher expands rules top-down and would not terminate).
#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

struct ByteGrammar {
  enum class Op : uint8_t { Bytes, Ref, End };
  struct Element {
    Op op;
    int32_t arg;  // Bytes: index into sets; Ref: rule index
  };
  std::vector<Element> elements;
  std::vector<std::bitset<256>> sets;
  std::vector<std::vector<int32_t>> rule_alts;  // per rule: start positions of its alternatives
  std::vector<std::string> rule_names;
  int32_t root = 0;
};

// GrammarError naming the rule: undefined references, left recursion, a repetition of something
// that can match the empty string, more than `max_elements` elements.
ByteGrammar lower(const ExprGrammar& g, size_t max_elements = 4'000'000);

}  // namespace fp4lm::engine::structured
