// ChatTemplate: the golden prompts of the shipped Qwen3 template, the public templates of
// Qwen2.5, Llama 3 / 3.1 and Mistral (v0.1, v0.3 with tools) against prompts rendered by Python
// Jinja2 with Hugging Face's settings, and loading templates from a model directory.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace fp4lm::tokenizer::chat_template_test {
namespace {

using ::testing::HasSubstr;
using test::TempDir;
using test::write_file;

const char* kQwen25Template = R"__({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)__";
const char* kLlama3Template = R"__({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})__";
const char* kLlama31Template = R"__({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)__";
const char* kMistral01Template = R"__({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})__";
const char* kMistral03Template = R"__({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
)__";
// Conversations (messages as JSON text; key order matters for tojson).
const char* kSimpleMessages = R"__([{"role": "user", "content": "What is the capital of France?"}])__";
const char* kMultiMessages = R"__([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}])__";
const char* kThinkMessages = R"__([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nA1"}, {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "<think>\nnew reasoning\n</think>\n\nA2"}])__";
const char* kReasoningFieldMessages = R"__([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "because"}])__";
const char* kToolsMessages = R"__([{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}, {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"}, {"role": "tool", "content": "sunny", "tool_call_id": "call12345"}, {"role": "assistant", "content": "It is 21 °C and sunny."}, {"role": "user", "content": "Thanks"}])__";
const char* kMultiNoSystemMessages =
    R"__([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}])__";
const char* kTools = R"__([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}])__";

struct Expectation {
  const char* tmpl;  // nullptr: the shipped Qwen3 template
  const char* bos;
  const char* eos;
  const char* messages;
  bool tools;
  bool add_generation_prompt;
  int enable_thinking;  // -1 unset, 0 false, 1 true
  const char* expected;
};

// Expected prompts rendered by Python Jinja2 3.1 with Hugging Face's environment.
const Expectation kExpectations[] = {
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, true, -1,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, true, 0,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, true, 1,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, false, -1,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, false, 0,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kSimpleMessages, false, false, 1,
     "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kMultiMessages, false, true, -1,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kMultiMessages, false, false, -1,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kThinkMessages, false, true, -1,
     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nnew reasoning\n</think>\n\nA2<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kThinkMessages, false, false, -1,
     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nnew reasoning\n</think>\n\nA2<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kReasoningFieldMessages, false, true, -1,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nbecause\n</think>\n\nA<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kReasoningFieldMessages, false, false, -1,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nbecause\n</think>\n\nA<|im_end|>\n"},
    {nullptr, "", "<|im_end|>", kToolsMessages, true, true, -1,
     "<|im_start|>system\nBe helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21 °C and sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"},
    {nullptr, "", "<|im_end|>", kToolsMessages, true, false, -1,
     "<|im_start|>system\nBe helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21 °C and sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"},
    {kQwen25Template, "", "<|im_end|>", kSimpleMessages, false, true, -1,
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
    {kQwen25Template, "", "<|im_end|>", kSimpleMessages, false, false, -1,
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"},
    {kQwen25Template, "", "<|im_end|>", kMultiMessages, false, true, -1,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
    {kQwen25Template, "", "<|im_end|>", kMultiMessages, false, false, -1,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"},
    {kQwen25Template, "", "<|im_end|>", kToolsMessages, true, true, -1,
     "<|im_start|>system\nBe helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21 °C and sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"},
    {kQwen25Template, "", "<|im_end|>", kToolsMessages, true, false, -1,
     "<|im_start|>system\nBe helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21 °C and sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"},
    {kLlama3Template, "<|begin_of_text|>", "<|eot_id|>", kSimpleMessages, false, true, -1,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama3Template, "<|begin_of_text|>", "<|eot_id|>", kSimpleMessages, false, false, -1,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"},
    {kLlama3Template, "<|begin_of_text|>", "<|eot_id|>", kMultiMessages, false, true, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama3Template, "<|begin_of_text|>", "<|eot_id|>", kMultiMessages, false, false, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kSimpleMessages, false, true, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kSimpleMessages, false, false, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kMultiMessages, false, true, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kMultiMessages, false, false, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kToolsMessages, true, true, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Get the weather for a city\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\",\n                    \"description\": \"City name\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n                    \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nIt is 21 °C and sunny.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama31Template, "<|begin_of_text|>", "<|eot_id|>", kToolsMessages, true, false, -1,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Get the weather for a city\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\",\n                    \"description\": \"City name\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n                    \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nIt is 21 °C and sunny.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>"},
    {kMistral01Template, "<s>", "</s>", kSimpleMessages, false, true, -1,
     "<s>[INST] What is the capital of France? [/INST]"},
    {kMistral01Template, "<s>", "</s>", kSimpleMessages, false, false, -1,
     "<s>[INST] What is the capital of France? [/INST]"},
    {kMistral01Template, "<s>", "</s>", kMultiNoSystemMessages, false, true, -1,
     "<s>[INST] Hi [/INST]Hello.</s>[INST] 2+2? [/INST]"},
    {kMistral01Template, "<s>", "</s>", kMultiNoSystemMessages, false, false, -1,
     "<s>[INST] Hi [/INST]Hello.</s>[INST] 2+2? [/INST]"},
    {kMistral03Template, "<s>", "</s>", kSimpleMessages, false, true, -1,
     "<s>[INST] What is the capital of France?[/INST]"},
    {kMistral03Template, "<s>", "</s>", kSimpleMessages, false, false, -1,
     "<s>[INST] What is the capital of France?[/INST]"},
    {kMistral03Template, "<s>", "</s>", kMultiMessages, false, true, -1,
     "<s>[INST] Hi[/INST] Hello.</s>[INST] You are terse.\n\n2+2?[/INST]"},
    {kMistral03Template, "<s>", "</s>", kMultiMessages, false, false, -1,
     "<s>[INST] Hi[/INST] Hello.</s>[INST] You are terse.\n\n2+2?[/INST]"},
    {kMistral03Template, "<s>", "</s>", kToolsMessages, true, true, -1,
     "<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"call12345\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": \"call12345\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": sunny, \"call_id\": \"call12345\"}[/TOOL_RESULTS] It is 21 °C and sunny.</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST] Be helpful.\n\nThanks[/INST]"},
    {kMistral03Template, "<s>", "</s>", kToolsMessages, true, false, -1,
     "<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"call12345\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": \"call12345\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": sunny, \"call_id\": \"call12345\"}[/TOOL_RESULTS] It is 21 °C and sunny.</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST] Be helpful.\n\nThanks[/INST]"},
};

std::filesystem::path qwen3_dir() { return test::shared_dir() / "tokenizers" / "qwen3"; }

TEST(ChatTemplate, ReproducesQwen3GoldenChat) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/golden_chat.jsonl");
  auto tmpl = ChatTemplate::from_dir(qwen3_dir().string());
  EXPECT_EQ(tmpl.bos_token(), "");
  EXPECT_EQ(tmpl.eos_token(), "<|im_end|>");
  std::ifstream in(qwen3_dir() / "golden_chat.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    ChatOptions opts;
    opts.add_generation_prompt = j.value("add_generation_prompt", false);
    if (j.contains("enable_thinking")) opts.enable_thinking = j["enable_thinking"].get<bool>();
    EXPECT_EQ(tmpl.render(j["messages"], opts), j["rendered"].get<std::string>()) << line;
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(ChatTemplate, MatchesPythonJinja2OnPublicTemplates) {
  std::string qwen3_source;
  bool have_qwen3 = std::filesystem::exists(qwen3_dir() / "tokenizer_config.json");
  int checked = 0;
  for (const auto& e : kExpectations) {
    std::string source;
    if (e.tmpl) {
      source = e.tmpl;
    } else {
      if (!have_qwen3) continue;  // the shipped template lives in ../shared
      source = ChatTemplate::from_dir(qwen3_dir().string()).source();
    }
    ChatTemplate tmpl(source, e.bos, e.eos);
    ChatOptions opts;
    opts.add_generation_prompt = e.add_generation_prompt;
    if (e.enable_thinking >= 0) opts.enable_thinking = e.enable_thinking == 1;
    // Tools go through render_ordered: tojson must print their keys in the order written.
    auto messages = nlohmann::ordered_json::parse(e.messages);
    auto tools = e.tools ? nlohmann::ordered_json::parse(kTools) : nlohmann::ordered_json(nullptr);
    EXPECT_EQ(tmpl.render_ordered(messages, tools, opts), e.expected)
        << "template " << (e.tmpl ? std::string(e.tmpl).substr(0, 60) : "qwen3") << "\nmessages " << e.messages;
    ++checked;
  }
  EXPECT_GE(checked, 26);
}

TEST(ChatTemplate, RenderWithSortedJsonMatchesWhenNoObjectIsPrinted) {
  ChatTemplate tmpl(kQwen25Template, "", "<|im_end|>");
  ChatOptions opts;
  opts.add_generation_prompt = true;
  EXPECT_EQ(tmpl.render(nlohmann::json::parse(kMultiMessages), opts),
            tmpl.render_ordered(nlohmann::ordered_json::parse(kMultiMessages), nullptr, opts));
}

TEST(ChatTemplate, ToolsThroughChatOptions) {
  ChatTemplate tmpl(kQwen25Template, "", "<|im_end|>");
  ChatOptions opts;
  opts.tools = nlohmann::json::parse(kTools);
  std::string out = tmpl.render(nlohmann::json::parse(kSimpleMessages), opts);
  EXPECT_THAT(out, HasSubstr("# Tools"));
  // nlohmann::json keeps keys sorted, so tojson prints them sorted.
  EXPECT_THAT(out, HasSubstr(R"({"function": {"description": "Get the weather for a city")"));
}

TEST(ChatTemplate, EnableThinkingIsUndefinedUnlessGiven) {
  ChatTemplate tmpl("{{ enable_thinking is defined }}|{{ enable_thinking }}", "", "");
  ChatOptions opts;
  EXPECT_EQ(tmpl.render(nlohmann::json::array(), opts), "False|");
  opts.enable_thinking = false;
  EXPECT_EQ(tmpl.render(nlohmann::json::array(), opts), "True|False");
}

TEST(ChatTemplate, StandardVariables) {
  ChatTemplate tmpl("{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ add_generation_prompt }}|{{ messages|length }}",
                    "<s>", "</s>");
  ChatOptions opts;
  opts.add_generation_prompt = true;
  EXPECT_EQ(tmpl.render(nlohmann::json::parse(kSimpleMessages), opts), "<s>|</s>|None|True|1");
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplateAndOverride) {
  ChatTemplate tmpl(kLlama31Template, "<|begin_of_text|>", "<|eot_id|>");
  ChatOptions opts;
  opts.extra = {{"date_string", "01 Jan 2025"}};
  EXPECT_THAT(tmpl.render(nlohmann::json::parse(kSimpleMessages), opts), HasSubstr("Today Date: 01 Jan 2025\n"));
  opts.extra = {{"bos_token", "<BOS>"}};
  EXPECT_EQ(tmpl.render(nlohmann::json::parse(kSimpleMessages), opts).rfind("<BOS>", 0), 0u);
}

TEST(ChatTemplate, RaiseExceptionBecomesAnErrorWithTheMessage) {
  ChatTemplate tmpl(kMistral01Template, "<s>", "</s>");
  auto messages = nlohmann::json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  try {
    tmpl.render(messages, {});
    FAIL() << "no error";
  } catch (const fp4lm::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Conversation roles must alternate user/assistant/user/assistant/..."));
    EXPECT_THAT(e.what(), HasSubstr("line 1"));
  }
}

TEST(ChatTemplate, Mistral03ChecksToolCallIds) {
  ChatTemplate tmpl(kMistral03Template, "<s>", "</s>");
  auto messages = nlohmann::json::parse(
      R"([{"role": "user", "content": "x"},
          {"role": "assistant", "tool_calls": [{"id": "short", "function": {"name": "f", "arguments": {}}}]}])");
  try {
    tmpl.render(messages, {});
    FAIL() << "no error";
  } catch (const fp4lm::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Tool call IDs should be alphanumeric strings with length 9!"));
  }
}

TEST(ChatTemplate, SyntaxErrorsAreReportedAtConstruction) {
  try {
    ChatTemplate tmpl("{% for m in messages %}\n{{ m.content | nosuchfilter }}{% endfor %}", "", "");
    FAIL() << "no error";
  } catch (const fp4lm::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("line 2, column 16"));
    EXPECT_THAT(e.what(), HasSubstr("nosuchfilter"));
  }
  EXPECT_THROW(ChatTemplate("{% if x %}", "", ""), fp4lm::Error);
}

TEST(ChatTemplate, MessagesMustBeAnArray) {
  ChatTemplate tmpl("x", "", "");
  EXPECT_THROW(tmpl.render(nlohmann::json::object(), {}), fp4lm::Error);
}

TEST(ChatTemplate, CopiesShareTheParsedTemplate) {
  ChatTemplate a("{{ messages[0].content }}", "", "");
  ChatTemplate b = a;
  EXPECT_EQ(b.render(nlohmann::json::parse(kSimpleMessages), {}), "What is the capital of France?");
}

// ---- from_dir ----

TEST(ChatTemplateFromDir, TemplateListPicksDefaultAndTokensMayBeObjects) {
  TempDir dir;
  write_file(dir / "tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "chat_template": [{"name": "tool_use", "template": "TOOLS"},
                      {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})");
  auto tmpl = ChatTemplate::from_dir(dir.path().string());
  EXPECT_EQ(tmpl.render(nlohmann::json::parse(kSimpleMessages), {}), "<s>What is the capital of France?</s>");
}

TEST(ChatTemplateFromDir, ChatTemplateJinjaFileWins) {
  TempDir dir;
  write_file(dir / "tokenizer_config.json", R"({"eos_token": "E", "chat_template": "config"})");
  write_file(dir / "chat_template.jinja", "file {{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::from_dir(dir.path().string()).render(nlohmann::json::array(), {}), "file E");
}

TEST(ChatTemplateFromDir, ErrorsNameTheFile) {
  TempDir dir;
  auto expect_fail = [&](const std::string& config, const std::string& needle) {
    write_file(dir / "tokenizer_config.json", config);
    try {
      ChatTemplate::from_dir(dir.path().string());
      ADD_FAILURE() << "no error for " << config;
    } catch (const fp4lm::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("tokenizer_config.json")) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(needle)) << e.what();
    }
  };
  expect_fail("{not json", "invalid JSON");
  expect_fail("[]", "expected a JSON object");
  expect_fail(R"({"eos_token": "x"})", "no 'chat_template'");
  expect_fail(R"({"chat_template": 5})", "must be a string or a list");
  expect_fail(R"({"chat_template": [{"name": "rag", "template": "x"}]})", "no template named \"default\"");
  expect_fail(R"({"chat_template": "x", "eos_token": 3})", "'eos_token'");
  expect_fail(R"({"chat_template": "{% if %}"})", "line 1, column 7");

  TempDir empty;
  try {
    ChatTemplate::from_dir(empty.path().string());
    ADD_FAILURE() << "no error";
  } catch (const fp4lm::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not found"));
  }
}

TEST(ChatTemplateFromDir, RenderErrorsNameTheTemplateFile) {
  TempDir dir;
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "{{ raise_exception('nope') }}"})");
  try {
    ChatTemplate::from_dir(dir.path().string()).render(nlohmann::json::array(), {});
    FAIL() << "no error";
  } catch (const fp4lm::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tokenizer_config.json"));
    EXPECT_THAT(e.what(), HasSubstr("nope"));
  }
}

}  // namespace
}  // namespace fp4lm::tokenizer::chat_template_test
