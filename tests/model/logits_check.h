#pragma once
// The two helpers the whole-model tests compare logits with: every position's logits of one
// forward call, and their distance to a float64 reference relative to the reference's range.
#include <algorithm>
#include <cmath>
#include <vector>

#include "model/causal_lm.h"

namespace fp4lm::model {

// Logits [toks.size(), vocab] of `toks` run through a fresh sequence in one forward call.
inline std::vector<float> all_logits(const CausalLM& lm, const std::vector<int32_t>& toks) {
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * lm.vocab_size());
  lm.forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::all, out.data());
  return out;
}

// Max |got - want| over all rows, relative to max |want|.
inline double max_rel_diff(const std::vector<float>& got, const std::vector<std::vector<double>>& want) {
  double diff = 0, scale = 0;
  size_t k = 0;
  for (const auto& row : want)
    for (double w : row) {
      diff = std::max(diff, std::abs(static_cast<double>(got[k++]) - w));
      scale = std::max(scale, std::abs(w));
    }
  return diff / scale;
}

}  // namespace fp4lm::model
