#pragma once
// The Mamba-2 mixers' timer (model/mixer_timer.h; model/mamba2_mixer.h): state = the conv window
// and the selective scan that reads and writes S; mixer = the whole mixer, in_proj and out_proj
// included.
#include "model/mixer_timer.h"

namespace fp4lm::model::mamba {

MixerTimer& timer();

}  // namespace fp4lm::model::mamba
