"""A Nemotron-H model (Mamba-2 + MoE + attention layers: per-sequence conv and SSM
state next to the KV cache) serves eight concurrent streams through `fp4lm serve`, each stream's
tokens equal to the same request run alone. (That the scheduler does put the eight in one
forward is asserted in tests/engine/nemotron_h_engine_test.cpp; here the requests only overlap
as the server admits them.)"""
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import Server, synth, write_byte_tokenizer

PROMPTS = ["Once upon a time", "a", "The quick brown fox jumps over the lazy dog", "0123456789",
           "Mamba", "state space", "!!", "Nemotron-H serves eight streams at once"]


@pytest.fixture(scope="module")
def nemotron_server(tmp_path_factory, logs):
    d = synth(tmp_path_factory.mktemp("models") / "nemotron", "--arch", "NemotronHForCausalLM", "--algo", "NVFP4",
              "--layers", "6", "--hybrid-pattern", "ME*EM-", "--experts", "8")
    write_byte_tokenizer(d)
    s = Server(d, "--max-num-seqs", "8", "--max-num-batched-tokens", "16", log_dir=logs, name="nemotron")
    yield s
    assert s.stop() == 0, s.log()


def complete(server, prompt):
    body = {"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "stream": False}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_eight_concurrent_streams_equal_each_alone(nemotron_server):
    alone = [complete(nemotron_server, p) for p in PROMPTS]
    assert all(len(t) == 16 for t in alone)
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda p: complete(nemotron_server, p), PROMPTS))
    assert together == alone
