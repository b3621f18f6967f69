#pragma once
// The architecture facts of an HF config.json, validated once, for every supported model: the
// shared keys here, each architecture's own keys by its ArchDef (model/arch/). The fields are
// the parameters of the shared building blocks (attention, MLP, MoE) the ArchDefs assemble.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/attention_table.h"

namespace fp4lm::model {

class ArchDef;
struct ConfigReader;

struct RopeScaling {
  std::string type;  // "" (none), "linear", "llama3", "yarn", "longrope"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3, yarn
  // yarn (HF _compute_yarn_parameters): the ramp between beta_fast and beta_slow rotations, the
  // cos/sin factor (attention_factor; < 0 = from mscale / mscale_all_dim), truncate the ramp ends.
  double beta_fast = 32.0, beta_slow = 1.0, mscale = 0.0, mscale_all_dim = 0.0, attention_factor = -1.0;
  bool truncate = true;
  // "proportional" (Gemma 4): the first partial_rotary_factor·head_dim/2 frequency pairs rotate
  // (exponents over the whole head_dim), the others keep angle 0; all divided by factor.
  double partial_rotary_factor = 1.0;
  // "longrope" (Phi-3 / Phi-4-mini, HF _compute_longrope_parameters): inv_freq[i] divided by
  // short_factor[i], or by long_factor[i] in a step whose sequence is longer than
  // original_max_position_embeddings; cos/sin × attention_factor (here always resolved, >= 0).
  std::vector<double> short_factor, long_factor;
};

// The sparse-MoE family's fields (Qwen MoE, Mixtral, the Qwen3.5-MoE hybrids), HF key names.
struct MoeConfig {
  int64_t num_experts = 0, top_k = 0, moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE, Qwen3-Next, Qwen3.5-MoE
  // DeepSeek-style routing (model/layers/moe_router.h route_sigmoid_topk): sigmoid scores, selection on
  // scores + e_score_correction_bias within topk_group of n_group groups, weights × routed_scaling_factor.
  struct SigmoidRoutingConfig {
    bool enabled = false;
    int64_t n_group = 1, topk_group = 1;
    double routed_scaling_factor = 1.0;
  } sigmoid;
};

// The gated delta-net hybrids' fields (Qwen3.5, Qwen3.5-MoE, Qwen3-Next). full_attention[i]:
// layer i is a gated full-attention layer, else a gated delta-net (GDN) layer.
struct GatedDeltaNetConfig {
  std::vector<bool> full_attention;
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;  // NK, NV
  int64_t linear_key_head_dim = 0, linear_value_head_dim = 0;    // DK, DV
  int64_t linear_conv_kernel = 0;                                // K
  // Qwen3-Next stores the GDN projections fused and interleaved per key head (in_proj_qkvz,
  // in_proj_ba); Qwen3.5 as separate in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
  bool fused_qkvz = false;
  // The output gate of the gated RMSNorm: sigmoid(z) instead of silu(z) (Qwen4-Exp's output_gate_type).
  bool sigmoid_gate = false;
  int64_t conv_dim() const {
    return 2 * linear_num_key_heads * linear_key_head_dim + linear_num_value_heads * linear_value_head_dim;
  }
};

// Nemotron-H (NemotronHForCausalLM, arch/nemotron_h.cpp): one mixer per decoder layer, by the
// pattern's letter ('M' Mamba-2, '*' attention, '-' MLP, 'E' MoE), and the Mamba-2 mixer's
// fields (model/layers/mamba2_mixer.h), HF key names.
struct MambaConfig {
  std::string pattern;  // one letter per layer (hybrid_override_pattern); empty outside Nemotron-H
  int64_t num_heads = 0, head_dim = 0, state_size = 0, n_groups = 0, conv_kernel = 0, chunk_size = 0;
  bool conv_bias = true, proj_bias = false, mlp_bias = false;
  double dt_min = 0.0, dt_max = 0.0;  // time_step_limit: dt clamped to [dt_min, dt_max]
  std::string ssm_cache_dtype = "float32";  // mamba_ssm_cache_dtype: float32, bfloat16, float16
  // The 'E' layers' latent MoE (moe_latent_size; Nemotron 3 Super / Ultra): the routed experts run
  // on fc1_latent_proj(x) of this width and their sum goes back through fc2_latent_proj. 0: none.
  int64_t moe_latent_size = 0;
  int64_t mtp_layers = 0;  // num_nextn_predict_layers: never loaded (one INFO line says so)
  int64_t intermediate() const { return num_heads * head_dim; }
  int64_t conv_dim() const { return intermediate() + 2 * n_groups * state_size; }
  bool layer_is(int64_t i, char kind) const {
    return i >= 0 && static_cast<size_t>(i) < pattern.size() && pattern[static_cast<size_t>(i)] == kind;
  }
};

// Multi-head Latent Attention (DeepSeek-V3 / Kimi K2, GLM-4.7-Flash; model/layers/latent_attention.h),
// HF key names. Enabled when kv_lora_rank > 0.
struct LatentAttentionConfig {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (HF q_lora_rank null)
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;  // the rope dims are stored as interleaved pairs (HF rope_interleave)
  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // cached values per position
};

// DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5; model/layers/dsa_indexer.h): MLA whose queries each
// attend to the index_topk past positions an indexer scores best (index_topk 0: dense MLA).
struct DsaConfig {
  int64_t index_topk = 0, index_n_heads = 0, index_head_dim = 0;
  bool rope_interleave = false;  // the indexer's RoPE: interleaved pairs (GLM-5) or half-split (DeepSeek-V3.2)
  std::vector<bool> shared;      // per layer: reuses the previous full layer's selection (GLM-5 indexer_types)
  bool enabled() const { return index_topk > 0; }
  bool shares(int64_t layer) const { return layer < static_cast<int64_t>(shared.size()) && shared[static_cast<size_t>(layer)]; }
};

// Gemma 3 / Gemma 4 (arch/gemma.h): attention layers of two types (sliding and full, in
// ModelConfig::attention with each layer's head_dim, KV heads and K/V source), each type with its
// own RoPE, the embeddings scaled by sqrt(hidden_size), the logits optionally soft-capped.
struct GemmaConfig {
  // The sliding layers' RoPE (the full layers' is ModelConfig::rope_theta / rope_scaling).
  double local_rope_theta = 10000.0;
  RopeScaling local_rope_scaling;
  // Softmax scale of q·k: query_pre_attn_scalar^-0.5 (Gemma 3); 0 = 1/sqrt(head_dim).
  double attention_scaling = 0.0;
  // Gemma 4: the full layers' keys doubling as values (attention_k_eq_v: no v_proj), values
  // RMS-normalized per head without a weight, each layer's output × its stored layer_scalar.
  bool full_k_eq_v = false, v_norm = false, layer_scalar = false;
  // Gemma 4 MoE (enable_moe_block): every layer has a router + experts (c.moe's sizes) beside its
  // dense MLP (arch/gemma_moe.h).
  bool moe = false;
  // use_double_wide_mlp: the MLPs of the layers that read another layer's K/V
  // (num_kv_shared_layers, AttentionLayerSpec::kv_source) are 2 × intermediate_size.
  bool double_wide_mlp = false;
  // Gemma 4's use_bidirectional_attention "vision": an image's soft tokens attend to each other
  // both ways on the sliding layers (the full layers stay causal); otherwise causal everywhere.
  bool vision_bidir = false;
  // Gemma 4 per-layer input embeddings (arch/gemma_ple.h): hidden_size_per_layer_input (0 =
  // none) and vocab_size_per_layer_input.
  int64_t ple_dim = 0, ple_vocab = 0;
};

// Gemma 3n (arch/gemma3n.cpp; its attention, layer types, KV sharing and per-layer inputs in
// GemmaConfig): altup_num_inputs residual streams updated by AltUp (model/layers/altup.h) around
// altup_active_idx, a Laurel branch of laurel_rank (model/layers/laurel.h), per-layer MLP widths and the
// Gaussian top-k of the gate (activation_sparsity_pattern, model/layers/gaussian_topk_mlp.h).
struct Gemma3nConfig {
  int64_t altup_inputs = 0, altup_active = 0, laurel_rank = 0;
  bool altup_correct_scale = true;
  std::vector<int64_t> intermediate_sizes;
  std::vector<double> activation_sparsity;
  bool enabled() const { return altup_inputs > 0; }
};

// gpt-oss (arch/gpt_oss.cpp): the experts' clamped SwiGLU (swiglu_alpha, swiglu_limit); its
// alternating sliding / full layers are in ModelConfig::attention.
struct GptOssConfig {
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
};

// MiniMax-M3 (arch/minimax_m3.cpp): which layers are block-sparse (layer_types
// "minimax_m3_sparse") with their lightning indexer's shape, the dense MLPs' and shared expert's
// sizes, the clamped SwiGLU of every MLP, and the tensor naming.
struct MiniMaxM3Config {
  std::vector<bool> sparse;  // layer i's attention is block-sparse (else full attention)
  int64_t index_heads = 0, index_head_dim = 0, index_block_size = 0, index_topk_blocks = 0, index_local_blocks = 0;
  int64_t dense_intermediate_size = 0, shared_intermediate_size = 0;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
  // The published checkpoint's names (block_sparse_moe, w1/w3/w2, index_*_proj, gate_proj/up_proj),
  // as the wrapper stores them; false: transformers' MiniMaxM3VLForCausalLM names (fused experts).
  bool original_names = false;
};

// Qwen4-Exp (arch/qwen4_exp.cpp, which describes the mechanisms): hyper-connection streams, the
// PLE n-gram layers, the QSA indexer of the full-attention layers.
struct Qwen4ExpConfig {
  int64_t hc_count = 0, hc_lowrank = 0;
  std::vector<bool> ple;  // per decoder layer (ple_layer_ids, one-indexed in config.json)
  int64_t ple_embed_dim = 0, ple_conv_kernel = 0, ngram_size = 0, heads_per_ngram = 0;
  int64_t ngram_vocab_size_base = 0, ngram_vocab_divisor = 0, split_ngram_parts = 0;
  uint64_t seed = 0;
  int64_t eos_token_id = -1;  // the first eos id: the n-gram context's padding and segment border
  int64_t index_heads = 0, index_head_dim = 0, index_budget = 0, index_compress_ratio = 0;
};

// DeepSeek-V4 (arch/deepseek_v4.cpp, which describes the mechanisms): per-layer attention kind
// and MoE kind, compression rates, hyper-connection shape, grouped output, indexer, two RoPEs.
struct DeepseekV4Config {
  enum class Attn { sliding, csa, hca };  // sliding_attention, compressed_sparse_attention, heavily_compressed_attention
  std::vector<Attn> attn;                 // per layer
  std::vector<bool> hash_moe;             // per layer: experts by tid2eid[token] (else top-k)
  int64_t csa_rate = 4, hca_rate = 128;   // compress_rates
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  int64_t sliding_window = 128;
  int64_t q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t rope_dim = 0;  // qk_rope_head_dim: the trailing dims of a head that rotate
  int64_t index_heads = 0, index_head_dim = 0, index_topk = 0;
  double swiglu_limit = 10.0;
  double routed_scaling_factor = 1.5;
  // RoPE "main" (sliding layers) and "compress" (CSA / HCA layers and their compressors).
  double main_theta = 10000.0, compress_theta = 160000.0;
  RopeScaling main_scaling, compress_scaling;
  bool enabled() const { return !attn.empty(); }
};

// Llama 4 (arch/llama4.cpp): per layer MoE or dense (moe_layers / interleave_moe_layer_step), the
// NoPE layers' query temperature (attn_temperature_tuning, floor_scale, attn_scale), the RoPE
// layers' L2 q/k norm (use_qk_norm). Its RoPE / NoPE and chunked / full layers (no_rope_layers,
// attention_chunk_size, layer_types) are in ModelConfig::attention.
struct Llama4Config {
  std::vector<bool> moe;      // layer i's feed_forward is the MoE (else a dense MLP)
  int64_t intermediate_size_mlp = 0;
  bool temperature_tuning = true, l2_qk_norm = true;
  double floor_scale = 8192, attn_scale = 0.1;
};

// DeciLM / Llama-Nemotron NAS (DeciLMForCausalLM, arch/decilm.cpp): each decoder layer's
// attention and FFN from block_configs — the block itself, nothing (no_op: no tensors, the
// identity), or one hidden x hidden Linear behind the block's norm (replace_with_linear).
struct DeciLMConfig {
  enum class Block { normal, no_op, linear };
  std::vector<Block> attn, ffn;          // per layer
  std::vector<int64_t> intermediate;     // per layer: the MLP width from ffn_mult (normal FFN)
  bool enabled() const { return !attn.empty(); }
};

// The fields every architecture has (and the shared building blocks' parameters), plus one
// parsed struct per family of architecture-specific fields.
struct ModelConfig {
  const ArchDef* arch = nullptr;  // the architecture's definition (static, never null once parsed)
  std::string architecture;       // HF name, e.g. "Qwen3MoeForCausalLM"
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;  // dense MLP (and Qwen2-MoE dense layers)
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 2048;
  // Per decoder layer: its kind of attention (full, sliding window, chunked, none), window, head
  // shape, K/V source and RoPE (model/attention_table.h); the shared parser starts it full, the
  // ArchDef fills its patterns, complete_attention_table the config's shape.
  AttentionTable attention;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always)
  bool qk_norm = false;         // Qwen3 / Qwen3-MoE per-head q_norm, k_norm
  bool qk_norm_full_width = false;  // MiniMax-M2: q_norm / k_norm over all heads at once
  MoeConfig moe;  // sparse-MoE architectures (read_sparse_moe_keys and the MoE ArchDefs)
  GatedDeltaNetConfig gdn;  // the gated delta-net hybrids (arch/gated_hybrid.h)
  MambaConfig mamba;        // Nemotron-H (arch/nemotron_h.cpp)
  LatentAttentionConfig mla;  // multi-head latent attention (arch/deepseek_v3.cpp)
  DsaConfig dsa;              // its sparse indexer (arch/deepseek_v32.cpp)
  bool attn_output_gate = false;  // q_proj holds a per-head gate: output × sigmoid(gate)
  int64_t rotary_dim = 0;         // RoPE over the first rotary_dim dims of a head (= head_dim unless partial)
  // Qwen's multimodal RoPE (rope_parameters.mrope_section / mrope_interleaved): which of a
  // token's (t, h, w) positions each frequency pair rotates by (model/layers/rope.h). Empty: 1-D RoPE.
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;
  bool zero_centered_norm = false;  // RMSNorms scale by (1 + weight)
  // Multi-token-prediction layers stored after the last decoder layer (DeepSeek-V3, GLM-4.x:
  // model.layers.<num_layers + j>.*; never read), or as mtp.layers.<j>.* (Qwen3.5 / Qwen3-Next:
  // read by model/layers/mtp_head.h for speculative decoding).
  int64_t num_nextn_predict_layers = 0;
  // RMSNorms multiply the weight in float32 and round once (Gemma: (x/rms · w) rounded), instead
  // of rounding x/rms to the activation dtype before the multiply (Llama, Qwen).
  bool norm_rounds_once = false;
  // The MLPs' activation (HF hidden_act / hidden_activation): "silu" or "gelu_pytorch_tanh".
  std::string hidden_act = "silu";
  // The token embeddings are multiplied by sqrt(hidden_size), rounded to the activation dtype (Gemma).
  bool scale_embeddings = false;
  // Soft-capped logits (Gemma): 0 = none; else logits = cap * tanh(logits / cap).
  double final_logit_softcapping = 0.0;
  GemmaConfig gemma;  // Gemma 3 / Gemma 4 (arch/gemma.h)
  Gemma3nConfig gemma3n;  // Gemma 3n (arch/gemma3n.cpp)
  GptOssConfig gpt_oss;  // gpt-oss (arch/gpt_oss.cpp)
  Llama4Config llama4;   // Llama 4 (arch/llama4.cpp)
  MiniMaxM3Config minimax_m3;  // MiniMax-M3 (arch/minimax_m3.cpp)
  DeepseekV4Config deepseek_v4;  // DeepSeek-V4 (arch/deepseek_v4.cpp)
  Qwen4ExpConfig qwen4_exp;  // Qwen4-Exp (arch/qwen4_exp.cpp)
  DeciLMConfig decilm;  // DeciLM / Llama-Nemotron NAS (arch/decilm.cpp)
  // Tensors under this prefix stand for `model.` (VL checkpoints: "model.language_model.").
  std::string tensor_prefix = "model.";
  // A multi-modal wrapper that stores its whole language model (tensors and quantization entries)
  // under a prefix of its own, read as if it were absent (Nemotron-H's VL / Omni wrappers:
  // "language_model."); "" = none. Applied before tensor_prefix and tensor_renames.
  std::string wrapper_prefix;
  // Whole tensors an architecture stores under another name than the engine reads: {engine name,
  // checkpoint name} (Nemotron-H: model.embed_tokens.weight is backbone.embeddings.weight).
  std::vector<std::pair<std::string, std::string>> tensor_renames;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::string torch_dtype;  // "bfloat16", ... ("" when absent)

  bool is_moe() const { return moe.num_experts > 0; }
  bool is_hybrid() const { return !gdn.full_attention.empty(); }
  // Whether decoder layer i is (gated) full attention; always true outside the hybrid.
  bool layer_is_attention(int64_t i) const { return gdn.full_attention.empty() || gdn.full_attention[i]; }
  int64_t num_attention_layers() const;
  // Whether decoder layer i has a sparse MoE block (else a dense MLP).
  bool layer_is_moe(int64_t i) const;
};

// Throws Error naming config.json (`path`) and the field for a missing/invalid field or an
// unsupported architecture or field value.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& path);

// Keys shared by several architectures, for their ArchDef::parse_config.
// A dense MLP in every layer: intermediate_size (required, positive).
void read_dense_mlp_keys(const ConfigReader& r, ModelConfig& c);
// The Qwen MoE family's keys: num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob (default `norm_topk_default`), decoder_sparse_step, intermediate_size (for
// dense layers) and mlp_only_layers.
void read_sparse_moe_keys(const ConfigReader& r, ModelConfig& c, bool norm_topk_default);

}  // namespace fp4lm::model
