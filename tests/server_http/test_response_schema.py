"""vLLM's response models walked field by field (as test_request_schema.py walks the requests).

The field lists are vLLM's pydantic models as of vllm/entrypoints/openai/completion/protocol.py
(CompletionResponse, CompletionResponseChoice, CompletionStreamResponse,
CompletionResponseStreamChoice), chat_completion/protocol.py (ChatCompletionResponse,
ChatCompletionResponseChoice, ChatMessage, ChatCompletionStreamResponse,
ChatCompletionResponseStreamChoice) and serve/engine/protocol.py (UsageInfo). vLLM answers a whole
response with model_dump() (every field, null when unset) and writes each stream chunk with
model_dump_json(exclude_unset=True) (the fields its serving code sets, null included), the final
usage chunk with exclude_none. A vLLM client reading any of these keys must find it here.
"""
import json

import httpx
import pytest

COMPLETION_RESPONSE = {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                       "kv_transfer_params", "ec_transfer_params", "metrics"}
COMPLETION_CHOICE = {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_logprobs",
                     "prompt_token_ids", "routed_experts"}
USAGE = {"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"}
CHAT_RESPONSE = {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                 "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params",
                 "metrics"}
CHAT_CHOICE = {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids", "routed_experts"}
# ChatMessage; its serializer drops an empty tool_calls list.
CHAT_MESSAGE = {"role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"}

# Stream chunks: the keys vLLM's serving code sets.
CHUNK = {"id", "object", "created", "model", "choices"}
COMPLETION_STREAM_CHOICE = {"index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids",
                            "token_ids"}
CHAT_FIRST_CHUNK = CHUNK | {"prompt_token_ids", "prompt_text"}
CHAT_FIRST_CHOICE = {"index", "delta", "logprobs", "finish_reason"}
CHAT_STREAM_CHOICE = {"index", "delta", "logprobs", "finish_reason", "token_ids"}  # + stop_reason when finishing
# The final usage chunk (exclude_none). prompt_tokens_details only with --enable-prompt-tokens-details
# and cached prompt tokens, as vLLM.
USAGE_CHUNK = CHUNK | {"usage"}
STREAM_USAGE = {"prompt_tokens", "total_tokens", "completion_tokens"}
STREAM_USAGE_EXTRA = {"prompt_tokens_details"}

COMPLETION = {"model": "tiny", "prompt": "Once", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0,
        "ignore_eos": True}


def post(server, path, body):
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def events(server, path, body):
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        data = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


@pytest.mark.parametrize("extra", [{}, {"return_token_ids": True, "prompt_logprobs": 1, "logprobs": 1}])
def test_completion_response_has_every_vllm_field(server, extra):
    r = post(server, "/v1/completions", {**COMPLETION, **extra})
    assert set(r) == COMPLETION_RESPONSE
    assert set(r["usage"]) == USAGE
    (c,) = r["choices"]
    assert set(c) == COMPLETION_CHOICE
    for key in ("service_tier", "system_fingerprint", "kv_transfer_params", "ec_transfer_params", "metrics"):
        assert r[key] is None, key
    assert c["routed_experts"] is None and c["stop_reason"] is None
    if not extra:
        assert c["token_ids"] is None and c["prompt_token_ids"] is None and c["prompt_logprobs"] is None
        assert c["logprobs"] is None
    else:
        assert len(c["token_ids"]) == 4 and len(c["prompt_token_ids"]) == r["usage"]["prompt_tokens"]
        assert c["prompt_logprobs"][0] is None and len(c["prompt_logprobs"]) == len(c["prompt_token_ids"])


def test_echo_with_logprobs_returns_the_prompt_logprobs_it_computed(server):
    # vLLM: echo + logprobs computes prompt logprobs and returns them in the choice too.
    c = post(server, "/v1/completions", {**COMPLETION, "echo": True, "logprobs": 0})["choices"][0]
    assert c["prompt_logprobs"][0] is None and len(c["prompt_logprobs"]) == len("Once")


@pytest.mark.parametrize("extra", [{}, {"return_token_ids": True, "prompt_logprobs": 1, "return_prompt_text": True}])
def test_chat_response_has_every_vllm_field(server, extra):
    r = post(server, "/v1/chat/completions", {**CHAT, **extra})
    assert set(r) == CHAT_RESPONSE
    assert set(r["usage"]) == USAGE
    (c,) = r["choices"]
    assert set(c) == CHAT_CHOICE
    assert set(c["message"]) == CHAT_MESSAGE
    for key in ("refusal", "annotations", "audio", "function_call", "reasoning"):
        assert c["message"][key] is None, key
    if not extra:
        for key in ("prompt_logprobs", "prompt_token_ids", "prompt_text"):
            assert r[key] is None, key
        assert c["token_ids"] is None
    else:
        assert r["prompt_text"] == "<|user|>hi\n<|assistant|>"
        assert len(r["prompt_token_ids"]) == r["usage"]["prompt_tokens"] == len(r["prompt_logprobs"])
        assert len(c["token_ids"]) == 4


def test_the_openai_client_reads_vllm_fields_as_attributes(client):
    # vLLM client code reads these as attributes (AttributeError when absent).
    r = client.completions.create(model="tiny", prompt="Once", max_tokens=2, temperature=0)
    c = r.choices[0]
    assert c.prompt_token_ids is None and c.token_ids is None and c.prompt_logprobs is None
    assert c.stop_reason is None
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                          temperature=0)
    assert chat.prompt_logprobs is None and chat.prompt_token_ids is None and chat.choices[0].token_ids is None
    assert chat.choices[0].message.reasoning is None


@pytest.mark.parametrize("ids", [False, True])
def test_completion_stream_chunks_have_vllm_fields(server, ids):
    chunks = events(server, "/v1/completions",
                    {**COMPLETION, "return_token_ids": ids, "stream_options": {"include_usage": True}})
    *body, usage = chunks
    assert body
    for i, ch in enumerate(body):
        assert set(ch) == CHUNK, ch
        (c,) = ch["choices"]
        assert set(c) == COMPLETION_STREAM_CHOICE, c
        assert (c["prompt_token_ids"] is not None) == (ids and i == 0), c
        assert (c["token_ids"] is not None) == ids, c
        assert c["stop_reason"] is None
    assert set(usage) == USAGE_CHUNK and usage["choices"] == []
    assert STREAM_USAGE <= set(usage["usage"]) <= STREAM_USAGE | STREAM_USAGE_EXTRA


@pytest.mark.parametrize("ids", [False, True])
def test_chat_stream_chunks_have_vllm_fields(server, ids):
    chunks = events(server, "/v1/chat/completions",
                    {**CHAT, "return_token_ids": ids, "stream_options": {"include_usage": True}})
    first, *body, usage = chunks
    assert set(first) == CHAT_FIRST_CHUNK
    assert (first["prompt_token_ids"] is not None) == ids and first["prompt_text"] is None
    assert set(first["choices"][0]) == CHAT_FIRST_CHOICE
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert body
    for ch in body:
        assert set(ch) == CHUNK, ch
        (c,) = ch["choices"]
        finishing = c["finish_reason"] is not None
        assert set(c) == CHAT_STREAM_CHOICE | ({"stop_reason"} if finishing else set()), c
        assert (c["token_ids"] is not None) == ids
    assert body[-1]["choices"][0]["finish_reason"] == "length"
    assert set(usage) == USAGE_CHUNK and usage["choices"] == []


# vLLM's should_include_usage: continuous_usage_stats counts only together with include_usage.
@pytest.mark.parametrize("path,base", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)])
@pytest.mark.parametrize("include,continuous", [(False, True), (True, False), (True, True), (False, False)])
def test_usage_streaming_as_vllm(server, path, base, include, continuous):
    chunks = events(server, path,
                    {**base, "stream_options": {"include_usage": include, "continuous_usage_stats": continuous}})
    with_choices = [c for c in chunks if c["choices"]]
    usage_only = [c for c in chunks if not c["choices"]]
    assert len(usage_only) == (1 if include else 0)
    if include:
        assert chunks[-1] is usage_only[0] and chunks[-1]["usage"]["completion_tokens"] == 4
    for c in with_choices:
        assert ("usage" in c) == (include and continuous), c
    if include and continuous:
        last = with_choices[-1]["usage"]
        assert last["completion_tokens"] == 4
        assert last["total_tokens"] == last["prompt_tokens"] + 4
