// The Mamba-2 scan compiled for AVX-512 (this folder's flags); registered as the `avx512`
// variant (kernels/ssm_scan.cpp).
#define FP4LM_SSM_ISA avx512
#define FP4LM_SSM_LANES 16
#include "kernels/cpu/ssm_scan_forms.h"
