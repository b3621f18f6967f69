#pragma once
// The Mamba-2 mixers' prefill-form switch and timer (model/layers/mixer_timer.h; model/layers/mamba2_mixer.h):
// state = the conv window and the selective scan that reads and writes S; mixer = the whole
// mixer, in_proj and out_proj included.
#include "model/layers/mixer_timer.h"

namespace fp4lm::model::mamba {

// How the Mamba-2 mixers run spans of more than one row (decode rows always run recurrent):
// the recurrent scan or the chunked SSD form (kernels/ssm_scan.h). Process-wide, for benchmarks
// and tests that compare the two; recurrent by default (the chunked form is not enough faster on
// CPU to justify the row alignment it would need: docs/KERNELS.md).
enum class PrefillForm { chunked, recurrent };
void set_prefill_form(PrefillForm f);
PrefillForm prefill_form();

MixerTimer& timer();

}  // namespace fp4lm::model::mamba
