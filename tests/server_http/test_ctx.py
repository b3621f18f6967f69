"""Context limits (after llama.cpp's ctx_shift tests, without context shifting: fp4lm refuses)."""
import httpx
import openai
import pytest

from conftest import Server


@pytest.fixture(scope="module")
def short(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--max-model-len", "64", log_dir=logs, name="short")
    yield s
    assert s.stop() == 0, s.log()


def test_prompt_longer_than_the_context_is_a_400(short):
    r = httpx.post(short.url + "/v1/completions", json={"prompt": "x" * 80, "max_tokens": 1})
    assert r.status_code == 400
    assert "maximum context length is 64" in r.json()["error"]["message"]


def test_prompt_plus_max_tokens_beyond_the_context_is_a_400(short):
    r = httpx.post(short.url + "/v1/completions", json={"prompt": "x" * 50, "max_tokens": 20})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    client = openai.OpenAI(base_url=short.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x" * 50, max_tokens=20)


def test_generation_fills_the_context_exactly(short):
    r = httpx.post(short.url + "/v1/completions",
                   json={"prompt": "x" * 50, "max_tokens": 14, "temperature": 0, "ignore_eos": True}).json()
    assert r["usage"]["total_tokens"] == 64 and r["choices"][0]["finish_reason"] == "length"


def test_a_request_larger_than_the_kv_budget_is_refused_up_front(tiny_model, logs):
    # 2 layers x 2 KV heads x 16 dims x (K+V) x 2 bytes = 256 bytes per position: 8 KiB = 32 positions.
    s = Server(tiny_model, "--served-model-name", "tiny", "--kv-cache-memory", "8KiB", log_dir=logs, name="kv")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "x" * 20, "max_tokens": 20})
        assert r.status_code == 400 and "kv_cache_memory" in r.json()["error"]["message"]
        ok = httpx.post(s.url + "/v1/completions",
                        json={"prompt": "x" * 10, "max_tokens": 10, "temperature": 0, "ignore_eos": True})
        assert ok.status_code == 200
        # Four of these need 80 positions at once: they queue for memory instead of failing.
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as pool:
            rs = list(pool.map(lambda _: httpx.post(s.url + "/v1/completions", timeout=60, json={
                "prompt": "x" * 10, "max_tokens": 10, "temperature": 0, "ignore_eos": True}), range(4)))
        assert [r.status_code for r in rs] == [200] * 4
        assert {r.json()["choices"][0]["text"] for r in rs} == {ok.json()["choices"][0]["text"]}
    finally:
        assert s.stop() == 0, s.log()
