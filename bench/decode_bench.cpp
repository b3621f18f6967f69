// Decode throughput of the whole runtime against the memory roofline.
//
// Writes a synthetic NVFP4 checkpoint with real layer shapes — Qwen3-30B-A3B (MoE: hidden 2048,
// 128 experts, top-8, moe_intermediate 768, 32 heads / 4 KV heads, head_dim 128, vocab 151936),
// Llama-3-8B (dense: hidden 4096, intermediate 14336, 32 / 8 heads, vocab 128256) or
// Qwen3.6-35B-A3B (hybrid: every 4th layer gated attention with 16 heads / 2 KV heads of 256,
// the others gated delta-nets with 16 key / 32 value heads of 128, conv kernel 4; 256 experts,
// top-8, moe_intermediate 512, shared expert 512, vocab 248320; quantized as NVIDIA publishes it:
// MIXED_PRECISION, FP8 attention and GDN projections, W4A16 NVFP4 experts, shared expert and
// lm_head), or Qwen3.5-27B (hybrid-dense: the same mixers with 24 heads / 4 KV heads of 256 and
// 16 key / 48 value GDN heads of 128, hidden 5120, a dense MLP of 17408 in every layer, quantized
// the same way with the MLP in W4A16 NVFP4), or GLM-4.7-Flash (mla: Glm4MoeLiteForCausalLM, hidden
// 2048, multi-head latent attention with 20 heads, q_lora_rank 768, kv_lora_rank 512, nope/rope/v
// head dims 192/64/256; 64 experts, top-4, moe_intermediate 1536, one shared expert, layer 0 a dense
// MLP of 10240, vocab 154880; quantized as NVIDIA's newer DeepSeek exports: the four MLA
// projections bf16, o_proj, MLPs and experts NVFP4), or DeepSeek-V3's shapes the same way
// (deepseek-v3: 128 heads, 256 experts in 8 groups; about 8.7 GB per MoE layer), or Gemma 4 as
// NVIDIA publishes it (NVFP4 MLPs and experts, BF16 attention, routers and the tied embedding /
// lm_head): gemma4-31b (hidden 5376, 32 heads, sliding layers 16 KV heads of 256 with a window of
// 1024, every 6th layer and the last full with 4 KV heads of 512 and keys as values, MLP 21504,
// vocab 262144) or gemma4-26b-a4b (hidden 2816, 16 heads, sliding 8 KV heads of 256, full 2 of 512,
// a dense MLP of 2112 beside 128 experts of 704, top-8) — with --layers decoder layers. Codes and block scales are random bytes written directly (the
// reference quantizer over GBs of floats would take minutes); scales are chosen so activations
// stay O(1). Then: load, prefill a short prompt, decode --tokens tokens at M=1, and compare with
// the roofline = (weight + KV bytes one decode step must read) / (read bandwidth measured in
// the same process at the same thread count).
//
//   decode_bench --arch moe|dense|hybrid|hybrid-dense|mla|deepseek-v3|gemma4-31b|gemma4-26b-a4b|nemotron-dense|nemotron-moe
//                [--layers N] [--threads T] [--tokens N] [--prompt N] [--dir PATH]
//                [--override-activation-dtype bfloat16] [--bf16-lm-head] [--fp8]
//                [--linear-backend NAME] [--moe-backend NAME] [--gdn-prefill chunked|recurrent|both]
//                [--mamba-prefill chunked|recurrent|both] [--mtp K [--full-layers N]]
// hybrid: the gated delta-nets' mixer timer (model/layers/gated_delta_rule.h) gives the share of the
// decode step spent in the delta rule (state read, update, write) and in the whole GDN mixer;
// --gdn-prefill times the prompt with the chunked form, the recurrent form, or both (default);
// --mamba-prefill likewise for nemotron-*: the Mamba-2 scan's chunked SSD form or its recurrence
// (model/layers/mamba_timing.h), each line with the Mamba timer's share of the prefill.
// --mtp K (hybrids): also writes the MTP head (bf16, as NVIDIA keeps mtp.*), times a draft token
// and a verify of K + 1 tokens, and projects the single-stream speedup of the whole model
// (--full-layers, default 40) at vLLM's published acceptance (time_mtp, print_mtp).
// To compare with the AVX2 kernels end to end: FP4LM_DISABLE_ISA=avx512 decode_bench ...
// --fp8: every quantized layer FP8 E4M3 (per-tensor weight_scale and input_scale, as ModelOpt's
// FP8 exports) instead of NVFP4; it runs on the cpu_fp8_w8a16_* backends.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "engine/process_stats.h"
#include "engine/sampler.h"
#include "io/safetensors.h"
#include "kernels/registry.h"
#include "model/load/bytes_read_per_token.h"
#include "model/causal_lm.h"
#include "model/layers/gated_delta_rule.h"
#include "model/layers/mamba_timing.h"

namespace {

using namespace fp4lm;
using nlohmann::json;
namespace fs = std::filesystem;

struct Shapes {
  std::string arch;
  int64_t hidden, heads, kv_heads, head_dim, vocab, inter;  // inter: dense MLP or expert
  int64_t experts = 0, top_k = 0;
  // hybrid (Qwen3.5-MoE): shared expert, gated delta-net dims; layer i is attention iff (i+1) % 4 == 0
  int64_t shared = 0, nk = 0, nv = 0, dk = 0, dv = 0, conv = 0;
  // mla (DeepSeek-V3 / GLM-4.7-Flash): latent attention dims; layer 0 a dense MLP of dense_inter
  int64_t q_lora = 0, kv_lora = 0, nope = 0, rope = 0, vdim = 0, dense_inter = 0;
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling = 1.8;
  bool yarn = false;  // DeepSeek-V3's rope_scaling (factor 40 over 4096 positions)
  // Gemma 4: sliding window of the sliding layers; the full layers' head_dim / KV heads (keys as
  // values); the dense MLP beside the experts (MoE). Layer i is full iff (i+1) % 6 == 0 or last.
  int64_t window = 0, full_head_dim = 0, full_kv_heads = 0, dense_mlp = 0;
  bool gemma() const { return window > 0; }
  bool gemma_full(int64_t i, int64_t layers) const { return (i + 1) % 6 == 0 || i == layers - 1; }
  // Nemotron-H: the release's layer pattern (the first --layers letters are built) and the
  // Mamba-2 heads, head_dim, state size and groups (conv kernel: `conv`).
  std::string pattern = {};
  int64_t mh = 0, mp = 0, ns = 0, mg = 0;
  bool nemotron() const { return !pattern.empty(); }
  int64_t mamba_conv_dim() const { return mh * mp + 2 * mg * ns; }
  bool hybrid() const { return nk > 0; }
  bool mla() const { return kv_lora > 0; }
  bool attention(int64_t i) const { return !hybrid() || (i + 1) % 4 == 0; }
  int64_t conv_dim() const { return 2 * nk * dk + nv * dv; }
};

Shapes qwen3_30b_a3b() { return {"Qwen3MoeForCausalLM", 2048, 32, 4, 128, 151936, 768, 128, 8}; }
Shapes llama3_8b() { return {"LlamaForCausalLM", 4096, 32, 8, 128, 128256, 14336}; }
// Qwen3.6-35B-A3B's text model (its model card: hidden 2048, 10 × (3 GDN + 1 attention),
// GDN 16 QK / 32 V heads of 128, attention 16 Q / 2 KV heads of 256, 256 experts, 8 routed +
// 1 shared, intermediate 512, vocab 248320 padded).
Shapes qwen3_6_35b_a3b() {
  Shapes s{"Qwen3_5MoeForCausalLM", 2048, 16, 2, 256, 248320, 512, 256, 8};
  s.shared = 512, s.nk = 16, s.nv = 32, s.dk = 128, s.dv = 128, s.conv = 4;
  return s;
}
// Qwen3.5-27B's text model (dense: hidden 5120, 16 × (3 GDN + 1 attention), GDN 16 QK / 48 V
// heads of 128, attention 24 Q / 4 KV heads of 256, intermediate 17408, vocab 248320).
Shapes qwen3_5_27b() {
  Shapes s{"Qwen3_5ForCausalLM", 5120, 24, 4, 256, 248320, 17408};
  s.nk = 16, s.nv = 48, s.dk = 128, s.dv = 128, s.conv = 4;
  return s;
}

// GLM-4.7-Flash (transformers' Glm4MoeLiteConfig defaults are this model's).
Shapes glm_4_7_flash() {
  Shapes s{"Glm4MoeLiteForCausalLM", 2048, 20, 20, 64, 154880, 1536, 64, 4};
  s.shared = 1536, s.q_lora = 768, s.kv_lora = 512, s.nope = 192, s.rope = 64, s.vdim = 256, s.dense_inter = 10240;
  return s;
}

// DeepSeek-V3 / R1 (its config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
// nope/rope/v 128/64/128, 256 experts in 8 groups, top-8 from 4 groups, moe_intermediate 2048, one
// shared expert, dense intermediate 18432, vocab 129280, YaRN). The bench makes only layer 0 dense
// (the model has 3) so that --layers 2 already times one MoE layer.
Shapes deepseek_v3() {
  Shapes s{"DeepseekV3ForCausalLM", 7168, 128, 128, 64, 129280, 2048, 256, 8};
  s.shared = 2048, s.q_lora = 1536, s.kv_lora = 512, s.nope = 128, s.rope = 64, s.vdim = 128, s.dense_inter = 18432;
  s.n_group = 8, s.topk_group = 4, s.routed_scaling = 2.5, s.yarn = true;
  return s;
}

// Gemma-4-31B-IT and Gemma-4-26B-A4B (their config.json text_config).
Shapes gemma4_31b() {
  Shapes s{"Gemma4ForCausalLM", 5376, 32, 16, 256, 262144, 21504};
  s.window = 1024, s.full_head_dim = 512, s.full_kv_heads = 4;
  return s;
}
Shapes gemma4_26b_a4b() {
  Shapes s{"Gemma4ForCausalLM", 2816, 16, 8, 256, 262144, 704, 128, 8};
  s.window = 1024, s.full_head_dim = 512, s.full_kv_heads = 2, s.dense_mlp = 2112;
  return s;
}
// NVIDIA-Nemotron-Nano-9B-v2 (its config.json: hidden 4480, 56 layers M-M-M-MM-M-M-M*-..., 40 heads
// / 8 KV heads of 128, relu² MLP 15680, Mamba-2 128 heads of 80, state 128, 8 groups, vocab 131072).
Shapes nemotron_nano_9b_v2() {
  Shapes s{"NemotronHForCausalLM", 4480, 40, 8, 128, 131072, 15680};
  s.pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-";
  s.mh = 128, s.mp = 80, s.ns = 128, s.mg = 8, s.conv = 4;
  return s;
}
// NVIDIA-Nemotron-3-Nano-30B-A3B (hidden 2688, 52 layers MEMEM*EMEMEM*..., 32 heads / 2 KV heads of
// 128, 128 relu² experts of 1856, top-6, one shared expert of 3712, Mamba-2 64 heads of 64, state
// 128, 8 groups, vocab 131072).
Shapes nemotron_3_nano_30b_a3b() {
  Shapes s{"NemotronHForCausalLM", 2688, 32, 2, 128, 131072, 1856, 128, 6};
  s.shared = 3712, s.routed_scaling = 2.5;
  s.pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  s.mh = 64, s.mp = 64, s.ns = 128, s.mg = 8, s.conv = 4;
  return s;
}

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t next_rand() {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Tensor {
  std::string name;
  DType dtype;
  Shape shape;
  enum Fill { codes, scales, bf16_small, bf16_one, f32_value, fp8_codes } fill;
  float value = 0;
};

void add_nvfp4(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  t.push_back({m + ".weight", DType::U8, {n, k / 2}, Tensor::codes});
  t.push_back({m + ".weight_scale", DType::F8_E4M3, {n, k / 16}, Tensor::scales});
  // |w| ≈ sqrt(8.6) × scale × s2 ≈ 1/sqrt(k): unit-gain layers.
  t.push_back({m + ".weight_scale_2", DType::F32, {}, Tensor::f32_value, 1.0f / std::sqrt(8.6f * k)});
  t.push_back({m + ".input_scale", DType::F32, {}, Tensor::f32_value, 8.0f / 2688.0f});
}

bool g_fp8 = false;  // --fp8

// W4A16 NVFP4 (ModelOpt's W4A16_NVFP4: no input_scale).
void add_w4a16(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  add_nvfp4(t, m, n, k);
  t.pop_back();
}

// FP8 codes with exponents 4..8 (|w| in [2^-3, 3.75], rms ≈ 1.26): unit-gain with scale 1/(1.26·√k).
void add_fp8(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  t.push_back({m + ".weight", DType::F8_E4M3, {n, k}, Tensor::fp8_codes});
  t.push_back({m + ".weight_scale", DType::F32, {}, Tensor::f32_value, 1.0f / (1.26f * std::sqrt(static_cast<float>(k)))});
  t.push_back({m + ".input_scale", DType::F32, {}, Tensor::f32_value, 8.0f / 448.0f});
}

void add_quantized(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  if (g_fp8) add_fp8(t, m, n, k);
  else add_nvfp4(t, m, n, k);
}

// One of the writers above: a linear layer `m` of n x k in its format.
using AddLinear = void (*)(std::vector<Tensor>&, const std::string&, int64_t, int64_t);

// An attention block's projections under `p` (…self_attn): q_rows query rows (twice the heads'
// when the output gate rides on q_proj), K and V, then o_proj.
void add_attention(std::vector<Tensor>& t, const std::string& p, const Shapes& s, int64_t q_rows, AddLinear add) {
  add(t, p + ".q_proj", q_rows, s.hidden);
  add(t, p + ".k_proj", s.kv_heads * s.head_dim, s.hidden);
  add(t, p + ".v_proj", s.kv_heads * s.head_dim, s.hidden);
  add(t, p + ".o_proj", s.hidden, s.heads * s.head_dim);
}

// A SwiGLU MLP's projections under `p`: a dense MLP, one expert or the shared expert.
void add_mlp(std::vector<Tensor>& t, const std::string& p, int64_t hidden, int64_t inter, AddLinear add) {
  add(t, p + ".gate_proj", inter, hidden);
  add(t, p + ".up_proj", inter, hidden);
  add(t, p + ".down_proj", hidden, inter);
}

void add_bf16(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  t.push_back({m + ".weight", DType::BF16, {n, k}, Tensor::bf16_small});
}

// One Qwen3.5 hybrid layer under `p` as NVIDIA's MIXED_PRECISION exports: FP8 attention / GDN
// projections (`proj`); W4A16 NVFP4 experts and shared expert (MoE) or MLP (dense) (`mlp`);
// routers, in_proj_a/b, conv and norms bf16. The MTP head's layer: full attention, all bf16.
void hybrid_layer(std::vector<Tensor>& t, const Shapes& s, const std::string& p, bool attention,
                  AddLinear proj = add_fp8, AddLinear mlp = add_w4a16) {
  t.push_back({p + ".input_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_small});  // (1 + w)
  t.push_back({p + ".post_attention_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_small});
  if (attention) {
    add_attention(t, p + ".self_attn", s, 2 * s.heads * s.head_dim, proj);  // query and gate rows
    t.push_back({p + ".self_attn.q_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_small});
    t.push_back({p + ".self_attn.k_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_small});
  } else {
    const std::string a = p + ".linear_attn";
    add_fp8(t, a + ".in_proj_qkv", s.conv_dim(), s.hidden);
    add_fp8(t, a + ".in_proj_z", s.nv * s.dv, s.hidden);
    add_fp8(t, a + ".out_proj", s.hidden, s.nv * s.dv);
    t.push_back({a + ".in_proj_b.weight", DType::BF16, {s.nv, s.hidden}, Tensor::bf16_small});
    t.push_back({a + ".in_proj_a.weight", DType::BF16, {s.nv, s.hidden}, Tensor::bf16_small});
    t.push_back({a + ".conv1d.weight", DType::BF16, {s.conv_dim(), 1, s.conv}, Tensor::bf16_one});
    t.push_back({a + ".A_log", DType::F32, {s.nv}, Tensor::f32_value, -1.0f});  // e^g ≈ 0.77 per token
    t.push_back({a + ".dt_bias", DType::F32, {s.nv}, Tensor::f32_value, 0.0f});
    t.push_back({a + ".norm.weight", DType::BF16, {s.dv}, Tensor::bf16_one});
  }
  if (s.experts == 0) return add_mlp(t, p + ".mlp", s.hidden, s.inter, mlp);
  t.push_back({p + ".mlp.gate.weight", DType::BF16, {s.experts, s.hidden}, Tensor::bf16_small});
  for (int64_t e = 0; e < s.experts; ++e) add_mlp(t, fmt::format("{}.mlp.experts.{}", p, e), s.hidden, s.inter, mlp);
  add_mlp(t, p + ".mlp.shared_expert", s.hidden, s.shared, mlp);
  t.push_back({p + ".mlp.shared_expert_gate.weight", DType::BF16, {1, s.hidden}, Tensor::bf16_small});
}

int64_t g_mtp = 0;  // --mtp K: the hybrid's MTP head, and K drafts per verify step

// The hybrid's MTP head as NVIDIA's files keep it: all of mtp.* bf16 (fc, three norms, one
// full-attention layer with its MoE or MLP).
void mtp_head(std::vector<Tensor>& t, const Shapes& s) {
  add_bf16(t, "mtp.fc", s.hidden, 2 * s.hidden);
  for (const char* n : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
    t.push_back({n, DType::BF16, {s.hidden}, Tensor::bf16_small});
  hybrid_layer(t, s, "mtp.layers.0", true, add_bf16, add_bf16);
}

// One DeepSeek-style layer: latent attention (bf16 projections, NVFP4 o_proj), then layer 0's
// dense MLP or the sigmoid-routed experts with their shared expert (NVFP4).
void mla_layer(std::vector<Tensor>& t, const Shapes& s, int64_t l) {
  const std::string p = fmt::format("model.layers.{}", l), a = p + ".self_attn";
  t.push_back({p + ".input_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  t.push_back({p + ".post_attention_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  add_bf16(t, a + ".q_a_proj", s.q_lora, s.hidden);
  t.push_back({a + ".q_a_layernorm.weight", DType::BF16, {s.q_lora}, Tensor::bf16_one});
  add_bf16(t, a + ".q_b_proj", s.heads * (s.nope + s.rope), s.q_lora);
  add_bf16(t, a + ".kv_a_proj_with_mqa", s.kv_lora + s.rope, s.hidden);
  t.push_back({a + ".kv_a_layernorm.weight", DType::BF16, {s.kv_lora}, Tensor::bf16_one});
  add_bf16(t, a + ".kv_b_proj", s.heads * (s.nope + s.vdim), s.kv_lora);
  add_quantized(t, a + ".o_proj", s.hidden, s.heads * s.vdim);
  if (l == 0) return add_mlp(t, p + ".mlp", s.hidden, s.dense_inter, add_quantized);
  t.push_back({p + ".mlp.gate.weight", DType::BF16, {s.experts, s.hidden}, Tensor::bf16_small});
  t.push_back({p + ".mlp.gate.e_score_correction_bias", DType::F32, {s.experts}, Tensor::f32_value, 0.0f});
  for (int64_t e = 0; e < s.experts; ++e)
    add_mlp(t, fmt::format("{}.mlp.experts.{}", p, e), s.hidden, s.inter, add_quantized);
  add_mlp(t, p + ".mlp.shared_experts", s.hidden, s.shared, add_quantized);
}

// One Gemma 4 layer as NVIDIA's NVFP4 exports: BF16 attention (full layers: no v_proj), the four
// norms, q/k norms, layer_scalar; the NVFP4 MLP; with experts, the BF16 router (proj, scale,
// per_expert_scale), the three MoE norms and NVFP4 experts.
void gemma_layer(std::vector<Tensor>& t, const Shapes& s, int64_t l, int64_t layers) {
  const std::string p = fmt::format("model.layers.{}", l), a = p + ".self_attn";
  const bool full = s.gemma_full(l, layers);
  const int64_t hd = full ? s.full_head_dim : s.head_dim, kvh = full ? s.full_kv_heads : s.kv_heads;
  for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                        "post_feedforward_layernorm"})
    t.push_back({p + "." + n + ".weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  t.push_back({p + ".layer_scalar", DType::BF16, {1}, Tensor::bf16_one});
  add_bf16(t, a + ".q_proj", s.heads * hd, s.hidden);
  add_bf16(t, a + ".k_proj", kvh * hd, s.hidden);
  if (!full) add_bf16(t, a + ".v_proj", kvh * hd, s.hidden);
  add_bf16(t, a + ".o_proj", s.hidden, s.heads * hd);
  t.push_back({a + ".q_norm.weight", DType::BF16, {hd}, Tensor::bf16_one});
  t.push_back({a + ".k_norm.weight", DType::BF16, {hd}, Tensor::bf16_one});
  add_mlp(t, p + ".mlp", s.hidden, s.experts ? s.dense_mlp : s.inter, add_quantized);
  if (s.experts == 0) return;
  for (const char* n : {"post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"})
    t.push_back({p + "." + n + ".weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  add_bf16(t, p + ".router.proj", s.experts, s.hidden);
  t.push_back({p + ".router.scale", DType::BF16, {s.hidden}, Tensor::bf16_one});
  t.push_back({p + ".router.per_expert_scale", DType::BF16, {s.experts}, Tensor::bf16_one});
  for (int64_t e = 0; e < s.experts; ++e)
    add_mlp(t, fmt::format("{}.experts.{}", p, e), s.hidden, s.inter, add_quantized);
}

// Nemotron-H layer l quantized as NVIDIA publishes it: NVFP4 Mamba / MLP / expert projections;
// the attention layers and the Mamba layers that feed them (Nemotron 3), conv1d, routers and
// norms bf16 (nemotron_bf16_layer).
bool nemotron_bf16_layer(const Shapes& s, int64_t l) {
  const char here = s.pattern[static_cast<size_t>(l)];
  const char next = static_cast<size_t>(l + 1) < s.pattern.size() ? s.pattern[static_cast<size_t>(l + 1)] : 0;
  return here == '*' || (s.experts > 0 && here == 'M' && next == '*');
}

void nemotron_layer(std::vector<Tensor>& t, const Shapes& s, int64_t l) {
  const std::string p = fmt::format("backbone.layers.{}", l), x = p + ".mixer";
  const AddLinear add = nemotron_bf16_layer(s, l) ? add_bf16 : add_nvfp4;
  t.push_back({p + ".norm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  switch (s.pattern[static_cast<size_t>(l)]) {
    case 'M': {
      const int64_t inter = s.mh * s.mp;
      add(t, x + ".in_proj", inter + s.mamba_conv_dim() + s.mh, s.hidden);
      add(t, x + ".out_proj", s.hidden, inter);
      t.push_back({x + ".conv1d.weight", DType::BF16, {s.mamba_conv_dim(), 1, s.conv}, Tensor::bf16_small});
      t.push_back({x + ".conv1d.bias", DType::BF16, {s.mamba_conv_dim()}, Tensor::bf16_small});
      t.push_back({x + ".A_log", DType::F32, {s.mh}, Tensor::f32_value, 0.0f});  // A = -1
      t.push_back({x + ".D", DType::F32, {s.mh}, Tensor::f32_value, 1.0f});
      t.push_back({x + ".dt_bias", DType::F32, {s.mh}, Tensor::f32_value, -2.0f});
      t.push_back({x + ".norm.weight", DType::BF16, {inter}, Tensor::bf16_one});
      break;
    }
    case '*':
      add_attention(t, x, s, s.heads * s.head_dim, add);
      break;
    case 'E':
      t.push_back({x + ".gate.weight", DType::BF16, {s.experts, s.hidden}, Tensor::bf16_small});
      t.push_back({x + ".gate.e_score_correction_bias", DType::F32, {s.experts}, Tensor::f32_value, 0.0f});
      for (int64_t e = 0; e < s.experts; ++e) {
        add(t, fmt::format("{}.experts.{}.up_proj", x, e), s.inter, s.hidden);
        add(t, fmt::format("{}.experts.{}.down_proj", x, e), s.hidden, s.inter);
      }
      add(t, x + ".shared_experts.up_proj", s.shared, s.hidden);
      add(t, x + ".shared_experts.down_proj", s.hidden, s.shared);
      break;
    default:
      add(t, x + ".up_proj", s.inter, s.hidden);
      add(t, x + ".down_proj", s.hidden, s.inter);
  }
}

std::vector<Tensor> layout(const Shapes& s, int64_t layers, bool bf16_head) {
  if (s.nemotron()) {  // lm_head bf16 as published
    std::vector<Tensor> t;
    t.push_back({"backbone.embeddings.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
    t.push_back({"backbone.norm_f.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
    t.push_back({"lm_head.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
    for (int64_t l = 0; l < layers; ++l) nemotron_layer(t, s, l);
    return t;
  }
  std::vector<Tensor> t;
  t.push_back({"model.embed_tokens.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
  t.push_back({"model.norm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  if (s.gemma()) {  // lm_head tied to the BF16 embedding
    for (int64_t l = 0; l < layers; ++l) gemma_layer(t, s, l, layers);
    return t;
  }
  if (bf16_head) t.push_back({"lm_head.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
  else if (s.hybrid()) add_w4a16(t, "lm_head", s.vocab, s.hidden);
  else add_quantized(t, "lm_head", s.vocab, s.hidden);
  if (s.hybrid() && g_mtp > 0) mtp_head(t, s);
  for (int64_t l = 0; l < layers; ++l) {
    if (s.hybrid()) {
      hybrid_layer(t, s, fmt::format("model.layers.{}", l), s.attention(l));
      continue;
    }
    if (s.mla()) {
      mla_layer(t, s, l);
      continue;
    }
    const std::string p = fmt::format("model.layers.{}", l);
    t.push_back({p + ".input_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
    t.push_back({p + ".post_attention_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
    add_attention(t, p + ".self_attn", s, s.heads * s.head_dim, add_quantized);
    if (s.experts == 0) {
      add_mlp(t, p + ".mlp", s.hidden, s.inter, add_quantized);
      continue;
    }
    t.push_back({p + ".self_attn.q_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_one});
    t.push_back({p + ".self_attn.k_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_one});
    t.push_back({p + ".mlp.gate.weight", DType::BF16, {s.experts, s.hidden}, Tensor::bf16_small});
    for (int64_t e = 0; e < s.experts; ++e)
      add_mlp(t, fmt::format("{}.mlp.experts.{}", p, e), s.hidden, s.inter, add_quantized);
  }
  return t;
}

void fill(const Tensor& t, std::vector<uint8_t>& buf) {
  buf.resize(static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype));
  switch (t.fill) {
    case Tensor::codes:
      for (size_t i = 0; i < buf.size(); i += 8) {
        uint64_t r = next_rand();
        std::memcpy(buf.data() + i, &r, std::min<size_t>(8, buf.size() - i));
      }
      break;
    case Tensor::scales:  // E4M3 0x30..0x3F: 0.5 .. 1.875
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(0x30 + (next_rand() & 15));
      break;
    case Tensor::bf16_small:
    case Tensor::bf16_one: {
      auto* p = reinterpret_cast<uint16_t*>(buf.data());
      for (size_t i = 0; i < buf.size() / 2; ++i) {
        float v = t.fill == Tensor::bf16_one ? 1.0f
                                             : (static_cast<float>(next_rand() % 2001) / 1000.0f - 1.0f) * 0.05f;
        p[i] = f32_to_bf16(v);
      }
      break;
    }
    case Tensor::f32_value:
      for (size_t i = 0; i < buf.size(); i += 4) std::memcpy(buf.data() + i, &t.value, 4);
      break;
    case Tensor::fp8_codes:
      for (size_t i = 0; i < buf.size(); ++i) {
        const uint64_t r = next_rand();
        buf[i] = static_cast<uint8_t>((r & 0x80) | ((4 + (r >> 8) % 5) << 3) | ((r >> 16) & 7));
      }
      break;
  }
}

// The keys every architecture's config.json shares (each writer adds its own).
json shared_config_keys(const Shapes& s, int64_t layers) {
  return {{"architectures", {s.arch}},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"num_hidden_layers", layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"torch_dtype", "bfloat16"}};
}

json gemma_config(const Shapes& s, int64_t layers) {
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i) types.push_back(s.gemma_full(i, layers) ? "full_attention" : "sliding_attention");
  json c = shared_config_keys(s, layers);
  c.update(json{{"model_type", "gemma4_text"},
            {"global_head_dim", s.full_head_dim},
            {"num_global_key_value_heads", s.full_kv_heads},
            {"attention_k_eq_v", true},
            {"intermediate_size", s.experts ? s.dense_mlp : s.inter},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"sliding_window", s.window},
            {"layer_types", types},
            {"rope_parameters",
             {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
              {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}}},
            {"final_logit_softcapping", 30.0},
            {"hidden_size_per_layer_input", 0},
            {"num_kv_shared_layers", 0},
            {"use_bidirectional_attention", "vision"},
            {"enable_moe_block", s.experts > 0},
            {"max_position_embeddings", 262144},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", true},
            {"bos_token_id", 2},
            {"eos_token_id", 1}});
  if (s.experts) {
    c["num_experts"] = s.experts;
    c["top_k_experts"] = s.top_k;
    c["moe_intermediate_size"] = s.inter;
  }
  c["quantization_config"] = {{"quant_method", "modelopt"},
                              {"quant_algo", g_fp8 ? "FP8" : "NVFP4"},
                              {"ignore", {"lm_head", "model.layers.*.self_attn*", "model.layers.*.router*"}}};
  if (!g_fp8) c["quantization_config"]["group_size"] = 16;
  return c;
}

json nemotron_config_json(const Shapes& s, int64_t layers) {
  json c = shared_config_keys(s, layers);
  c.update(json{{"model_type", "nemotron_h"},
            {"hybrid_override_pattern", s.pattern.substr(0, static_cast<size_t>(layers))},
            {"intermediate_size", s.inter},
            {"mlp_hidden_act", "relu2"},
            {"mamba_num_heads", s.mh},
            {"mamba_head_dim", s.mp},
            {"ssm_state_size", s.ns},
            {"n_groups", s.mg},
            {"conv_kernel", s.conv},
            {"layer_norm_epsilon", 1e-5},
            {"max_position_embeddings", 40960},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2}});
  if (s.experts) {
    c["n_routed_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
    c["moe_intermediate_size"] = s.inter;
    c["moe_shared_expert_intermediate_size"] = s.shared;
    c["n_group"] = 1, c["topk_group"] = 1;
    c["norm_topk_prob"] = true;
    c["routed_scaling_factor"] = s.routed_scaling;
  }
  json exclude = {"lm_head", "backbone.layers.*.mixer.conv1d", "backbone.layers.*.mixer.gate"};
  for (int64_t l = 0; l < layers; ++l)
    if (nemotron_bf16_layer(s, l)) exclude.push_back(fmt::format("backbone.layers.{}.mixer*", l));
  c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}, {"ignore", exclude}};
  return c;
}

// Nemotron-H: the bytes of every tensor a decode step reads (the chosen experts' share of the
// routed experts, one embedding row), the bf16 K/V up to `ctx`, and each Mamba layer's float32
// state read and written (`state`: that part).
double nemotron_bytes_per_token(const Shapes& s, int64_t layers, int64_t ctx, double* state) {
  double total = 2.0 * s.hidden;
  for (const Tensor& t : layout(s, layers, true)) {
    if (t.name == "backbone.embeddings.weight") continue;
    const double b = static_cast<double>(shape_numel(t.shape)) * static_cast<double>(dtype_size(t.dtype));
    total += model::bytes_read_per_token(t.name, b, s.experts, s.top_k);
  }
  *state = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const char k = s.pattern[static_cast<size_t>(l)];
    if (k == '*') total += 2.0 * s.kv_heads * s.head_dim * ctx * 2;
    if (k == 'M') *state += 2 * 4.0 * ((s.conv - 1) * s.mamba_conv_dim() + s.mh * s.mp * s.ns);
  }
  return total + *state;
}

json config_json(const Shapes& s, int64_t layers, bool bf16_head) {
  if (s.gemma()) return gemma_config(s, layers);
  if (s.nemotron()) return nemotron_config_json(s, layers);
  json c = shared_config_keys(s, layers);
  c.update(json{{"intermediate_size", s.experts ? 6144 : s.inter},
            {"max_position_embeddings", 40960},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", s.experts ? 1000000.0 : 500000.0},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2}});
  if (s.experts) {
    c["num_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
    c["moe_intermediate_size"] = s.inter;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
  }
  if (s.mla()) {
    c["num_key_value_heads"] = s.heads;
    c["intermediate_size"] = s.dense_inter;
    c["n_routed_experts"] = s.experts;
    c["n_shared_experts"] = s.shared / s.inter;
    c["n_group"] = s.n_group;
    c["topk_group"] = s.topk_group;
    c["routed_scaling_factor"] = s.routed_scaling;
    if (s.yarn)
      c["rope_scaling"] = {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                           {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
    c["first_k_dense_replace"] = 1;
    c["q_lora_rank"] = s.q_lora;
    c["kv_lora_rank"] = s.kv_lora;
    c["qk_nope_head_dim"] = s.nope;
    c["qk_rope_head_dim"] = s.rope;
    c["v_head_dim"] = s.vdim;
    c["rope_interleave"] = true;
    c.erase("num_experts");
    c.erase("decoder_sparse_step");
    c.erase("mlp_only_layers");
  }
  json exclude = json::array();
  if (bf16_head) exclude.push_back("lm_head");
  if (s.mla())
    for (const char* m : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"})
      exclude.push_back(fmt::format("model.layers.*.self_attn.{}", m));
  if (s.experts) exclude.push_back("model.layers.*.mlp.gate");
  if (s.hybrid()) {
    json types = json::array();
    for (int64_t i = 0; i < layers; ++i) types.push_back(s.attention(i) ? "full_attention" : "linear_attention");
    c["layer_types"] = types;
    c["linear_num_key_heads"] = s.nk;
    c["linear_num_value_heads"] = s.nv;
    c["linear_key_head_dim"] = s.dk;
    c["linear_value_head_dim"] = s.dv;
    c["linear_conv_kernel_dim"] = s.conv;
    c["attn_output_gate"] = true;
    if (s.experts) c["shared_expert_intermediate_size"] = s.shared;
    c["mamba_ssm_dtype"] = "float32";
    if (g_mtp > 0) c["mtp_num_hidden_layers"] = 1;
    c.erase("rope_theta");
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}};
    // MIXED_PRECISION as NVIDIA's 35B-A3B export lists it (modules not listed stay bf16).
    json q = json::object();
    auto put = [&](const std::string& m, const char* algo) { q[m] = {{"quant_algo", algo}}; };
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      if (s.attention(i))
        for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"}) put(p + "self_attn." + m, "FP8");
      else
        for (const char* m : {"in_proj_qkv", "in_proj_z", "out_proj"}) put(p + "linear_attn." + m, "FP8");
      if (s.experts) put(p + "mlp.experts", "W4A16_NVFP4");
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        put(p + (s.experts ? "mlp.shared_expert." : "mlp.") + m, "W4A16_NVFP4");
    }
    if (!bf16_head) put("lm_head", "W4A16_NVFP4");
    c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", q}};
    return c;
  }
  c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", g_fp8 ? "FP8" : "NVFP4"}, {"ignore", exclude}};
  if (!g_fp8) c["quantization_config"]["group_size"] = 16;
  return c;
}

void write_checkpoint(const std::string& dir, const Shapes& s, int64_t layers, bool bf16_head) {
  fs::create_directories(dir);
  const std::vector<Tensor> ts = layout(s, layers, bf16_head);
  io::SafetensorsStreamWriter::Layout lay;
  for (const Tensor& t : ts) lay.emplace_back(t.name, t.dtype, t.shape);
  io::SafetensorsStreamWriter w(dir + "/model.safetensors", lay);
  std::vector<uint8_t> buf;
  for (const Tensor& t : ts) {
    fill(t, buf);
    w.write_tensor(t.name, buf.data(), buf.size());
  }
  w.finish();
  std::ofstream(dir + "/config.json") << config_json(s, layers, bf16_head).dump(2);
}

// Bytes one decode step reads: every weight except the experts not chosen (top_k of them are),
// the embedding row, and the KV cache up to `ctx` positions.
double bytes_per_token(const Shapes& s, int64_t layers, bool bf16_head, int64_t ctx) {
  auto nvfp4 = [](int64_t n, int64_t k) { return static_cast<double>(n) * k * (g_fp8 ? 1.0 : 0.5 + 1.0 / 16); };
  if (s.gemma()) {  // BF16 attention and K/V (a sliding layer reads at most its window), the tied BF16 head
    double total = 2.0 * s.vocab * s.hidden + 2.0 * s.hidden;
    for (int64_t i = 0; i < layers; ++i) {
      const bool full = s.gemma_full(i, layers);
      const int64_t hd = full ? s.full_head_dim : s.head_dim, kvh = full ? s.full_kv_heads : s.kv_heads;
      total += 2.0 * ((2 * s.heads + (full ? 1 : 2) * kvh) * hd) * s.hidden;
      total += 2.0 * 2 * kvh * hd * static_cast<double>(full ? ctx : std::min(ctx, s.window));
      const int64_t mlp = s.experts ? s.dense_mlp : s.inter;
      total += nvfp4(2 * mlp, s.hidden) + nvfp4(s.hidden, mlp);
      if (s.experts)
        total += 2.0 * s.experts * s.hidden + s.top_k * (nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter));
    }
    return total;
  }
  double per_layer = nvfp4((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden) + nvfp4(s.hidden, s.heads * s.head_dim);
  if (s.experts) per_layer += 2.0 * s.experts * s.hidden + s.top_k * (nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter));
  else per_layer += nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter);
  if (s.mla()) {  // bf16 projections + NVFP4 o_proj, the bf16 latent cache; layer 0 dense
    const double attn = 2.0 * (s.q_lora * s.hidden + s.heads * (s.nope + s.rope) * s.q_lora +
                               (s.kv_lora + s.rope) * s.hidden + s.heads * (s.nope + s.vdim) * s.kv_lora) +
                        nvfp4(s.hidden, s.heads * s.vdim) + 2.0 * (s.kv_lora + s.rope) * ctx;
    const double moe = 2.0 * s.experts * s.hidden +
                      (s.top_k + s.shared / s.inter) * (nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter));
    const double dense = nvfp4(2 * s.dense_inter, s.hidden) + nvfp4(s.hidden, s.dense_inter);
    const double head = bf16_head ? 2.0 * s.vocab * s.hidden : nvfp4(s.vocab, s.hidden);
    return layers * attn + dense + (layers - 1) * moe + head + 2.0 * s.hidden;
  }
  per_layer += 2.0 * s.kv_heads * s.head_dim * ctx * 2;  // bf16 K and V
  const double head = bf16_head ? 2.0 * s.vocab * s.hidden : nvfp4(s.vocab, s.hidden);
  return layers * per_layer + head + 2.0 * s.hidden;
}

// The hybrid's decode step: per GDN layer its FP8 projections, bf16 in_proj_a/b and conv, and its
// float32 state read and written (conv window and S, `gdn_state` bytes each way); per attention
// layer its FP8 projections and KV cache; per layer the router, 8 W4A16 experts and the shared
// expert (MoE) or the W4A16 MLP (dense); the W4A16 lm_head.
double hybrid_bytes_per_token(const Shapes& s, int64_t layers, bool bf16_head, int64_t ctx, double* gdn_state) {
  auto w4a16 = [](int64_t n, int64_t k) { return static_cast<double>(n) * k * (0.5 + 1.0 / 16); };
  auto fp8 = [](int64_t n, int64_t k) { return static_cast<double>(n) * k; };
  const double state = 4.0 * ((s.conv - 1) * s.conv_dim() + s.nv * s.dk * s.dv);
  *gdn_state = 0;
  double total = 0;
  for (int64_t i = 0; i < layers; ++i) {
    if (s.attention(i)) {
      total += fp8(2 * s.heads * s.head_dim + 2 * s.kv_heads * s.head_dim, s.hidden) + fp8(s.hidden, s.heads * s.head_dim);
      total += 2.0 * s.kv_heads * s.head_dim * ctx * 2;  // bf16 K and V
    } else {
      total += fp8(s.conv_dim() + s.nv * s.dv, s.hidden) + fp8(s.hidden, s.nv * s.dv);
      total += 2.0 * (2 * s.nv * s.hidden + s.conv_dim() * s.conv);
      total += 2 * state;
      *gdn_state += 2 * state;
    }
    if (s.experts == 0) total += w4a16(2 * s.inter, s.hidden) + w4a16(s.hidden, s.inter);
    else total += 2.0 * s.experts * s.hidden + (s.top_k + 1) * (w4a16(2 * s.inter, s.hidden) + w4a16(s.hidden, s.inter));
  }
  const double head = bf16_head ? 2.0 * s.vocab * s.hidden : w4a16(s.vocab, s.hidden);
  return total + head + 2.0 * s.hidden;
}

size_t dir_bytes(const std::string& dir) {
  size_t b = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) b += e.file_size();
  return b;
}

// --mtp K: what a speculative step costs beside a decode step. A draft token is one row through
// the MTP head (fc, its layer, lm_head; the values fed in do not change the work), timed in steady
// state: the head's state is cut back after each round of K, as the drafter does. A verify step
// is K + 1 tokens through the target with every position's logits, on the decoded state.
struct MtpCost {
  double draft_s = 0, verify_s = 0;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

MtpCost time_mtp(const model::CausalLM& lm, model::SequenceState& target, int64_t k, int64_t prompt_len, int32_t tok) {
  const int64_t hid = lm.config().hidden_size, vocab = lm.vocab_size();
  model::SequenceState ms = lm.new_mtp_sequence();
  std::vector<float> hidden(static_cast<size_t>(prompt_len * hid), 0.5f), logits(static_cast<size_t>(vocab)),
      g(static_cast<size_t>(hid));
  const std::vector<int32_t> toks(static_cast<size_t>(prompt_len), tok);
  lm.mtp_forward(ms, toks.data(), hidden.data(), prompt_len, logits.data());  // the head reads the prompt
  std::vector<double> draft, verify;
  for (int rep = 0; rep < 6; ++rep) {
    for (int64_t j = 0; j < k; ++j) {
      const auto t0 = std::chrono::steady_clock::now();
      lm.mtp_forward(ms, &tok, hidden.data(), 1, logits.data(), g.data());
      draft.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    ms.truncate(prompt_len);
  }
  std::vector<float> all(static_cast<size_t>((k + 1) * vocab));
  const std::vector<int32_t> v(static_cast<size_t>(k + 1), tok);
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    lm.forward(target, v.data(), k + 1, model::LogitsMode::all, all.data());
    verify.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return {median_of(draft), median_of(verify)};
}

// Acceptance per draft position of the Qwen3-Next-style MTP head as vLLM reports it (share of
// drafts whose first j + 1 tokens were all accepted): vLLM PR #48892, gsm8k, temperature 0 —
// one draft 83.4%; eight drafts 76.2, 61.6, 51.3, 42.4, 36.4, 30.9, 27.2, 23.7%.
double published_acceptance(int64_t k, int64_t j) {
  static const double eight[] = {0.762, 0.616, 0.513, 0.424, 0.364, 0.309, 0.272, 0.237};
  if (k == 1) return 0.834;
  return j < 8 ? eight[j] : 0.2;
}

void print_mtp(const MtpCost& c, int64_t k, double step_s, double full_over_measured) {
  std::printf("MTP (%lld drafts): a draft token %.2f ms (%.3f of this decode step); a verify of %lld tokens %.1f ms "
              "(%.2fx a decode step)\n",
              static_cast<long long>(k), c.draft_s * 1e3, c.draft_s / step_s, static_cast<long long>(k + 1),
              c.verify_s * 1e3, c.verify_s / step_s);
  // The whole model: the decoder layers' share of a step and of a verify scales with the bytes
  // they read (x full_over_measured); the head's cost does not.
  double tokens = 1;
  for (int64_t j = 0; j < k; ++j) tokens += published_acceptance(k, j);
  const double full_step = step_s * full_over_measured, full_verify = c.verify_s * full_over_measured;
  std::printf("MTP projection for the whole model (decoder layers x%.1f by bytes): %.2f tokens per verify at vLLM's "
              "published acceptance; step %.1f ms, verify %.1f ms + %lld drafts %.1f ms -> %.2fx single-stream decode\n",
              full_over_measured, tokens, full_step * 1e3, full_verify * 1e3, static_cast<long long>(k),
              k * c.draft_s * 1e3, tokens * full_step / (full_verify + k * c.draft_s));
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "moe", dir, override_dtype = "auto", linear_backend, moe_backend, gdn_prefill = "both",
              mamba_prefill = "both";
  int64_t layers = 4, tokens = 32, prompt_len = 16, full_layers = 40;
  int threads = 2;
  bool bf16_head = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--arch") arch = val();
    else if (a == "--layers") layers = std::stoll(val());
    else if (a == "--threads") threads = std::stoi(val());
    else if (a == "--tokens") tokens = std::stoll(val());
    else if (a == "--prompt") prompt_len = std::stoll(val());
    else if (a == "--dir") dir = val();
    else if (a == "--override-activation-dtype") override_dtype = val();
    else if (a == "--bf16-lm-head") bf16_head = true;
    else if (a == "--fp8") g_fp8 = true;
    else if (a == "--linear-backend") linear_backend = val();
    else if (a == "--moe-backend") moe_backend = val();
    else if (a == "--gdn-prefill") gdn_prefill = val();
    else if (a == "--mamba-prefill") mamba_prefill = val();
    else if (a == "--mtp") g_mtp = std::stoll(val());
    else if (a == "--full-layers") full_layers = std::stoll(val());
    else {
      std::fprintf(stderr, "usage: decode_bench --arch moe|dense|hybrid|hybrid-dense|mla|deepseek-v3|gemma4-31b|gemma4-26b-a4b|nemotron-dense|nemotron-moe [--layers N] [--threads T] [--tokens N] [--prompt N] "
                           "[--dir PATH] [--override-activation-dtype bfloat16] [--bf16-lm-head] [--fp8] [--linear-backend NAME] "
                           "[--moe-backend NAME] [--gdn-prefill chunked|recurrent|both] [--mamba-prefill chunked|recurrent|both] "
                           "[--mtp K [--full-layers N]]\n");
      return 2;
    }
  }
  if (gdn_prefill != "chunked" && gdn_prefill != "recurrent" && gdn_prefill != "both") {
    std::fprintf(stderr, "--gdn-prefill must be chunked, recurrent or both\n");
    return 2;
  }
  if (mamba_prefill != "chunked" && mamba_prefill != "recurrent" && mamba_prefill != "both") {
    std::fprintf(stderr, "--mamba-prefill must be chunked, recurrent or both\n");
    return 2;
  }
  if (prompt_len < 1 || tokens < 1) {
    std::fprintf(stderr, "--prompt and --tokens must be at least 1\n");
    return 2;
  }
  if (arch != "moe" && arch != "dense" && arch != "hybrid" && arch != "hybrid-dense" && arch != "mla" &&
      arch != "deepseek-v3" && arch != "gemma4-31b" && arch != "gemma4-26b-a4b" && arch != "nemotron-dense" &&
      arch != "nemotron-moe") {
    std::fprintf(stderr, "--arch must be moe, dense, hybrid, hybrid-dense, mla, deepseek-v3, gemma4-31b, gemma4-26b-a4b, "
                         "nemotron-dense or nemotron-moe\n");
    return 2;
  }
  if (arch.starts_with("nemotron") && (g_fp8 || bf16_head)) {
    std::fprintf(stderr, "--fp8 and --bf16-lm-head do not apply to --arch nemotron-* (quantized as published: NVFP4, lm_head bf16)\n");
    return 2;
  }
  if (arch.starts_with("hybrid") && g_fp8) {
    std::fprintf(stderr, "--fp8 does not apply to --arch hybrid (it is quantized as published: MIXED_PRECISION)\n");
    return 2;
  }
  const Shapes s = arch == "moe"      ? qwen3_30b_a3b()
                   : arch == "dense"  ? llama3_8b()
                   : arch == "hybrid" ? qwen3_6_35b_a3b()
                   : arch == "mla"    ? glm_4_7_flash()
                   : arch == "deepseek-v3" ? deepseek_v3()
                   : arch == "gemma4-31b" ? gemma4_31b()
                   : arch == "gemma4-26b-a4b" ? gemma4_26b_a4b()
                   : arch == "nemotron-dense" ? nemotron_nano_9b_v2()
                   : arch == "nemotron-moe"   ? nemotron_3_nano_30b_a3b()
                                      : qwen3_5_27b();
  if (g_mtp < 0 || g_mtp > 8 || (g_mtp > 0 && !s.hybrid())) {
    std::fprintf(stderr, "--mtp K (1..8) applies to --arch hybrid|hybrid-dense\n");
    return 2;
  }
  if (s.nemotron() && (layers < 1 || static_cast<size_t>(layers) > s.pattern.size())) {
    std::fprintf(stderr, "--layers must be 1 to %zu for --arch %s\n", s.pattern.size(), arch.c_str());
    return 2;
  }
  const bool own_dir = dir.empty();
  if (own_dir) dir = (fs::temp_directory_path() / fmt::format("fp4lm-decode-bench-{}-{}", arch, ::getpid())).string();
  try {
    auto t0 = std::chrono::steady_clock::now();
    // In a child process, so the generator's buffers never count in this process's peak RSS.
    pid_t child = ::fork();
    if (child == 0) {
      try {
        write_checkpoint(dir, s, layers, bf16_head);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "decode_bench: %s\n", e.what());
        std::_Exit(1);
      }
      std::_Exit(0);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("writing the synthetic checkpoint failed");
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t ckpt_bytes = dir_bytes(dir);
    std::printf("checkpoint: %s, %lld layers, %.2f GB written in %.1f s (%s)\n", s.arch.c_str(),
                static_cast<long long>(layers), ckpt_bytes / 1e9, write_s, dir.c_str());
    ThreadPool::set_global_threads(threads);
    model::EngineOptions o;
    o.dtype = "bfloat16";
    o.override_activation_dtype = model::parse_override_activation_dtype(override_dtype);
    o.linear_backend = linear_backend;
    o.moe_backend = moe_backend;
    model::LoadOptions lo;
    lo.max_model_len = prompt_len + tokens + 1 + 4 * (g_mtp + 1);
    lo.mtp = g_mtp > 0;
    lo.progress = false;
    auto lm = model::CausalLM::load(dir, o, lo);

    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (auto& t : prompt) t = static_cast<int32_t>(3 + next_rand() % (s.vocab - 3));
    std::vector<float> logits(static_cast<size_t>(s.vocab));
    // The prompt, once per GDN prefill form asked (hybrid); the last run's state decodes on.
    std::vector<std::string> forms = {"chunked"};
    if (s.hybrid()) forms = gdn_prefill == "both" ? std::vector<std::string>{"recurrent", "chunked"}
                                                  : std::vector<std::string>{gdn_prefill};
    if (s.nemotron()) forms = mamba_prefill == "both" ? std::vector<std::string>{"recurrent", "chunked"}
                                                      : std::vector<std::string>{mamba_prefill};
    const model::mamba::PrefillForm mamba_default = model::mamba::prefill_form();
    std::vector<std::string> prefill_lines;
    std::optional<model::SequenceState> cache;
    double prefill_s = 0;
    model::gdn::timer().enable(s.hybrid());
    model::mamba::timer().enable(s.nemotron());
    for (const std::string& form : forms) {
      model::gdn::set_prefill_form(form == "recurrent" ? model::gdn::PrefillForm::recurrent
                                                       : model::gdn::PrefillForm::chunked);
      if (s.nemotron())
        model::mamba::set_prefill_form(form == "recurrent" ? model::mamba::PrefillForm::recurrent
                                                           : model::mamba::PrefillForm::chunked);
      cache.reset();
      cache.emplace(lm->new_sequence());
      model::gdn::timer().reset();
      model::mamba::timer().reset();
      t0 = std::chrono::steady_clock::now();
      lm->forward(*cache, prompt.data(), prompt_len, model::LogitsMode::last, logits.data());
      prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s.hybrid()) {
        const model::MixerTimes mt = model::gdn::timer().times();
        prefill_lines.push_back(fmt::format(
            "prefill ({} GDN form): {} tokens at {:.1f} tok/s; delta rule {:.1f} ms ({:.1f}%), GDN mixers {:.1f} ms ({:.1f}%)",
            form, prompt_len, prompt_len / prefill_s, mt.state_s * 1e3, 100 * mt.state_s / prefill_s, mt.mixer_s * 1e3,
            100 * mt.mixer_s / prefill_s));
      }
      if (s.nemotron()) {
        const model::MixerTimes mt = model::mamba::timer().times();
        prefill_lines.push_back(fmt::format(
            "prefill ({} Mamba form): {} tokens at {:.1f} tok/s; conv + scan {:.1f} ms ({:.1f}%), Mamba mixers {:.1f} ms "
            "({:.1f}%)",
            form, prompt_len, prompt_len / prefill_s, mt.state_s * 1e3, 100 * mt.state_s / prefill_s, mt.mixer_s * 1e3,
            100 * mt.mixer_s / prefill_s));
      }
    }
    model::gdn::set_prefill_form(model::gdn::PrefillForm::chunked);
    model::mamba::set_prefill_form(mamba_default);
    std::vector<double> steps;
    int32_t tok = engine::argmax(logits.data(), s.vocab);
    // The first steps warm the caches: the median and the mixer shares are over the rest.
    const int64_t warmup = std::min<int64_t>(4, tokens / 4);
    double decode_total_s = 0;
    for (int64_t i = 0; i < tokens; ++i) {
      if (i == warmup) {
        model::gdn::timer().reset();
        model::mamba::timer().reset();
      }
      auto ts = std::chrono::steady_clock::now();
      lm->forward(*cache, &tok, 1, model::LogitsMode::last, logits.data());
      steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
      if (i >= warmup) decode_total_s += steps.back();
      tok = engine::argmax(logits.data(), s.vocab);
    }
    const model::MixerTimes decode_times = model::gdn::timer().times();
    const model::MixerTimes mamba_times = model::mamba::timer().times();
    model::gdn::timer().enable(false);
    model::mamba::timer().enable(false);
    const size_t peak_rss = engine::peak_rss_bytes();
    std::vector<double> sorted(steps.begin() + warmup, steps.end());
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const int64_t ctx = prompt_len + tokens / 2;
    double gdn_state_bytes = 0;
    double mamba_state_bytes = 0;
    const double bytes = s.hybrid()     ? hybrid_bytes_per_token(s, layers, bf16_head, ctx, &gdn_state_bytes)
                         : s.nemotron() ? nemotron_bytes_per_token(s, layers, ctx, &mamba_state_bytes)
                                        : bytes_per_token(s, layers, bf16_head, ctx);
    const double bw = read_bandwidth(size_t{1} << 30, 5, ThreadPool::global());
    const double roofline_tok_s = bw / bytes;
    const size_t kv_bytes = cache->bytes_per_position() * static_cast<size_t>(prompt_len + tokens) +
                            (cache->reserved_bytes() - cache->kv().bytes());  // + the recurrent state
    std::printf("threads %d, activations bfloat16, override %s, lm_head %s\n", threads, override_dtype.c_str(),
                s.gemma() ? "bf16 (tied)" : bf16_head || s.nemotron() ? "bf16" : s.hybrid() ? "w4a16 nvfp4" : g_fp8 ? "fp8" : "nvfp4");
    {  // Which backends ran: the oracle's choice for this checkpoint's schemes (or the forced names).
      const kernels::QuantKey key = g_fp8 || s.hybrid()          ? kernels::kFp8
                                    : o.override_activation_dtype ? kernels::kNvfp4W4A16
                                                                  : kernels::kNvfp4W4A4;
      const kernels::QuantKey moe_key = s.hybrid() ? kernels::kNvfp4W4A16 : key;
      const char* format = g_fp8 || s.hybrid() ? "FP8" : "NVFP4";
      const DType act = o.override_activation_dtype.value_or(DType::BF16);
      const auto lin = kernels::select_linear({key, act, s.hidden, s.hidden, {}}, "bench", linear_backend);
      const auto dense = kernels::select_linear({kernels::kUnquantized, act, s.vocab, s.hidden, {}}, "bench");
      std::printf("backends: %s Linear %s", format, lin.backend->name.c_str());
      if (s.hybrid() && s.experts == 0) {  // the dense MLP and lm_head
        const auto mlp = kernels::select_linear({kernels::kNvfp4W4A16, act, s.inter, s.hidden, {}}, "bench", linear_backend);
        std::printf(", W4A16 NVFP4 Linear %s", mlp.backend->name.c_str());
      }
      if (s.experts > 0 && !s.nemotron()) {  // Nemotron-H's relu² experts run as per-expert Linears
        const auto moe = kernels::select_moe({moe_key, act, s.experts, s.top_k, s.hidden, s.inter, {}}, "bench", moe_backend);
        std::printf(", %s MoE %s", s.hybrid() ? "W4A16 NVFP4" : format, moe.backend->name.c_str());
      }
      std::printf(", unquantized (router%s) %s\n", bf16_head || s.nemotron() ? ", lm_head" : "",
                  dense.backend->name.c_str());
    }
    if (s.hybrid() || s.nemotron())
      for (const std::string& l : prefill_lines) std::printf("%s\n", l.c_str());
    else
      std::printf("prefill: %lld tokens at %.1f tok/s\n", static_cast<long long>(prompt_len), prompt_len / prefill_s);
    std::printf("decode: %.2f tok/s (median of %zu steps; %.1f ms/step; mean %.1f ms)\n", 1.0 / median, sorted.size(),
                median * 1e3, decode_total_s / static_cast<double>(sorted.size()) * 1e3);
    if (s.nemotron()) {
      const double n = static_cast<double>(sorted.size());
      std::printf("decode step shares (Mamba timer, same %zu steps): state update (conv window + selective scan) %.2f%% "
                  "(%.3f ms/step), Mamba mixers %.1f%% (%.1f ms/step)\n",
                  sorted.size(), 100 * mamba_times.state_s / decode_total_s, mamba_times.state_s / n * 1e3,
                  100 * mamba_times.mixer_s / decode_total_s, mamba_times.mixer_s / n * 1e3);
    }
    if (s.hybrid()) {
      const double n = static_cast<double>(sorted.size());
      std::printf("decode step shares (mixer timer, same %zu steps): delta rule %.2f%% (%.3f ms/step), GDN mixers %.1f%% (%.1f ms/step)\n",
                  sorted.size(), 100 * decode_times.state_s / decode_total_s, decode_times.state_s / n * 1e3,
                  100 * decode_times.mixer_s / decode_total_s, decode_times.mixer_s / n * 1e3);
    }
    std::printf("bytes/token %.1f MB%s, read bandwidth %.2f GB/s -> roofline %.2f tok/s; ratio to roofline %.2f\n",
                bytes / 1e6,
                s.hybrid()     ? fmt::format(" (GDN state read + written {:.1f} MB)", gdn_state_bytes / 1e6).c_str()
                : s.nemotron() ? fmt::format(" (Mamba state read + written {:.1f} MB)", mamba_state_bytes / 1e6).c_str()
                               : "",
                bw / 1e9, roofline_tok_s, (1.0 / median) / roofline_tok_s);
    if (s.mla())  // what the cache holds per token per layer, measured, against the K/V it stands for
      std::printf("KV cache per token per layer: %zu bytes (latent %lld + rope key %lld, bf16) vs %lld bytes for "
                  "the expanded K (%lld heads x %lld) and V (x %lld): %.1fx smaller\n",
                  cache->bytes_per_position() / static_cast<size_t>(layers), static_cast<long long>(s.kv_lora),
                  static_cast<long long>(s.rope), static_cast<long long>(2 * s.heads * (s.nope + s.rope + s.vdim)),
                  static_cast<long long>(s.heads), static_cast<long long>(s.nope + s.rope),
                  static_cast<long long>(s.vdim),
                  2.0 * s.heads * (s.nope + s.rope + s.vdim) /
                      static_cast<double>(cache->bytes_per_position() / static_cast<size_t>(layers)));
    std::printf("peak RSS %.2f GB vs checkpoint %.2f GB + KV %.4f GB: ratio %.2f\n", peak_rss / 1e9, ckpt_bytes / 1e9,
                kv_bytes / 1e9, static_cast<double>(peak_rss) / static_cast<double>(ckpt_bytes + kv_bytes));
    if (g_mtp > 0) {
      double unused = 0;
      const double head = hybrid_bytes_per_token(s, 0, bf16_head, ctx, &unused);
      const double scale = (hybrid_bytes_per_token(s, full_layers, bf16_head, ctx, &unused) - head) / (bytes - head);
      // Only the layers scale: x = (layers_full + head) / (layers + head) in bytes.
      print_mtp(time_mtp(*lm, *cache, g_mtp, prompt_len, tok), g_mtp, median,
                (scale * (bytes - head) + head) / bytes);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    if (own_dir) fs::remove_all(dir);
    return 1;
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}
