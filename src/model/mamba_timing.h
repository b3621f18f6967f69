#pragma once
// A cheap timer of the Mamba-2 mixers (model/mamba2_mixer.h; off by default, decode_bench turns it
// on): wall seconds spent updating the per-sequence state (the conv window and the selective scan
// that reads and writes S) and in the whole mixer (in_proj and out_proj included), summed over
// every Mamba layer and call since the last reset.
namespace fp4lm::model::mamba {

struct MixerTimes {
  double state_s = 0, mixer_s = 0;
};
void enable_timing(bool on);
bool timing_enabled();
void add_times(double state_s, double mixer_s);
MixerTimes times();
void reset_times();

}  // namespace fp4lm::model::mamba
