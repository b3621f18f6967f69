#pragma once
// The dense float32 checkpoint a quantized one stands for (the reference the format tests compare
// logits against), and the comparison itself. Each test decides how its format's weights are
// dequantized; the copying, the config rewrite and the error measure are shared here.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"

namespace fp4lm::test {

// The tensor's values as float32 (any float dtype).
std::vector<float> as_f32(const TensorView& t);

// Writes `out` (model.safetensors + config.json) from checkpoint `q`: every tensor whose name ends
// in one of `drop` is left out; for the others `dequantize(ck, name, t)` gives the float32 values
// and shape of a quantized weight (nullopt: the tensor as stored, a float one converted to float32). The config
// loses its quantization_config and says torch_dtype float32. Returns `out` as a string.
struct DenseTensor {
  Shape shape;
  std::vector<float> values;
};
using Dequantize = std::function<std::optional<DenseTensor>(const io::Checkpoint& ck, const std::string& name,
                                                            const TensorView& t)>;
std::string write_dense_checkpoint(const std::string& q, const std::filesystem::path& out,
                                   const std::vector<std::string>& drop, const Dequantize& dequantize);

// max |got - want| relative to the range of want.
double rel_to_range(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace fp4lm::test
