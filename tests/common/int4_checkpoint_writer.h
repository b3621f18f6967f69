#pragma once
// Test-side writer of int4 checkpoints in each producer's layout (docs/FORMAT.md §13), written
// from the producers' packing rules independently of fp4lm's loaders: from a dense float (F32, BF16, F16)
// checkpoint, every decoder Linear weight (q/k/v/o/gate/up/down_proj) is quantized to 4-bit integers
// per row and group (min-max with a zero point, or abs-max symmetric with zero point 8; act-order:
// groups of columns chosen by a random g_idx), and two checkpoints are written:
//  - `deq_dir`: the dense checkpoint with each such weight replaced by its dequantized values (F32)
//    (code - zero) × scale, the scale rounded to the dtype the producer stores it in;
//  - `int4_dir`: the same weights in the producer's tensors, config.json's quantization_config set
//    to `quantization_config`:
//    GPTQ: qweight I32 [k/8, n] (column 8i + t in bits 4t of [i, r]), qzeros I32 [groups, n/8]
//      (row 8c + t in bits 4t; minus one in the v1 format), scales F16 [groups, n], g_idx I32 [k];
//    AutoAWQ GEMM: qweight I32 [k, n/8] and qzeros I32 [groups, n/8] with rows packed in the order
//      0, 2, 4, 6, 1, 3, 5, 7 (AutoAWQ's order_map), scales F16 [groups, n];
//    compressed-tensors pack-quantized: weight_packed I32 [n, k/8] (q + 8), weight_scale BF16
//      [n, groups], weight_shape I64 [2], weight_zero_point I32 [n/8, groups] (zp + 8, packed
//      along the rows; asymmetric only), weight_g_idx I32 [k] (actorder group only).
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace fp4lm::test {

//    ModelOpt W4A16_AWQ: weight U8 [n/2, k] (rows 2i / 2i+1 in the low / high nibble of [i, j],
//      two's-complement q), weight_scale F32 [n, groups]; with pre_quant_scale, a `pre_quant_scale`
//      [k] per input (shared by q/k/v and by gate/up), the weights quantized divided by it and the
//      dense weights dequantized times it (as ModelOpt's AWQ export); symmetric only.
enum class Int4Producer { gptq, awq, compressed_tensors, modelopt };

struct Int4WriteOptions {
  Int4Producer producer = Int4Producer::gptq;
  int64_t group = 128;      // 0: one group per row
  bool symmetric = true;
  bool act_order = false;   // a non-trivial g_idx (GPTQ; compressed-tensors' actorder group)
  bool gptq_v1 = true;      // GPTQ: zero points stored minus one (checkpoint_format "gptq")
  bool write_g_idx = true;  // GPTQ: g_idx is written even without act-order (as GPTQ does)
  bool pre_quant_scale = false;  // ModelOpt
  nlohmann::json quantization_config;
  uint32_t seed = 1;
};

void write_int4_pair(const std::filesystem::path& dense_dir, const std::filesystem::path& deq_dir,
                     const std::filesystem::path& int4_dir, const Int4WriteOptions& o);

}  // namespace fp4lm::test
