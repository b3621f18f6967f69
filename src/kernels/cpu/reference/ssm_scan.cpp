// The Mamba-2 scan compiled for the build's baseline (SSE2 on x86-64, whatever the target offers
// elsewhere); registered as the always-available `reference` variant (kernels/ssm_scan.cpp).
#define FP4LM_SSM_ISA baseline
#define FP4LM_SSM_LANES 4
#include "kernels/cpu/ssm_scan_forms.h"
