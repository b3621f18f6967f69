#include "server/openai_response.h"

#include <algorithm>

#include "engine/best_of.h"
#include "server/tool_call_parser.h"

namespace fp4lm::server {

using nlohmann::json;
using TC = ApiRequest::ToolChoice;

// What one choice has produced so far.
struct ResponseBuilder::Choice {
  size_t index = 0, prompt = 0;
  bool started = false;
  std::string text;  // generated text (streaming: as sent)
  std::vector<int32_t> ids;
  std::vector<engine::TokenLogprob> logprobs;
  std::vector<engine::TokenLogprob> prompt_lps;  // the prompt's tokens after the first
  double cumulative_logprob = 0;                 // of the sampled tokens (best_of ranks by it)
  std::string finish_reason;
  json stop_reason = nullptr;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache supplied
  std::unique_ptr<ChatOutputParser> parser;  // chat with a reasoning / tool parser
  std::string tool_text;                     // tool_choice "required": the output so far
  std::string named_id;                      // tool_choice named: the call's id once started
  size_t tool_calls = 0;                     // calls produced so far
};

ResponseBuilder::ResponseBuilder(const ApiRequest& req, const ServingModel& m, std::string id, int64_t created)
    : req_(req), m_(m), id_(std::move(id)), created_(created) {
  const size_t prompts = std::max<size_t>(1, req_.prompts.size());
  const size_t samples = static_cast<size_t>(std::max<int64_t>(1, req_.samples()));
  for (size_t c = 0; c < prompts * samples; ++c) {
    auto ch = std::make_unique<Choice>();
    ch->index = c;
    ch->prompt = c / samples;
    ch->parser = make_parser();
    choices_.push_back(std::move(ch));
  }
}

ResponseBuilder::~ResponseBuilder() = default;

std::unique_ptr<ChatOutputParser> ResponseBuilder::make_parser() const {
  if (!parses_output()) return nullptr;
  return std::make_unique<ChatOutputParser>(m_.reasoning, req_.tool_choice == TC::auto_calls ? m_.tool_parser : nullptr,
                                            &req_.tools);
}

const ApiRequest::Prompt& ResponseBuilder::prompt_of(const Choice& ch) const {
  static const ApiRequest::Prompt kNone;
  return ch.prompt < req_.prompts.size() ? req_.prompts[ch.prompt] : kNone;
}

std::string ResponseBuilder::token_text(int32_t id) const {
  if (!m_.tok || req_.return_tokens_as_token_ids) return "token_id:" + std::to_string(id);
  return m_.tok->decode({id}, false);
}

// Each prompt counts once, however many samples it has (as vLLM counts them).
int64_t ResponseBuilder::prompt_tokens() const {
  if (req_.prompts.empty()) return static_cast<int64_t>(req_.params.prompt.size());
  int64_t n = 0;
  for (const auto& p : req_.prompts) n += static_cast<int64_t>(p.ids.size());
  return n;
}

// Only the returned choices count (with best_of > n too, as vLLM counted them).
int64_t ResponseBuilder::completion_tokens() const {
  int64_t n = 0;
  for (const Choice* ch : returned()) n += ch->completion_tokens;
  return n;
}

std::vector<const ResponseBuilder::Choice*> ResponseBuilder::returned() const {
  std::vector<const Choice*> out;
  for (const auto& ch : choices_) out.push_back(ch.get());
  if (req_.best_of <= req_.n) return out;
  // Each prompt's candidates as engine::best_of_order ranks them.
  const size_t samples = static_cast<size_t>(req_.samples()), n = static_cast<size_t>(req_.n);
  std::vector<const Choice*> best;
  for (size_t at = 0; at < out.size(); at += samples) {
    std::vector<double> keys;
    for (size_t i = at; i < std::min(out.size(), at + samples); ++i) keys.push_back(out[i]->cumulative_logprob);
    for (size_t i : engine::best_of_order(keys, n)) best.push_back(out[at + i]);
  }
  return best;
}

json ResponseBuilder::usage() const {
  // prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache supplied (OpenAI's
  // and vLLM's field), each prompt once like prompt_tokens.
  const int64_t p = prompt_tokens(), c = completion_tokens();
  std::vector<int64_t> cached(std::max<size_t>(1, req_.prompts.size()), 0);
  for (const Choice* ch : returned())
    if (ch->prompt < cached.size()) cached[ch->prompt] = std::max(cached[ch->prompt], ch->cached_tokens);
  int64_t cached_total = 0;
  for (int64_t x : cached) cached_total += x;
  json details = nullptr;
  if (m_.prompt_tokens_details) details = {{"cached_tokens", cached_total}};
  return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}, {"prompt_tokens_details", details}};
}

json ResponseBuilder::choice_usage(const Choice& ch) const {
  const int64_t p = static_cast<int64_t>(prompt_of(ch).ids.size());
  return {{"prompt_tokens", p}, {"completion_tokens", ch.completion_tokens}, {"total_tokens", p + ch.completion_tokens}};
}

json ResponseBuilder::logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t text_offset,
                                    const Choice* echo) const {
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  if (req_.endpoint == Endpoint::chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string t = token_text(lp.id);
      json top = json::array();
      // logprob_token_ids: the sampled token first, then the listed ids (vLLM's per-token dict).
      const bool listed = !req_.params.logprob_token_ids.empty();
      if (listed) top.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}});
      for (const auto& [id, v] : lp.top) {
        if (listed && id == lp.id) continue;
        const std::string tt = token_text(id);
        top.push_back({{"token", tt}, {"logprob", v}, {"bytes", bytes_of(tt)}});
      }
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t off = text_offset;
  // vLLM's completions entries hold the sampled token as well as the top k (so logprobs=0
  // gives the sampled token alone, and k + 1 entries when it is not among the top k).
  auto top_of = [&](const std::string& t, const engine::TokenLogprob& lp) {
    json d = json::object();
    d[t] = lp.logprob;
    const size_t k = std::min(lp.top.size(), static_cast<size_t>(req_.top_logprobs));
    for (size_t i = 0; i < k; ++i) d[token_text(lp.top[i].first)] = lp.top[i].second;
    return d;
  };
  if (echo) {
    // The prompt's tokens first (OpenAI's echo): the first has no logprob, the others their
    // prompt logprobs (absent only when the request failed before its first token).
    const std::vector<int32_t>& ids = prompt_of(*echo).ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string t = token_text(ids[i]);
      tokens.push_back(t);
      offsets.push_back(off);
      off += t.size();
      if (i == 0 || i - 1 >= echo->prompt_lps.size()) {
        token_logprobs.push_back(nullptr);
        top.push_back(nullptr);
        continue;
      }
      const engine::TokenLogprob& lp = echo->prompt_lps[i - 1];
      token_logprobs.push_back(lp.logprob);
      top.push_back(top_of(t, lp));
    }
  }
  for (const auto& lp : lps) {
    const std::string t = token_text(lp.id);
    tokens.push_back(t);
    token_logprobs.push_back(lp.logprob);
    top.push_back(top_of(t, lp));
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token {id: {logprob, rank,
// decoded_token}} for the token itself and the top k (ranks 1..k), -inf clamped as vLLM does.
json ResponseBuilder::prompt_logprobs_json(const Choice& ch) const {
  json list = json::array({nullptr});
  for (const engine::TokenLogprob& lp : ch.prompt_lps) {
    json d = json::object();
    auto entry = [&](int32_t id, float v, int64_t rank) {
      d[std::to_string(id)] = {{"logprob", std::max(v, -9999.0f)}, {"rank", rank}, {"decoded_token", token_text(id)}};
    };
    entry(lp.id, lp.logprob, lp.rank);
    const size_t k = std::min(lp.top.size(), static_cast<size_t>(std::max<int64_t>(0, req_.params.prompt_logprobs)));
    for (size_t i = 0; i < k; ++i) entry(lp.top[i].first, lp.top[i].second, static_cast<int64_t>(i) + 1);
    list.push_back(std::move(d));
  }
  return list;
}

json ResponseBuilder::chunk_base() const {
  json c = {{"id", id_},
            {"object", req_.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", m_.name}};
  // vLLM writes chunks with exclude_unset: `usage` only where it is set (continuous usage, the
  // final usage chunk), never as null.
  return c;
}

// Chat text goes through the reasoning / tool-call parsers (otherwise it is all content).
bool ResponseBuilder::parses_output() const {
  if (req_.endpoint != Endpoint::chat) return false;
  if (req_.tool_choice == TC::required || req_.tool_choice == TC::named) return false;
  return m_.reasoning != ReasoningKind::none || (req_.tool_choice == TC::auto_calls && m_.tool_parser);
}

// tool_choice "required": the output is a JSON list of {"name", "parameters"} (the constraint
// makes it so unless the length limit cut it; then there are no calls, and the text is content).
std::vector<ToolCallDelta> ResponseBuilder::required_calls(const std::string& text) const {
  std::vector<ToolCallDelta> calls;
  const auto v = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_array()) return calls;
  for (const auto& c : v) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return {};
    calls.push_back({calls.size(), make_tool_call_id(), c["name"].get<std::string>(),
                     python_json_dumps(c.contains("parameters") ? c["parameters"] : nlohmann::ordered_json::object())});
  }
  return calls;
}

ChatDelta ResponseBuilder::chat_delta(Choice& ch, const std::string& text, bool last) const {
  ChatDelta d;
  if (req_.tool_choice == TC::named) {
    if (!text.empty()) {
      ToolCallDelta t{0, "", "", text};
      if (ch.named_id.empty()) {
        ch.named_id = make_tool_call_id();
        t.id = ch.named_id;
        t.name = req_.named_tool;
      }
      d.tool_calls.push_back(std::move(t));
    }
  } else if (req_.tool_choice == TC::required) {
    ch.tool_text += text;
    if (last) {
      d.tool_calls = required_calls(ch.tool_text);
      // Cut by max_tokens (not a complete list): what was generated comes back as content.
      if (d.tool_calls.empty()) d.content = ch.tool_text;
    }
  } else if (ch.parser) {
    d = ch.parser->feed(text);
    if (last) {
      ChatDelta rest = ch.parser->finish();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
      for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
    }
  } else {
    d.content = text;
  }
  if (!req_.include_reasoning) d.reasoning.clear();
  if (!req_.parallel_tool_calls) std::erase_if(d.tool_calls, [](const ToolCallDelta& t) { return t.index > 0; });
  ch.tool_calls += static_cast<size_t>(
      std::count_if(d.tool_calls.begin(), d.tool_calls.end(), [](const ToolCallDelta& t) { return !t.name.empty(); }));
  return d;
}

// The deltas of one chat output, one per chunk as vLLM sends them: reasoning / content first,
// then each tool call's opening (id, type, name) and its arguments.
std::vector<json> ResponseBuilder::chat_stream_deltas(const ChatDelta& d, bool last) const {
  std::vector<json> deltas;
  const bool plain = !parses_output() && req_.tool_choice != TC::named && req_.tool_choice != TC::required;
  if (plain) {
    deltas.push_back({{"content", d.content}});
    return deltas;
  }
  if (!d.content.empty() || !d.reasoning.empty()) {
    json x = json::object();
    if (!d.reasoning.empty()) {
      x["reasoning_content"] = d.reasoning;
      x["reasoning"] = d.reasoning;
    }
    if (!d.content.empty()) x["content"] = d.content;
    deltas.push_back(std::move(x));
  }
  for (const ToolCallDelta& t : d.tool_calls) {
    if (!t.name.empty()) {
      deltas.push_back({{"tool_calls", json::array({{{"index", t.index},
                                                     {"id", t.id},
                                                     {"type", "function"},
                                                     {"function", {{"name", t.name}}}}})}});
    }
    if (!t.arguments.empty())
      deltas.push_back({{"tool_calls", json::array({{{"index", t.index}, {"function", {{"arguments", t.arguments}}}}})}});
  }
  if (deltas.empty() && last) deltas.push_back({{"content", ""}});
  return deltas;
}

std::string ResponseBuilder::chat_finish_reason(const Choice& ch, const std::string& engine_reason) const {
  if (ch.tool_calls > 0 && req_.tool_choice == TC::auto_calls) return "tool_calls";
  if (req_.tool_choice == TC::required && engine_reason == "stop" && ch.tool_calls > 0) return "tool_calls";
  return engine_reason;
}

std::vector<json> ResponseBuilder::stream_chunks(size_t c, const engine::RequestOutput& out) {
  Choice& ch = *choices_.at(c);
  std::vector<json> chunks;
  const bool chat = req_.endpoint == Endpoint::chat;
  std::string text = out.text;
  bool echoing = false;  // completions: this chunk starts with the prompt
  if (!out.prompt_logprobs.empty()) ch.prompt_lps = out.prompt_logprobs;
  if (!ch.started) {
    ch.started = true;
    if (chat) {
      json first = chunk_base();
      json delta = {{"role", "assistant"}, {"content", req_.echo ? prompt_of(ch).text : std::string()}};
      first["choices"] = json::array(
          {{{"index", ch.index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      // vLLM sets both on the first chunk, null unless asked for.
      first["prompt_token_ids"] = req_.return_token_ids ? json(prompt_of(ch).ids) : json(nullptr);
      first["prompt_text"] = req_.prompt_text_out ? json(*req_.prompt_text_out) : json(nullptr);
      if (req_.continuous_usage) first["usage"] = choice_usage(ch);
      chunks.push_back(std::move(first));
    } else if (req_.echo) {
      text = prompt_of(ch).text + text;
      echoing = true;
    }
  }
  if (out.completion_tokens > 0) ch.completion_tokens = out.completion_tokens;
  ch.cached_tokens = std::max(ch.cached_tokens, out.cached_tokens);
  const bool has_ids = !out.token_ids.empty() && (req_.return_token_ids || req_.logprobs);
  const bool first_text_chunk = !chat && ch.text.empty() && ch.ids.empty();
  if (text.empty() && !out.finished && !has_ids && !(first_text_chunk && req_.return_token_ids)) return chunks;

  std::vector<json> deltas;
  if (chat) {
    const bool last = out.finished && out.finish_reason != "error";
    deltas = chat_stream_deltas(chat_delta(ch, text, last), out.finished);
    if (deltas.empty()) {
      if (!has_ids) return chunks;
      deltas.push_back({{"content", ""}});
    }
  } else {
    deltas.push_back(nullptr);
  }
  for (size_t i = 0; i < deltas.size(); ++i) {
    const bool first = i == 0, final_chunk = i + 1 == deltas.size();
    json choice = {{"index", ch.index}};
    if (chat) choice["delta"] = deltas[i];
    else choice["text"] = text;
    if (first && req_.logprobs && echoing) choice["logprobs"] = logprobs_json(out.logprobs, ch.text.size(), &ch);
    else if (first && req_.logprobs && !out.logprobs.empty()) choice["logprobs"] = logprobs_json(out.logprobs, ch.text.size());
    else choice["logprobs"] = nullptr;
    const bool finishing = out.finished && final_chunk;
    choice["finish_reason"] =
        finishing ? json(chat ? chat_finish_reason(ch, out.finish_reason) : out.finish_reason) : json(nullptr);
    // vLLM's stream choices: completions set stop_reason, prompt_token_ids and token_ids on every
    // chunk (null when finishing / asked for does not hold), chat token_ids on every chunk and
    // stop_reason on the finishing one.
    if (finishing) {
      choice["stop_reason"] = out.stop_reason ? json(*out.stop_reason)
                              : out.stop_token ? json(*out.stop_token)
                                               : json(nullptr);
    } else if (!chat) {
      choice["stop_reason"] = nullptr;
    }
    if (!chat)
      choice["prompt_token_ids"] =
          req_.return_token_ids && first && first_text_chunk ? json(prompt_of(ch).ids) : json(nullptr);
    choice["token_ids"] = !req_.return_token_ids ? json(nullptr) : first ? json(out.token_ids) : json::array();
    json chunk = chunk_base();
    chunk["choices"] = json::array({choice});
    if (req_.continuous_usage) chunk["usage"] = choice_usage(ch);
    chunks.push_back(std::move(chunk));
  }
  ch.text += text;
  ch.ids.insert(ch.ids.end(), out.token_ids.begin(), out.token_ids.end());
  return chunks;
}

json ResponseBuilder::usage_chunk() const {
  json c = chunk_base();
  c["choices"] = json::array();
  c["usage"] = usage();
  if (c["usage"]["prompt_tokens_details"].is_null()) c["usage"].erase("prompt_tokens_details");  // vLLM: exclude_unset
  return c;
}

void ResponseBuilder::add(size_t c, const engine::RequestOutput& out) {
  Choice& ch = *choices_.at(c);
  ch.text += out.text;
  ch.ids.insert(ch.ids.end(), out.token_ids.begin(), out.token_ids.end());
  ch.logprobs.insert(ch.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  for (const auto& lp : out.logprobs) ch.cumulative_logprob += lp.logprob;
  if (!out.prompt_logprobs.empty()) ch.prompt_lps = out.prompt_logprobs;
  if (out.completion_tokens > 0) ch.completion_tokens = out.completion_tokens;
  ch.cached_tokens = std::max(ch.cached_tokens, out.cached_tokens);
  if (out.finished) {
    ch.finish_reason = out.finish_reason;
    ch.stop_reason = out.stop_reason ? json(*out.stop_reason) : out.stop_token ? json(*out.stop_token) : json(nullptr);
  }
}

// The whole chat message: the same parsers over the whole text, so it equals the streamed deltas.
json ResponseBuilder::chat_message(const Choice& ch, std::string& finish_reason) const {
  const std::string echo = req_.echo ? prompt_of(ch).text : std::string();
  // vLLM's ChatMessage, every key (tool_calls only when there are calls, as vLLM serializes it).
  json msg = {{"role", "assistant"}, {"content", echo + ch.text}, {"refusal", nullptr}, {"annotations", nullptr},
              {"audio", nullptr},    {"function_call", nullptr},   {"reasoning", nullptr}};
  if (req_.tool_choice == TC::none && m_.reasoning == ReasoningKind::none) return msg;
  Choice whole;
  whole.parser = make_parser();
  const ChatDelta d = chat_delta(whole, ch.text, true);
  finish_reason = chat_finish_reason(whole, ch.finish_reason);
  json calls = json::array();
  for (const ToolCallDelta& t : d.tool_calls) {
    if (t.name.empty() && !calls.empty() && calls.back()["function"]["arguments"].is_string()) {
      // A later argument chunk of the same call (a parser that streams arguments).
      calls.back()["function"]["arguments"] = calls.back()["function"]["arguments"].get<std::string>() + t.arguments;
      continue;
    }
    calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
  }
  const bool forced = req_.tool_choice == TC::named || req_.tool_choice == TC::required;
  const std::string content = echo + d.content;
  msg["content"] = !content.empty() ? json(content) : forced || calls.empty() ? json("") : json(nullptr);
  if (m_.reasoning != ReasoningKind::none) {
    msg["reasoning_content"] = d.reasoning.empty() ? json(nullptr) : json(d.reasoning);
    msg["reasoning"] = msg["reasoning_content"];
  }
  if (!calls.empty()) msg["tool_calls"] = calls;  // vLLM leaves an empty list out
  return msg;
}

json ResponseBuilder::response() const {
  const bool chat = req_.endpoint == Endpoint::chat;
  json choices = json::array();
  const std::vector<const Choice*> ret = returned();
  for (size_t c = 0; c < ret.size(); ++c) {
    const Choice& ch = *ret[c];
    json choice = {{"index", c}};
    const bool echo = !chat && req_.echo;
    std::string finish_reason = ch.finish_reason;
    if (chat) choice["message"] = chat_message(ch, finish_reason);
    else choice["text"] = (echo ? prompt_of(ch).text : std::string()) + ch.text;
    choice["logprobs"] = req_.logprobs ? logprobs_json(ch.logprobs, 0, echo ? &ch : nullptr) : json(nullptr);
    choice["finish_reason"] = finish_reason;
    choice["stop_reason"] = ch.stop_reason;
    // vLLM's choice keys, null when not asked for (its responses are model_dump()s: every field).
    choice["token_ids"] = req_.return_token_ids ? json(ch.ids) : json(nullptr);
    if (!chat) {
      // vLLM returns the prompt logprobs whenever they were computed (echo with logprobs too).
      choice["prompt_logprobs"] = req_.params.prompt_logprobs >= 0 ? prompt_logprobs_json(ch) : json(nullptr);
      choice["prompt_token_ids"] = req_.return_token_ids ? json(prompt_of(ch).ids) : json(nullptr);
    }
    choice["routed_experts"] = nullptr;
    choices.push_back(std::move(choice));
  }
  json r = {{"id", id_},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", m_.name},
            {"choices", choices},
            {"service_tier", nullptr},
            {"system_fingerprint", nullptr},
            {"usage", usage()},
            {"kv_transfer_params", nullptr},
            {"ec_transfer_params", nullptr},
            {"metrics", nullptr}};
  if (chat) {
    // Chat: one prompt; its ids and prompt_logprobs on the response (vLLM's place for them).
    r["prompt_token_ids"] = req_.return_token_ids && !req_.prompts.empty() ? json(req_.prompts[0].ids) : json(nullptr);
    r["prompt_logprobs"] = req_.params.prompt_logprobs >= 0 && !ret.empty() ? prompt_logprobs_json(*ret[0]) : json(nullptr);
    r["prompt_text"] = req_.prompt_text_out ? json(*req_.prompt_text_out) : json(nullptr);
  }
  return r;
}

}  // namespace fp4lm::server
