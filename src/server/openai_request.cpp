#include "server/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "engine/best_of.h"
#include "engine/image_input.h"
#include "engine/process_stats.h"
#include "io/json_file.h"
#include "server/chat_images.h"
#include "server/chat_schema.h"
#include "server/request_fields.h"
#include "server/request_json.h"
#include "server/structured_output_request.h"
#include "server/tool_choice_spec.h"
#include "server/unsupported_fields.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

// The most choices one request may ask for (n times the prompts of a list).
constexpr int64_t kMaxChoices = 128;

// Tokenizing costs many times the text's size in short-lived allocations; above this the freed
// memory is handed back at once instead of staying in the heap (engine/process_stats.h).
constexpr size_t kLargePromptBytes = size_t{1} << 20;

// logit_bias: token id (an object key) -> bias, each clamped to [-100, 100] as vLLM does.
void parse_logit_bias(const json& b, const ServingModel& m, engine::RequestParams& p) {
  if (!present(b, "logit_bias")) return;
  const json& lb = b["logit_bias"];
  if (!lb.is_object()) throw bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  // Every key that is not a token id in one error (vLLM names them all).
  std::vector<std::string> not_ids;
  for (const auto& [k, v] : lb.items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
    if (ec != std::errc() || end != k.data() + k.size()) not_ids.push_back("'" + k + "'");
  }
  if (!not_ids.empty())
    throw bad_request(fmt::format("'logit_bias' keys must be token ids, got {}", fmt::join(not_ids, ", ")), "logit_bias");
  for (const auto& [k, v] : lb.items()) {
    const std::string field = "logit_bias." + k;
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
    if (ec != std::errc() || end != k.data() + k.size())
      throw bad_request(fmt::format("'logit_bias' keys must be token ids, got '{}'", k), "logit_bias");
    if (id < 0 || id >= m.vocab_size)
      throw bad_request(fmt::format("logit_bias token id {} is outside the vocabulary [0, {})", id, m.vocab_size),
                        "logit_bias");
    if (!v.is_number()) throw bad_request(fmt::format("'{}' must be a number", field), field);
    // vLLM clamps each bias to [-100, 100].
    const double bias = std::clamp(v.get<double>(), -100.0, 100.0);
    p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
}

// A logprob count as vLLM checks it: -1 is the whole vocabulary; --max-logprobs caps it (-1: no
// cap). `what` is vLLM's word in the message ("sample" / "prompt").
int64_t resolve_logprobs(int64_t k, const ServingModel& m, const char* field, const char* what) {
  if (k == -1) k = m.vocab_size;
  const int64_t cap = m.max_logprobs < 0 ? m.vocab_size : m.max_logprobs;
  if (k > cap)
    throw bad_request(fmt::format("Requested {} logprobs of {}, which is greater than max allowed: {}", what, k, cap),
                      field);
  return k;
}

// allowed_token_ids (vLLM): sampling only among these ids, each inside the vocabulary.
void parse_allowed_token_ids(const json& b, const ServingModel& m, engine::RequestParams& p) {
  if (!present(b, "allowed_token_ids")) return;
  const json& v = b["allowed_token_ids"];
  if (v.is_array() && v.empty()) throw bad_request("allowed_token_ids is not None and empty!", "allowed_token_ids");
  p.allowed_token_ids = token_ids(v, "allowed_token_ids", m.vocab_size);
}

// logprob_token_ids (vLLM): at each generated position the logprobs of these ids (with the
// sampled token's) instead of the top k; needs logprobs (chat: true; completions: any count, which
// the ids replace, as vLLM's to_sampling_params passes logprobs=None with them).
void parse_logprob_token_ids(const json& b, const ServingModel& m, ApiRequest& r) {
  const char* f = "logprob_token_ids";
  if (!present(b, f)) return;
  const json& v = b[f];
  if (v.is_array() && v.empty()) throw bad_request("`logprob_token_ids` must not be an empty list.", f);
  if (opt_bool(b, "use_beam_search").value_or(false))
    throw bad_request("`logprob_token_ids` is not supported with beam search.", f);
  if (!r.logprobs)
    throw bad_request(r.endpoint == Endpoint::chat ? "when using `logprob_token_ids`, `logprobs` must be set to true."
                                                   : "when using `logprob_token_ids`, `logprobs` must be set.",
                      f);
  if (v.is_array() && static_cast<int64_t>(v.size()) > engine::kMaxLogprobTokenIds)
    throw bad_request(fmt::format("Requested logprob_token_ids of length {}, which is greater than max allowed: {}",
                                  v.size(), engine::kMaxLogprobTokenIds),
                      f);
  std::vector<int32_t> ids = token_ids(v, f, m.vocab_size);
  const int64_t n = static_cast<int64_t>(ids.size());
  r.params.logprob_token_ids = std::move(ids);
  r.params.logprobs = r.top_logprobs = n;
}

// The sampling parameters and penalties, the model's generation_config defaults under them.
void parse_sampling(const json& b, const SamplingDefaults& d, uint64_t random_seed, engine::RequestParams& p) {
  p.sampling.temperature = opt_num(b, "temperature").value_or(d.temperature.value_or(1.0));
  if (!(p.sampling.temperature >= 0))
    throw bad_request(fmt::format("'temperature' must be >= 0, got {}", p.sampling.temperature), "temperature");
  if (p.sampling.temperature < 1e-5) p.sampling.temperature = 0;  // vLLM: greedy
  p.sampling.top_p = opt_num(b, "top_p").value_or(d.top_p.value_or(1.0));
  const int64_t top_k = opt_int(b, "top_k", -1).value_or(d.top_k.value_or(0));
  p.sampling.top_k = top_k < 0 ? 0 : top_k;
  p.sampling.min_p = opt_num(b, "min_p").value_or(d.min_p.value_or(0.0));
  // vLLM takes any 64-bit signed seed; its bits seed the generator.
  const std::optional<int64_t> seed = opt_int(b, "seed");
  p.sampling.seed = seed ? static_cast<uint64_t>(*seed) : random_seed;
  p.presence_penalty = opt_num(b, "presence_penalty").value_or(0.0);
  p.frequency_penalty = opt_num(b, "frequency_penalty").value_or(0.0);
  p.repetition_penalty = opt_num(b, "repetition_penalty").value_or(d.repetition_penalty.value_or(1.0));
  p.ignore_eos = opt_bool(b, "ignore_eos").value_or(false);
  p.min_tokens = opt_int(b, "min_tokens", 0).value_or(0);
  p.skip_special_tokens = opt_bool(b, "skip_special_tokens").value_or(true);
}

// stop (a string or a list of strings; they need the tokenizer) and stop_token_ids.
void parse_stop(const json& b, const ServingModel& m, engine::RequestParams& p) {
  if (present(b, "stop")) {
    const json& s = b["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) {
        if (!x.is_string()) throw bad_request("'stop' must be a string or a list of strings", "stop");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request("'stop' must be a string or a list of strings", "stop");
    }
    std::erase(p.stop, std::string());
    if (!p.stop.empty() && !m.tok)
      throw bad_request("'stop' strings need a tokenizer, and this model has none; use stop_token_ids", "stop");
  }
  if (present(b, "stop_token_ids")) p.stop_token_ids = token_ids(b["stop_token_ids"], "stop_token_ids", m.vocab_size);
}

// The fields both endpoints share. `max_tokens_default` < 0: the rest of the context.
void parse_common(const json& b, const ServingModel& m, uint64_t random_seed, ApiRequest& r) {
  engine::RequestParams& p = r.params;
  const SamplingDefaults& d = m.defaults;

  r.n = opt_int(b, "n", 1, kMaxChoices).value_or(1);
  r.best_of = opt_int(b, "best_of", 1, kMaxChoices).value_or(r.n);
  if (r.best_of < r.n)
    throw bad_request(fmt::format("best_of must be greater than or equal to n, got n={} and best_of={}", r.n, r.best_of),
                      "best_of");
  reject_unsupported_fields(b, r.endpoint);
  r.return_tokens_as_token_ids = opt_bool(b, "return_tokens_as_token_ids").value_or(m.return_tokens_as_token_ids);
  r.stream = opt_bool(b, "stream").value_or(false);
  // OpenAI: the best of several samples is known only at their end.
  if (r.stream && r.best_of > r.n)
    throw bad_request(fmt::format("best_of ({}) greater than n ({}) cannot be streamed", r.best_of, r.n), "best_of");
  if (const auto k = opt_int(b, "prompt_logprobs", -1)) {
    // Stream chunks have no prompt_logprobs; vLLM refuses k > 0 and -1, and drops 0.
    if (r.stream && *k != 0) throw bad_request("prompt_logprobs are not available when stream=True.", "prompt_logprobs");
    const int64_t n = resolve_logprobs(*k, m, "prompt_logprobs", "prompt");  // -1: the whole vocabulary
    if (!r.stream) r.prompt_logprobs = r.params.prompt_logprobs = n;
  }
  if (present(b, "stream_options")) {
    if (!r.stream) throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
    const json& so = b["stream_options"];
    if (!so.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    r.include_usage = opt_bool(so, "include_usage", "stream_options.include_usage").value_or(false);
    // vLLM's should_include_usage: continuous usage only together with include_usage.
    r.continuous_usage =
        opt_bool(so, "continuous_usage_stats", "stream_options.continuous_usage_stats").value_or(false) &&
        r.include_usage;
  }
  if (m.force_include_usage && r.stream) r.include_usage = r.continuous_usage = true;  // vLLM: both, whatever was asked
  // Fields with no effect here are still typed as vLLM types them (a 400 names the field).
  opt_int(b, "routed_experts_prompt_start", 0);
  opt_int(b, "stream_interval", 1);
  parse_logit_bias(b, m, p);
  parse_allowed_token_ids(b, m, p);
  p.structured = parse_structured_outputs(b);  // response_format, structured_outputs, guided_*
  p.structured.whitespace = json_whitespace(b, m.json_whitespace);

  parse_sampling(b, d, random_seed, p);
  r.return_token_ids = opt_bool(b, "return_token_ids").value_or(false);

  parse_stop(b, m, p);
}

// use_beam_search (vLLM's BeamSearchParams: width n, or best_of on /v1/completions where given;
// length_penalty; early_stopping as Hugging Face's). Beam search runs greedy one-token steps and
// keeps no stop strings, penalties, biases or constraints, so a request that sets them with it is
// refused rather than having them ignored; length_penalty / early_stopping without it change
// nothing, as in vLLM.
void parse_beam_search(const json& b, ApiRequest& r) {
  const std::optional<double> lp = opt_num(b, "length_penalty");
  const std::optional<bool> early = opt_bool(b, "early_stopping");
  if (!opt_bool(b, "use_beam_search").value_or(false)) return;
  r.beam = true;
  r.beam_params.beam_width = r.samples();
  r.beam_params.length_penalty = lp.value_or(1.0);
  r.beam_params.early_stopping = early.value_or(false);
  r.beam_params.ignore_eos = r.params.ignore_eos;
  r.best_of = r.n;  // the beams come ranked: the first n of them are the choices
  if (r.stream) throw bad_request("Streaming is not currently supported with beam search", "stream");
  const engine::RequestParams& p = r.params;
  auto refuse = [](bool set, const char* field) {
    if (set) throw bad_request(fmt::format("'{}' cannot be combined with use_beam_search", field), field);
  };
  refuse(p.structured.active(), p.structured.param.empty() ? "structured_outputs" : p.structured.param.c_str());
  refuse(!p.stop.empty(), "stop");
  refuse(!p.stop_token_ids.empty(), "stop_token_ids");
  refuse(!p.logit_bias.empty(), "logit_bias");
  refuse(!p.allowed_token_ids.empty(), "allowed_token_ids");
  refuse(p.min_tokens > 0, "min_tokens");
  refuse(p.prompt_logprobs >= 0, "prompt_logprobs");
  refuse(p.presence_penalty != 0, "presence_penalty");
  refuse(p.frequency_penalty != 0, "frequency_penalty");
  refuse(p.repetition_penalty != 1, "repetition_penalty");
}

// The most prompt ids a request may have: one generated token must still fit the context.
size_t prompt_id_limit(const ServingModel& m) { return static_cast<size_t>(std::max<int64_t>(m.max_model_len - 1, 0)); }

[[noreturn]] void prompt_too_long(const ServingModel& m, size_t bytes, const std::string& field) {
  throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt ({} bytes) "
                                "has more than {} tokens, which leaves no room for generated tokens.",
                                m.max_model_len, bytes, prompt_id_limit(m)),
                    field);
}

// A 400 before any copy or tokenization when `bytes` of prompt text must make more ids than fit
// (the tokenizer's bound on bytes per id; no bound, no check).
void check_prompt_bytes(const ServingModel& m, size_t bytes, const std::string& field) {
  if (m.tok && m.tok->min_ids_for_bytes(bytes) > prompt_id_limit(m)) prompt_too_long(m, bytes, field);
}

// The ids of a prompt text, or a 400 as soon as it is known not to fit the context: from its size
// alone when the tokenizer bounds the ids per byte, else by stopping the tokenizer at the limit.
// An over-long prompt never costs a whole tokenization (unless it is to be truncated).
std::vector<int32_t> encode_prompt(const ServingModel& m, const std::string& text, bool add_special_tokens,
                                   const std::string& field, bool truncating) {
  std::optional<std::vector<int32_t>> ids =
      m.tok->encode_at_most(text, add_special_tokens, truncating ? SIZE_MAX : prompt_id_limit(m));
  if (text.size() >= kLargePromptBytes) engine::release_free_memory();  // tokenizing's temporaries
  if (!ids) prompt_too_long(m, text.size(), field);
  return std::move(*ids);
}

// The text of the user messages, which every chat template renders whole (others it may drop or
// rewrite, e.g. earlier turns' reasoning): a lower bound on the rendered prompt's size, known
// before the messages are copied and rendered.
size_t user_text_bytes(const json& b) {
  size_t n = 0;
  if (!b.contains("messages") || !b["messages"].is_array()) return 0;
  for (const json& msg : b["messages"]) {
    if (!msg.is_object() || !msg.contains("role") || msg["role"] != "user" || !msg.contains("content")) continue;
    const json& c = msg["content"];
    if (c.is_string()) n += c.get_ref<const std::string&>().size();
    if (!c.is_array()) continue;
    for (const json& part : c)
      if (part.is_object() && part.contains("text") && part["text"].is_string())
        n += part["text"].get_ref<const std::string&>().size();
  }
  return n;
}

// truncate_prompt_tokens: keep N of the prompt's tokens (-1: the context length), as vLLM: the
// last N (truncation_side "left", the default) or the first N ("right").
void truncate_prompt(const json& b, const ServingModel& m, std::vector<int32_t>& ids) {
  const std::optional<std::string> side = opt_string(b, "truncation_side");
  if (side && *side != "left" && *side != "right")
    throw bad_request(fmt::format("'truncation_side' must be \"left\" or \"right\", got \"{}\"", *side),
                      "truncation_side");
  const std::optional<int64_t> t = opt_int(b, "truncate_prompt_tokens", -1);
  if (!t) return;
  const int64_t keep = *t == -1 ? m.max_model_len : *t;
  if (keep >= m.max_model_len && *t != -1)
    throw bad_request(fmt::format("truncate_prompt_tokens ({}) must be less than the context length ({})", keep,
                                  m.max_model_len),
                      "truncate_prompt_tokens");
  if (static_cast<int64_t>(ids.size()) <= keep) return;
  if (side == "right") ids.resize(static_cast<size_t>(keep));
  else ids.erase(ids.begin(), ids.end() - keep);
}

// max_tokens once the prompt is known: explicit values are checked against the context by the
// engine; defaults are clipped to what is left of it.
int64_t max_tokens_for(const json& b, const ServingModel& m, size_t prompt_len, std::optional<int64_t> fallback) {
  std::optional<int64_t> mt = opt_int(b, "max_completion_tokens", 1);
  if (!mt) mt = opt_int(b, "max_tokens", 1);
  if (mt) return *mt;  // against the context in engine::validate (overflow-safe)
  std::optional<int64_t> cap = fallback;
  if (m.defaults.max_tokens) cap = std::min(cap.value_or(*m.defaults.max_tokens), *m.defaults.max_tokens);
  return engine::default_max_tokens(m.max_model_len, static_cast<int64_t>(prompt_len), m.canvas_length, cap);
}

// The engine's one validator (ranges, context length) on every prompt, its RequestError as a
// 400. The completions endpoint's "max_completion_tokens" is reported under the name the client
// used; a list's prompt under its index.
void check_engine_params(const json& b, ApiRequest& r, const ServingModel& m) {
  if (m.canvas_length > 0) {
    // DiffusionGemma accepts whole blocks: no per-token logprobs to search or rank by (the other
    // fields it cannot honour are refused by the engine's check, engine/diffusion_generator.h).
    if (r.beam) throw bad_request("DiffusionGemma does not support beam search ('use_beam_search')", "use_beam_search");
    if (r.best_of > r.n)
      throw bad_request("DiffusionGemma does not support best_of > n (ranking samples needs each token's logprob)",
                        "best_of");
  }
  const int64_t choices = static_cast<int64_t>(r.prompts.size()) * r.best_of;
  if (choices > kMaxChoices)
    throw bad_request(fmt::format("{} prompts with {}={} make {} {}; at most {} per request", r.prompts.size(),
                                  r.best_of > r.n ? "best_of" : "n", r.best_of, choices,
                                  r.best_of > r.n ? "samples" : "choices", kMaxChoices),
                      r.prompts.size() > 1 ? "prompt" : r.best_of > r.n ? "best_of" : "n");
  r.params.prompt = r.prompts[0].ids;
  r.params.max_tokens = r.prompts[0].max_tokens;
  r.prompt_text = r.prompts[0].text;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    try {
      engine::RequestParams p = r.params;
      p.prompt = r.prompts[i].ids;
      p.max_tokens = r.prompts[i].max_tokens;
      engine::validate(p, engine::RequestLimits{m.vocab_size, m.max_model_len, m.max_logprobs});
      if (r.beam) {
        engine::BeamSearchParams bp = r.beam_params;
        bp.max_tokens = p.max_tokens;
        engine::validate_beam_search(bp, engine::RequestLimits{m.vocab_size, m.max_model_len}, p.prompt.size());
      }
    } catch (const engine::RequestError& e) {
      const bool renamed = e.param == "max_tokens" && present(b, "max_completion_tokens");
      const std::string param = renamed ? "max_completion_tokens" : e.param;
      if (r.prompts.size() > 1 && param == "prompt")
        throw bad_request(fmt::format("prompt[{}]: {}", i, e.what()), fmt::format("prompt[{}]", i));
      throw bad_request(e.what(), param);
    }
  }
}

// An error message without the server's own paths: the checkpoint directory (as given, and
// absolute) is cut from file names.
std::string without_server_paths(std::string msg, const ServingModel& m) {
  std::vector<std::string> dirs = {m.path};
  std::error_code ec;
  dirs.push_back(std::filesystem::absolute(m.path, ec).string());
  dirs.push_back(std::filesystem::weakly_canonical(m.path, ec).string());
  for (std::string d : dirs) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (d.empty() || d == "/" || d == ".") continue;
    d += '/';
    for (size_t at = msg.find(d); at != std::string::npos; at = msg.find(d, at)) msg.erase(at, d.size());
  }
  return msg;
}

// The image parts' cheap checks, before any is read: a model with a vision tower, the count
// against --limit-mm-per-prompt, and the fields that cannot be combined with images.
void check_image_parts(const json& b, const ServingModel& m, const std::vector<ImagePart>& images) {
  if (images.empty()) return;
  if (!m.images) {
    try {
      engine::refuse_images(m.name);
    } catch (const engine::RequestError& e) {
      throw bad_request(e.what(), images[0].field);
    }
  }
  const int64_t n = static_cast<int64_t>(images.size());
  if (n > m.image_limit)
    throw bad_request(fmt::format("image {}: At most {} image(s) may be provided in one prompt "
                                  "(--limit-mm-per-prompt), and this request has {}",
                                  m.image_limit + 1, m.image_limit, n),
                      images[static_cast<size_t>(m.image_limit)].field);
  // Cutting the prompt could cut an image's placeholders; beam search runs text prompts only.
  if (present(b, "truncate_prompt_tokens"))
    throw bad_request("'truncate_prompt_tokens' cannot be combined with image parts", "truncate_prompt_tokens");
  if (opt_bool(b, "use_beam_search").value_or(false))
    throw bad_request("'use_beam_search' cannot be combined with image parts", "use_beam_search");
  // They would change how the images are read or processed, which fp4lm does as the checkpoint's
  // preprocessor_config.json says: refused with images rather than ignored (without, no effect).
  for (const char* f : {"mm_processor_kwargs", "media_io_kwargs"})
    if (present(b, f) && !(b[f].is_object() && b[f].empty()))
      throw bad_request(fmt::format("'{}' is not supported with image parts (images are processed as the "
                                    "checkpoint's preprocessor_config.json says)",
                                    f),
                        f);
}

}  // namespace

engine::RequestParams choice_params(const ApiRequest& r, size_t c) {
  engine::RequestParams p = r.params;
  const ApiRequest::Prompt& pr = r.prompts[c / static_cast<size_t>(r.samples())];
  p.prompt = pr.ids;
  p.max_tokens = pr.max_tokens;
  p.sampling.seed = engine::sample_seed(p.sampling.seed, c % static_cast<size_t>(r.samples()));
  if (r.best_of > r.n) p.logprobs = std::max<int64_t>(p.logprobs, 0);  // the ranking sums the sampled tokens'
  return p;
}

json parse_body(const std::string& body) {
  // Integers exact (request_json.h), nesting bounded as every JSON we read.
  const json b = parse_request_json(body);
  if (!b.is_object()) throw bad_request(fmt::format("the request body must be a JSON object, got {}", io::json_type_name(b)));
  return b;
}

void check_model_field(const json& b, const ServingModel& m) {
  if (!present(b, "model")) return;
  if (!b["model"].is_string()) throw bad_request("'model' must be a string", "model");
  const std::string name = b["model"].get<std::string>();
  if (name != m.name && name != m.path)
    throw ApiError(404, fmt::format("The model `{}` does not exist.", name), "model");
}

ApiRequest parse_completion_request(const json& b, const ServingModel& m, uint64_t random_seed) {
  check_model_field(b, m);
  ApiRequest r;
  r.endpoint = Endpoint::completions;
  parse_common(b, m, random_seed, r);
  if (!b.contains("prompt") || b["prompt"].is_null()) throw bad_request("'prompt' is required", "prompt");
  const json& prompt = b["prompt"];
  const bool add_special = opt_bool(b, "add_special_tokens").value_or(true);
  const bool truncating = present(b, "truncate_prompt_tokens");  // a longer prompt is then fine
  // One prompt (a string or a list of token ids), or a list of them: each its own choices.
  auto one = [&](const json& x, const std::string& field) {
    ApiRequest::Prompt p;
    if (x.is_string()) {
      if (!truncating) check_prompt_bytes(m, x.get_ref<const std::string&>().size(), field);  // before copying
      p.text = x.get<std::string>();
      if (p.text.empty()) throw bad_request(fmt::format("'{}' is empty", field), field);
      if (!m.tok) throw bad_request("this model has no tokenizer: give the prompt as a list of token ids", field);
      p.ids = encode_prompt(m, p.text, add_special, field, truncating);
    } else if (x.is_array()) {
      p.ids = token_ids(x, field, m.vocab_size);
      if (p.ids.empty()) throw bad_request(fmt::format("'{}' is empty", field), field);
      if (m.tok) p.text = m.tok->decode(p.ids, false);
    } else {
      throw bad_request(fmt::format("'{}' must be a string or a list of token ids", field), field);
    }
    truncate_prompt(b, m, p.ids);
    p.max_tokens = max_tokens_for(b, m, p.ids.size(), 16);
    r.prompts.push_back(std::move(p));
  };
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    for (size_t i = 0; i < prompt.size(); ++i) one(prompt[i], fmt::format("prompt[{}]", i));
  } else if (prompt.is_string() || prompt.is_array()) {
    one(prompt, "prompt");
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
  }
  r.echo = opt_bool(b, "echo").value_or(false);
  if (auto lp = opt_int(b, "logprobs", -1)) {
    r.logprobs = true;
    r.top_logprobs = r.params.logprobs = resolve_logprobs(*lp, m, "logprobs", "sample");  // -1: the vocabulary
  }
  // echo with logprobs: the prompt's tokens come first in the logprobs (OpenAI), from prompt logprobs.
  if (r.echo && r.logprobs) r.params.prompt_logprobs = std::max(r.params.prompt_logprobs, r.top_logprobs);
  parse_logprob_token_ids(b, m, r);
  parse_beam_search(b, r);
  check_engine_params(b, r, m);
  return r;
}

std::string render_chat_prompt(const json& b, const ServingModel& m, const nlohmann::ordered_json* ordered,
                               std::vector<ImagePart>* images) {
  if (!m.tok || !m.chat)
    throw bad_request("this model has no tokenizer or chat template, so it cannot serve chat completions; use "
                      "/v1/completions",
                      "messages");
  const json messages = checked_messages(b, images);
  if (images) check_image_parts(b, m, *images);  // before the template sees them
  tokenizer::ChatOptions co = checked_template_options(b);
  // continue_final_message: the last (assistant) message is left open for the model to go on.
  const bool cont = opt_bool(b, "continue_final_message").value_or(false);
  if (cont && co.add_generation_prompt && opt_bool(b, "add_generation_prompt").value_or(false))
    throw bad_request("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                      "continue_final_message");
  if (cont) co.add_generation_prompt = false;
  std::string prompt;
  try {
    if (ordered && ordered->contains("messages"))
      prompt = m.chat->render_ordered(ordered_messages(messages, (*ordered)["messages"]),
                                      present(b, "tools") ? (*ordered)["tools"] : nlohmann::ordered_json(), co);
    else
      prompt = m.chat->render(messages, co);
  } catch (const Error& e) {
    throw bad_request(
        fmt::format("the chat template failed on these messages: {}", without_server_paths(e.what(), m)), "messages");
  }
  if (cont) {
    // As Hugging Face does: cut the rendering after the final message's content (its last part).
    const json& content = messages.back()["content"];
    const json& tail = content.is_array() ? content.back() : content;
    if (content.is_array() && tail.value("type", "") != "text")
      throw bad_request("continue_final_message: the final message must end with a text part", "continue_final_message");
    const std::string last = content.is_array() ? tail["text"].get<std::string>() : content.get<std::string>();
    const size_t at = last.empty() ? std::string::npos : prompt.rfind(last);
    if (at == std::string::npos)
      throw bad_request("continue_final_message: the final message's content does not appear in the rendered prompt",
                        "continue_final_message");
    prompt.resize(at + last.size());
  }
  return prompt;
}

namespace {

// tool_choice as vLLM resolves it: absent with tools means "auto", which needs the server's
// tool-call parser; "required" and a named function constrain the output (tool_choice_spec).
void parse_tool_choice(const json& b, const ServingModel& m, ApiRequest& r) {
  using TC = ApiRequest::ToolChoice;
  const bool tools = present(b, "tools") && b["tools"].is_array() && !b["tools"].empty();
  if (tools) r.tools = b["tools"];
  r.parallel_tool_calls = opt_bool(b, "parallel_tool_calls").value_or(true);
  if (!present(b, "tool_choice")) {
    r.tool_choice = tools ? TC::auto_calls : TC::none;
  } else if (b["tool_choice"].is_object()) {
    r.tool_choice = TC::named;
    r.named_tool = b["tool_choice"]["function"]["name"].get<std::string>();
  } else {
    const std::string v = b["tool_choice"].get<std::string>();
    r.tool_choice = v == "none" ? TC::none : v == "required" ? TC::required : TC::auto_calls;
  }
  if (r.tool_choice == TC::auto_calls && !tools) r.tool_choice = TC::none;  // "auto" with an empty list
  if (r.tool_choice == TC::auto_calls && !m.tool_parser)
    throw bad_request("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                      "tool_choice");
  if (r.tool_choice == TC::required || r.tool_choice == TC::named) {
    if (r.params.structured.active())
      throw bad_request(fmt::format("tool_choice \"required\" or a named function cannot be combined with '{}'",
                                    r.params.structured.param),
                        "tool_choice");
    r.params.structured = tool_choice_spec(b);
    r.params.structured.whitespace = json_whitespace(b, m.json_whitespace);
  }
}

}  // namespace

ApiRequest parse_chat_request(const json& b, const ServingModel& m, uint64_t random_seed,
                              const nlohmann::ordered_json* ordered) {
  check_model_field(b, m);
  ApiRequest r;
  r.endpoint = Endpoint::chat;
  parse_common(b, m, random_seed, r);
  // Harmony's channels are special tokens: the parser needs them in the text (vLLM parses them by id).
  if (m.reasoning == ReasoningKind::openai_gptoss || (m.tool_parser && m.tool_parser->name() == "openai"))
    r.params.skip_special_tokens = false;
  const bool truncating = present(b, "truncate_prompt_tokens");  // a longer prompt is then fine
  if (m.tok && m.chat && !truncating) check_prompt_bytes(m, user_text_bytes(b), "messages");  // before rendering
  const std::string prompt = render_chat_prompt(b, m, ordered, &r.images);
  parse_tool_choice(b, m, r);  // after the template's checks of tools and tool_choice
  r.include_reasoning = opt_bool(b, "include_reasoning").value_or(true);
  ApiRequest::Prompt p;
  p.ids = encode_prompt(m, prompt, opt_bool(b, "add_special_tokens").value_or(false), "messages", truncating);
  if (p.ids.empty()) throw bad_request("the rendered chat prompt is empty", "messages");
  if (!r.images.empty()) {
    // The template must write one placeholder per image part (one that drops parts, or text
    // holding the placeholder token itself, would pair images with the wrong places).
    const int32_t pad = m.images->image_pad_id();
    const auto pads = static_cast<size_t>(std::count(p.ids.begin(), p.ids.end(), pad));
    if (pads != r.images.size())
      throw bad_request(fmt::format("the chat template rendered {} image placeholder(s) (token id {}) for {} image "
                                    "part(s); each image part needs exactly one",
                                    pads, pad, r.images.size()),
                        "messages");
  }
  // echo: the final message, when it is the assistant's, comes first in the answer (vLLM).
  r.echo = opt_bool(b, "echo").value_or(false);
  if (r.echo) {
    const json& last = b["messages"].back();
    if (last.value("role", "") == "assistant") {
      std::vector<ImagePart> last_images;  // the request's own, read above
      const json content = checked_messages(json{{"messages", json::array({last})}}, &last_images)[0]["content"];
      if (content.is_string()) p.text = content.get<std::string>();
      else
        for (const json& part : content) {
          if (part["type"] != "text") continue;
          if (!p.text.empty()) p.text += '\n';
          p.text += part["text"].get_ref<const std::string&>();
        }
    }
  }
  truncate_prompt(b, m, p.ids);
  p.max_tokens = max_tokens_for(b, m, p.ids.size(), std::nullopt);
  if (opt_bool(b, "return_prompt_text").value_or(false)) r.prompt_text_out = prompt;
  r.prompts.push_back(std::move(p));
  r.logprobs = opt_bool(b, "logprobs").value_or(false);
  if (auto k = opt_int(b, "top_logprobs", -1)) {
    if (*k != 0 && !r.logprobs)
      throw bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
    // -1: the whole vocabulary (vLLM); logprob_token_ids, when given, take the place of the top k.
    if (!present(b, "logprob_token_ids")) r.top_logprobs = resolve_logprobs(*k, m, "top_logprobs", "sample");
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  parse_logprob_token_ids(b, m, r);
  if (r.tool_choice == ApiRequest::ToolChoice::auto_calls && present(b, "use_beam_search") &&
      b["use_beam_search"] == true)
    throw bad_request("tool calls cannot be combined with use_beam_search", "tool_choice");
  parse_beam_search(b, r);
  check_engine_params(b, r, m);
  return r;
}

void attach_chat_images(ApiRequest& r, const json& b, const ServingModel& m) {
  if (r.images.empty()) return;
  ApiRequest::Prompt& p = r.prompts[0];
  const int64_t text_tokens = static_cast<int64_t>(p.ids.size() - r.images.size());
  std::vector<engine::EncodedImage> encoded = encode_chat_images(r.images, m, text_tokens);
  engine::RequestParams with_images;
  with_images.prompt = p.ids;
  try {
    m.images->attach(with_images, std::move(encoded), m.max_model_len);
  } catch (const engine::RequestError& e) {
    throw bad_request(e.what(), "messages");
  }
  p.ids = std::move(with_images.prompt);
  r.params.images = std::move(with_images.images);
  p.max_tokens = max_tokens_for(b, m, p.ids.size(), std::nullopt);
  r.images.clear();
  check_engine_params(b, r, m);
}

TokenizeRequest parse_tokenize_request(const json& b, const ServingModel& m, const nlohmann::ordered_json* ordered) {
  check_model_field(b, m);
  if (!m.tok) throw bad_request("this model has no tokenizer");
  TokenizeRequest r;
  if (present(b, "messages")) {
    r.ids = m.tok->encode(render_chat_prompt(b, m, ordered), false);
  } else {
    const std::optional<std::string> prompt = opt_string(b, "prompt");
    if (!prompt) throw bad_request("'prompt' must be a string", "prompt");
    r.ids = m.tok->encode(*prompt, opt_bool(b, "add_special_tokens").value_or(true));
  }
  r.return_token_strs = opt_bool(b, "return_token_strs").value_or(false);
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json& b, const ServingModel& m) {
  check_model_field(b, m);
  if (!m.tok) throw bad_request("this model has no tokenizer");
  if (!present(b, "tokens")) throw bad_request("'tokens' must be a list of token ids", "tokens");
  return token_ids(b["tokens"], "tokens", static_cast<int64_t>(m.tok->vocab_size()));
}

}  // namespace fp4lm::server
