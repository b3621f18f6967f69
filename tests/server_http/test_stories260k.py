"""stories260k (a real trained tiny Llama, ../shared; skipped when absent): the reference greedy
continuations come back exactly, one request at a time and all at once."""
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import SHARED, Server

MODEL = SHARED / "models" / "stories260k"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").exists(), reason=f"shared model absent: {MODEL}")


@pytest.fixture(scope="module")
def stories(logs):
    s = Server(MODEL, "--served-model-name", "stories", "--max-num-seqs", "8", log_dir=logs, name="stories")
    yield s
    assert s.stop() == 0, s.log()


def references():
    return [json.loads(l) for l in (MODEL / "reference_greedy.jsonl").read_text().splitlines() if l.strip()]


def continuation(url, ref):
    r = httpx.post(url + "/v1/completions", timeout=120, json={
        "prompt": ref["prompt_ids"], "max_tokens": len(ref["greedy_continuation"]), "temperature": 0,
        "ignore_eos": True, "return_token_ids": True}).json()
    return r["choices"][0]["token_ids"]


def test_reference_greedy_alone_and_concurrently(stories):
    refs = references()
    assert refs
    for ref in refs:
        assert continuation(stories.url, ref) == ref["greedy_continuation"]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda ref: continuation(stories.url, ref), refs))
    assert got == [ref["greedy_continuation"] for ref in refs]


def test_no_tokenizer_means_token_id_prompts_only(stories):
    r = httpx.post(stories.url + "/v1/completions", json={"prompt": "text", "max_tokens": 1})
    assert r.status_code == 400 and "token ids" in r.json()["error"]["message"]
    r = httpx.post(stories.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400
