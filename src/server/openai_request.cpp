#include "server/openai_request.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "server/structured_output_request.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

constexpr int64_t kMaxLogprobs = 20;  // vLLM's default max_logprobs

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

std::optional<int64_t> opt_int(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  const json& v = b[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 5.0 is an integer to a JSON schema
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  throw bad_request(fmt::format("'{}' must be an integer, got {}", key, v.dump()), key);
}

std::optional<double> opt_num(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  if (!b[key].is_number()) throw bad_request(fmt::format("'{}' must be a number, got {}", key, b[key].dump()), key);
  return b[key].get<double>();
}

std::optional<bool> opt_bool(const json& b, const char* key) {
  if (!present(b, key)) return std::nullopt;
  if (!b[key].is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean, got {}", key, b[key].dump()), key);
  return b[key].get<bool>();
}

std::vector<int32_t> id_list(const json& v, const char* key, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const json& x : v) {
    if (!x.is_number_integer())
      throw bad_request(fmt::format("'{}' must be a list of integer token ids, found {}", key, x.dump()), key);
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw bad_request(fmt::format("'{}': token id {} is outside the vocabulary [0, {})", key, id, vocab), key);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// The fields both endpoints share. `max_tokens_default` < 0: the rest of the context.
void parse_common(const json& b, const ServingModel& m, uint64_t random_seed, ApiRequest& r) {
  engine::RequestParams& p = r.params;
  const SamplingDefaults& d = m.defaults;

  if (auto n = opt_int(b, "n"); n && *n != 1)
    throw bad_request(fmt::format("'n' must be 1 (more than one choice per request is not supported), got {}", *n), "n");
  r.stream = opt_bool(b, "stream").value_or(false);
  if (present(b, "stream_options")) {
    if (!r.stream) throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
    const json& so = b["stream_options"];
    if (!so.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    r.include_usage = opt_bool(so, "include_usage").value_or(false);
  }
  p.structured = parse_structured_outputs(b);  // response_format, structured_outputs, guided_*

  p.sampling.temperature = opt_num(b, "temperature").value_or(d.temperature.value_or(1.0));
  if (!(p.sampling.temperature >= 0))
    throw bad_request(fmt::format("'temperature' must be >= 0, got {}", p.sampling.temperature), "temperature");
  if (p.sampling.temperature < 1e-5) p.sampling.temperature = 0;  // vLLM: greedy
  p.sampling.top_p = opt_num(b, "top_p").value_or(d.top_p.value_or(1.0));
  const int64_t top_k = opt_int(b, "top_k").value_or(d.top_k.value_or(0));
  if (top_k < -1) throw bad_request(fmt::format("'top_k' must be -1 (disable), 0 (disable) or at least 1, got {}", top_k), "top_k");
  p.sampling.top_k = top_k < 0 ? 0 : top_k;
  p.sampling.min_p = opt_num(b, "min_p").value_or(d.min_p.value_or(0.0));
  p.sampling.seed = opt_int(b, "seed").has_value() ? static_cast<uint64_t>(*opt_int(b, "seed")) : random_seed;
  p.presence_penalty = opt_num(b, "presence_penalty").value_or(0.0);
  p.frequency_penalty = opt_num(b, "frequency_penalty").value_or(0.0);
  p.repetition_penalty = opt_num(b, "repetition_penalty").value_or(d.repetition_penalty.value_or(1.0));
  p.ignore_eos = opt_bool(b, "ignore_eos").value_or(false);
  p.min_tokens = opt_int(b, "min_tokens").value_or(0);
  p.skip_special_tokens = opt_bool(b, "skip_special_tokens").value_or(true);
  r.return_token_ids = opt_bool(b, "return_token_ids").value_or(false);

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
  if (present(b, "stop_token_ids")) {
    if (!b["stop_token_ids"].is_array()) throw bad_request("'stop_token_ids' must be a list of integers", "stop_token_ids");
    p.stop_token_ids = id_list(b["stop_token_ids"], "stop_token_ids", m.vocab_size);
  }
}

// max_tokens after the prompt is known: explicit values are checked against the context by the
// engine; defaults are clipped to what is left of it.
void set_max_tokens(const json& b, const ServingModel& m, ApiRequest& r, std::optional<int64_t> fallback) {
  std::optional<int64_t> mt = opt_int(b, "max_completion_tokens");
  const char* field = "max_completion_tokens";
  if (!mt) {
    mt = opt_int(b, "max_tokens");
    field = "max_tokens";
  }
  const int64_t left = m.max_model_len - static_cast<int64_t>(r.params.prompt.size());
  if (mt) {
    if (*mt < 1) throw bad_request(fmt::format("'{}' must be at least 1, got {}", field, *mt), field);
    r.params.max_tokens = *mt;
  } else {
    int64_t v = fallback ? *fallback : left;
    if (m.defaults.max_tokens) v = std::min(v, *m.defaults.max_tokens);
    r.params.max_tokens = std::max<int64_t>(1, std::min(v, left));
  }
}

// Engine-level checks (ranges, context length) as 400s.
void check_engine_params(const ApiRequest& r, const ServingModel& m) {
  const engine::RequestParams& p = r.params;
  try {
    engine::validate(p, m.vocab_size);
  } catch (const engine::RequestError& e) {
    throw bad_request(e.what(), e.param);
  }
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  if (prompt >= m.max_model_len)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                  "tokens, which leaves no room for generated tokens.",
                                  m.max_model_len, prompt),
                      "prompt");
  if (prompt + p.max_tokens > m.max_model_len)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                  "tokens ({} in the prompt, {} for the completion). Please reduce the length of "
                                  "the prompt or the completion.",
                                  m.max_model_len, prompt + p.max_tokens, prompt, p.max_tokens),
                      "max_tokens");
}

std::string message_content(const json& msg, size_t i) {
  if (!msg.contains("content") || msg["content"].is_null()) return "";
  const json& c = msg["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(fmt::format("messages[{}].content must be a string or a list of parts", i), "messages");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_request(fmt::format("messages[{}].content: only text parts ({{\"type\": \"text\", \"text\": ...}}) "
                                    "are supported",
                                    i),
                        "messages");
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

json parse_body(const std::string& body) {
  json b;
  try {
    b = io::parse_json(body, "the request body");  // nesting bounded, as every JSON we read
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
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
  json prompt = b["prompt"];
  // A one-element batch is the same as its element; real batches need n choices, not supported.
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() != 1)
      throw bad_request("batched prompts (a list of several prompts) are not supported; send one request per prompt",
                        "prompt");
    prompt = json(prompt[0]);
  }
  if (prompt.is_string()) {
    r.prompt_text = prompt.get<std::string>();
    if (r.prompt_text.empty()) throw bad_request("the prompt is empty", "prompt");
    if (!m.tok) throw bad_request("this model has no tokenizer: give the prompt as a list of token ids", "prompt");
    r.params.prompt = m.tok->encode(r.prompt_text, opt_bool(b, "add_special_tokens").value_or(true));
  } else if (prompt.is_array()) {
    r.params.prompt = id_list(prompt, "prompt", m.vocab_size);
    if (r.params.prompt.empty()) throw bad_request("the prompt is empty", "prompt");
    if (m.tok) r.prompt_text = m.tok->decode(r.params.prompt, false);
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a one-element list of either", "prompt");
  }
  if (present(b, "suffix")) throw bad_request("'suffix' is not supported", "suffix");
  r.echo = opt_bool(b, "echo").value_or(false);
  if (auto lp = opt_int(b, "logprobs")) {
    if (*lp < 0 || *lp > kMaxLogprobs)
      throw bad_request(fmt::format("'logprobs' must be in [0, {}], got {}", kMaxLogprobs, *lp), "logprobs");
    r.logprobs = true;
    r.top_logprobs = *lp;
    r.params.logprobs = *lp;
  }
  if (r.echo && r.logprobs) throw bad_request("'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo");
  set_max_tokens(b, m, r, 16);
  check_engine_params(r, m);
  return r;
}

std::string render_chat_prompt(const json& b, const ServingModel& m) {
  if (!m.tok || !m.chat)
    throw bad_request("this model has no tokenizer or chat template, so it cannot serve chat completions; use "
                      "/v1/completions",
                      "messages");
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    throw bad_request("'messages' must be a non-empty list of messages", "messages");
  json messages = json::array();
  for (size_t i = 0; i < b["messages"].size(); ++i) {
    const json& msg = b["messages"][i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      throw bad_request(fmt::format("messages[{}] must be an object with a string 'role'", i), "messages");
    json copy = msg;
    copy["content"] = message_content(msg, i);
    messages.push_back(std::move(copy));
  }
  tokenizer::ChatOptions co;
  co.add_generation_prompt = opt_bool(b, "add_generation_prompt").value_or(true);
  if (present(b, "chat_template_kwargs")) {
    const json& kw = b["chat_template_kwargs"];
    if (!kw.is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const auto& [k, v] : kw.items()) {
      if (k == "enable_thinking" && v.is_boolean()) co.enable_thinking = v.get<bool>();
      else co.extra[k] = v;
    }
  }
  if (present(b, "tools")) {
    if (!b["tools"].is_array()) throw bad_request("'tools' must be a list", "tools");
    co.tools = b["tools"];
  }
  try {
    return m.chat->render(messages, co);
  } catch (const Error& e) {
    throw bad_request(fmt::format("the chat template failed on these messages: {}", e.what()), "messages");
  }
}

ApiRequest parse_chat_request(const json& b, const ServingModel& m, uint64_t random_seed) {
  check_model_field(b, m);
  ApiRequest r;
  r.endpoint = Endpoint::chat;
  parse_common(b, m, random_seed, r);
  const std::string prompt = render_chat_prompt(b, m);
  r.params.prompt = m.tok->encode(prompt, /*add_special_tokens=*/false);
  if (r.params.prompt.empty()) throw bad_request("the rendered chat prompt is empty", "messages");
  r.logprobs = opt_bool(b, "logprobs").value_or(false);
  if (auto k = opt_int(b, "top_logprobs")) {
    if (*k < 0 || *k > kMaxLogprobs)
      throw bad_request(fmt::format("'top_logprobs' must be in [0, {}], got {}", kMaxLogprobs, *k), "top_logprobs");
    if (!r.logprobs) throw bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
    r.top_logprobs = *k;
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  set_max_tokens(b, m, r, std::nullopt);
  check_engine_params(r, m);
  return r;
}

}  // namespace fp4lm::server
