// Decode throughput of the whole runtime against the memory roofline.
//
// Writes a synthetic checkpoint with a published model's shapes and quantization (src/synth, its
// random-codes mode: NVFP4 / FP8 codes and block scales written directly, scales chosen so
// activations stay O(1)), with --layers decoder layers; the tensors are whatever the
// architecture's own plan asks for at those shapes. Then: load, prefill a short prompt, decode
// --tokens tokens at M=1, and compare with the roofline = (the bytes one decode step reads, from
// the loaded model: its checkpoint's tensors as model::bytes_read_per_token counts them and its
// sequence state) / (read bandwidth measured in the same process at the same thread count).
// The presets (preset()): only config.json values and the published quantization recipes.
//   moe            Qwen3-30B-A3B (hidden 2048, 128 experts, top-8, moe_intermediate 768, 32 / 4
//                  heads of 128, vocab 151936)
//   dense          Llama-3-8B (hidden 4096, intermediate 14336, 32 / 8 heads, vocab 128256)
//   hybrid         Qwen3.6-35B-A3B's text model (every 4th layer gated attention, 16 / 2 heads of
//                  256, the others gated delta-nets of 16 key / 32 value heads of 128; 256
//                  experts, top-8, moe_intermediate 512, shared expert 512, vocab 248320) as NVIDIA
//                  publishes it: MIXED_PRECISION, FP8 attention and GDN projections, W4A16 NVFP4
//                  experts, shared expert and lm_head
//   hybrid-dense   Qwen3.5-27B (hidden 5120, 24 / 4 heads of 256, GDN 16 / 48 heads of 128, MLP
//                  17408 in W4A16 NVFP4), quantized the same way
//   mla            GLM-4.7-Flash (multi-head latent attention, 20 heads, q_lora 768, kv_lora 512,
//                  nope/rope/v 192/64/256; 64 experts, top-4, moe_intermediate 1536, one shared
//                  expert, layer 0 a dense MLP of 10240, vocab 154880): the four MLA projections
//                  bf16, the rest NVFP4
//   deepseek-v3    DeepSeek-V3's shapes the same way (128 heads, 256 experts in 8 groups; about
//                  8.7 GB per MoE layer; only layer 0 dense, so --layers 2 times one MoE layer)
//   gemma4-31b     Gemma 4 as NVIDIA publishes it (NVFP4 MLPs and experts; BF16 attention,
//   gemma4-26b-a4b routers and tied embedding): 31B (hidden 5376, sliding layers 16 KV heads of
//                  256, window 1024, every 6th and the last layer full with 4 KV heads of 512,
//                  MLP 21504) or 26B-A4B (hidden 2816, a dense MLP of 2112 beside 128 experts of
//                  704, top-8)
//   nemotron-dense NVIDIA-Nemotron-Nano-9B-v2 / NVIDIA-Nemotron-3-Nano-30B-A3B (the release's
//   nemotron-moe   layer pattern, its first --layers letters): NVFP4, attention layers (and, MoE,
//                  the Mamba layers before them), routers, conv1d and lm_head bf16
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
#include "io/checkpoint.h"
#include "kernels/registry.h"
#include "model/load/bytes_read_per_token.h"
#include "model/causal_lm.h"
#include "model/layers/gated_delta_rule.h"
#include "model/layers/mamba_timing.h"
#include "synth/synthetic_checkpoint.h"

namespace {

using namespace fp4lm;
using nlohmann::json;
using quant::QuantAlgo;
namespace fs = std::filesystem;

struct Flags {
  bool bf16_head = false, fp8 = false;
  int64_t mtp = 0;
};

const char* const kArchs[] = {"moe",          "dense",      "hybrid",         "hybrid-dense",   "mla",
                              "deepseek-v3",  "gemma4-31b", "gemma4-26b-a4b", "nemotron-dense", "nemotron-moe"};

// The Nemotron-H releases' layer patterns (M Mamba-2, * attention, - MLP, E MoE).
constexpr std::string_view kNemotronNano9bV2 = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-";
constexpr std::string_view kNemotron3Nano30bA3b = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";

// --arch's published model at `layers` decoder layers: its sizes and config.json values, and its
// quantization as published. No tensor names: the architecture's plan says what to write.
synth::SyntheticOptions preset(const std::string& arch, int64_t layers, const Flags& f) {
  synth::SyntheticOptions o;
  o.layers = layers;
  o.random_codes = true;
  o.seed = 1;
  o.algo = f.fp8 ? QuantAlgo::FP8 : QuantAlgo::NVFP4;
  o.quantize_lm_head = !f.bf16_head;
  o.config_overrides = {{"max_position_embeddings", 40960}};
  json& c = o.config_overrides;
  auto shape = [&o](const char* hf, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t vocab) {
    o.architecture = hf, o.hidden = hidden, o.heads = heads, o.kv_heads = kv_heads, o.head_dim = head_dim;
    o.vocab = vocab;
  };
  auto experts = [&o](int64_t n, int64_t top_k, int64_t inter, int64_t shared = 0) {
    o.experts = n, o.top_k = top_k, o.moe_intermediate = inter, o.shared_expert_intermediate = shared;
  };
  if (arch == "moe") {
    shape("Qwen3MoeForCausalLM", 2048, 32, 4, 128, 151936);
    experts(128, 8, 768);
    o.intermediate = 6144;
    c["rope_theta"] = 1000000.0;
  } else if (arch == "dense") {
    shape("LlamaForCausalLM", 4096, 32, 8, 128, 128256);
    o.intermediate = 14336;
    c["rope_theta"] = 500000.0;
  } else if (arch == "hybrid" || arch == "hybrid-dense") {
    if (arch == "hybrid") {
      shape("Qwen3_5MoeForCausalLM", 2048, 16, 2, 256, 248320);
      experts(256, 8, 512, 512);
      o.linear_value_heads = 32;
    } else {
      shape("Qwen3_5ForCausalLM", 5120, 24, 4, 256, 248320);
      o.intermediate = 17408;
      o.linear_value_heads = 48;
    }
    o.linear_key_heads = 16, o.linear_key_head_dim = 128, o.linear_value_head_dim = 128, o.conv_kernel = 4;
    o.full_attention_interval = 4;
    o.mtp_head = f.mtp > 0;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}};
    // MIXED_PRECISION as NVIDIA's 35B-A3B export lists it (modules not listed stay bf16).
    o.algo = QuantAlgo::MIXED_PRECISION;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      if ((i + 1) % 4 == 0)
        for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"}) o.mixed[p + "self_attn." + m] = QuantAlgo::FP8;
      else
        for (const char* m : {"in_proj_qkv", "in_proj_z", "out_proj"}) o.mixed[p + "linear_attn." + m] = QuantAlgo::FP8;
      if (o.experts > 0 && arch == "hybrid") o.mixed[p + "mlp.experts"] = QuantAlgo::W4A16_NVFP4;
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        o.mixed[p + (arch == "hybrid" ? "mlp.shared_expert." : "mlp.") + m] = QuantAlgo::W4A16_NVFP4;
    }
    if (!f.bf16_head) o.mixed["lm_head"] = QuantAlgo::W4A16_NVFP4;
  } else if (arch == "mla" || arch == "deepseek-v3") {
    if (arch == "mla") {
      shape("Glm4MoeLiteForCausalLM", 2048, 20, 20, 64, 154880);
      experts(64, 4, 1536);
      o.intermediate = 10240;
      c.update({{"q_lora_rank", 768}, {"qk_nope_head_dim", 192}, {"v_head_dim", 256}, {"n_group", 1},
                {"topk_group", 1}, {"routed_scaling_factor", 1.8}});
    } else {
      shape("DeepseekV3ForCausalLM", 7168, 128, 128, 64, 129280);
      experts(256, 8, 2048);
      o.intermediate = 18432;
      c.update({{"q_lora_rank", 1536}, {"qk_nope_head_dim", 128}, {"v_head_dim", 128}, {"n_group", 8},
                {"topk_group", 4}, {"routed_scaling_factor", 2.5},
                {"rope_scaling",
                 {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
                  {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}}});
    }
    c.update({{"kv_lora_rank", 512}, {"qk_rope_head_dim", 64}, {"head_dim", 64}, {"n_shared_experts", 1},
              {"first_k_dense_replace", 1}});
    // As NVIDIA's newer DeepSeek exports: the four MLA projections bf16.
    for (const char* m : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"})
      o.exclude.push_back(fmt::format("model.layers.*.self_attn.{}", m));
  } else if (arch.starts_with("gemma4")) {
    json types = json::array();  // full iff (i + 1) % 6 == 0 or the last layer
    for (int64_t i = 0; i < layers; ++i)
      types.push_back((i + 1) % 6 == 0 || i == layers - 1 ? "full_attention" : "sliding_attention");
    c.update({{"layer_types", types}, {"sliding_window", 1024}, {"global_head_dim", 512},
              {"max_position_embeddings", 262144}, {"bos_token_id", 2}, {"eos_token_id", 1}});
    if (arch == "gemma4-31b") {
      shape("Gemma4ForCausalLM", 5376, 32, 16, 256, 262144);
      o.intermediate = 21504;
      c["num_global_key_value_heads"] = 4;
    } else {
      shape("Gemma4ForCausalLM", 2816, 16, 8, 256, 262144);
      o.intermediate = 2112;
      c.update({{"num_global_key_value_heads", 2}, {"enable_moe_block", true}, {"num_experts", 128},
                {"top_k_experts", 8}, {"moe_intermediate_size", 704}});
    }
    o.tie_word_embeddings = true;
    o.exclude = {"model.layers.*.self_attn*", "model.layers.*.router*"};
  } else {  // nemotron-*
    const bool moe = arch == "nemotron-moe";
    const std::string_view pattern = moe ? kNemotron3Nano30bA3b : kNemotronNano9bV2;
    if (moe) {
      shape("NemotronHForCausalLM", 2688, 32, 2, 128, 131072);
      experts(128, 6, 1856, 3712);
      o.mamba_heads = 64, o.mamba_head_dim = 64;
    } else {
      shape("NemotronHForCausalLM", 4480, 40, 8, 128, 131072);
      o.intermediate = 15680;
      o.mamba_heads = 128, o.mamba_head_dim = 80;
    }
    o.hybrid_pattern = std::string(pattern.substr(0, static_cast<size_t>(layers)));
    o.ssm_state = 128, o.mamba_groups = 8, o.conv_kernel = 4;
    o.quantize_lm_head = false;  // bf16 as published
    // Attention layers bf16, and in Nemotron 3 the Mamba layers that feed them.
    for (int64_t l = 0; l < layers; ++l) {
      const char here = pattern[static_cast<size_t>(l)];
      const char next = static_cast<size_t>(l + 1) < pattern.size() ? pattern[static_cast<size_t>(l + 1)] : 0;
      if (here == '*' || (moe && here == 'M' && next == '*')) o.exclude.push_back(fmt::format("model.layers.{}.mixer*", l));
    }
  }
  return o;
}

// The bytes one decode step at `ctx` positions reads, from the loaded model: each weight as
// model::bytes_read_per_token counts it (routed experts: their top_k / num_experts share), the
// embedding one row (and whole when it is the tied lm_head), no MTP head; the sequence state's
// K/V up to ctx and its recurrent state read and written (`recurrent`: that part; `outside`: the
// weights outside the decoder layers, which do not scale with their count).
double bytes_per_token(const model::CausalLM& lm, const model::SequenceState& state, int64_t ctx, double* recurrent,
                       double* outside) {
  const model::ModelConfig& c = lm.config();
  const io::Checkpoint& ckpt = lm.checkpoint();
  double total = 0;
  *outside = 0;
  for (const std::string& name : ckpt.tensor_names()) {
    if (name.starts_with("mtp.")) continue;  // the draft head's, read only when drafting
    const double bytes = static_cast<double>(ckpt.get(name).nbytes);
    const double read = name.ends_with("embed_tokens.weight") || name.ends_with("embeddings.weight")
                            ? bytes / static_cast<double>(c.vocab_size) + (c.tie_word_embeddings ? bytes : 0.0)
                            : model::bytes_read_per_token(name, bytes, c.moe.num_experts, c.moe.top_k);
    total += read;
    if (name.find(".layers.") == std::string::npos) *outside += read;
  }
  // One copy of the recurrent state (recurrent_floats(); the sequence holds two, the step's input
  // and output), read and written once per step.
  *recurrent = 2.0 * sizeof(float) * static_cast<double>(state.recurrent_floats());
  return total + static_cast<double>(state.bytes_per_position()) * static_cast<double>(ctx) + *recurrent;
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
  Flags f;
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
    else if (a == "--bf16-lm-head") f.bf16_head = true;
    else if (a == "--fp8") f.fp8 = true;
    else if (a == "--linear-backend") linear_backend = val();
    else if (a == "--moe-backend") moe_backend = val();
    else if (a == "--gdn-prefill") gdn_prefill = val();
    else if (a == "--mamba-prefill") mamba_prefill = val();
    else if (a == "--mtp") f.mtp = std::stoll(val());
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
  if (std::find(std::begin(kArchs), std::end(kArchs), arch) == std::end(kArchs)) {
    std::fprintf(stderr, "--arch must be moe, dense, hybrid, hybrid-dense, mla, deepseek-v3, gemma4-31b, gemma4-26b-a4b, "
                         "nemotron-dense or nemotron-moe\n");
    return 2;
  }
  const bool hybrid = arch.starts_with("hybrid"), nemotron = arch.starts_with("nemotron"),
             gemma = arch.starts_with("gemma4");
  if (nemotron && (f.fp8 || f.bf16_head)) {
    std::fprintf(stderr, "--fp8 and --bf16-lm-head do not apply to --arch nemotron-* (quantized as published: NVFP4, lm_head bf16)\n");
    return 2;
  }
  if (hybrid && f.fp8) {
    std::fprintf(stderr, "--fp8 does not apply to --arch hybrid (it is quantized as published: MIXED_PRECISION)\n");
    return 2;
  }
  if (f.mtp < 0 || f.mtp > 8 || (f.mtp > 0 && !hybrid)) {
    std::fprintf(stderr, "--mtp K (1..8) applies to --arch hybrid|hybrid-dense\n");
    return 2;
  }
  const size_t pattern_len = arch == "nemotron-moe" ? kNemotron3Nano30bA3b.size() : kNemotronNano9bV2.size();
  if (layers < 1 || (nemotron && static_cast<size_t>(layers) > pattern_len)) {
    std::fprintf(stderr, "--layers must be 1 to %zu for --arch %s\n", nemotron ? pattern_len : size_t{1} << 20,
                 arch.c_str());
    return 2;
  }
  const synth::SyntheticOptions so = preset(arch, layers, f);
  const bool own_dir = dir.empty();
  if (own_dir) dir = (fs::temp_directory_path() / fmt::format("fp4lm-decode-bench-{}-{}", arch, ::getpid())).string();
  try {
    auto t0 = std::chrono::steady_clock::now();
    // In a child process, so the generator's buffers never count in this process's peak RSS.
    pid_t child = ::fork();
    if (child == 0) {
      try {
        synth::write_synthetic_checkpoint(dir, so);
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
    std::printf("checkpoint: %s, %lld layers, %.2f GB written in %.1f s (%s)\n", so.architecture.c_str(),
                static_cast<long long>(layers), ckpt_bytes / 1e9, write_s, dir.c_str());
    ThreadPool::set_global_threads(threads);
    model::EngineOptions o;
    o.dtype = "bfloat16";
    o.override_activation_dtype = model::parse_override_activation_dtype(override_dtype);
    o.linear_backend = linear_backend;
    o.moe_backend = moe_backend;
    model::LoadOptions lo;
    lo.max_model_len = prompt_len + tokens + 1 + 4 * (f.mtp + 1);
    lo.mtp = f.mtp > 0;
    lo.progress = false;
    auto lm = model::CausalLM::load(dir, o, lo);
    const model::ModelConfig& mc = lm->config();
    const int64_t vocab = mc.vocab_size, experts = mc.moe.num_experts;

    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    uint64_t r = 0x9e3779b97f4a7c15ull;  // any tokens: the prompt's content does not change the work
    for (auto& t : prompt) t = static_cast<int32_t>(3 + (r = r * 6364136223846793005ull + 1) % static_cast<uint64_t>(vocab - 3));
    std::vector<float> logits(static_cast<size_t>(vocab));
    // The prompt, once per GDN prefill form asked (hybrid); the last run's state decodes on.
    std::vector<std::string> forms = {"chunked"};
    if (hybrid) forms = gdn_prefill == "both" ? std::vector<std::string>{"recurrent", "chunked"}
                                                  : std::vector<std::string>{gdn_prefill};
    if (nemotron) forms = mamba_prefill == "both" ? std::vector<std::string>{"recurrent", "chunked"}
                                                      : std::vector<std::string>{mamba_prefill};
    const model::mamba::PrefillForm mamba_default = model::mamba::prefill_form();
    std::vector<std::string> prefill_lines;
    std::optional<model::SequenceState> cache;
    double prefill_s = 0;
    model::gdn::timer().enable(hybrid);
    model::mamba::timer().enable(nemotron);
    for (const std::string& form : forms) {
      model::gdn::set_prefill_form(form == "recurrent" ? model::gdn::PrefillForm::recurrent
                                                       : model::gdn::PrefillForm::chunked);
      if (nemotron)
        model::mamba::set_prefill_form(form == "recurrent" ? model::mamba::PrefillForm::recurrent
                                                           : model::mamba::PrefillForm::chunked);
      cache.reset();
      cache.emplace(lm->new_sequence());
      model::gdn::timer().reset();
      model::mamba::timer().reset();
      t0 = std::chrono::steady_clock::now();
      lm->forward(*cache, prompt.data(), prompt_len, model::LogitsMode::last, logits.data());
      prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (hybrid) {
        const model::MixerTimes mt = model::gdn::timer().times();
        prefill_lines.push_back(fmt::format(
            "prefill ({} GDN form): {} tokens at {:.1f} tok/s; delta rule {:.1f} ms ({:.1f}%), GDN mixers {:.1f} ms ({:.1f}%)",
            form, prompt_len, prompt_len / prefill_s, mt.state_s * 1e3, 100 * mt.state_s / prefill_s, mt.mixer_s * 1e3,
            100 * mt.mixer_s / prefill_s));
      }
      if (nemotron) {
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
    int32_t tok = engine::argmax(logits.data(), vocab);
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
      tok = engine::argmax(logits.data(), vocab);
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
    double state_bytes = 0, outside = 0;
    const double bytes = bytes_per_token(*lm, *cache, ctx, &state_bytes, &outside);
    const double bw = read_bandwidth(size_t{1} << 30, 5, ThreadPool::global());
    const double roofline_tok_s = bw / bytes;
    const size_t kv_bytes = cache->bytes_per_position() * static_cast<size_t>(prompt_len + tokens) +
                            (cache->reserved_bytes() - cache->kv().bytes());  // + the recurrent state
    std::printf("threads %d, activations bfloat16, override %s, lm_head %s\n", threads, override_dtype.c_str(),
                gemma ? "bf16 (tied)" : f.bf16_head || nemotron ? "bf16" : hybrid ? "w4a16 nvfp4" : f.fp8 ? "fp8" : "nvfp4");
    {  // Which backends ran: the oracle's choice for this checkpoint's schemes (or the forced names).
      const kernels::QuantKey key = f.fp8 || hybrid          ? kernels::kFp8
                                    : o.override_activation_dtype ? kernels::kNvfp4W4A16
                                                                  : kernels::kNvfp4W4A4;
      const kernels::QuantKey moe_key = hybrid ? kernels::kNvfp4W4A16 : key;
      const char* format = f.fp8 || hybrid ? "FP8" : "NVFP4";
      const DType act = o.override_activation_dtype.value_or(DType::BF16);
      const int64_t hid = mc.hidden_size;
      const auto lin = kernels::select_linear({key, act, hid, hid, {}}, "bench", linear_backend);
      const auto dense = kernels::select_linear({kernels::kUnquantized, act, vocab, hid, {}}, "bench");
      std::printf("backends: %s Linear %s", format, lin.backend->name.c_str());
      if (hybrid && experts == 0) {  // the dense MLP and lm_head
        const auto mlp =
            kernels::select_linear({kernels::kNvfp4W4A16, act, mc.intermediate_size, hid, {}}, "bench", linear_backend);
        std::printf(", W4A16 NVFP4 Linear %s", mlp.backend->name.c_str());
      }
      if (experts > 0 && !nemotron) {  // Nemotron-H's relu² experts run as per-expert Linears
        const auto moe = kernels::select_moe(
            {moe_key, act, experts, mc.moe.top_k, hid, mc.moe.moe_intermediate_size, {}}, "bench", moe_backend);
        std::printf(", %s MoE %s", hybrid ? "W4A16 NVFP4" : format, moe.backend->name.c_str());
      }
      std::printf(", unquantized (router%s) %s\n", f.bf16_head || nemotron ? ", lm_head" : "",
                  dense.backend->name.c_str());
    }
    if (hybrid || nemotron)
      for (const std::string& l : prefill_lines) std::printf("%s\n", l.c_str());
    else
      std::printf("prefill: %lld tokens at %.1f tok/s\n", static_cast<long long>(prompt_len), prompt_len / prefill_s);
    std::printf("decode: %.2f tok/s (median of %zu steps; %.1f ms/step; mean %.1f ms)\n", 1.0 / median, sorted.size(),
                median * 1e3, decode_total_s / static_cast<double>(sorted.size()) * 1e3);
    if (nemotron) {
      const double n = static_cast<double>(sorted.size());
      std::printf("decode step shares (Mamba timer, same %zu steps): state update (conv window + selective scan) %.2f%% "
                  "(%.3f ms/step), Mamba mixers %.1f%% (%.1f ms/step)\n",
                  sorted.size(), 100 * mamba_times.state_s / decode_total_s, mamba_times.state_s / n * 1e3,
                  100 * mamba_times.mixer_s / decode_total_s, mamba_times.mixer_s / n * 1e3);
    }
    if (hybrid) {
      const double n = static_cast<double>(sorted.size());
      std::printf("decode step shares (mixer timer, same %zu steps): delta rule %.2f%% (%.3f ms/step), GDN mixers %.1f%% (%.1f ms/step)\n",
                  sorted.size(), 100 * decode_times.state_s / decode_total_s, decode_times.state_s / n * 1e3,
                  100 * decode_times.mixer_s / decode_total_s, decode_times.mixer_s / n * 1e3);
    }
    std::printf("bytes/token %.1f MB%s, read bandwidth %.2f GB/s -> roofline %.2f tok/s; ratio to roofline %.2f\n",
                bytes / 1e6,
                hybrid     ? fmt::format(" (GDN state read + written {:.1f} MB)", state_bytes / 1e6).c_str()
                : nemotron ? fmt::format(" (Mamba state read + written {:.1f} MB)", state_bytes / 1e6).c_str()
                               : "",
                bw / 1e9, roofline_tok_s, (1.0 / median) / roofline_tok_s);
    if (mc.mla.enabled()) {  // what the cache holds per token per layer, measured, against the K/V it stands for
      const model::LatentAttentionConfig& m = mc.mla;
      const int64_t expanded = 2 * mc.num_heads * (m.qk_head_dim() + m.v_head_dim);
      const size_t per_layer = cache->bytes_per_position() / static_cast<size_t>(layers);
      std::printf("KV cache per token per layer: %zu bytes (latent %lld + rope key %lld, bf16) vs %lld bytes for "
                  "the expanded K (%lld heads x %lld) and V (x %lld): %.1fx smaller\n",
                  per_layer, static_cast<long long>(m.kv_lora_rank), static_cast<long long>(m.qk_rope_head_dim),
                  static_cast<long long>(expanded), static_cast<long long>(mc.num_heads),
                  static_cast<long long>(m.qk_head_dim()), static_cast<long long>(m.v_head_dim),
                  static_cast<double>(expanded) / static_cast<double>(per_layer));
    }
    std::printf("peak RSS %.2f GB vs checkpoint %.2f GB + KV %.4f GB: ratio %.2f\n", peak_rss / 1e9, ckpt_bytes / 1e9,
                kv_bytes / 1e9, static_cast<double>(peak_rss) / static_cast<double>(ckpt_bytes + kv_bytes));
    if (f.mtp > 0) {
      // The decoder layers' bytes (their weights and state) scale to --full-layers; the rest does not.
      const double full = outside + (bytes - outside) * static_cast<double>(full_layers) / static_cast<double>(layers);
      print_mtp(time_mtp(*lm, *cache, f.mtp, prompt_len, tok), f.mtp, median, full / bytes);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    if (own_dir) fs::remove_all(dir);
    return 1;
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}
