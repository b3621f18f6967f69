#pragma once
// The request most scheduler tests add: a prompt, max_tokens, greedy (the default sampling), and
// ignore_eos so that every request runs its max_tokens.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace fp4lm::engine {  // (not engine::test: that would hide fp4lm::test in the files using it)

inline RequestParams greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace fp4lm::engine
