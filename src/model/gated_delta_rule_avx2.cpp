// The gated delta rule compiled for AVX2 + FMA (this file's flags come from its name); chosen at
// run time by gated_delta_rule.cpp when the CPU has both.
#define FP4LM_GDN_ISA avx2
#define FP4LM_GDN_LANES 8
#include "model/gated_delta_rule_impl.h"
