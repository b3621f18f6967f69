// The block-diffusion loop of transformers 5.24's generation_diffusion_gemma.py, at batch 1: its
// random draws from fp4lm's seeded stream (temperature 1), or the deterministic rule (pad canvas,
// argmax denoiser; temperature 0).
#include "engine/diffusion_generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "engine/request_error.h"
#include "engine/sampler.h"
#include "model/config_reader.h"

namespace fp4lm::engine {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Entropy of softmax(l) (torch.distributions.Categorical(logits=l).entropy()).
double entropy(const float* l, int64_t n) {
  const double mx = *std::max_element(l, l + n);
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(l[i]) - mx);
  const double lse = mx + std::log(z);
  double h = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(l[i]) - lse;
    h -= std::exp(lp) * lp;
  }
  return h;
}

void refuse(bool given, const char* param, const char* what) {
  if (given)
    throw RequestError(std::string("DiffusionGemma does not support ") + what + " ('" + param + "')", param);
}

}  // namespace

DiffusionSchedule parse_diffusion_schedule(const std::optional<json>& gen, const std::string& path) {
  DiffusionSchedule s;
  if (!gen) return s;
  const json& g = *gen;
  const model::ConfigReader r{g, path};
  for (const auto& [k, v] : g.items()) {
    static const char* known[] = {"max_denoising_steps", "sampler_config", "t_min", "t_max", "stability_threshold",
                                  "confidence_threshold", "pad_token_id", "eos_token_id",
                                  // Not inference: the output form, metadata, the token the prompt
                                  // starts with, and the length defaults (--max-tokens decides).
                                  "return_dict_in_generate", "transformers_version", "_commit_hash",
                                  "_from_model_config", "bos_token_id", "max_new_tokens", "max_length",
                                  // How transformers stores its cache and compiles: fp4lm keeps the
                                  // dynamic cache's semantics (sliding layers keep window - 1 positions).
                                  "cache_implementation", "cache_config", "disable_compile"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* n) { return k == n; }) == std::end(known))
      fail("{}: DiffusionGemma: unknown field '{}' (transformers' DiffusionGemmaGenerationConfig refuses it too)",
           path, k);
  }
  if (r.has("cache_implementation") && g["cache_implementation"] != "dynamic")
    fail("{}: DiffusionGemma: 'cache_implementation' {} is not supported (null or \"dynamic\"; a static cache "
         "changes what the decoder's sliding layers see)",
         path, g["cache_implementation"].dump());
  s.max_denoising_steps = r.opt<int64_t>("max_denoising_steps", s.max_denoising_steps);
  r.positive("max_denoising_steps", s.max_denoising_steps);
  if (r.has("sampler_config")) {
    const json& sc = g["sampler_config"];
    if (!sc.is_object()) fail("{}: field 'sampler_config' must be an object", path);
    for (const auto& [k, v] : sc.items())
      if (k != "_cls_name" && k != "entropy_bound") fail("{}: DiffusionGemma: unknown field 'sampler_config.{}'", path, k);
    if (sc.contains("_cls_name") && sc["_cls_name"] != "EntropyBoundSamplerConfig")
      fail("{}: DiffusionGemma: 'sampler_config._cls_name' {} is not supported (EntropyBoundSamplerConfig)", path,
           sc["_cls_name"].dump());
    const model::ConfigReader sr{sc, path};
    s.entropy_bound = sr.req<double>("entropy_bound");
    if (!(s.entropy_bound > 0)) fail("{}: field 'sampler_config.entropy_bound' must be > 0", path);
  }
  s.t_min = r.opt<double>("t_min", s.t_min);
  s.t_max = r.opt<double>("t_max", s.t_max);
  if (s.t_min < 0 || s.t_max < 0 || s.t_max <= s.t_min)
    fail("{}: fields 't_min' ({}) and 't_max' ({}) must satisfy 0 <= t_min < t_max", path, s.t_min, s.t_max);
  s.stability_threshold = r.opt<int64_t>("stability_threshold", s.stability_threshold);
  if (s.stability_threshold < 0) fail("{}: field 'stability_threshold' must be >= 0", path);
  s.confidence_threshold = r.opt<double>("confidence_threshold", s.confidence_threshold);
  if (!(s.confidence_threshold > 0)) fail("{}: field 'confidence_threshold' must be > 0", path);
  if (r.has("pad_token_id")) s.pad_token_id = r.get<int64_t>("pad_token_id");
  if (r.has("eos_token_id")) {
    if (g["eos_token_id"].is_array()) s.eos_token_ids = r.int_list("eos_token_id");
    else s.eos_token_ids = {r.get<int64_t>("eos_token_id")};
  }
  return s;
}

void check_diffusion_request(const model::DiffusionGemmaConfig& c, const RequestParams& p, int64_t max_len) {
  // The temperatures are generation_config.json's t_max..t_min schedule; a request picks the rule.
  if (p.sampling.temperature != 0.0 && p.sampling.temperature != 1.0)
    throw RequestError("DiffusionGemma's temperatures are the t_max..t_min schedule of generation_config.json; give "
                       "temperature 0 (deterministic: pad canvas, argmax denoiser) or 1 (transformers' sampling: "
                       "a uniformly random canvas, a draw from each position's distribution), not " +
                           std::to_string(p.sampling.temperature),
                       "temperature");
  refuse(p.sampling.top_k != 0, "top_k", "top-k filtering");
  refuse(p.sampling.top_p != 1.0, "top_p", "nucleus filtering");
  refuse(p.sampling.min_p != 0.0, "min_p", "min-p filtering");
  refuse(p.min_tokens != 0, "min_tokens", "a minimum length");
  refuse(p.presence_penalty != 0, "presence_penalty", "penalties");
  refuse(p.frequency_penalty != 0, "frequency_penalty", "penalties");
  refuse(p.repetition_penalty != 1, "repetition_penalty", "penalties");
  refuse(p.logprobs >= 0, "logprobs", "logprobs (a block's tokens are not drawn one by one)");
  refuse(p.prompt_logprobs >= 0, "prompt_logprobs", "prompt logprobs");
  refuse(!p.logit_bias.empty(), "logit_bias", "logit_bias");
  refuse(!p.allowed_token_ids.empty(), "allowed_token_ids", "allowed_token_ids");
  refuse(p.structured.active(), p.structured.param.empty() ? "structured_outputs" : p.structured.param.c_str(),
         "structured outputs");
  refuse(p.images != nullptr, "images", "images");
  if (p.prompt.empty()) throw RequestError("the prompt is empty", "prompt");
  if (p.max_tokens < 1) throw RequestError("max_tokens must be at least 1, got " + std::to_string(p.max_tokens), "max_tokens");
  for (int32_t id : p.prompt)
    if (id < 0 || id >= c.vocab_size)
      throw RequestError("prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                             std::to_string(c.vocab_size) + ")",
                         "prompt");
  const int64_t C = c.canvas_length;
  const int64_t canvases = p.max_tokens / C + (p.max_tokens % C != 0);  // no overflow, whatever max_tokens
  const int64_t room = std::max<int64_t>(0, max_len - static_cast<int64_t>(p.prompt.size()));
  if (canvases > room / C)
    throw RequestError("the prompt (" + std::to_string(p.prompt.size()) + " tokens) plus " +
                           std::to_string(canvases) + " canvases of " + std::to_string(C) + " tokens exceed " +
                           (max_len == c.max_position_embeddings ? "max_position_embeddings" : "the context length") +
                           " (" + std::to_string(max_len) + ")",
                       "max_tokens");
}

DiffusionRun::DiffusionRun(const model::DiffusionGemma& m, const DiffusionSchedule& s, RequestParams p,
                           const tokenizer::Tokenizer* tok)
    : m_(m),
      s_(s),
      p_(std::move(p)),
      draw_(SamplingParams{1.0, 0, 1.0, 0.0, p_.sampling.seed}),
      text_(tok, p_.stop, p_.skip_special_tokens) {
  const model::DiffusionGemmaConfig& c = m.config();
  check_diffusion_request(c, p_, c.max_position_embeddings);
  if (!p_.stop.empty() && !tok)
    throw RequestError("stop strings need the checkpoint's tokenizer (give stop_token_ids)", "stop");
  sampling_ = p_.sampling.temperature == 1.0;
  canvases_ = (p_.max_tokens + c.canvas_length - 1) / c.canvas_length;
  pad_ = static_cast<int32_t>(s.pad_token_id.value_or(c.pad_token_id));
  stops_.assign(p_.stop_token_ids.begin(), p_.stop_token_ids.end());
  if (!p_.ignore_eos)
    for (int64_t e : s.eos_token_ids) eos_.push_back(static_cast<int32_t>(e));
  res_.prompt_ids = p_.prompt;
  res_.finish_reason = "length";
  cache_ = m.new_cache();
}

// Sampling: the seeded stream draws the random canvas tokens (uniform over the vocabulary, as
// torch.randint) and each position's token from softmax(scaled logits) (as torch.multinomial).
int32_t DiffusionRun::noise() {
  const int64_t V = m_.config().vocab_size;
  return static_cast<int32_t>(std::min<int64_t>(V - 1, static_cast<int64_t>(draw_.uniform() * static_cast<double>(V))));
}

std::span<const int32_t> DiffusionRun::to_encode() const {
  if (!encode_due_) return {};
  return res_.canvases == 0 ? std::span<const int32_t>(p_.prompt) : std::span<const int32_t>(block_);
}

void DiffusionRun::encoded() {
  const int64_t C = m_.config().canvas_length;
  encode_due_ = false;
  ++res_.canvases;
  canvas_.assign(static_cast<size_t>(C), pad_);
  if (sampling_)
    for (int32_t& t : canvas_) t = noise();
  argmax_ = canvas_;
  self_conditioning_.clear();
  history_.assign(static_cast<size_t>(s_.stability_threshold), std::vector<int32_t>(static_cast<size_t>(C), -1));
  step_ = s_.max_denoising_steps;
}

std::vector<int32_t> DiffusionRun::next_block() {
  if (res_.canvases == 0) {
    const auto t0 = Clock::now();
    m_.encode(cache_, to_encode(), /*logits=*/false);
    res_.prefill_seconds = seconds_since(t0);
  }
  const auto t0 = Clock::now();
  if (res_.canvases > 0) m_.encode(cache_, to_encode(), /*logits=*/false);  // the appended canvas, as transformers
  encoded();
  while (true) {
    std::optional<std::vector<int32_t>> block = denoised(m_.decode(cache_, canvas_, self_conditioning_));
    if (block) {
      res_.decode_seconds += seconds_since(t0);
      return std::move(*block);
    }
  }
}

std::optional<std::vector<int32_t>> DiffusionRun::denoised(std::vector<float> logits) {
  const model::DiffusionGemmaConfig& c = m_.config();
  const int64_t C = c.canvas_length, V = c.vocab_size;
  if (static_cast<int64_t>(logits.size()) != C * V)
    fail("DiffusionGemma: the decoder gave {} logits, expected {} x {}", logits.size(), C, V);
  ++res_.decoder_passes;
  // The linear temperature schedule (step_ counts down: t_max first, t_min last).
  const float temp = static_cast<float>(
      s_.t_min + (s_.t_max - s_.t_min) * (static_cast<double>(step_) / static_cast<double>(s_.max_denoising_steps)));
  for (float& l : logits) l /= temp;
  std::vector<int32_t> next_argmax(static_cast<size_t>(C)), denoised(static_cast<size_t>(C));
  std::vector<double> ent(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) {
    const float* row = logits.data() + i * V;
    next_argmax[i] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    denoised[i] = sampling_ ? draw_.sample(row, V) : next_argmax[i];
    ent[i] = entropy(row, V);
  }
  // Entropy-bounded acceptance: the k lowest-entropy positions with
  // sum(entropy) - max(entropy) <= entropy_bound take the denoiser's token; the rest reset.
  std::vector<int64_t> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ent[a] < ent[b]; });
  double cum = 0;
  for (int64_t r = 0; r < C; ++r) {
    const int64_t i = order[r];
    cum += ent[i];
    const bool accepted = cum - ent[i] <= s_.entropy_bound;
    canvas_[i] = accepted ? denoised[i] : sampling_ ? noise() : pad_;
  }
  // Stable: the argmax canvas equals each of the last stability_threshold ones.
  bool stable = true;
  for (const auto& h : history_) stable = stable && h == next_argmax;
  if (!history_.empty()) {
    std::rotate(history_.begin(), history_.begin() + 1, history_.end());
    history_.back() = next_argmax;
  }
  const double mean_entropy = std::accumulate(ent.begin(), ent.end(), 0.0) / static_cast<double>(C);
  const bool confident = mean_entropy < s_.confidence_threshold;
  argmax_ = std::move(next_argmax);
  self_conditioning_ = std::move(logits);
  --step_;
  if (stable && confident) ++res_.early_stops;
  else if (step_ >= 1) return std::nullopt;
  return finish_canvas();
}

std::vector<int32_t> DiffusionRun::finish_canvas() {
  block_ = std::move(argmax_);
  self_conditioning_.clear();
  self_conditioning_.shrink_to_fit();
  // EOS / stop ids anywhere in the block end generation after that token (transformers pads the rest).
  std::vector<int32_t> emitted = block_;
  for (size_t i = 0; i < emitted.size(); ++i) {
    const int32_t t = emitted[i];
    const bool is_stop = std::find(stops_.begin(), stops_.end(), t) != stops_.end();
    if (is_stop || std::find(eos_.begin(), eos_.end(), t) != eos_.end()) {
      emitted.resize(i + 1);
      done_ = true;
      res_.finish_reason = "stop";
      if (is_stop) res_.stop_token = t;
      break;
    }
  }
  const int64_t room = p_.max_tokens - static_cast<int64_t>(res_.output_ids.size());
  if (static_cast<int64_t>(emitted.size()) > room) {
    emitted.resize(static_cast<size_t>(room));
    if (done_) {  // the EOS / stop id fell beyond max_tokens: the length ended it
      res_.finish_reason = "length";
      res_.stop_token.reset();
    }
  }
  // The text, token by token as the scheduler streams it: the ending EOS / stop id is not in it;
  // the token completing a stop string ends the output there (the rest of the block is dropped).
  const bool ends_with_id = done_ && res_.finish_reason == "stop";
  for (size_t i = 0; i < emitted.size(); ++i) {
    if (ends_with_id && i + 1 == emitted.size()) break;
    if (text_.push(emitted[i])) {
      emitted.resize(i + 1);
      done_ = true;
      res_.finish_reason = "stop";
      res_.stop_token.reset();
      res_.stop_reason = text_.stop_reason();
      break;
    }
  }
  res_.output_ids.insert(res_.output_ids.end(), emitted.begin(), emitted.end());
  if (res_.canvases >= canvases_ || static_cast<int64_t>(res_.output_ids.size()) >= p_.max_tokens) done_ = true;
  if (done_ && !res_.stop_reason && text_.finish()) {  // a stop string in the flushed tail
    res_.finish_reason = "stop";
    res_.stop_token.reset();
    res_.stop_reason = text_.stop_reason();
  }
  encode_due_ = !done_;
  return emitted;
}

DiffusionResult diffusion_generate(const model::DiffusionGemma& m, const DiffusionSchedule& s, const RequestParams& p,
                                   const DiffusionBlockCallback& on_block) {
  DiffusionRun run(m, s, p);
  while (!run.done()) {
    const std::vector<int32_t> block = run.next_block();
    if (on_block && !block.empty()) on_block(block);
  }
  return run.result();
}

}  // namespace fp4lm::engine
