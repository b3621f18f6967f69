"""/v1/completions with the official openai client (after llama.cpp's completion tests)."""
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import FP4LM


def complete(client, prompt, **kw):
    extra = kw.pop("extra_body", {})
    return client.completions.create(model="tiny", prompt=prompt, extra_body=extra, **kw)


def test_completion_usage_and_length(client):
    r = complete(client, "Once upon", max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.model == "tiny" and r.id.startswith("cmpl-")
    c = r.choices[0]
    assert c.finish_reason == "length" and c.index == 0
    assert r.usage.prompt_tokens == len("Once upon")
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == len("Once upon") + 8


def test_default_max_tokens_is_16(client):
    r = complete(client, "x", temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16


def test_stream_and_non_stream_give_the_same_text(client):
    kw = dict(max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    whole = complete(client, "The cat", **kw)
    chunks = list(complete(client, "The cat", stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_raw_stream_ends_with_done(server):
    with httpx.stream("POST", server.url + "/v1/completions", timeout=30,
                      json={"prompt": "ab", "max_tokens": 4, "temperature": 0, "stream": True,
                            "ignore_eos": True, "return_token_ids": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    ids = [i for e in events[:-1] for i in json.loads(e)["choices"][0].get("token_ids", [])]
    assert len(ids) == 4


def test_same_seed_same_output_alone_and_at_concurrency_8(client):
    kw = dict(max_tokens=20, temperature=1.0, seed=1234, extra_body={"ignore_eos": True})
    alone = complete(client, "seeded", **kw).choices[0].text
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: complete(client, "seeded", **kw).choices[0].text, range(8)))
    assert texts == [alone] * 8
    other = complete(client, "seeded", **{**kw, "seed": 99}).choices[0].text
    assert other != alone  # 20 sampled bytes from a flat-ish distribution: a collision is ~impossible


def test_greedy_equals_fp4lm_generate(server, client, tiny_model):
    prompt = [72, 101, 108, 108, 111]
    gen = subprocess.run([FP4LM, "generate", "--model", str(tiny_model), "--prompt-ids",
                          ",".join(map(str, prompt)), "--max-tokens", "12", "--json"],
                         check=True, capture_output=True, text=True, timeout=120)
    expected = json.loads(gen.stdout)["output_ids"]
    r = httpx.post(server.url + "/v1/completions", timeout=30,
                   json={"prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": True}).json()
    assert r["choices"][0]["token_ids"] == expected


def test_greedy_output_does_not_depend_on_the_batch(client):
    kw = dict(max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    prompts = [f"prompt number {i}" for i in range(8)]
    alone = [complete(client, p, **kw).choices[0].text for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: complete(client, p, **kw).choices[0].text, prompts))
    assert together == alone


def test_stop_string_is_cut_from_the_output_streaming_or_not(client):
    kw = dict(max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
    full = complete(client, "stop test", **kw).choices[0].text
    # A stop string from the middle of the greedy text: two characters after the 10th.
    chars = list(full)
    assert len(chars) > 14
    stop = "".join(chars[10:12])
    cut = full[: full.index(stop)]
    r = complete(client, "stop test", stop=[stop], **kw)
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in complete(client, "stop test", stop=stop, stream=True, **kw)
                       if c.choices)
    assert streamed == cut


def test_stop_token_ids_and_min_tokens(server):
    base = {"prompt": [65, 66], "max_tokens": 10, "temperature": 0, "return_token_ids": True, "ignore_eos": True}
    ids = httpx.post(server.url + "/v1/completions", json=base).json()["choices"][0]["token_ids"]
    r = httpx.post(server.url + "/v1/completions", json={**base, "stop_token_ids": [ids[3]]}).json()
    first = ids.index(ids[3])
    assert r["choices"][0]["token_ids"] == ids[: first + 1]
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["stop_reason"] == ids[3]


def test_echo_and_logprobs(client):
    r = complete(client, "echo me", max_tokens=3, temperature=0, echo=True, extra_body={"ignore_eos": True})
    assert r.choices[0].text.startswith("echo me")
    r = complete(client, "lp", max_tokens=3, temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 3 and len(lp.token_logprobs) == 3 and len(lp.top_logprobs) == 3
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and len(top) <= 2
        assert abs(max(top.values()) - chosen) < 1e-6  # greedy: the chosen token is the most probable


def test_errors_surface_as_openai_exceptions(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", n=0)
    assert "'n'" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", temperature=-1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", stream=False, stream_options={"include_usage": True})


def test_validation_happens_before_the_first_streamed_byte(server):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "stream": True, "top_p": 7})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"


@pytest.mark.parametrize("n_tokens", [1, 5])
def test_token_id_prompts(server, n_tokens):
    r = httpx.post(server.url + "/v1/completions",
                   json={"prompt": list(range(65, 65 + n_tokens)), "max_tokens": 2, "temperature": 0,
                         "ignore_eos": True}).json()
    assert r["usage"]["prompt_tokens"] == n_tokens and r["usage"]["completion_tokens"] == 2
