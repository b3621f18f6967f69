"""LLM.chat and the tokenizer with the real Qwen3 tokenizer and chat template: the rendered
prompt is `fp4lm chat-template`'s, and the generated ids are `fp4lm generate --chat`'s."""
import json

import pytest

from fp4lm import LLM, SamplingParams
from conftest import SHARED, cli

CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}]


@pytest.fixture(scope="module")
def llm(qwen3_chat_model):
    return LLM(model=str(qwen3_chat_model))


@pytest.mark.parametrize("enable_thinking", [None, False, True])
def test_rendered_prompt_is_the_clis(llm, qwen3_chat_model, tmp_path, enable_thinking):
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(CONVERSATION))
    args = ["chat-template", "--model", qwen3_chat_model, "--messages", messages, "--add-generation-prompt"]
    kwargs = {}
    if enable_thinking is not None:
        args += ["--enable-thinking", str(enable_thinking).lower()]
        kwargs["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    expected = cli(*args).stdout
    tok = llm.get_tokenizer()
    assert tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True, **kwargs) == expected
    out = llm.chat(CONVERSATION, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), **kwargs)[0]
    assert out.prompt == expected
    assert out.prompt_token_ids == tok.encode(expected, add_special_tokens=False)


def test_golden_chat_lines(llm):
    path = SHARED / "tokenizers" / "qwen3" / "golden_chat.jsonl"
    tok = llm.get_tokenizer()
    for line in path.read_text().splitlines():
        g = json.loads(line)
        kwargs = {"enable_thinking": g["enable_thinking"]} if "enable_thinking" in g else {}
        assert tok.apply_chat_template(g["messages"], tokenize=False,
                                       add_generation_prompt=g["add_generation_prompt"], **kwargs) == g["rendered"]


def test_chat_generates_what_the_cli_generates(llm, qwen3_chat_model):
    message = "What is the capital of France?"
    ref = json.loads(cli("generate", "--model", qwen3_chat_model, "--chat", message, "--max-tokens", "6",
                         "--json").stdout)
    out = llm.chat([{"role": "user", "content": message}], SamplingParams(temperature=0, max_tokens=6))[0]
    assert out.prompt_token_ids == ref["prompt_ids"]
    assert out.outputs[0].token_ids == ref["output_ids"]
    assert out.outputs[0].text == ref["text"]
    # A list of conversations gives one output per conversation, in order.
    both = llm.chat([[{"role": "user", "content": message}], CONVERSATION], SamplingParams(max_tokens=2))
    assert len(both) == 2 and both[0].prompt_token_ids == ref["prompt_ids"]


def test_tokenizer_basics(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode("Hello world", add_special_tokens=False)
    assert tok.decode(ids) == "Hello world"
    assert tok.eos_token_id is not None and tok.vocab_size > 151000
    with pytest.raises(ValueError, match="enable_thinking"):
        tok.apply_chat_template(CONVERSATION, tokenize=False, chat_template_kwargs={"enable_thinking": 1})


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
TOOL_TURN = CONVERSATION + [
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "content": "-3 C"}]


def test_tools_and_tool_results_render_as_the_clis(llm, qwen3_chat_model, tmp_path):
    doc = tmp_path / "conv.json"
    doc.write_text(json.dumps({"messages": TOOL_TURN, "tools": TOOLS}))
    expected = cli("chat-template", "--model", qwen3_chat_model, "--messages", doc, "--add-generation-prompt").stdout
    assert "<tools>" in expected and "get_weather" in expected and "<tool_response>" in expected
    tok = llm.get_tokenizer()
    assert tok.apply_chat_template(TOOL_TURN, tokenize=False, add_generation_prompt=True, tools=TOOLS) == expected
    out = llm.chat(TOOL_TURN, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), tools=TOOLS)[0]
    assert out.prompt == expected


def test_continue_final_message(llm):
    conv = CONVERSATION + [{"role": "assistant", "content": "The answer is"}]
    out = llm.chat(conv, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), continue_final_message=True)[0]
    assert out.prompt.endswith("The answer is")
