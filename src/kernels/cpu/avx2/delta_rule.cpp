// The gated delta rule compiled for AVX2 + FMA (this folder's flags); registered as the `avx2`
// variant of the delta-rule family (kernels/delta_rule.cpp).
#define FP4LM_GDN_ISA avx2
#define FP4LM_GDN_LANES 8
#include "kernels/cpu/delta_rule_forms.h"
