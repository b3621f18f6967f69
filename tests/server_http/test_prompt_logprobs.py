"""prompt_logprobs (vLLM's extension), completions echo with logprobs (OpenAI's), and best_of > n,
with the official openai client. Prompt logprobs are checked against an independent computation:
`fp4lm eval --dump-logits` runs the whole prompt in one forward, and the test takes its
log-softmax."""
import json
import math
import subprocess

import httpx
import pytest

from conftest import FP4LM

PROMPT = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 32, 84, 104, 101]


def reference_logprobs(model, ids, tmp_path):
    """Per position t >= 1: (the logprob of ids[t], {id: logprob} of the whole vocabulary) after ids[:t]."""
    (tmp_path / "ids.jsonl").write_text(json.dumps({"ids": ids}) + "\n")
    subprocess.run([FP4LM, "eval", "--model", str(model), "--ids", str(tmp_path / "ids.jsonl"),
                    "--dump-logits", str(tmp_path / "logits.jsonl")],
                   check=True, capture_output=True, text=True, timeout=120)
    rows = json.loads((tmp_path / "logits.jsonl").read_text().splitlines()[0])["logits"]
    out = []
    for t in range(1, len(ids)):
        row = rows[t - 1]
        mx = max(row)
        lse = mx + math.log(sum(math.exp(v - mx) for v in row))
        out.append([v - lse for v in row])
    return out


def test_prompt_logprobs_equal_a_whole_prompt_forward(server, tiny_model, tmp_path):
    ref = reference_logprobs(tiny_model, PROMPT, tmp_path)
    # Twice: the second request finds its prompt cached, yet must compute every position again.
    for _ in range(2):
        r = httpx.post(server.url + "/v1/completions", timeout=60, json={
            "model": "tiny", "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "prompt_logprobs": 2}).json()
        plp = r["choices"][0]["prompt_logprobs"]
        assert len(plp) == len(PROMPT) and plp[0] is None
        for t in range(1, len(PROMPT)):
            lp = ref[t - 1]
            entry = plp[t]
            tok = entry[str(PROMPT[t])]
            assert tok["logprob"] == pytest.approx(lp[PROMPT[t]], abs=2e-3), t
            x = lp[PROMPT[t]]
            assert sum(v > x + 2e-3 for v in lp) + 1 <= tok["rank"] <= sum(v >= x - 2e-3 for v in lp), t
            second = sorted(lp)[-2]
            top = [int(k) for k, v in entry.items() if int(k) != PROMPT[t] or v["rank"] <= 2]
            for k in top:  # the top 2 (the prompt token's entry too when it is one of them)
                assert lp[k] >= second - 1e-3 or k == PROMPT[t], t
            for k, v in entry.items():
                assert v["logprob"] == pytest.approx(lp[int(k)], abs=2e-3)
                assert isinstance(v["decoded_token"], str)
            assert len(entry) in (2, 3)  # the prompt token and the top 2
        assert r["usage"]["prompt_tokens_details"] is None  # vLLM's without --enable-prompt-tokens-details


def test_chat_prompt_logprobs_are_on_the_response(server, client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       temperature=0, extra_body={"prompt_logprobs": 0, "return_token_ids": True})
    plp = r.model_extra["prompt_logprobs"]
    ids = r.model_extra["prompt_token_ids"]
    assert len(plp) == len(ids) and plp[0] is None
    for t in range(1, len(ids)):
        assert list(plp[t]) == [str(ids[t])] and plp[t][str(ids[t])]["logprob"] <= 0


def test_echo_with_logprobs_puts_the_prompt_tokens_first(server, client, tiny_model, tmp_path):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0, echo=True, logprobs=1,
                                  extra_body={"ignore_eos": True})
    ch = r.choices[0]
    lp = ch.logprobs
    n = len(PROMPT)
    assert len(lp.tokens) == n + 4
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    ref = reference_logprobs(tiny_model, PROMPT, tmp_path)
    for t in range(1, n):
        assert lp.token_logprobs[t] == pytest.approx(ref[t - 1][PROMPT[t]], abs=2e-3)
        assert lp.tokens[t] in lp.top_logprobs[t] and 1 <= len(lp.top_logprobs[t]) <= 2
    # The offsets run over the prompt's tokens and then the generated ones (in UTF-8 bytes, as
    # fp4lm counts text offsets); the text holds both.
    assert lp.text_offset[0] == 0
    for t in range(1, len(lp.tokens)):
        assert lp.text_offset[t] == lp.text_offset[t - 1] + len(lp.tokens[t - 1].encode())
    plain = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1,
                                      extra_body={"ignore_eos": True})
    assert ch.text == bytes(PROMPT).decode() + plain.choices[0].text
    assert lp.token_logprobs[n:] == plain.choices[0].logprobs.token_logprobs
    # Streamed: the first chunk carries the prompt's entries, the whole equals the response.
    tokens, values = [], []
    for chunk in client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0, echo=True,
                                           logprobs=1, stream=True, extra_body={"ignore_eos": True}):
        for c in chunk.choices:
            if c.logprobs:
                tokens += c.logprobs.tokens
                values += c.logprobs.token_logprobs
    assert tokens == lp.tokens and values == lp.token_logprobs


def test_best_of_returns_the_samples_of_highest_cumulative_logprob(client):
    kw = dict(model="tiny", prompt="Once", max_tokens=6, temperature=1.0, seed=11, logprobs=0,
              extra_body={"ignore_eos": True})
    # The candidates are the seeded samples n=best_of would return (sample i: seed + i).
    every = client.completions.create(n=5, **kw)
    sums = [sum(c.logprobs.token_logprobs) for c in every.choices]
    assert len(set(sums)) == 5
    best = client.completions.create(n=2, best_of=5, **kw)
    order = sorted(range(5), key=lambda i: -sums[i])
    assert [c.index for c in best.choices] == [0, 1]
    assert [c.text for c in best.choices] == [every.choices[i].text for i in order[:2]]
    assert [sum(c.logprobs.token_logprobs) for c in best.choices] == pytest.approx([sums[i] for i in order[:2]])
    assert best.usage.completion_tokens == 12  # the returned choices, as vLLM counts them
    # Without logprobs in the request the ranking is the same and none are returned.
    kw.pop("logprobs")
    quiet = client.completions.create(n=1, best_of=5, **kw)
    assert quiet.choices[0].text == every.choices[order[0]].text and quiet.choices[0].logprobs is None


@pytest.mark.parametrize("extra,param", [
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ({"best_of": 3, "n": 2, "stream": True}, "best_of"),
    ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": 129}, "best_of"),
])
def test_bad_values_are_400s(server, extra, param):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 2, **extra}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_streamed_prompt_logprobs_zero_is_dropped(server):
    r = httpx.post(server.url + "/v1/completions", timeout=30,
                   json={"prompt": "Once", "max_tokens": 2, "prompt_logprobs": 0, "stream": True})
    assert r.status_code == 200 and "prompt_logprobs" not in r.text
