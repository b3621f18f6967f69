"""Hostile request bodies (issue 28, items 1, 6 and 7): sizes that overflow 64-bit arithmetic,
numbers no 64-bit integer holds, type errors in every field, malformed tools and content parts,
template variables a client may not replace, and template errors. Each one gets a 4xx with an
OpenAI-style error object naming the field, and the server answers the next request."""
import httpx
import pytest

from conftest import Server, synth, write_byte_tokenizer

I64_MAX = 2**63 - 1
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def post(server, path, body, timeout=30):
    return httpx.post(server.url + path, json=body, timeout=timeout)


def assert_client_error(r, param=None):
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert err["code"] == r.status_code
    assert "json.exception" not in err["message"] and "type_error" not in err["message"], err
    if param is not None:
        assert err["param"] == param, err
    return err


def assert_alive(server):
    assert server.proc.poll() is None, server.log()
    r = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "hi", "max_tokens": I64_MAX}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": I64_MAX, "stream": True}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_completion_tokens": I64_MAX}, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": I64_MAX}, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": I64_MAX, "stream": True}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2**64 - 1}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2**63}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -2**63}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1e300}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "min_tokens": I64_MAX}, "min_tokens"),
    ("/v1/completions", {"prompt": "hi", "seed": 2**64}, "seed"),
    ("/v1/completions", {"prompt": "hi", "n": I64_MAX}, "n"),
    ("/v1/completions", {"prompt": "hi", "logprobs": I64_MAX}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "top_k": -2**63}, "top_k"),
    ("/v1/completions", {"prompt": [1, 2**64 - 1]}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "stop_token_ids": [2**32 + 1]}, "stop_token_ids"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": I64_MAX, "logprobs": True}, "top_logprobs"),
])
def test_sizes_beyond_64_bits_are_400s_and_the_server_lives(server, path, body, param):
    assert_client_error(post(server, path, body), param)
    assert_alive(server)


# Every field the server reads, given a value of the wrong type.
COMPLETION_FIELDS = ["max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
                     "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "min_tokens",
                     "skip_special_tokens", "return_token_ids", "stop", "stop_token_ids", "n", "stream",
                     "echo", "logprobs", "add_special_tokens", "model", "response_format"]


@pytest.mark.parametrize("field", COMPLETION_FIELDS)
@pytest.mark.parametrize("value", [{"a": 1}, [[1]]])
def test_type_errors_in_every_completion_field_are_400s(server, field, value):
    err = assert_client_error(post(server, "/v1/completions", {"prompt": "hi", field: value}))
    assert err["param"] is not None and err["param"].startswith(field.split(".")[0]), err


@pytest.mark.parametrize("body,param", [
    ({"messages": [{"role": "user", "content": [{"type": 5}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "messages[0].content[0].image_url"),
    ({"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages[0].content"),
    ({"messages": [{"role": ["user"], "content": "hi"}]}, "messages[0]"),
    ({"messages": "hi"}, "messages"),
    ({**CHAT, "tools": [1, 2]}, "tools[0]"),
    ({**CHAT, "tools": [{"type": "function", "function": "x"}]}, "tools[0].function"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": 3}}]}, "tools[0].function.name"),
    ({**CHAT, "tools": "x"}, "tools"),
    ({**CHAT, "tool_choice": "required"}, "tool_choice"),
    ({**CHAT, "chat_template_kwargs": {"messages": [{"role": "system", "content": "pwned"}]}},
     "chat_template_kwargs.messages"),
    ({**CHAT, "chat_template_kwargs": {"tools": []}}, "chat_template_kwargs.tools"),
    ({**CHAT, "chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt"),
    ({**CHAT, "chat_template_kwargs": {"eos_token": "x"}}, "chat_template_kwargs.eos_token"),
    ({**CHAT, "chat_template_kwargs": "x"}, "chat_template_kwargs"),
    ({**CHAT, "add_generation_prompt": "yes"}, "add_generation_prompt"),
])
def test_chat_schema_violations_are_400s_naming_the_field(server, body, param):
    err = assert_client_error(post(server, "/v1/chat/completions", body), param)
    assert param in err["message"], err
    # /tokenize renders chat messages the same way and refuses them the same way.
    assert_client_error(post(server, "/tokenize", body), param)


def test_valid_tools_and_template_kwargs_are_accepted(server):
    body = {**CHAT, "max_tokens": 2, "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": "none", "chat_template_kwargs": {"enable_thinking": False, "custom": 1}}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {"prompt": "hi", "return_token_strs": "x"}, "return_token_strs"),
    ("/tokenize", {"prompt": "hi", "add_special_tokens": 1}, "add_special_tokens"),
    ("/tokenize", {"prompt": ["hi"]}, "prompt"),
    ("/detokenize", {"tokens": [1, 2**64]}, "tokens"),
    ("/detokenize", {"tokens": [1.5]}, "tokens"),
])
def test_tokenize_type_errors_are_400s(server, path, body, param):
    assert_client_error(post(server, path, body), param)
    assert_alive(server)


@pytest.fixture(scope="module")
def raising_server(tmp_path_factory, logs):
    """A model whose chat template raises for a role it does not know."""
    d = synth(tmp_path_factory.mktemp("models") / "raising", "--arch", "LlamaForCausalLM", "--algo", "NVFP4")
    write_byte_tokenizer(d, "{% for m in messages %}{% if m['role'] == 'bad' %}"
                            "{{ raise_exception('role bad is not allowed') }}{% endif %}{{ m['content'] }}"
                            "{% endfor %}")
    s = Server(d, "--served-model-name", "raising", log_dir=logs, name="raising")
    s.model_dir = d
    yield s
    assert s.stop() == 0, s.log()


def test_template_errors_do_not_show_server_paths(raising_server):
    r = post(raising_server, "/v1/chat/completions", {"messages": [{"role": "bad", "content": "x"}]})
    err = assert_client_error(r, "messages")
    assert "role bad is not allowed" in err["message"], err
    assert str(raising_server.model_dir) not in r.text, r.text
    assert "/tmp" not in r.text and "pytest-" not in r.text, r.text
    assert_alive(raising_server)


def memory_kib(server, field):
    """VmRSS / VmHWM of the server process, in KiB."""
    for line in open(f"/proc/{server.proc.pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{server.proc.pid}/status")


def test_an_over_long_prompt_is_refused_without_tokenizing_it(server):
    # 24 MiB of text for the tiny model's short context: the tokenizer's bound (ids >= bytes / the most
    # bytes one id can stand for) refuses it from its size, before the prompt is copied, rendered
    # or tokenized; what remains is the body and its parsed JSON (~4x; 7x before this check).
    assert_alive(server)
    hwm0 = memory_kib(server, "VmHWM")
    text = "the quick brown fox " * ((24 << 20) // 20)
    for path, body, param in [("/v1/completions", {"prompt": text}, "prompt"),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}, "messages")]:
        err = assert_client_error(post(server, path, body, timeout=120), param)
        assert "maximum context length" in err["message"] and "leaves no room" in err["message"], err
    grown_mib = (memory_kib(server, "VmHWM") - hwm0) / 1024
    assert grown_mib < 5 * 24 + 16, f"peak RSS grew {grown_mib:.0f} MiB for a 24 MiB prompt"
    # Just over the context, but small: the tokenizer stops at the limit; just under: accepted.
    ctx = httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]["max_model_len"]
    over = post(server, "/v1/completions", {"prompt": "a" * ctx, "max_tokens": 1})
    assert "leaves no room" in assert_client_error(over, "prompt")["message"]
    ok = post(server, "/v1/completions", {"prompt": "a" * (ctx - 8), "max_tokens": 1})
    assert ok.status_code == 200, ok.text
    assert_alive(server)


def test_memory_goes_back_after_large_requests(server):
    # Large bodies are their own mappings (unmapped when freed) and tokenizing's temporaries are
    # trimmed, so RSS after a burst of large requests is back near where it was.
    assert_alive(server)
    rss0 = memory_kib(server, "VmRSS")
    filler = "x" * (8 << 20)
    for _ in range(6):
        r = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "user": filler}, timeout=120)
        assert r.status_code == 200, r.text
        r = post(server, "/tokenize", {"prompt": "hello world " * (1 << 18)}, timeout=120)
        assert r.status_code == 200 and r.json()["count"] > 1 << 18, r.text[:200]
    grown_mib = (memory_kib(server, "VmRSS") - rss0) / 1024
    assert grown_mib < 8, f"RSS stayed {grown_mib:.1f} MiB above its level before 6 x (8 MiB body + 3 MiB prompt)"
