#pragma once
// DiffusionGemma's block-diffusion generation (transformers' DiffusionGemmaGenerationMixin.generate,
// batch 1): the encoder writes the prompt's K/V; then per canvas of canvas_length tokens the
// decoder denoises it for at most max_denoising_steps steps (self-conditioned on the previous
// step's logits, scaled by the linear temperature schedule t_min..t_max), tokens are accepted
// under the entropy bound, the rest reset, and the steps stop early once the argmax canvas is
// stable for stability_threshold steps and the mean entropy is below confidence_threshold; the
// final argmax canvas is the block, which the encoder then writes before the next canvas.
//
// The temperatures are the schedule's, so a request's temperature picks the rule. 0: deterministic
// (the canvas starts as — and positions not accepted reset to — the pad token, the denoiser takes
// the argmax). 1: transformers' sampling (a uniformly random canvas and renoising, a draw from each
// position's distribution) from fp4lm's seeded stream (the same seed, the same output; not
// torch's numbers). Both emit the argmax canvas, as transformers. Other temperatures are refused,
// and so are the request fields that have no meaning here (logprobs, penalties, stop strings,
// min_tokens, ...), by name.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "model/diffusion_gemma.h"

namespace fp4lm::engine {

// generation_config.json's schedule (transformers' DiffusionGemmaGenerationConfig and its
// defaults for keys left out).
struct DiffusionSchedule {
  int64_t max_denoising_steps = 48;
  double entropy_bound = 0.1;
  double t_min = 0.4, t_max = 0.8;
  int64_t stability_threshold = 1;
  double confidence_threshold = 0.005;
  std::optional<int64_t> pad_token_id;
  std::vector<int64_t> eos_token_ids;  // only from generation_config.json, as transformers
};

// Every key read or refused by name; Error naming `path` and the field. nullopt json: defaults.
DiffusionSchedule parse_diffusion_schedule(const std::optional<nlohmann::json>& gen, const std::string& path);

struct DiffusionResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;  // generated tokens, including a final EOS / stop id
  std::string finish_reason;        // "stop" or "length"
  std::optional<int32_t> stop_token;  // the stop_token_ids entry that ended it (not set for EOS)
  int64_t canvases = 0, decoder_passes = 0, early_stops = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Called with each accepted block (after EOS truncation, within max_tokens).
using DiffusionBlockCallback = std::function<void(std::span<const int32_t>)>;

// RequestError naming the parameter for what the loop does not support or a value out of range.
DiffusionResult diffusion_generate(const model::DiffusionGemma& m, const DiffusionSchedule& s,
                                   const RequestParams& p, const DiffusionBlockCallback& on_block = {});

}  // namespace fp4lm::engine
