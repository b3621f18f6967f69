"""One request path (issue 20, item 5): `fp4lm generate` runs a request through the engine's
scheduler with the server's sampling parameters, so the same request gives the same tokens,
text, finish reason and logprobs from the CLI and from /v1/completions."""
import json
import subprocess

import httpx
import pytest

from conftest import FP4LM

CASES = [
    # (server fields, generate flags)
    ({"temperature": 0}, []),
    ({"temperature": 0.9, "top_p": 0.8, "top_k": 20, "min_p": 0.02, "seed": 1234},
     ["--temperature", "0.9", "--top-p", "0.8", "--top-k", "20", "--min-p", "0.02", "--seed", "1234"]),
    ({"temperature": 1.0, "seed": 7, "presence_penalty": 1.2, "frequency_penalty": 0.7,
      "repetition_penalty": 1.3},
     ["--temperature", "1.0", "--seed", "7", "--presence-penalty", "1.2", "--frequency-penalty", "0.7",
      "--repetition-penalty", "1.3"]),
    ({"temperature": 0, "logprobs": 3, "min_tokens": 4},
     ["--logprobs", "3", "--min-tokens", "4"]),
]


def cli(model, prompt, max_tokens, flags):
    r = subprocess.run([FP4LM, "generate", "--model", str(model), "--prompt", prompt, "--max-tokens",
                        str(max_tokens), "--json", *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def served(server, prompt, max_tokens, fields):
    body = {"prompt": prompt, "max_tokens": max_tokens, "return_token_ids": True, **fields}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


@pytest.mark.parametrize("fields,flags", CASES)
def test_generate_gives_the_servers_tokens_for_the_same_request(server, tiny_model, fields, flags):
    prompt = "Once upon a time"
    c = cli(tiny_model, prompt, 24, flags)
    s = served(server, prompt, 24, fields)
    assert c["output_ids"] == s["token_ids"]
    assert c["text"] == s["text"]
    assert c["finish_reason"] == s["finish_reason"]
    if "logprobs" in fields:
        lp = s["logprobs"]
        assert [x["id"] for x in c["logprobs"]] == c["output_ids"]
        assert [round(x["logprob"], 4) for x in c["logprobs"]] == [round(v, 4) for v in lp["token_logprobs"]]
        assert all(len(x["top"]) == fields["logprobs"] for x in c["logprobs"])


def test_stop_strings_end_both_the_same_way(server, tiny_model):
    prompt = "Once upon a time"
    greedy = cli(tiny_model, prompt, 24, [])
    text = greedy["text"]
    assert len(text) >= 6, text
    stop = text[3:6]  # a string the greedy continuation contains
    c = cli(tiny_model, prompt, 24, ["--stop", stop])
    s = served(server, prompt, 24, {"temperature": 0, "stop": [stop]})
    assert c["text"] == s["text"] == text[:text.index(stop)]
    assert c["finish_reason"] == s["finish_reason"] == "stop"
    assert c["stop_reason"] == s["stop_reason"] == stop
    assert c["output_ids"] == s["token_ids"]


@pytest.mark.parametrize("flags,fields,needle", [
    (["--max-tokens", "0"], {"max_tokens": 0}, "max-tokens"),
    (["--repetition-penalty", "0"], {"repetition_penalty": 0}, "repetition-penalty must be in (0, 2]"),
    (["--logprobs", "21"], {"logprobs": 21}, "logprobs"),
    (["--max-tokens", "100000"], {"max_tokens": 100000}, "maximum context length"),
])
def test_generate_refuses_what_the_server_refuses(server, tiny_model, flags, fields, needle):
    r = subprocess.run([FP4LM, "generate", "--model", str(tiny_model), "--prompt", "hi", *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr, r.stderr
    s = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", **fields}, timeout=60)
    assert s.status_code == 400, s.text
