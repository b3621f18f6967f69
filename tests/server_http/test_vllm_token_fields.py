"""vLLM's allowed_token_ids, logprob_token_ids, logprobs / top_logprobs / prompt_logprobs = -1 under
--max-logprobs, and its SageMaker routes /invocations and /ping, with the official openai client
(extra_body for vLLM's fields) and httpx. Values are checked against the server's own full
distribution (top_logprobs=-1 on an unrestricted request), which the logprob tests check against
a whole-prompt forward (test_prompt_logprobs.py)."""
import json
import math

import httpx
import openai
import pytest

from conftest import Server

MSG = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def full(tiny_model, logs):
    """A server without a logprobs cap (vLLM's --max-logprobs -1)."""
    s = Server(tiny_model, "--served-model-name", "tiny", "--max-logprobs", "-1", log_dir=logs, name="full")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def fclient(full):
    return openai.OpenAI(base_url=full.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def full_distributions(fclient, max_tokens):
    """Greedy chat: per position the sampled id and {id: logprob} over the whole vocabulary."""
    r = fclient.chat.completions.create(model="tiny", messages=MSG, max_tokens=max_tokens, temperature=0,
                                        logprobs=True, top_logprobs=-1,
                                        extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    out = []
    for c in r.choices[0].logprobs.content:
        d = {int(e.token.removeprefix("token_id:")): e.logprob for e in c.top_logprobs}
        out.append((int(c.token.removeprefix("token_id:")), d))
    return out


def test_top_logprobs_minus_one_is_the_whole_vocabulary(fclient):
    (tok, d), = full_distributions(fclient, 1)
    # Every id once, a distribution (log-sum-exp 0), the sampled (greedy) token the most probable.
    assert sorted(d) == list(range(len(d))) and len(d) > 100
    mx = max(d.values())
    assert mx + math.log(sum(math.exp(v - mx) for v in d.values())) == pytest.approx(0, abs=1e-3)
    assert d[tok] == mx


def test_minus_one_over_the_cap_is_vllms_400(server, client):
    # The default cap (20): -1 asks for the vocabulary and is refused with vLLM's message.
    for path, body, field in [
        ("/v1/chat/completions", {"messages": MSG, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ("/v1/completions", {"prompt": "Hi", "logprobs": -1}, "logprobs"),
        ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": -1}, "prompt_logprobs"),
    ]:
        r = httpx.post(server.url + path, json={"model": "tiny", "max_tokens": 1, **body}, timeout=60)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == field
        assert "which is greater than max allowed: 20" in err["message"], err
        assert err["message"].startswith("Requested "), err


def test_completions_and_prompt_logprobs_minus_one(full, fclient):
    (tok, d), = full_distributions(fclient, 1)
    vocab = len(d)
    r = httpx.post(full.url + "/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": [72, 101, 108, 108, 111], "max_tokens": 1, "temperature": 0, "logprobs": -1,
        "prompt_logprobs": -1}).json()
    plp = r["choices"][0]["prompt_logprobs"]
    assert plp[0] is None
    for entry in plp[1:]:
        assert sorted(int(k) for k in entry) == list(range(vocab))  # every id, the prompt token's among them
        lps = [v["logprob"] for v in entry.values()]
        mx = max(lps)
        assert mx + math.log(sum(math.exp(v - mx) for v in lps)) == pytest.approx(0, abs=1e-3)
    # completions' top_logprobs are keyed by text: as many distinct texts as the vocabulary decodes to.
    assert len(r["choices"][0]["logprobs"]["top_logprobs"][0]) > 100


def test_allowed_token_ids_greedy_picks_the_more_probable_allowed(fclient):
    (tok, d), = full_distributions(fclient, 1)
    ranked = sorted(d, key=lambda i: -d[i])
    a, b = ranked[7], ranked[3]  # neither is the unrestricted choice; b is the more probable
    for allowed in ([a, b], [b, a]):
        r = fclient.chat.completions.create(model="tiny", messages=MSG, max_tokens=1, temperature=0, logprobs=True,
                                            extra_body={"allowed_token_ids": allowed, "return_token_ids": True,
                                                        "return_tokens_as_token_ids": True})
        c = r.choices[0]
        assert c.token_ids == [b]
        # Logprobs are the raw distribution's (vLLM's default raw_logprobs), before the mask.
        assert c.logprobs.content[0].logprob == pytest.approx(d[b], abs=1e-4)


@pytest.mark.parametrize("stream", [False, True])
def test_allowed_token_ids_sampling_n_and_stream(full, stream):
    allowed = [72, 101, 108, 32]
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 12, "temperature": 1.5, "n": 3, "seed": 5,
            "ignore_eos": True, "allowed_token_ids": allowed, "return_token_ids": True, "stream": stream}
    ids = {0: [], 1: [], 2: []}
    if stream:
        with httpx.stream("POST", full.url + "/v1/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for ch in json.loads(line[6:])["choices"]:
                    ids[ch["index"]] += ch.get("token_ids") or []
    else:
        r = httpx.post(full.url + "/v1/completions", json=body, timeout=120).json()
        for ch in r["choices"]:
            ids[ch["index"]] = ch["token_ids"]
    for i, t in ids.items():
        assert len(t) == 12, (i, t)
        assert set(t) <= set(allowed), (i, t)
    # Sampled, not one forced token: the 36 draws use more than one of the four ids.
    assert len({x for t in ids.values() for x in t}) > 1
    # A request's tokens do not depend on the others: the same seed alone gives choice 0's tokens.
    alone = httpx.post(full.url + "/v1/completions", json={**body, "n": 1, "stream": False}, timeout=120).json()
    assert alone["choices"][0]["token_ids"] == ids[0]


def test_allowed_token_ids_errors_name_the_field(server):
    for bad in ([1, 10**6], [-1], [], "x", [1.5]):
        r = httpx.post(server.url + "/v1/chat/completions", timeout=60,
                       json={"model": "tiny", "messages": MSG, "max_tokens": 1, "allowed_token_ids": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "allowed_token_ids", (bad, r.text)


def test_logprob_token_ids_equal_the_full_distribution(fclient):
    ref = full_distributions(fclient, 3)
    want = [5, 72, 101, 200]
    r = fclient.chat.completions.create(model="tiny", messages=MSG, max_tokens=3, temperature=0, logprobs=True,
                                        top_logprobs=2,  # logprob_token_ids take its place (vLLM)
                                        extra_body={"logprob_token_ids": want, "return_tokens_as_token_ids": True,
                                                    "ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    for (tok, d), c in zip(ref, content):
        assert int(c.token.removeprefix("token_id:")) == tok
        got = [(int(e.token.removeprefix("token_id:")), e.logprob) for e in c.top_logprobs]
        # vLLM's per-token dict: the sampled token first, then the listed ids (each once).
        assert got[0][0] == tok
        assert [i for i, _ in got[1:]] == [i for i in want if i != tok]
        for i, v in got:
            assert v == pytest.approx(d[i], abs=1e-4), (i, v, d[i])


def test_logprob_token_ids_on_completions_and_stream(full, fclient):
    (tok, d), = full_distributions(fclient, 1)
    want = [7, 65]
    r = httpx.post(full.url + "/v1/chat/completions", timeout=120, json={
        "model": "tiny", "messages": MSG, "max_tokens": 1, "temperature": 0, "logprobs": True, "stream": True,
        "logprob_token_ids": want, "return_tokens_as_token_ids": True})
    tops = [c["logprobs"]["content"][0]["top_logprobs"] for line in r.text.splitlines()
            if line.startswith("data: {") for c in json.loads(line[6:])["choices"] if c.get("logprobs")]
    assert len(tops) == 1
    assert {int(e["token"].removeprefix("token_id:")): e["logprob"] for e in tops[0]} == pytest.approx(
        {i: d[i] for i in [tok, *want]}, abs=1e-4)
    # Completions: `logprobs` must be given; the ids replace its count (vLLM passes logprobs=None).
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 1, "temperature": 0, "logprob_token_ids": want}
    ok = httpx.post(full.url + "/v1/completions", json={**body, "logprobs": 0, "return_tokens_as_token_ids": True},
                    timeout=60)
    assert ok.status_code == 200, ok.text
    lp = ok.json()["choices"][0]["logprobs"]
    sampled = int(lp["tokens"][0].removeprefix("token_id:"))
    got = {int(k.removeprefix("token_id:")): v for k, v in lp["top_logprobs"][0].items()}
    ref = fclient.completions.create(model="tiny", prompt="Hello", max_tokens=1, temperature=0, logprobs=-1,
                                     extra_body={"return_tokens_as_token_ids": True}).choices[0].logprobs
    d = {int(k.removeprefix("token_id:")): v for k, v in ref.top_logprobs[0].items()}
    assert got == pytest.approx({i: d[i] for i in [sampled, *want]}, abs=1e-4)
    bad = httpx.post(full.url + "/v1/completions", json=body, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logprob_token_ids", bad.text


def test_logprob_token_ids_errors(server):
    base = {"model": "tiny", "messages": MSG, "max_tokens": 1}
    for extra in [{"logprob_token_ids": [1]},  # without logprobs
                  {"logprobs": True, "logprob_token_ids": []},
                  {"logprobs": True, "logprob_token_ids": [10**6]},
                  {"logprobs": True, "logprob_token_ids": list(range(129))},
                  {"logprobs": True, "logprob_token_ids": [1], "use_beam_search": True}]:
        r = httpx.post(server.url + "/v1/chat/completions", json={**base, **extra}, timeout=60)
        assert r.status_code == 400, (extra, r.text)
        assert r.json()["error"]["param"] == "logprob_token_ids", (extra, r.text)


def test_ping_and_invocations(server, client):
    for method in ("GET", "POST"):
        assert httpx.request(method, server.url + "/ping", timeout=10).status_code == 200
    chat = {"model": "tiny", "messages": MSG, "max_tokens": 5, "temperature": 0}
    via = httpx.post(server.url + "/invocations", json=chat, timeout=60).json()
    direct = httpx.post(server.url + "/v1/chat/completions", json=chat, timeout=60).json()
    assert via["object"] == "chat.completion"
    assert via["choices"][0]["message"] == direct["choices"][0]["message"]
    comp = {"model": "tiny", "prompt": "Once upon", "max_tokens": 5, "temperature": 0}
    via = httpx.post(server.url + "/invocations", json=comp, timeout=60).json()
    direct = client.completions.create(**comp)
    assert via["object"] == "text_completion"
    assert via["choices"][0]["text"] == direct.choices[0].text
    r = httpx.post(server.url + "/invocations", json={"model": "tiny", "input": "x"}, timeout=60)
    assert r.status_code == 400
    assert "Cannot find suitable handler for request" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/invocations", timeout=10).status_code == 405
