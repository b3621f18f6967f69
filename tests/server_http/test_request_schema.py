"""vLLM's request schemas walked field by field (CompletionRequest and ChatCompletionRequest as
of vLLM's entrypoints/openai/*/protocol.py): every field is documented in docs/SERVER.md, every
field fp4lm does not implement is a 400 naming it when set to a value that would matter, and
every ignored field leaves the output unchanged."""
import json
import re
from pathlib import Path

import httpx
import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "SERVER.md").read_text()

COMMON = ["model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty", "seed",
          "stop", "stream", "stream_options", "temperature", "top_p", "user", "use_beam_search", "top_k", "min_p",
          "repetition_penalty", "watermarking", "length_penalty", "stop_token_ids", "include_stop_str_in_output",
          "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
          "truncate_prompt_tokens", "truncation_side", "allowed_token_ids", "prompt_logprobs", "logprob_token_ids",
          "bad_words", "add_special_tokens", "response_format", "structured_outputs", "priority", "request_id",
          "session_id", "return_tokens_as_token_ids", "return_token_ids", "routed_experts_prompt_start",
          "return_token_offsets", "return_mm_kwargs", "cache_salt", "kv_transfer_params", "ec_transfer_params",
          "vllm_xargs", "repetition_detection", "thinking_token_budget", "stream_interval", "echo"]
COMPLETION_ONLY = ["prompt", "best_of", "suffix", "prompt_embeds"]
CHAT_ONLY = ["messages", "top_logprobs", "max_completion_tokens", "tools", "tool_choice", "reasoning_effort",
             "include_reasoning", "parallel_tool_calls", "add_generation_prompt", "continue_final_message",
             "documents", "chat_template", "chat_template_kwargs", "media_io_kwargs", "mm_processor_kwargs",
             "return_prompt_text"]

# Fields refused with a value that would change the output (their no-op defaults are accepted).
UNSUPPORTED = {
    "include_stop_str_in_output": (True, False),
    "spaces_between_special_tokens": (False, True), "bad_words": (["x"], []),
    "watermarking": (True, False), "thinking_token_budget": (10, None),
    "repetition_detection": ({"max_pattern_size": 2}, None), "priority": (1, 0),
}
COMPLETION_UNSUPPORTED = {"suffix": ("x", None), "prompt_embeds": ("AAAA", None)}
CHAT_UNSUPPORTED = {"chat_template": ("{{ 'x' }}", None)}
IGNORED = {"user": "u1", "request_id": "r-1", "session_id": "s", "cache_salt": "salt", "kv_transfer_params": {"a": 1},
           "ec_transfer_params": {"a": 1}, "vllm_xargs": {"k": "v"}, "routed_experts_prompt_start": 1,
           "return_token_offsets": True, "return_mm_kwargs": False, "stream_interval": 4}
CHAT_IGNORED = {"media_io_kwargs": {"image": {}}, "mm_processor_kwargs": {"x": 1}}

COMPLETION = {"model": "tiny", "prompt": "Once", "max_tokens": 4, "temperature": 0}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


def post(server, path, body):
    return httpx.post(server.url + path, json=body, timeout=60)


def test_every_vllm_field_is_documented():
    for field in COMMON + COMPLETION_ONLY + CHAT_ONLY:
        assert re.search(r"`" + re.escape(field) + r"[`.]", DOC), f"docs/SERVER.md does not mention `{field}`"
    for field in list(UNSUPPORTED) + list(COMPLETION_UNSUPPORTED) + list(CHAT_UNSUPPORTED) + list(IGNORED):
        assert field in COMMON + COMPLETION_ONLY + CHAT_ONLY, field


@pytest.mark.parametrize("path,base,table", [
    ("/v1/completions", COMPLETION, {**UNSUPPORTED, **COMPLETION_UNSUPPORTED}),
    ("/v1/chat/completions", CHAT, {**UNSUPPORTED, **CHAT_UNSUPPORTED}),
])
def test_unsupported_values_are_400s_naming_the_field(server, path, base, table):
    for field, (bad, no_op) in table.items():
        r = post(server, path, {**base, field: bad})
        assert r.status_code == 400, (field, r.text)
        assert r.json()["error"]["param"] == field, (field, r.text)
        ok = post(server, path, {**base, field: no_op})
        assert ok.status_code == 200, (field, ok.text)


@pytest.mark.parametrize("path,base,extra", [
    ("/v1/completions", COMPLETION, IGNORED),
    ("/v1/chat/completions", CHAT, {**IGNORED, **CHAT_IGNORED}),
])
def test_ignored_fields_change_nothing(server, path, base, extra):
    plain = post(server, path, base).json()
    r = post(server, path, {**base, **extra})
    assert r.status_code == 200, r.text
    key = "text" if "prompt" in base else "message"
    assert r.json()["choices"][0][key] == plain["choices"][0][key]
    assert r.json()["usage"] == plain["usage"]


def test_truncate_prompt_tokens_keeps_the_last_tokens(server):
    ids = list(range(10, 30))
    r = post(server, "/v1/completions", {**COMPLETION, "prompt": ids, "truncate_prompt_tokens": 5,
                                         "return_token_ids": True}).json()
    assert r["usage"]["prompt_tokens"] == 5
    assert r["choices"][0]["prompt_token_ids"] == ids[-5:]
    assert post(server, "/v1/completions", {**COMPLETION, "truncate_prompt_tokens": -2}).status_code == 400


@pytest.mark.parametrize("path,base", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)])
def test_truncation_side_left_keeps_the_last_tokens_and_right_the_first(server, path, base):
    ids = list(range(40, 60))
    body = {**base, "return_token_ids": True, "truncate_prompt_tokens": 5}
    if "prompt" in base:
        body["prompt"] = ids
    r = {side: post(server, path, {**body, "truncation_side": side}).json() for side in ("left", "right")}
    default = post(server, path, body).json()

    def prompt_ids(resp):
        return resp["choices"][0]["prompt_token_ids"] if "prompt" in base else resp["prompt_token_ids"]

    if "prompt" in base:
        assert prompt_ids(r["left"]) == ids[-5:] and prompt_ids(r["right"]) == ids[:5]
    else:  # the rendered chat prompt: its last and its first 5 tokens
        whole = post(server, path, {**base, "return_token_ids": True}).json()["prompt_token_ids"]
        assert prompt_ids(r["left"]) == whole[-5:] and prompt_ids(r["right"]) == whole[:5]
    assert prompt_ids(default) == prompt_ids(r["left"]), "vLLM's default side is left"
    assert all(x["usage"]["prompt_tokens"] == 5 for x in r.values())
    bad = post(server, path, {**body, "truncation_side": "middle"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncation_side"


def test_return_tokens_as_token_ids_and_prompt_text(server):
    r = post(server, "/v1/completions", {**COMPLETION, "logprobs": 1, "return_tokens_as_token_ids": True,
                                         "return_token_ids": True}).json()
    ch = r["choices"][0]
    assert ch["logprobs"]["tokens"] == [f"token_id:{t}" for t in ch["token_ids"]]
    c = post(server, "/v1/chat/completions", {**CHAT, "return_prompt_text": True}).json()
    assert c["prompt_text"] == "<|user|>hi\n<|assistant|>"


def reference_beam_search(server, prompt, width, max_tokens, penalty, eos):
    """vLLM's beam search written here, over the server's next-token logprobs (one greedy
    one-token completion per beam, its top 2 * width as token ids)."""
    live, done = [([], 0.0)], []

    def score(tokens, cum):
        return cum / (len(prompt) + len(tokens) - (1 if tokens and tokens[-1] in eos else 0)) ** penalty

    for _ in range(max_tokens):
        if not live:
            break
        cands = []
        for tokens, cum in live:
            r = post(server, "/v1/completions", {"model": "tiny", "prompt": prompt + tokens, "max_tokens": 1,
                                                 "temperature": 0, "logprobs": 2 * width, "ignore_eos": True,
                                                 "return_tokens_as_token_ids": True}).json()
            top = r["choices"][0]["logprobs"]["top_logprobs"][0]
            ranked = sorted(((int(k.split(":")[1]), v) for k, v in top.items()), key=lambda kv: -kv[1])[:2 * width]
            for t, lp in ranked:
                (done if t in eos else cands).append((tokens + [t], cum + lp))
        cands.sort(key=lambda b: -score(*b))
        live = cands[:width]
    done += live
    done.sort(key=lambda b: -score(*b))
    return done[:width]


@pytest.mark.parametrize("width,penalty", [(1, 1.0), (3, 1.0), (3, 0.5)])
def test_use_beam_search_equals_a_beam_search_over_the_models_logprobs(server, tiny_model, width, penalty):
    cfg = json.loads((Path(tiny_model) / "config.json").read_text())
    eos = cfg.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    prompt = [72, 101, 108, 108, 111]
    want = reference_beam_search(server, prompt, width, 5, penalty, eos)
    r = post(server, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 5, "n": width,
                                         "use_beam_search": True, "length_penalty": penalty,
                                         "return_token_ids": True})
    assert r.status_code == 200, r.text
    got = r.json()["choices"]
    assert [c["token_ids"] for c in got] == [t for t, _ in want]
    assert [c["finish_reason"] for c in got] == ["stop" if t[-1] in eos else "length" for t, _ in want]
    # Chat: the same search over the rendered prompt, n choices best first.
    chat = post(server, "/v1/chat/completions", {**CHAT, "n": 2, "use_beam_search": True, "return_token_ids": True})
    assert chat.status_code == 200 and len(chat.json()["choices"]) == 2, chat.text


@pytest.mark.parametrize("extra,param", [({"stream": True}, "stream"), ({"stop": ["x"]}, "stop"),
                                         ({"n": 11}, "n"), ({"logit_bias": {"5": 1}}, "logit_bias"),
                                         ({"use_beam_search": "yes"}, "use_beam_search"),
                                         ({"length_penalty": "x"}, "length_penalty")])
def test_beam_search_refuses_what_it_would_ignore(server, extra, param):
    r = post(server, "/v1/completions", {**COMPLETION, "use_beam_search": True, **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_reasoning_effort_and_documents_reach_the_template(server):
    assert post(server, "/v1/chat/completions", {**CHAT, "reasoning_effort": "low"}).status_code == 200
    r = post(server, "/v1/chat/completions", {**CHAT, "reasoning_effort": "extreme"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"
    assert post(server, "/v1/chat/completions", {**CHAT, "documents": [{"title": "t", "text": "x"}]}).status_code == 200
    r = post(server, "/v1/chat/completions", {**CHAT, "documents": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "documents"


# Every integer field vLLM types: a literal just outside 64 bits (read exactly, never through a
# double that rounds it into range) and a value under the field's lower bound are 400s naming it.
INT64_BELOW, INT64_ABOVE = "-9223372036854775809", "9223372036854775808"
INT_FIELDS = {  # field: a value under its lower bound (None: the whole int64 range is valid)
    "seed": None, "n": 0, "max_tokens": 0, "top_k": -2, "min_tokens": -1, "truncate_prompt_tokens": -2,
    "prompt_logprobs": -2, "priority": None, "routed_experts_prompt_start": -1, "stream_interval": 0,
}
COMPLETION_INT_FIELDS = {"logprobs": -1, "best_of": 0}
CHAT_INT_FIELDS = {"top_logprobs": -1, "max_completion_tokens": 0}


def raw_post(server, path, text):
    return httpx.post(server.url + path, content=text, headers={"Content-Type": "application/json"}, timeout=60)


@pytest.mark.parametrize("path,base,fields", [
    ("/v1/completions", COMPLETION, {**INT_FIELDS, **COMPLETION_INT_FIELDS}),
    ("/v1/chat/completions", CHAT, {**INT_FIELDS, **CHAT_INT_FIELDS}),
])
def test_integer_fields_are_read_exactly_and_range_checked(server, path, base, fields):
    extra = {"logprobs": True} if "messages" in base else {}  # top_logprobs needs it
    for field, under in fields.items():
        for literal in (INT64_BELOW, INT64_ABOVE, "1e400", "1.5") + ((str(under),) if under is not None else ()):
            text = json.dumps({**base, **extra})[:-1] + f', "{field}": {literal}}}'
            r = raw_post(server, path, text)
            assert r.status_code == 400, (field, literal, r.text)
            if literal != "1e400":  # a number no double holds is a JSON error of the whole body
                assert r.json()["error"]["param"] == field, (field, literal, r.text)
    # The ends of the int64 range are seeds.
    for literal in ("-9223372036854775808", "9223372036854775807"):
        assert raw_post(server, path, json.dumps(base)[:-1] + f', "seed": {literal}}}').status_code == 200
    # A list of token ids and logit_bias keys too.
    r = raw_post(server, path, json.dumps(base)[:-1] + f', "stop_token_ids": [{INT64_BELOW}]}}')
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop_token_ids", r.text
    r = post(server, path, {**base, "logit_bias": {INT64_BELOW: 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
