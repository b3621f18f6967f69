#pragma once
// The gated delta-net's switches around its delta rule: which form runs spans of more than one
// row, and the mixer timer. The delta rule itself is a kernel family: kernels/delta_rule.h.
#include <cstdint>

#include "kernels/delta_rule.h"

namespace fp4lm::model::gdn {

// Rows per block of the chunked form (CausalLM aligns prefill steps to it).
inline constexpr int64_t kChunk = kernels::kDeltaRuleChunk;

// How the gated delta-net runs spans of more than one row (decode rows always run recurrent).
// Process-wide, for benchmarks and tests that compare the two; chunked by default.
enum class PrefillForm { chunked, recurrent };
void set_prefill_form(PrefillForm f);
PrefillForm prefill_form();

// A cheap per-part timer of the gated delta-net mixers (off by default; decode_bench turns it
// on): wall seconds spent in the delta rule (state read, update and write, and the outputs) and
// in the whole mixer, summed over every GDN layer and call since the last reset.
struct MixerTimes {
  double rule_s = 0, mixer_s = 0;
};
void enable_timing(bool on);
bool timing_enabled();
void add_times(double rule_s, double mixer_s);
MixerTimes times();
void reset_times();

}  // namespace fp4lm::model::gdn
