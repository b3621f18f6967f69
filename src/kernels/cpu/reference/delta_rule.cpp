// The gated delta rule compiled for the build's baseline (SSE2 on x86-64, whatever the target
// offers elsewhere); registered as the always-available `reference` variant of the delta-rule
// family (kernels/delta_rule.cpp).
#define FP4LM_GDN_ISA baseline
#define FP4LM_GDN_LANES 4
#include "kernels/cpu/delta_rule_forms.h"
