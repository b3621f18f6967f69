#pragma once
// The global scales of compressed-tensors' NVFP4 files (`weight_global_scale`,
// `input_global_scale`): the reciprocal of ModelOpt's `weight_scale_2` / `input_scale`, computed
// the way compressed-tensors' writer computes it, so fp4lm's export matches its bytes
// (docs/FORMAT.md §9).

namespace fp4lm::quant {

// From an amax, as compressed-tensors' generate_gparam computes it: `448 * 6 / amax` on a torch
// tensor, which torch evaluates as reciprocal(amax) * 2688 — two roundings, so neither the true
// quotient nor 1 / (amax / 2688) (each is 1 ulp away for a quarter to a third of amaxes). A
// non-finite result (amax 0) becomes 1.0, compressed-tensors' placeholder.
float compressed_tensors_global_scale(float amax);

}  // namespace fp4lm::quant
