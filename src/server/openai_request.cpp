#include "server/openai_request.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/process_stats.h"
#include "io/json_file.h"
#include "server/chat_schema.h"
#include "server/request_fields.h"
#include "server/structured_output_request.h"
#include "server/tool_choice_spec.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

// Tokenizing costs many times the text's size in short-lived allocations; above this the freed
// memory is handed back at once instead of staying in the heap (engine/process_stats.h).
constexpr size_t kLargePromptBytes = size_t{1} << 20;

// The fields both endpoints share. `max_tokens_default` < 0: the rest of the context.
void parse_common(const json& b, const ServingModel& m, uint64_t random_seed, ApiRequest& r) {
  engine::RequestParams& p = r.params;
  const SamplingDefaults& d = m.defaults;

  if (auto n = opt_int(b, "n", 1); n && *n != 1)
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
  if (present(b, "stop_token_ids")) p.stop_token_ids = token_ids(b["stop_token_ids"], "stop_token_ids", m.vocab_size);
}

// max_tokens after the prompt is known: explicit values are checked against the context by the
// engine; defaults are clipped to what is left of it.
void set_max_tokens(const json& b, const ServingModel& m, ApiRequest& r, std::optional<int64_t> fallback) {
  std::optional<int64_t> mt = opt_int(b, "max_completion_tokens", 1);
  if (!mt) mt = opt_int(b, "max_tokens", 1);
  const int64_t left = m.max_model_len - static_cast<int64_t>(r.params.prompt.size());
  if (mt) {
    r.params.max_tokens = *mt;  // against the context in engine::validate (overflow-safe)
  } else {
    int64_t v = fallback ? *fallback : left;
    if (m.defaults.max_tokens) v = std::min(v, *m.defaults.max_tokens);
    r.params.max_tokens = std::max<int64_t>(1, std::min(v, left));
  }
}

// The engine's one validator (ranges, context length), its RequestError as a 400. The
// completions endpoint's "max_completion_tokens" is reported under the name the client used.
void check_engine_params(const json& b, const ApiRequest& r, const ServingModel& m) {
  try {
    engine::validate(r.params, engine::RequestLimits{m.vocab_size, m.max_model_len});
  } catch (const engine::RequestError& e) {
    const bool renamed = e.param == "max_tokens" && present(b, "max_completion_tokens");
    throw bad_request(e.what(), renamed ? "max_completion_tokens" : e.param);
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
    if (r.prompt_text.size() >= kLargePromptBytes) engine::release_free_memory();  // tokenizing's temporaries
  } else if (prompt.is_array()) {
    r.params.prompt = token_ids(prompt, "prompt", m.vocab_size);
    if (r.params.prompt.empty()) throw bad_request("the prompt is empty", "prompt");
    if (m.tok) r.prompt_text = m.tok->decode(r.params.prompt, false);
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a one-element list of either", "prompt");
  }
  if (present(b, "suffix")) throw bad_request("'suffix' is not supported", "suffix");
  r.echo = opt_bool(b, "echo").value_or(false);
  if (auto lp = opt_int(b, "logprobs", 0, engine::kMaxLogprobs)) {
    r.logprobs = true;
    r.top_logprobs = *lp;
    r.params.logprobs = *lp;
  }
  if (r.echo && r.logprobs) throw bad_request("'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo");
  set_max_tokens(b, m, r, 16);
  check_engine_params(b, r, m);
  return r;
}

std::string render_chat_prompt(const json& b, const ServingModel& m, const nlohmann::ordered_json* ordered) {
  if (!m.tok || !m.chat)
    throw bad_request("this model has no tokenizer or chat template, so it cannot serve chat completions; use "
                      "/v1/completions",
                      "messages");
  const json messages = checked_messages(b);
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
    // As Hugging Face does: cut the rendering after the final message's content.
    const std::string last = messages.back()["content"].get<std::string>();
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
  }
}

}  // namespace

ApiRequest parse_chat_request(const json& b, const ServingModel& m, uint64_t random_seed,
                              const nlohmann::ordered_json* ordered) {
  check_model_field(b, m);
  ApiRequest r;
  r.endpoint = Endpoint::chat;
  parse_common(b, m, random_seed, r);
  const std::string prompt = render_chat_prompt(b, m, ordered);
  parse_tool_choice(b, m, r);  // after the template's checks of tools and tool_choice
  r.include_reasoning = opt_bool(b, "include_reasoning").value_or(true);
  r.params.prompt = m.tok->encode(prompt, /*add_special_tokens=*/false);
  if (prompt.size() >= kLargePromptBytes) engine::release_free_memory();  // tokenizing's temporaries
  if (r.params.prompt.empty()) throw bad_request("the rendered chat prompt is empty", "messages");
  r.logprobs = opt_bool(b, "logprobs").value_or(false);
  if (auto k = opt_int(b, "top_logprobs", 0, engine::kMaxLogprobs)) {
    if (!r.logprobs) throw bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
    r.top_logprobs = *k;
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  set_max_tokens(b, m, r, std::nullopt);
  check_engine_params(b, r, m);
  return r;
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
