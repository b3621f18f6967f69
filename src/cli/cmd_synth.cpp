// `fp4lm synth`: write a small random-weight checkpoint in exact HF / ModelOpt layout (for the
// demo, tests and benchmarks), quantized by the library's own reference quantizer.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "model/arch/arch.h"
#include "model/model_limits.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::cli {
namespace {

// Synthetic checkpoints are for tests, demos and benchmarks (about 2 GB of bfloat16 at most).
constexpr double kMaxSynthParams = 1e9;

struct SynthArgs {
  std::string out, arch = "Qwen3MoeForCausalLM", algo = "NVFP4", overrides;
  synth::SyntheticOptions o;
};

CommandRegistration reg("synth", "Write a small random-weight checkpoint (HF/ModelOpt layout)", [](CLI::App& sub) {
  auto a = std::make_shared<SynthArgs>();
  sub.add_option("--out", a->out, "Output directory")->required();
  std::string archs;  // every registered architecture (model/arch/registry.cpp)
  for (const model::ArchDef* d : model::architectures())
    archs += (archs.empty() ? "" : ", ") + std::string(d->hf_name());
  sub.add_option("--arch", a->arch, archs)->capture_default_str();
  sub.add_option("--algo", a->algo, "NVFP4, NVFP4_AWQ, W4A16_NVFP4, FP8 or none")->capture_default_str();
  sub.add_option("--layers", a->o.layers, "Decoder layers")->capture_default_str();
  sub.add_option("--hidden", a->o.hidden, "Hidden size")->capture_default_str();
  sub.add_option("--vocab", a->o.vocab, "Vocabulary size")->capture_default_str();
  sub.add_option("--experts", a->o.experts, "Experts per MoE layer")->capture_default_str();
  sub.add_option("--hybrid-pattern", a->o.hybrid_pattern,
                 "NemotronHForCausalLM: the layer letters (M Mamba-2, * attention, - MLP, E MoE), extended with "
                 "M-M* to --layers")
      ->capture_default_str();
  sub.add_option("--moe-latent-size", a->o.moe_latent,
                 "NemotronHForCausalLM: moe_latent_size of the E layers (0: no latent projections)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--kv-shared-layers", a->o.kv_shared_layers,
                 "Gemma4ForCausalLM: num_kv_shared_layers (the last layers read an earlier layer's K/V)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--ple-dim", a->o.ple_dim,
                 "Gemma4ForCausalLM: hidden_size_per_layer_input (per-layer input embeddings, as E2B / E4B)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--config-overrides", a->overrides,
                 "JSON object of config.json keys set over the architecture's own (its text model's part), e.g. "
                 "'{\"sliding_window\": 16}'; the tensors follow the resulting config");
  sub.add_flag("--random-codes", a->o.random_codes,
               "Quantized Linears as random NVFP4 / FP8 codes and scales, streamed to disk (benchmarks; not the "
               "reference quantizer's values)");
  sub.add_option("--seed", a->o.seed, "Random seed")->capture_default_str()->check(CLI::Validator(
      [](std::string& v) { return v.rfind('-', 0) == 0 ? "must be from 0 to 2^64-1, got " + v : std::string(); }, "SEED"));
  sub.add_flag("--quantize-lm-head", a->o.quantize_lm_head, "Quantize lm_head too");
  sub.add_flag("--pre-quant-scale", a->o.pre_quant_scale,
               "AWQ: a pre_quant_scale on every quantized Linear (weights quantized divided by it), as ModelOpt's "
               "NVFP4_AWQ exports");
  sub.add_flag("--distinct-shard-scales", a->o.distinct_shard_scales,
               "Give fused shards (q/k/v, gate/up) different weight_scale_2");
  sub.add_flag("--fused-experts", a->o.fused_experts,
               "Unquantized experts as fused 3-D gate_up_proj / down_proj tensors (original bf16 checkpoints)");
  sub.add_flag("--mxfp4-experts", a->o.mxfp4_experts,
               "gpt-oss: experts as MXFP4 *_blocks / *_scales with quant_method mxfp4 (use with --algo none)");
  sub.add_flag("--extra-tensors", a->o.extra_tensors,
               "Add mtp.* (and, for VL architectures, model.visual.*) tensors the loader ignores");
  sub.add_flag("--mtp-head", a->o.mtp_head,
               "Qwen3.5 / Qwen3-Next hybrids: a real MTP head (unquantized), the draft model of "
               "--speculative-config '{\"method\": \"mtp\", ...}'");
  return [a]() -> int {
    a->o.architecture = a->arch;
    if (!a->overrides.empty()) {
      a->o.config_overrides = nlohmann::json::parse(a->overrides, nullptr, /*allow_exceptions=*/false);
      if (!a->o.config_overrides.is_object())
        usage_fail("--config-overrides must be a JSON object (got '{}')", a->overrides);
    }
    if (a->algo == "none" || a->algo == "NONE") a->o.algo = quant::QuantAlgo::None;
    else {
      try {
        a->o.algo = quant::parse_algo(a->algo, "--algo");
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      if (a->o.algo == quant::QuantAlgo::MIXED_PRECISION)
        usage_fail("--algo MIXED_PRECISION needs a layer map; use the library's synth::SyntheticOptions");
    }
    if (a->o.mxfp4_experts && a->o.algo != quant::QuantAlgo::None)
      usage_fail("--mxfp4-experts writes the MXFP4 experts of an otherwise unquantized model: use --algo none");
    if (a->o.hidden % 16 != 0 || a->o.hidden <= 0) usage_fail("--hidden must be a positive multiple of 16");
    if (a->o.hybrid_pattern.empty() || a->o.hybrid_pattern.find_first_not_of("M*-E") != std::string::npos)
      usage_fail("--hybrid-pattern must be a non-empty string of M, *, - and E (got '{}')", a->o.hybrid_pattern);
    if (a->o.layers <= 0 || a->o.vocab <= 0 || a->o.experts < a->o.top_k)
      usage_fail("--layers and --vocab must be positive and --experts at least {}", a->o.top_k);
    using L = model::ModelLimits;
    if (a->o.hidden > L::hidden_size) usage_fail("--hidden must be at most {} (got {})", L::hidden_size, a->o.hidden);
    if (a->o.layers > L::num_hidden_layers)
      usage_fail("--layers must be at most {} (got {})", L::num_hidden_layers, a->o.layers);
    if (a->o.vocab > L::vocab_size) usage_fail("--vocab must be at most {} (got {})", L::vocab_size, a->o.vocab);
    if (a->o.experts > L::num_experts) usage_fail("--experts must be at most {} (got {})", L::num_experts, a->o.experts);
    a->o.head_dim = a->o.hidden / a->o.heads;
    a->o.intermediate = a->o.hidden * 3 / 2 / 16 * 16;
    // The writer holds every tensor in memory: refuse what would not fit rather than run out.
    const double h = static_cast<double>(a->o.hidden), per_layer = 4 * h * h + 3 * h * (a->o.intermediate +
        static_cast<double>(a->o.experts) * a->o.moe_intermediate + a->o.shared_expert_intermediate);
    const double params = 2 * static_cast<double>(a->o.vocab) * h + static_cast<double>(a->o.layers) * per_layer;
    if (params > kMaxSynthParams)
      usage_fail("--hidden {} --layers {} --vocab {} --experts {} make about {:.3g} parameters; synth writes at most "
                 "{:.0e} (it holds them in memory)",
                 a->o.hidden, a->o.layers, a->o.vocab, a->o.experts, params, kMaxSynthParams);
    synth::write_synthetic_checkpoint(a->out, a->o);
    std::printf("wrote %s checkpoint (%s) to %s\n", a->arch.c_str(), a->algo.c_str(), a->out.c_str());
    return 0;
  };
});

}  // namespace
}  // namespace fp4lm::cli
