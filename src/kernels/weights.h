#pragma once
// The weights a backend receives for one layer, as the checkpoint stores them (views into the
// mmapped files). A fused engine layer (qkv, gate_up, MoE w13) keeps its HF shards separate:
// each shard has its own rows and its own global scale, which becomes a per-output-row scale
// (docs/FORMAT.md, exact; no block scale is touched). Backends repack into whatever layout they
// like in make_linear/make_moe.
//
// Each weight format has its own view type; a shard holds exactly one of them. A new format is a
// new view here, a new alternative of ShardView and a quant method in model/quant_method/.
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant_key.h"

namespace fp4lm::kernels {

// unquantized: `data` [rows, k] in `dtype` (F32, BF16 or F16).
struct DenseView {
  static constexpr WeightKey key = WeightKey::unquantized;
  DType dtype = DType::F32;
  const void* data = nullptr;
};

// nvfp4: `codes` U8 [rows, k/2] (element 2j in the low nibble), `block_scales` E4M3 [rows, k/16].
struct Nvfp4View {
  static constexpr WeightKey key = WeightKey::nvfp4_static;
  const uint8_t* codes = nullptr;
  const uint8_t* block_scales = nullptr;
  float global_scale = 1.0f;  // weight_scale_2
  float input_scale = 0.0f;   // on-disk input_scale (W4A4); 0 when absent or unused (W4A16)
  // Block scales repacked at load (ModelOpt W4A8_NVFP4_FP8's blocks of 32, each scale written
  // twice); QuantMethod::linear adds it to LinearWeights::keepalive. Null: the file's bytes.
  std::shared_ptr<const void> owned = nullptr;  // initialized, so brace-initialized views may omit it
};

// fp8: `codes` F8_E4M3 [rows, k], a per-tensor or a per-channel scale.
struct Fp8View {
  static constexpr WeightKey key = WeightKey::fp8_static;
  const uint8_t* codes = nullptr;
  float global_scale = 1.0f;  // weight_scale (per tensor)
  // A per-channel weight_scale: one scale per row [rows], used instead of global_scale.
  std::vector<float> row_scales;
  float input_scale = 0.0f;   // on-disk input_scale (static activation scale)
};

// fp8_block: `codes` F8_E4M3 [rows, k] and one scale per block of block_n rows × block_k
// columns (DeepSeek's `weight_scale_inv`, multiplied despite its name; compressed-tensors'
// block `weight_scale`), row-major [ceil(rows/block_n), ceil(k/block_k)], converted to float32 at
// load: w[r, j] = e4m3(code) × scales[(r / block_n) × scale_cols + j / block_k].
struct Fp8BlockView {
  static constexpr WeightKey key = WeightKey::fp8_block;
  const uint8_t* codes = nullptr;
  int64_t block_n = 0, block_k = 0;
  int64_t scale_cols = 0;     // ceil(k / block_k)
  std::vector<float> scales;  // [ceil(rows / block_n) × scale_cols]
};

// mxfp4: `codes` U8 [rows, k/2] (element 2j in the low nibble, as NVFP4), `scales` E8M0 bytes
// [rows, k/32]: w = e2m1(code) × 2^(scale - 127) (quant/mxfp4.h).
struct Mxfp4View {
  static constexpr WeightKey key = WeightKey::mxfp4;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  float input_scale = 0.0f;  // ModelOpt W4A8_MXFP4_FP8's static FP8 activation scale; 0: none
};

// int4: 4-bit integers with a float scale and an integer zero point per `group` input columns of a
// row (GPTQ, AWQ, compressed-tensors pack-quantized, ModelOpt W4A16_AWQ; each producer's layout is
// normalized to this one at load by its quant method, docs/FORMAT.md "int4"). `codes` U8
// [rows, k/2], unsigned 0..15, column 2j in the low nibble; `scales` / `zeros` [rows, k/group]:
//   w[r, perm[j]] = (code[r, j] - zero[r, j / group]) × scale[r, j / group]
// where `perm` (act-order, GPTQ's g_idx sorted) is the identity when empty. Symmetric schemes
// store zero 8. The view owns its arrays (the producers' layouts are repacked).
struct Int4View {
  static constexpr WeightKey key = WeightKey::int4;
  int64_t group = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<uint8_t> zeros;
  std::vector<int32_t> perm;  // [k] or empty
};

// int8: `codes` I8 [rows, k] (the checkpoint's bytes in place) and one float32 scale per row:
// w[r, j] = codes[r, j] × row_scales[r] (ModelOpt's weight_scale = row amax / 127).
// input_scale: W8A8_SQ's static per-tensor activation scale (amax / 127); 0 for W8A16.
struct Int8View {
  static constexpr WeightKey key = WeightKey::int8;
  const int8_t* codes = nullptr;
  std::vector<float> row_scales;  // [rows]
  float input_scale = 0.0f;
};

using ShardView = std::variant<DenseView, Nvfp4View, Fp8View, Fp8BlockView, Mxfp4View, Int4View, Int8View>;

// The format a view holds.
WeightKey view_key(const ShardView& v);

struct WeightShard {
  std::string name;  // HF module name, for error messages ("model.layers.0.self_attn.q_proj")
  int64_t rows = 0;  // output features of this shard
  ShardView view;

  // The view as format V; Error naming the shard when it holds another format.
  template <typename V>
  const V& as() const {
    if (const V* v = std::get_if<V>(&view)) return *v;
    wrong_format(V::key);
  }
  template <typename V>
  V& as() {
    if (V* v = std::get_if<V>(&view)) return *v;
    wrong_format(V::key);
  }
  // The on-disk activation scale (0 for formats without one).
  float input_scale() const;

 private:
  [[noreturn]] void wrong_format(WeightKey wanted) const;
};

// One linear map W[n, k]: shards stacked along n in order.
struct LinearWeights {
  QuantKey key;  // the layer's scheme after resolution and any activation override
  int64_t n = 0, k = 0;
  std::vector<WeightShard> shards;
  std::vector<float> bias;  // [n] (float32, converted at load) or empty
  // W4A4 / fp8: the scale the shared input is quantized with = max over the shards' input_scale.
  // (fp8_block W8A8 has none: its activations are quantized per token per block_k group.)
  float input_scale = 0.0f;
  // NVFP4 W4A4 under `--activation-scale dynamic`: every token is quantized with its own global
  // scale, quant::dynamic_activation_scale of its activations; input_scale is not used.
  bool per_token_input_scale = false;
  // Keeps the memory the pointers refer to alive (the checkpoint's mmaps, owned copies).
  std::shared_ptr<const void> keepalive;
};

// A fused MoE layer: per expert a gate_up (w13: gate rows then up rows, n = 2*inter, k = hidden)
// and a down projection (w2: n = hidden, k = inter), each with an optional bias (gpt-oss). What runs
// between them is the MoeProblem's ExpertActivation (default SwiGLU: w2(silu(gate) * up)).
struct MoeWeights {
  QuantKey key;
  int64_t num_experts = 0, hidden = 0, inter = 0;
  std::vector<LinearWeights> w13;  // [num_experts]
  std::vector<LinearWeights> w2;   // [num_experts]
  std::shared_ptr<const void> keepalive;
};

}  // namespace fp4lm::kernels
