// The API layer without sockets: request fields -> engine parameters, the 400/404 table,
// response and stream-chunk shapes, SSE framing, and the metrics exposition.
#include <gtest/gtest.h>

#include "../tokenizer/tokenizer_fixtures.h"
#include "common/paths.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace fp4lm::server::openai_api_test {
namespace {

using nlohmann::json;

class OpenAiApi : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = tokenizer::Tokenizer::from_json(tokenizer::fixtures::gpt2().dump(), "");
    chat_ = std::make_unique<tokenizer::ChatTemplate>(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}"
        "[no-think]{% endif %}{% endif %}",
        "", "");
    m_.name = "tiny";
    m_.path = "/models/tiny";
    m_.tok = tok_.get();
    m_.chat = chat_.get();
    m_.max_model_len = 64;
    m_.vocab_size = 269;
  }
  ApiRequest completion(const std::string& body) { return parse_completion_request(parse_body(body), m_, 77); }
  ApiRequest chat(const std::string& body) { return parse_chat_request(parse_body(body), m_, 77); }
  // The ApiError a completions body gets ("" status 0 when none).
  std::pair<int, std::string> error_of(const std::string& body, bool is_chat = false) {
    try {
      is_chat ? chat(body) : completion(body);
    } catch (const ApiError& e) {
      return {e.status, e.param};
    }
    return {0, ""};
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_;
  ServingModel m_;
};

TEST_F(OpenAiApi, CompletionFieldsMapToEngineParameters) {
  ApiRequest r = completion(R"({"model": "tiny", "prompt": "hello", "max_tokens": 5, "temperature": 0.5,
      "top_p": 0.9, "top_k": 7, "min_p": 0.1, "seed": 3, "stop": ["a", "bc"], "stop_token_ids": [4],
      "ignore_eos": true, "min_tokens": 2, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.2, "logprobs": 3, "stream": true,
      "stream_options": {"include_usage": true}, "unknown_field": {"is": "ignored"}})");
  const engine::RequestParams& p = r.params;
  EXPECT_EQ(p.prompt, tok_->encode("hello", true));
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_DOUBLE_EQ(p.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(p.sampling.top_p, 0.9);
  EXPECT_EQ(p.sampling.top_k, 7);
  EXPECT_DOUBLE_EQ(p.sampling.min_p, 0.1);
  EXPECT_EQ(p.sampling.seed, 3u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{4});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_DOUBLE_EQ(p.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(p.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.2);
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.prompt_text, "hello");
}

TEST_F(OpenAiApi, DefaultsFollowVllm) {
  ApiRequest r = completion(R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(r.params.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.params.max_tokens, 16);  // completions default
  EXPECT_DOUBLE_EQ(r.params.sampling.temperature, 1.0);
  EXPECT_EQ(r.params.sampling.seed, 77u);  // the server's random seed when none is given
  EXPECT_EQ(r.params.sampling.top_k, 0);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(completion(R"({"prompt": [[5, 6]], "top_k": -1, "temperature": 0})").params.sampling.top_k, 0);
  ApiRequest c = chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(c.params.max_tokens, 64 - static_cast<int64_t>(c.params.prompt.size())) << "chat: the rest of the context";
  m_.defaults.temperature = 0.25;
  m_.defaults.max_tokens = 3;
  EXPECT_DOUBLE_EQ(completion(R"({"prompt": "x"})").params.sampling.temperature, 0.25);
  EXPECT_EQ(completion(R"({"prompt": "x"})").params.max_tokens, 3);
  EXPECT_DOUBLE_EQ(completion(R"({"prompt": "x", "temperature": 0.75})").params.sampling.temperature, 0.75);
}

TEST_F(OpenAiApi, ChatRendersTheTemplateWithItsOptions) {
  ApiRequest c = chat(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
      "chat_template_kwargs": {"enable_thinking": false}, "max_completion_tokens": 4, "logprobs": true,
      "top_logprobs": 2})");
  EXPECT_EQ(tok_->decode(c.params.prompt), "<system>be brief\n<user>hi\n<assistant>[no-think]");
  EXPECT_EQ(c.params.max_tokens, 4);
  EXPECT_EQ(c.params.logprobs, 2);
  ApiRequest no_gen = chat(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false})");
  EXPECT_EQ(tok_->decode(no_gen.params.prompt), "<user>hi\n");
}

TEST_F(OpenAiApi, EveryInvalidFieldIsA400NamingIt) {
  const std::vector<std::pair<std::string, std::string>> table = {
      {R"({})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": ["a", 5]})", "prompt[1]"},
      {R"({"prompt": ["a", ""]})", "prompt[1]"},
      {R"({"prompt": [[1], [1, 99999]]})", "prompt[1]"},
      {R"({"prompt": [1, "x"]})", "prompt"},
      {R"({"prompt": [1, 9999]})", "prompt"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 100})", "max_tokens"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "seed": "s"})", "seed"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"prompt": "x", "stop_token_ids": 3})", "stop_token_ids"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": "x", "min_tokens": 20, "max_tokens": 5})", "min_tokens"},
      {R"({"prompt": "x", "n": 129})", "n"},
      {R"({"prompt": ["a", "b"], "n": 100})", "prompt"},
      {R"({"prompt": "x", "n": 2, "best_of": 1})", "best_of"},
      {R"({"prompt": "x", "n": 2, "best_of": 3, "stream": true})", "best_of"},
      {R"({"prompt": "x", "prompt_logprobs": -1})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", "prompt_logprobs"},
      {R"({"prompt": "x", "logit_bias": {"269": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": "a"}})", "logit_bias.1"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "truncation_side": "middle"})", "truncation_side"},
      {R"({"prompt": "x", "truncation_side": 1})", "truncation_side"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": false, "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "echo": "no"})", "echo"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format.type"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "response_format.json_schema"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})", "structured_outputs"},
      {R"({"prompt": "x", "structured_outputs": {"structural_tag": "a"}})", "structured_outputs.structural_tag"},
      {R"({"prompt": "x", "guided_choice": []})", "guided_choice"},
      {R"({"prompt": "x", "guided_regex": "a", "response_format": {"type": "json_object"}})", "guided_regex"},
      {R"({"prompt": "x", "response_format": "text"})", "response_format"},
      {R"({"prompt": "x", "suffix": "y"})", "suffix"},
      // Sizes that overflow a 64-bit sum with the prompt, and numbers no 64-bit integer holds.
      {R"({"prompt": "x", "max_tokens": 9223372036854775807})", "max_tokens"},
      {R"({"prompt": "x", "max_completion_tokens": 9223372036854775807})", "max_completion_tokens"},
      {R"({"prompt": "x", "max_tokens": 9223372036854775808})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e300})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -9223372036854775808})", "max_tokens"},
      {R"({"prompt": "x", "min_tokens": 9223372036854775807})", "min_tokens"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", "seed"},
      {R"({"prompt": "x", "seed": 1e19})", "seed"},
      {R"({"prompt": "x", "n": 9223372036854775807})", "n"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "logprobs": 9223372036854775807})", "logprobs"},
      {R"({"prompt": "x", "top_k": -9223372036854775808})", "top_k"},
      {R"({"prompt": "x", "top_k": 1e19})", "top_k"},
      // Integer literals outside 64 bits stay outside (no double rounding them onto -2^63).
      {R"({"prompt": "x", "seed": -9223372036854775809})", "seed"},
      {R"({"prompt": "x", "seed": -9223372036854776000})", "seed"},
      {R"({"prompt": "x", "seed": 18446744073709551616})", "seed"},
      {R"({"prompt": "x", "n": -9223372036854775809})", "n"},
      {R"({"prompt": "x", "stop_token_ids": [-9223372036854775809]})", "stop_token_ids"},
      {R"({"prompt": "x", "routed_experts_prompt_start": -1})", "routed_experts_prompt_start"},
      {R"({"prompt": "x", "stream_interval": 0})", "stream_interval"},
      {R"({"prompt": [1, 18446744073709551615]})", "prompt"},
      {R"({"prompt": [1, 2.5]})", "prompt"},
      {R"({"prompt": "x", "stop_token_ids": [4294967297]})", "stop_token_ids"},
      {R"({"prompt": "x", "add_special_tokens": "yes"})", "add_special_tokens"},
      {R"({"prompt": "x", "response_format": {"type": 5}})", "response_format.type"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": "x"}})", "stream_options.include_usage"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": 1}})",
       "stream_options.continuous_usage_stats"},
  };
  for (const auto& [body, param] : table) {
    auto [status, got] = error_of(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(got, param) << body;
  }
  const std::vector<std::pair<std::string, std::string>> chat_table = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0]"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].image_url"},
      {R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})", "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 25})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": 1})", "chat_template_kwargs"},
      // Type errors inside nested fields name the exact place (never a JSON-library message).
      {R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})", "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})", "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": ["hi"]}]})", "messages[0].content[0]"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": 5, "content": "hi"}]})", "messages[0]"},
      {R"({"messages": [{"role": "user", "content": "hi", "name": 3}]})", "messages[0].name"},
      {R"({"messages": [{"role": "assistant", "tool_calls": 1}]})", "messages[0].tool_calls"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": "x"}]}]})",
       "messages[0].tool_calls[0].function"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": ["hi"]})", "messages[0]"},
      // tools as vLLM's schema has them: a list of {"type": "function", "function": {"name", ...}}.
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [1, 2]})", "tools[0]"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": {"a": 1}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": "x"}]})",
       "tools[0].function"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "code", "function": {"name": "f"}}]})",
       "tools[0].type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {}}]})",
       "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
          "function": {"name": "f", "parameters": "x"}}]})",
       "tools[0].function.parameters"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": 3})", "tool_choice"},
      // chat_template_kwargs may not replace what the server sets.
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}})",
       "chat_template_kwargs.messages"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"tools": [1]}})",
       "chat_template_kwargs.tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"add_generation_prompt": false}})",
       "chat_template_kwargs.add_generation_prompt"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"bos_token": "x"}})",
       "chat_template_kwargs.bos_token"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": "no"}})",
       "chat_template_kwargs.enable_thinking"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": 1})", "add_generation_prompt"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9223372036854775807})", "max_tokens"},
  };
  for (const auto& [body, param] : chat_table) {
    auto [status, got] = error_of(body, true);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(got, param) << body;
  }
}

// Errors are one clear line naming the field: no JSON-library text ("[json.exception..."), and
// values outside int64 are said to be so rather than wrapped.
TEST_F(OpenAiApi, ErrorMessagesNameTheFieldInPlainWords) {
  auto message_of = [&](const std::string& body, bool is_chat) -> std::string {
    try {
      is_chat ? chat(body) : completion(body);
    } catch (const ApiError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message_of(R"({"prompt": "x", "max_tokens": 9223372036854775807})", false),
            "This model's maximum context length is 64 tokens. However, you requested 9223372036854775808 tokens "
            "(1 in the prompt, 9223372036854775807 for the completion). Please reduce the length of the prompt or "
            "the completion.");
  EXPECT_EQ(message_of(R"({"prompt": "x", "max_tokens": 18446744073709551615})", false),
            "'max_tokens' must be an integer in [1, 9223372036854775807], got 18446744073709551615");
  EXPECT_EQ(message_of(R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})", true),
            "'messages[0].content[0].type' must be a string, got 5");
  EXPECT_EQ(message_of(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [1, 2]})", true),
            "'tools[0]' must be an object");
  EXPECT_EQ(message_of(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}})",
                       true),
            "'chat_template_kwargs.messages': 'messages' is set by the server and cannot be replaced");
  // Control characters in a value come back escaped, and long values cut.
  const std::string shown = message_of("{\"prompt\": \"x\", \"temperature\": \"\\u001b[31m" + std::string(200, 'a') + "\"}", false);
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\u001b[31m"), std::string::npos) << shown;
  EXPECT_LT(shown.size(), 120u) << shown;
  // The extremes of a signed 64-bit seed are valid seeds.
  EXPECT_EQ(completion(R"({"prompt": "x", "seed": -9223372036854775808})").params.sampling.seed, 1ull << 63);
  EXPECT_EQ(completion(R"({"prompt": "x", "seed": 9223372036854775807})").params.sampling.seed, (1ull << 63) - 1);
  EXPECT_EQ(completion(R"({"prompt": "x", "max_tokens": 5.0})").params.max_tokens, 5);
}

TEST_F(OpenAiApi, ValidToolsReachTheTemplate) {
  chat_ = std::make_unique<tokenizer::ChatTemplate>(
      "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
      "{% endfor %}{{ flavour }}",
      "", "");
  m_.chat = chat_.get();
  ApiRequest c = chat(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                 "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
      "chat_template_kwargs": {"flavour": "!"}})");
  EXPECT_EQ(tok_->decode(c.params.prompt), "[get_weather]<user>hi<assistant><tool>ok!");
}

// Tools and tool-call arguments reach the template in the request's key order (Hugging Face's
// tojson keeps it; nlohmann's json would sort), arguments strings parsed as vLLM does.
TEST_F(OpenAiApi, TemplateSeesRequestKeyOrderAndParsedArguments) {
  chat_ = std::make_unique<tokenizer::ChatTemplate>(
      "{% for t in tools %}{{ t.function.parameters | tojson }}{% endfor %}|{% for m in messages %}"
      "{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}",
      "", "");
  m_.chat = chat_.get();
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{\"zeta\": 1, \"alpha\": 2}"}}]}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                 "properties": {"zeta": {}, "alpha": {}}}}}], "tool_choice": "none"})";
  const auto ordered = nlohmann::ordered_json::parse(body);
  EXPECT_EQ(render_chat_prompt(parse_body(body), m_, &ordered),
            R"({"type": "object", "properties": {"zeta": {}, "alpha": {}}}|{"zeta": 1, "alpha": 2})");
}

TEST_F(OpenAiApi, ContinueFinalMessageLeavesTheLastMessageOpen) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}])";
  EXPECT_EQ(render_chat_prompt(parse_body("{" + msgs + R"(, "continue_final_message": true, "add_generation_prompt": false})"), m_),
            "<user>hi\n<assistant>Once upon");
  EXPECT_EQ(render_chat_prompt(parse_body("{" + msgs + "}"), m_), "<user>hi\n<assistant>Once upon\n<assistant>");
  EXPECT_EQ(error_of("{" + msgs + R"(, "continue_final_message": true, "add_generation_prompt": true})", true),
            (std::pair<int, std::string>{400, "continue_final_message"}));
}

// A template failure names the template file but not where the server keeps the checkpoint.
TEST_F(OpenAiApi, ChatTemplateErrorsDoNotShowServerPaths) {
  test::TempDir dir;
  test::write_file(dir / "tokenizer_config.json",
                   json({{"chat_template", "{{ raise_exception('no system role here') }}"}}).dump());
  auto tmpl = tokenizer::ChatTemplate::from_dir(dir.path().string());
  m_.chat = &tmpl;
  m_.path = dir.path().string();
  try {
    chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(msg.find("no system role here"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(dir.path().string()), std::string::npos) << msg;
  }
}

TEST_F(OpenAiApi, TokenizeAndDetokenizeBodiesAreTyped) {
  auto status_param = [&](const std::string& body, bool detok) -> std::pair<int, std::string> {
    try {
      detok ? (void)parse_detokenize_request(parse_body(body), m_) : (void)parse_tokenize_request(parse_body(body), m_);
    } catch (const ApiError& e) {
      return {e.status, e.param};
    }
    return {0, ""};
  };
  EXPECT_EQ(status_param(R"({"prompt": "hi", "return_token_strs": "x"})", false),
            (std::pair<int, std::string>{400, "return_token_strs"}));
  EXPECT_EQ(status_param(R"({"prompt": 5})", false), (std::pair<int, std::string>{400, "prompt"}));
  EXPECT_EQ(status_param(R"({"prompt": "hi", "add_special_tokens": 1})", false),
            (std::pair<int, std::string>{400, "add_special_tokens"}));
  EXPECT_EQ(status_param(R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})", false),
            (std::pair<int, std::string>{400, "messages[0].content[0].type"}));
  EXPECT_EQ(status_param(R"({"tokens": [1, 1e300]})", true), (std::pair<int, std::string>{400, "tokens"}));
  EXPECT_EQ(status_param(R"({"tokens": "x"})", true), (std::pair<int, std::string>{400, "tokens"}));
  const TokenizeRequest t = parse_tokenize_request(parse_body(R"({"prompt": "hello world", "return_token_strs": true})"), m_);
  EXPECT_EQ(t.ids, tok_->encode("hello world", true));
  EXPECT_TRUE(t.return_token_strs);
  EXPECT_EQ(parse_detokenize_request(parse_body(R"({"tokens": [259, 267]})"), m_), (std::vector<int32_t>{259, 267}));
}

TEST_F(OpenAiApi, BadJsonUnknownModelAndMissingTokenizer) {
  EXPECT_THROW(parse_body("{not json"), ApiError);
  EXPECT_THROW(parse_body("[1, 2]"), ApiError);
  // Nesting is bounded while parsing (io::kMaxJsonDepth), before anything recursive walks it.
  try {
    parse_body("{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
    ADD_FAILURE() << "deep body accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128 levels"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of(R"({"prompt": "x", "model": "other"})"), (std::pair<int, std::string>{404, "model"}));
  EXPECT_EQ(error_of(R"({"prompt": "x", "model": "/models/tiny"})").first, 0) << "the path names the model too";
  EXPECT_EQ(error_of(R"({"prompt": "x", "model": null})").first, 0);
  m_.tok = nullptr;
  m_.chat = nullptr;
  EXPECT_EQ(error_of(R"({"prompt": "x"})"), (std::pair<int, std::string>{400, "prompt"}));
  EXPECT_EQ(error_of(R"({"prompt": [1], "stop": "x"})"), (std::pair<int, std::string>{400, "stop"}));
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "hi"}]})", true).first, 400);
  EXPECT_EQ(error_of(R"({"prompt": [1, 2], "max_tokens": 3})").first, 0);
}

TEST_F(OpenAiApi, ErrorObjectShape) {
  json e = ApiError(404, "The model `x` does not exist.", "model").to_json();
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "The model `x` does not exist.", "type": "NotFoundError",
                                         "param": "model", "code": 404}})"));
  EXPECT_TRUE(bad_request("bad").to_json()["error"]["param"].is_null());
  EXPECT_EQ(bad_request("bad").to_json()["error"]["type"], "BadRequestError");
}

TEST_F(OpenAiApi, SseFraming) {
  EXPECT_EQ(sse_event(json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
}

// truncate_prompt_tokens keeps the last N ("left", the default) or the first N ("right").
TEST_F(OpenAiApi, TruncationSide) {
  const std::string base = R"({"prompt": [10, 11, 12, 13, 14, 15], "truncate_prompt_tokens": 2)";
  EXPECT_EQ(completion(base + "}").prompts[0].ids, (std::vector<int32_t>{14, 15}));
  EXPECT_EQ(completion(base + R"(, "truncation_side": "left"})").prompts[0].ids, (std::vector<int32_t>{14, 15}));
  EXPECT_EQ(completion(base + R"(, "truncation_side": "right"})").prompts[0].ids, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(completion(R"({"prompt": [10, 11], "truncation_side": "right"})").prompts[0].ids,
            (std::vector<int32_t>{10, 11}));
}

engine::RequestOutput output(std::vector<int32_t> ids, std::string text, int64_t completion, bool finished = false,
                             std::string reason = "") {
  engine::RequestOutput o;
  o.token_ids = std::move(ids);
  o.text = std::move(text);
  o.completion_tokens = completion;
  o.finished = finished;
  o.finish_reason = std::move(reason);
  return o;
}

TEST_F(OpenAiApi, ChatStreamChunksAndWholeResponse) {
  m_.prompt_tokens_details = true;  // --enable-prompt-tokens-details: the cached tokens in usage
  ApiRequest r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true,
                          "stream_options": {"include_usage": true}})");
  ResponseBuilder rb(r, m_, "chatcmpl-1", 1700000000);
  auto c1 = rb.stream_chunks(output({104}, "h", 1));
  ASSERT_EQ(c1.size(), 2u);
  EXPECT_EQ(c1[0]["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(c1[0]["object"], "chat.completion.chunk");
  EXPECT_FALSE(c1[0].contains("usage")) << "vLLM's chunks carry usage only where it is set";
  EXPECT_TRUE(c1[0]["prompt_token_ids"].is_null() && c1[0]["prompt_text"].is_null());
  EXPECT_EQ(c1[1]["choices"][0]["delta"]["content"], "h");
  EXPECT_TRUE(c1[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(rb.stream_chunks(output({105}, "", 2)).empty()) << "nothing to show: no chunk";
  engine::RequestOutput fin = output({2}, "i", 3, true, "stop");
  fin.cached_tokens = 16;  // the prefix cache supplied 16 prompt tokens
  auto last = rb.stream_chunks(fin);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "stop");
  const json usage = rb.usage_chunk();
  EXPECT_TRUE(usage["choices"].empty());
  const int64_t prompt = static_cast<int64_t>(r.params.prompt.size());
  EXPECT_EQ(usage["usage"], (json{{"prompt_tokens", prompt},
                                   {"completion_tokens", 3},
                                   {"total_tokens", prompt + 3},
                                   {"prompt_tokens_details", {{"cached_tokens", 16}}}}));

  ApiRequest whole = chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ResponseBuilder wb(whole, m_, "chatcmpl-2", 1700000000);
  wb.add(output({104}, "h", 1));
  wb.add(output({105, 2}, "i", 3, true, "length"));
  const json resp = wb.response();
  EXPECT_EQ(resp["object"], "chat.completion");
  EXPECT_EQ(resp["model"], "tiny");
  EXPECT_EQ(resp["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "hi", "refusal": null,
      "annotations": null, "audio": null, "function_call": null, "reasoning": null})"))
      << "vLLM's ChatMessage, every key";
  for (const char* key : {"service_tier", "system_fingerprint", "kv_transfer_params", "ec_transfer_params", "metrics",
                          "prompt_logprobs", "prompt_token_ids", "prompt_text"})
    EXPECT_TRUE(resp.contains(key) && resp[key].is_null()) << key;
  for (const char* key : {"stop_reason", "token_ids", "routed_experts"})
    EXPECT_TRUE(resp["choices"][0].contains(key) && resp["choices"][0][key].is_null()) << key;
  EXPECT_EQ(resp["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(resp["usage"]["completion_tokens"], 3);
}

// usage.prompt_tokens_details as vLLM: null (absent from the usage chunk) unless the server runs with
// --enable-prompt-tokens-details, then {"cached_tokens": N} even for N = 0. vLLM's
// test_single_chat_session compares usage to CompletionUsage(prompt_tokens, completion_tokens,
// total_tokens); its test_single_completion (with the flag) wants cached_tokens == 0.
TEST_F(OpenAiApi, PromptTokensDetailsOnlyWithTheFlag) {
  for (const bool flag : {false, true}) {
    for (const int64_t cached : {int64_t{0}, int64_t{16}}) {
      m_.prompt_tokens_details = flag;
      ApiRequest r = chat(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true,
                              "stream_options": {"include_usage": true}})");
      ResponseBuilder rb(r, m_, "chatcmpl-1", 1);
      engine::RequestOutput fin = output({2}, "i", 1, true, "stop");
      fin.cached_tokens = cached;
      rb.add(fin);
      const json usage = rb.response()["usage"];
      const bool shown = flag;
      ASSERT_TRUE(usage.contains("prompt_tokens_details")) << "a key of vLLM's UsageInfo, null or not";
      if (shown)
        EXPECT_EQ(usage["prompt_tokens_details"], (json{{"cached_tokens", cached}}));
      else
        EXPECT_TRUE(usage["prompt_tokens_details"].is_null()) << flag << " " << cached;
      ResponseBuilder sb(r, m_, "chatcmpl-2", 1);
      sb.stream_chunks(fin);
      EXPECT_EQ(sb.usage_chunk()["usage"].contains("prompt_tokens_details"), shown) << flag << " " << cached;
    }
  }
}

// Found by vLLM's tests/entrypoints/openai against fp4lm serve (docs/SERVER_SUITES.md):
// test_chat_logit_bias_multiple_non_integer_keys wants every bad key named in one error.
TEST_F(OpenAiApi, LogitBiasNamesEveryKeyThatIsNotATokenId) {
  try {
    completion(R"({"prompt": "x", "logit_bias": {"bad1": 50, "7": 1, "bad2": 20}})");
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "logit_bias");
    EXPECT_NE(std::string(e.what()).find("'bad1', 'bad2'"), std::string::npos) << e.what();
  }
}

// allowed_token_ids, logprob_token_ids and -1 logprobs with vLLM's rules and messages.
TEST_F(OpenAiApi, AllowedAndLogprobTokenIdsAndMinusOneLogprobs) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(completion(R"({"prompt": "x", "allowed_token_ids": [3, 5]})").params.allowed_token_ids,
            (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(error_of(R"({"prompt": "x", "allowed_token_ids": [3, 269]})"), std::make_pair(400, std::string("allowed_token_ids")));
  EXPECT_EQ(error_of(R"({"prompt": "x", "allowed_token_ids": []})"), std::make_pair(400, std::string("allowed_token_ids")));
  EXPECT_EQ(error_of(R"({"prompt": "x", "allowed_token_ids": [1], "use_beam_search": true})"),
            std::make_pair(400, std::string("allowed_token_ids")));

  // Chat: the ids take the place of top_logprobs; logprobs is required.
  const ApiRequest c = chat("{" + msgs + R"(, "logprobs": true, "top_logprobs": 2, "logprob_token_ids": [1, 2, 3]})");
  EXPECT_EQ(c.params.logprob_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(c.params.logprobs, 3);
  EXPECT_EQ(error_of("{" + msgs + R"(, "logprob_token_ids": [1]})", true), std::make_pair(400, std::string("logprob_token_ids")));
  EXPECT_EQ(error_of("{" + msgs + R"(, "logprobs": true, "logprob_token_ids": [269]})", true),
            std::make_pair(400, std::string("logprob_token_ids")));
  // Completions: logprobs must be given, and the ids replace its count (vLLM passes logprobs=None).
  const ApiRequest k = completion(R"({"prompt": "x", "logprobs": 1, "logprob_token_ids": [4, 9, 4]})");
  EXPECT_EQ(k.params.logprob_token_ids, (std::vector<int32_t>{4, 9, 4}));
  EXPECT_EQ(k.top_logprobs, 3);
  EXPECT_EQ(error_of(R"({"prompt": "x", "logprob_token_ids": [4, 9]})"), std::make_pair(400, std::string("logprob_token_ids")));

  // -1 is the vocabulary (269): over the default cap of 20 a 400 with vLLM's message.
  try {
    chat("{" + msgs + R"(, "logprobs": true, "top_logprobs": -1})");
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "top_logprobs");
    EXPECT_EQ(std::string(e.what()), "Requested sample logprobs of 269, which is greater than max allowed: 20");
  }
  m_.max_logprobs = -1;  // --max-logprobs -1: no cap
  EXPECT_EQ(chat("{" + msgs + R"(, "logprobs": true, "top_logprobs": -1})").params.logprobs, 269);
  EXPECT_EQ(completion(R"({"prompt": "x", "logprobs": -1, "prompt_logprobs": -1})").params.prompt_logprobs, 269);
  EXPECT_EQ(completion(R"({"prompt": "x", "logprobs": 25})").params.logprobs, 25);
  EXPECT_EQ(error_of(R"({"prompt": "x", "prompt_logprobs": -1, "stream": true})"),
            std::make_pair(400, std::string("prompt_logprobs")));
  EXPECT_EQ(error_of(R"({"prompt": "x", "logprobs": -2})"), std::make_pair(400, std::string("logprobs")));
  m_.max_logprobs = 100;
  EXPECT_EQ(error_of(R"({"prompt": "x", "logprobs": -1})"), std::make_pair(400, std::string("logprobs")));
  EXPECT_EQ(completion(R"({"prompt": "x", "logprobs": 100})").params.logprobs, 100);
}

// --enable-force-include-usage (vLLM's test_enable_force_include_usage): usage in every chunk and at
// the end of every stream, whatever stream_options asks; non-streaming requests unchanged.
// --return-tokens-as-token-ids: the default of the request field, which still wins when given.
TEST_F(OpenAiApi, ServerFlagsForceUsageAndTokenIdsAsVllm) {
  EXPECT_FALSE(completion(R"({"prompt": "x", "stream": true})").include_usage);
  m_.force_include_usage = true;
  for (const char* body : {R"({"prompt": "x", "stream": true})",
                           R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": false}})"}) {
    const ApiRequest r = completion(body);
    EXPECT_TRUE(r.include_usage && r.continuous_usage) << body;
  }
  const ApiRequest whole = completion(R"({"prompt": "x"})");
  EXPECT_FALSE(whole.include_usage || whole.continuous_usage);
  EXPECT_FALSE(completion(R"({"prompt": "x"})").return_tokens_as_token_ids);
  m_.return_tokens_as_token_ids = true;
  EXPECT_TRUE(completion(R"({"prompt": "x"})").return_tokens_as_token_ids);
  EXPECT_FALSE(completion(R"({"prompt": "x", "return_tokens_as_token_ids": false})").return_tokens_as_token_ids);
}

// stream_options.continuous_usage_stats counts only with include_usage (vLLM's should_include_usage).
TEST_F(OpenAiApi, ContinuousUsageNeedsIncludeUsage) {
  const std::string base = R"({"prompt": "x", "stream": true, "stream_options": )";
  EXPECT_FALSE(completion(base + R"({"continuous_usage_stats": true}})").continuous_usage);
  EXPECT_FALSE(completion(base + R"({"include_usage": false, "continuous_usage_stats": true}})").continuous_usage);
  const ApiRequest r = completion(base + R"({"include_usage": true, "continuous_usage_stats": true}})");
  EXPECT_TRUE(r.continuous_usage && r.include_usage);
}

TEST_F(OpenAiApi, CompletionEchoAndLogprobs) {
  ApiRequest r = completion(R"({"prompt": "ab", "logprobs": 1, "max_tokens": 2})");
  ResponseBuilder rb(r, m_, "cmpl-1", 1);
  engine::RequestOutput o = output({99, 100}, "cd", 2, true, "length");
  o.logprobs = {{99, -0.5f, {{99, -0.5f}}}, {100, -1.0f, {{101, -0.25f}}}};
  rb.add(o);
  const json lp = rb.response()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"c", "d"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.5, -1.0}));
  // vLLM: the sampled token is among the entries (k + 1 of them when it is not in the top k).
  EXPECT_EQ(lp["top_logprobs"][1], (json{{"d", -1.0}, {"e", -0.25}}));
  EXPECT_EQ(lp["top_logprobs"][0], (json{{"c", -0.5}}));
  EXPECT_EQ(lp["text_offset"], (json{0, 1}));
  ApiRequest e = completion(R"({"prompt": "ab", "echo": true, "max_tokens": 2})");
  ResponseBuilder eb(e, m_, "cmpl-2", 1);
  eb.add(output({99}, "c", 1, true, "length"));
  EXPECT_EQ(eb.response()["choices"][0]["text"], "abc");
  ResponseBuilder sb(e, m_, "cmpl-3", 1);
  EXPECT_EQ(sb.stream_chunks(output({99}, "c", 1))[0]["choices"][0]["text"], "abc");
}

// prompt_logprobs as vLLM writes them (null first; per token its entry and the top k with ranks),
// echo with logprobs (the prompt's tokens first, the first one null), and best_of > n keeping the
// samples of the highest cumulative logprob.
TEST_F(OpenAiApi, PromptLogprobsEchoAndBestOf) {
  ApiRequest r = completion(R"({"prompt": [97, 98], "prompt_logprobs": 1, "max_tokens": 1})");
  EXPECT_EQ(r.params.prompt_logprobs, 1);
  ResponseBuilder rb(r, m_, "cmpl-1", 1);
  engine::RequestOutput o = output({99}, "c", 1, true, "length");
  o.prompt_logprobs = {{98, -2.0f, {{99, -0.5f}}, 3}};
  rb.add(o);
  EXPECT_EQ(rb.response()["choices"][0]["prompt_logprobs"],
            json::parse(R"([null, {"98": {"logprob": -2.0, "rank": 3, "decoded_token": "b"},
                                   "99": {"logprob": -0.5, "rank": 1, "decoded_token": "c"}}])"));

  ApiRequest e = completion(R"({"prompt": [97, 98], "echo": true, "logprobs": 0, "max_tokens": 1})");
  EXPECT_EQ(e.params.prompt_logprobs, 0);
  ResponseBuilder eb(e, m_, "cmpl-2", 1);
  o.logprobs = {{99, -0.25f, {}}};
  eb.add(o);
  const json resp = eb.response();
  EXPECT_EQ(resp["choices"][0]["text"], "abc");
  // vLLM returns the prompt logprobs echo computed (logprobs=0: the token alone).
  EXPECT_EQ(resp["choices"][0]["prompt_logprobs"],
            json::parse(R"([null, {"98": {"logprob": -2.0, "rank": 3, "decoded_token": "b"}}])"));
  const json lp = resp["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -2.0, -0.25]"));
  EXPECT_EQ(lp["top_logprobs"], json::parse(R"([null, {"b": -2.0}, {"c": -0.25}])"));  // logprobs=0: the token alone
  EXPECT_EQ(lp["text_offset"], (json{0, 1, 2}));
  ResponseBuilder sb(e, m_, "cmpl-3", 1);
  const json chunk = sb.stream_chunks(o)[0]["choices"][0];
  EXPECT_EQ(chunk["text"], "abc");
  EXPECT_EQ(chunk["logprobs"], lp);

  ApiRequest b = completion(R"({"prompt": [97], "n": 2, "best_of": 3, "max_tokens": 2, "seed": 4})");
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(choice_params(b, c).logprobs, 0) << "the ranking needs the sampled tokens' logprobs";
    EXPECT_EQ(choice_params(b, c).sampling.seed, 4 + c);
  }
  ResponseBuilder bb(b, m_, "cmpl-4", 1);
  const float sums[3][2] = {{-1.0f, -2.0f}, {-0.5f, -0.25f}, {-1.0f, -1.0f}};  // totals -3, -0.75, -2
  for (size_t c = 0; c < 3; ++c) {
    engine::RequestOutput x = output({99, 100}, c == 0 ? "x" : c == 1 ? "y" : "z", 2, true, "length");
    x.logprobs = {{99, sums[c][0], {}}, {100, sums[c][1], {}}};
    bb.add(c, x);
  }
  const json best = bb.response();
  ASSERT_EQ(best["choices"].size(), 2u);
  EXPECT_EQ(best["choices"][0]["text"], "y");
  EXPECT_EQ(best["choices"][1]["text"], "z");
  EXPECT_EQ(best["choices"][1]["index"], 1);
  EXPECT_EQ(best["choices"][0]["logprobs"], nullptr);  // not asked for
  EXPECT_EQ(best["usage"]["completion_tokens"], 4);
}

// n samples of each prompt of a list: choice c answers prompt c / n with seed + c % n; the
// response lists every choice and counts each prompt's tokens once.
TEST_F(OpenAiApi, ChoicesOfPromptListsAndSamples) {
  m_.prompt_tokens_details = true;
  ApiRequest r = completion(R"({"prompt": ["ab", [5, 6, 7]], "n": 2, "seed": 10, "max_tokens": 2,
                                "return_token_ids": true})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(choice_params(r, 3).prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(choice_params(r, 3).sampling.seed, 11u);
  EXPECT_EQ(choice_params(r, 0).prompt, tok_->encode("ab", true));
  EXPECT_EQ(choice_params(r, 0).sampling.seed, 10u);
  ResponseBuilder rb(r, m_, "cmpl-1", 1);
  ASSERT_EQ(rb.choices(), 4u);
  for (size_t c = 0; c < 4; ++c) {
    engine::RequestOutput o = output({99, 100}, c % 2 ? "cd" : "dc", 2, true, "length");
    o.cached_tokens = c == 1 ? 16 : c == 0 ? 8 : 0;  // the first prompt's two samples: it counts once (16)
    rb.add(c, o);
  }
  const json resp = rb.response();
  ASSERT_EQ(resp["choices"].size(), 4u);
  EXPECT_EQ(resp["choices"][3]["index"], 3);
  EXPECT_EQ(resp["choices"][3]["text"], "cd");
  EXPECT_EQ(resp["choices"][2]["prompt_token_ids"], (json{5, 6, 7}));
  const int64_t prompt = static_cast<int64_t>(tok_->encode("ab", true).size()) + 3;
  EXPECT_EQ(resp["usage"], (json{{"prompt_tokens", prompt},
                                  {"completion_tokens", 8},
                                  {"total_tokens", prompt + 8},
                                  {"prompt_tokens_details", {{"cached_tokens", 16}}}}));
  // Streamed, each chunk carries its choice's index.
  ResponseBuilder sb(r, m_, "cmpl-2", 1);
  EXPECT_EQ(sb.stream_chunks(2, output({99}, "c", 1))[0]["choices"][0]["index"], 2);
}

TEST(ServingMetricsText, VllmNamesLabelsAndCumulativeBuckets) {
  ServingMetrics m("my \"model\"", 100);
  engine::StepStats step;
  step.prompt_tokens = 3;
  step.generation_tokens = 1;
  step.sequences = 2;
  m.on_step(step);
  engine::RequestStats st;
  st.finish_reason = "length";
  st.prompt_tokens = 3;
  st.generation_tokens = 2;
  st.ttft_s = 0.03;
  st.e2e_s = 0.4;
  st.queue_s = 0.001;
  st.inter_token_s = {0.02};
  m.on_finished(st);
  engine::EngineLoad load;
  load.running = 1;
  load.waiting = 2;
  load.kv_reserved_bytes = 25;
  load.kv_budget_bytes = 100;
  const std::string t = m.render(load);
  const std::string l = "engine=\"0\",model_name=\"my \\\"model\\\"\"";
  for (const std::string& line : std::vector<std::string>{
           "# TYPE vllm:num_requests_running gauge",
           "vllm:num_requests_running{" + l + "} 1.0",
           "vllm:num_requests_waiting{" + l + "} 2.0",
           "vllm:kv_cache_usage_perc{" + l + "} 0.25",
           "# TYPE vllm:prompt_tokens counter",
           "vllm:prompt_tokens_total{" + l + "} 3.0",
           "vllm:generation_tokens_total{" + l + "} 1.0",
           "vllm:request_success_total{" + l + ",finished_reason=\"length\"} 1.0",
           "vllm:request_success_total{" + l + ",finished_reason=\"abort\"} 0.0",
           "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.02\"} 0.0",
           "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.04\"} 1.0",
           "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"+Inf\"} 1.0",
           "vllm:time_to_first_token_seconds_count{" + l + "} 1.0",
           "vllm:inter_token_latency_seconds_bucket{" + l + ",le=\"0.025\"} 1.0",
           "vllm:e2e_request_latency_seconds_bucket{" + l + ",le=\"0.5\"} 1.0",
           "vllm:request_queue_time_seconds_bucket{" + l + ",le=\"0.3\"} 1.0",
           "vllm:iteration_tokens_total_bucket{" + l + ",le=\"1.0\"} 0.0",
           "vllm:iteration_tokens_total_bucket{" + l + ",le=\"8.0\"} 1.0",
           "vllm:iteration_tokens_total_sum{" + l + "} 4.0",
       })
    EXPECT_NE(t.find(line + "\n"), std::string::npos) << line;
}

TEST(ServingMetricsText, PrefixCacheQueriesAndHitsInTokens) {
  ServingMetrics m("m", 100);
  engine::StepStats st;
  st.prefix_queries = 40;
  st.prefix_hits = 32;
  m.on_step(st);
  m.on_step(st);
  const std::string t = m.render({});
  const std::string l = "engine=\"0\",model_name=\"m\"";
  for (const std::string& line :
       std::vector<std::string>{"# TYPE vllm:prefix_cache_queries counter", "vllm:prefix_cache_queries_total{" + l + "} 80.0",
                                "# TYPE vllm:prefix_cache_hits counter", "vllm:prefix_cache_hits_total{" + l + "} 64.0"})
    EXPECT_NE(t.find(line + "\n"), std::string::npos) << line;
}

// The ends of the int64 range are seeds; a literal past them is refused with the field's range,
// not rounded onto it.
TEST_F(OpenAiApi, IntegersAreReadExactly) {
  EXPECT_EQ(completion(R"({"prompt": "x", "seed": -9223372036854775808})").params.sampling.seed, uint64_t{1} << 63);
  EXPECT_EQ(completion(R"({"prompt": "x", "seed": 9223372036854775807})").params.sampling.seed, (uint64_t{1} << 63) - 1);
  const json b = parse_body(R"({"a": -9223372036854775809, "b": -9223372036854775808, "c": 2.5, "d": [1, {"e": 3}]})");
  EXPECT_TRUE(b["a"].is_number_float());
  EXPECT_LT(b["a"].get<double>(), -0x1p63);
  EXPECT_EQ(b["b"].get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(b["c"].get<double>(), 2.5);
  EXPECT_EQ(b["d"][1]["e"], 3);
  EXPECT_EQ(parse_body(R"({"a": -9223372036854775810.0})")["a"].get<double>(), -0x1p63)
      << "a number literal reads as Python's float() reads it";
  for (const char* bad : {"{", R"({"a": 1e400})", "[1]x"}) {
    try {
      parse_body(bad);
      ADD_FAILURE() << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << bad;
    }
  }
}

// Structured outputs: a "required" tool-call output cut by max_tokens comes back as content with
// finish_reason "length" (whole and streamed); disable_any_whitespace from the server's default
// and the request.
TEST_F(OpenAiApi, CutRequiredToolOutputIsContentAndWhitespaceOption) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})";
  ApiRequest r = chat(body);
  EXPECT_FALSE(r.params.structured.whitespace.compact);
  ResponseBuilder wb(r, m_, "chatcmpl-1", 1);
  wb.add(output({91, 123}, "[{\"na", 5, true, "length"));
  const json resp = wb.response();
  EXPECT_EQ(resp["choices"][0]["message"]["content"], "[{\"na");
  EXPECT_FALSE(resp["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(resp["choices"][0]["finish_reason"], "length");
  ResponseBuilder sb(r, m_, "chatcmpl-2", 1);
  std::string streamed;
  json finish;
  for (const auto& o : {output({91}, "[{", 2), output({123}, "\"na", 5, true, "length")})
    for (const json& c : sb.stream_chunks(o)) {
      const json& ch = c["choices"][0];
      if (ch["delta"].contains("content")) streamed += ch["delta"]["content"].get<std::string>();
      EXPECT_FALSE(ch["delta"].contains("tool_calls"));
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
  EXPECT_EQ(streamed, "[{\"na");
  EXPECT_EQ(finish, "length");

  m_.json_whitespace.compact = true;  // --structured-outputs-config.disable_any_whitespace
  EXPECT_TRUE(chat(body).params.structured.whitespace.compact);
  ApiRequest c = completion(R"({"prompt": "x", "structured_outputs": {"json_object": true, "disable_any_whitespace": false}})");
  EXPECT_FALSE(c.params.structured.whitespace.compact);
  EXPECT_EQ(c.params.structured.kind, engine::structured::StructuredSpec::Kind::JsonObject);
  EXPECT_EQ(error_of(R"({"prompt": "x", "structured_outputs": {"json": {}, "whitespace_pattern": " "}})"),
            (std::pair<int, std::string>{400, "structured_outputs.whitespace_pattern"}));
}

}  // namespace
}  // namespace fp4lm::server::openai_api_test
