// The Mamba-2 scan compiled for AVX2 + FMA (this folder's flags); registered as the `avx2`
// variant (kernels/ssm_scan.cpp).
#define FP4LM_SSM_ISA avx2
#define FP4LM_SSM_LANES 8
#include "kernels/cpu/ssm_scan_forms.h"
