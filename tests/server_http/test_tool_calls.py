"""Tool calls and reasoning with the official openai client, as vLLM serves them: tool_choice
"auto" parsed by --tool-call-parser hermes (the model's output is forced into the hermes format
with a regex constraint: a random-weight model writes noise otherwise), "required" and a named
function enforced by the constraint, streamed tool_calls deltas assembled by index, finish_reason
"tool_calls", and --reasoning-parser qwen3 splitting <think>...</think> into reasoning_content."""
import json
import re

import openai
import pytest

from conftest import Server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 8},
                                  "unit": {"enum": ["c", "f"]},
                                  "days": {"type": "integer"}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, NOW]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


def check_weather_args(arguments):
    v = json.loads(arguments)
    assert set(v) <= {"city", "unit", "days"} and {"city", "unit"} <= set(v), arguments
    assert isinstance(v["city"], str) and len(v["city"]) <= 8
    assert v["unit"] in ("c", "f")
    if "days" in v:
        assert isinstance(v["days"], int) and not isinstance(v["days"], bool)
    return v


def forced(text):
    """structured_outputs that make the output exactly `text`."""
    return {"structured_outputs": {"regex": re.escape(text)}}


def assemble(chunks):
    """A streamed chat answer as a client assembles it: content, reasoning, tool calls by index."""
    content, reasoning, calls, finish = "", "", {}, None
    for c in chunks:
        if not c.choices:
            continue
        ch = c.choices[0]
        d = ch.delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert slot["id"] is None, "a call's id comes once"
                slot["id"] = tc.id
                assert tc.type == "function"
            if tc.function and tc.function.name:
                slot["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                slot["arguments"] += tc.function.arguments
        if ch.finish_reason:
            finish = ch.finish_reason
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


@pytest.fixture(scope="module")
def tool_server(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
               "--reasoning-parser", "qwen3", log_dir=logs, name="tools")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def tc(tool_server):
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


HERMES = ('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')


def test_auto_tool_calls_whole_and_streamed(tc):
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=200, temperature=0, extra_body=forced(HERMES))
    r = tc.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content == "Checking.\n"
    calls = ch.message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "now"]
    assert calls[0].function.arguments == '{"unit": "c", "city": "Paris"}'  # vLLM's json.dumps, order kept
    assert calls[1].function.arguments == "{}"
    assert all(c.type == "function" and re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", c.id) for c in calls)
    assert len({c.id for c in calls}) == 2

    content, reasoning, scalls, finish = assemble(tc.chat.completions.create(stream=True, **kw))
    assert (content, reasoning, finish) == ("Checking.\n", "", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in scalls] == [(c.function.name, c.function.arguments) for c in calls]
    assert all(c["id"] for c in scalls)

    # parallel_tool_calls=false keeps the first call only.
    one = tc.chat.completions.create(parallel_tool_calls=False, **kw).choices[0].message.tool_calls
    assert [c.function.name for c in one] == ["get_weather"]


def test_auto_without_a_call_is_content_and_none_is_never_parsed(tc):
    r = tc.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=50, temperature=0,
                                   extra_body=forced("Sunny, 20 C."))
    assert r.choices[0].message.content == "Sunny, 20 C."
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"
    r = tc.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="none", max_tokens=200,
                                   temperature=0, extra_body=forced(HERMES))
    assert r.choices[0].message.content == HERMES
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("seed", [1, 2])
def test_required_calls_validate_against_the_tool_parameters(tc, seed):
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=300, temperature=1.0,
              seed=seed)
    ch = tc.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.tool_calls
    for c in ch.message.tool_calls:
        assert c.function.name in ("get_weather", "now")
        if c.function.name == "get_weather":
            check_weather_args(c.function.arguments)
        else:
            assert json.loads(c.function.arguments) == {}
    content, _, scalls, finish = assemble(tc.chat.completions.create(stream=True, **kw))
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], c["arguments"]) for c in scalls] == \
        [(c.function.name, c.function.arguments) for c in ch.message.tool_calls]


def test_named_function_streams_its_arguments(tc):
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=300, temperature=0.7, seed=4,
              tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ch = tc.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "stop"  # vLLM: "stop" for a named function
    (call,) = ch.message.tool_calls
    assert call.function.name == "get_weather"
    check_weather_args(call.function.arguments)
    _, _, scalls, finish = assemble(tc.chat.completions.create(stream=True, **kw))
    assert finish == "stop"
    assert [(c["name"], c["arguments"]) for c in scalls] == [("get_weather", call.function.arguments)]


def test_tool_results_go_back_through_the_template(tc):
    msgs = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "20 C, sunny"}]
    r = tc.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, max_tokens=5, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    bad = [dict(msgs[1], tool_calls=[{"id": "c", "type": "function",
                                      "function": {"name": "f", "arguments": "{not json"}}])]
    with pytest.raises(openai.BadRequestError) as e:
        tc.chat.completions.create(model="tiny", messages=MSGS + bad, max_tokens=2)
    assert "messages[1].tool_calls[0].function.arguments" in str(e.value)


def test_auto_needs_the_server_flags(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=2)
    assert "--enable-auto-tool-choice" in str(e.value)
    # "required" and named functions work without them (they are constraints, not parsing).
    r = client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=300, temperature=0,
                                       tool_choice={"type": "function", "function": {"name": "now"}})
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {}


def test_reasoning_content_whole_and_streamed(tc):
    text = "<think>\nThe user wants weather.\n</think>\n\nIt is sunny."
    kw = dict(model="tiny", messages=MSGS, max_tokens=200, temperature=0, extra_body=forced(text))
    m = tc.chat.completions.create(**kw).choices[0].message
    assert m.reasoning_content == "\nThe user wants weather.\n"
    assert m.content == "\n\nIt is sunny."
    content, reasoning, _, finish = assemble(tc.chat.completions.create(stream=True, **kw))
    assert (content, reasoning, finish) == ("\n\nIt is sunny.", "\nThe user wants weather.\n", "stop")
    # include_reasoning=false drops it.
    m = tc.chat.completions.create(**{**kw, "extra_body": {**forced(text), "include_reasoning": False}}).choices[0].message
    assert m.reasoning_content is None and m.content == "\n\nIt is sunny."


def test_bad_parser_names_are_usage_errors(tiny_model, logs):
    import subprocess
    from conftest import FP4LM
    for flags in (["--tool-call-parser", "nope"], ["--reasoning-parser", "nope"], ["--enable-auto-tool-choice"]):
        p = subprocess.run([FP4LM, "serve", "--model", str(tiny_model), "--port", "0", *flags],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (flags, p.stderr)


@pytest.fixture(scope="module")
def harmony(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--enable-auto-tool-choice", "--tool-call-parser", "openai",
               "--reasoning-parser", "openai_gptoss", log_dir=logs, name="harmony")
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    assert s.stop() == 0, s.log()


HARMONY = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
           'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "c"}<|call|>')


def test_harmony_channels_and_tool_calls_whole_and_streamed(harmony):
    """gpt-oss's harmony output (forced here: the byte tokenizer spells the channel markers as text)
    split by --reasoning-parser openai_gptoss / --tool-call-parser openai."""
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=300, temperature=0, extra_body=forced(HARMONY))
    ch = harmony.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.reasoning_content == "Need the weather."
    assert not ch.message.content
    [call] = ch.message.tool_calls
    assert call.function.name == "get_weather" and check_weather_args(call.function.arguments) == {"city": "Paris",
                                                                                                  "unit": "c"}
    content, reasoning, calls, finish = assemble(harmony.chat.completions.create(stream=True, **kw))
    assert (content, reasoning, finish) == ("", "Need the weather.", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", call.function.arguments)]
    # A final answer is content.
    text = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Sunny."
    m = harmony.chat.completions.create(**{**kw, "extra_body": forced(text)}).choices[0].message
    assert (m.reasoning_content, m.content, m.tool_calls) == ("Easy.", "Sunny.", None)


def test_required_cut_by_max_tokens_returns_the_text_as_content(tc):
    """A tool_choice "required" output cut by max_tokens is no list of calls: what was generated
    comes back as content, with finish_reason "length" (not lost as content "")."""
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=8, temperature=1.0, seed=3)
    ch = tc.chat.completions.create(**kw).choices[0]
    assert ch.finish_reason == "length"
    assert not ch.message.tool_calls
    assert ch.message.content.startswith("[") and len(ch.message.content) >= 8, ch.message.content  # byte tokens
    content, _, calls, finish = assemble(tc.chat.completions.create(stream=True, **kw))
    assert (content, calls, finish) == (ch.message.content, [], "length")
