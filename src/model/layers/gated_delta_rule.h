#pragma once
// The gated delta-net's switches around its delta rule: which form runs spans of more than one
// row, and the mixer timer. The delta rule itself is a kernel family: kernels/delta_rule.h.
#include <cstdint>

#include "kernels/delta_rule.h"
#include "model/layers/mixer_timer.h"

namespace fp4lm::model::gdn {

// Rows per block of the chunked form (CausalLM aligns prefill steps to it).
inline constexpr int64_t kChunk = kernels::kDeltaRuleChunk;

// How the gated delta-net runs spans of more than one row (decode rows always run recurrent).
// Process-wide, for benchmarks and tests that compare the two; chunked by default.
enum class PrefillForm { chunked, recurrent };
void set_prefill_form(PrefillForm f);
PrefillForm prefill_form();

// The gated delta-net mixers' timer (model/layers/mixer_timer.h): state = the delta rule (state read,
// update and write, and the outputs); mixer = the whole mixer.
MixerTimer& timer();

}  // namespace fp4lm::model::gdn
