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
#include "engine/sampler.h"
#include "engine/text_stream.h"
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
  std::optional<std::string> stop_reason;  // the stop string that ended it
  int64_t canvases = 0, decoder_passes = 0, early_stops = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Called with each accepted block (after EOS truncation, within max_tokens).
using DiffusionBlockCallback = std::function<void(std::span<const int32_t>)>;

// RequestError naming the parameter for what the loop does not support or a value out of range:
// the checks diffusion_generate (and DiffusionRun) make before any work. `max_len`: the most
// positions the prompt and its whole canvases may take (max_position_embeddings, or a server's
// --max-model-len below it).
void check_diffusion_request(const model::DiffusionGemmaConfig& c, const RequestParams& p, int64_t max_len);

// One request's loop. Alone, a canvas at a time (next_block); in the serving engine's batch, a
// decoder pass at a time (to_encode / encoded / canvas / denoised), its forwards run together
// with other requests' (model::DiffusionGemma::encode_batch / decode_batch): the same steps in
// the same order, the same random draws from its own stream, so the same output.
class DiffusionRun {
 public:
  // check_diffusion_request first (against max_position_embeddings). `m`, `s` and `tok` (may be
  // null: no text, and stop strings are refused) outlive it.
  DiffusionRun(const model::DiffusionGemma& m, const DiffusionSchedule& s, RequestParams p,
               const tokenizer::Tokenizer* tok = nullptr);
  // Denoises the next canvas and returns the tokens it accepts into the output (truncated after
  // an EOS, a stop id, or the token that completes a stop string; within max_tokens; never
  // empty). Only while !done().
  std::vector<int32_t> next_block();

  // The batched steps, only while !done(). Before a canvas the encoder appends to_encode() (the
  // prompt, then the last block) to cache(); empty while a canvas is being denoised.
  std::span<const int32_t> to_encode() const;
  model::DiffusionGemmaCache& cache() { return cache_; }
  // Called once the encoder has appended to_encode(): starts the next canvas.
  void encoded();
  // The decoder's input for the next pass (after encoded()): the canvas and the previous pass's
  // scaled logits (empty on a canvas's first pass).
  std::span<const int32_t> canvas() const { return canvas_; }
  std::span<const float> self_conditioning() const { return self_conditioning_; }
  // One decoder pass's logits [canvas_length, vocab]: the acceptance, the stops. Returns the
  // accepted block (as next_block) when the canvas ends, nullopt while it goes on.
  std::optional<std::vector<int32_t>> denoised(std::vector<float> logits);

  bool done() const { return done_; }
  const DiffusionResult& result() const { return res_; }
  // The output's text as the scheduler makes it (engine/text_stream.h): what became final since
  // the last call; a final EOS / stop id is not in it, a stop string and what follows are cut.
  std::string take_text() { return text_.take(); }
  const std::string& text() const { return text_.text(); }

 private:
  std::vector<int32_t> finish_canvas();
  int32_t noise();

  const model::DiffusionGemma& m_;
  const DiffusionSchedule& s_;
  RequestParams p_;
  bool sampling_ = false, done_ = false, encode_due_ = true;
  int32_t pad_ = 0;
  int64_t canvases_ = 0;  // the most this request runs
  std::vector<int32_t> stops_, eos_;
  Sampler draw_;
  model::DiffusionGemmaCache cache_;
  std::vector<int32_t> block_;  // the last canvas, which the next canvas encodes first
  // The canvas being denoised: its tokens, the passes left (counting down: the schedule's
  // temperature), the last pass's argmax and scaled logits, the last stability_threshold argmax
  // canvases (oldest first; -1: none yet).
  std::vector<int32_t> canvas_, argmax_;
  int64_t step_ = 0;
  std::vector<float> self_conditioning_;
  std::vector<std::vector<int32_t>> history_;
  TextStream text_;
  DiffusionResult res_;
};

DiffusionResult diffusion_generate(const model::DiffusionGemma& m, const DiffusionSchedule& s,
                                   const RequestParams& p, const DiffusionBlockCallback& on_block = {});

}  // namespace fp4lm::engine
