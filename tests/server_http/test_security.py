"""--api-key (after llama.cpp's security tests)."""
import httpx
import openai
import pytest

from conftest import Server

KEY = "sk-test-1234"


@pytest.fixture(scope="module")
def keyed(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--api-key", KEY, log_dir=logs, name="keyed")
    yield s
    assert s.stop() == 0, s.log()


@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Bearer {KEY}x", f"Basic {KEY}", KEY])
def test_missing_or_wrong_key_is_a_401(keyed, auth):
    headers = {} if auth is None else {"Authorization": auth}
    for method, path, body in [("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}),
                               ("GET", "/v1/models", None),
                               ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
                               ("POST", "/tokenize", {"prompt": "x"})]:
        r = httpx.request(method, keyed.url + path, json=body, headers=headers)
        assert r.status_code == 401, path
        assert r.json()["error"]["type"] == "AuthenticationError"


def test_the_openai_client_with_and_without_the_key(keyed):
    bad = openai.OpenAI(base_url=keyed.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="tiny", prompt="x", max_tokens=1)
    good = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    r = good.completions.create(model="tiny", prompt="x", max_tokens=2, temperature=0,
                                extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 2


def test_health_stays_open_and_metrics_needs_the_key_unless_opened(keyed, tiny_model, logs):
    assert httpx.get(keyed.url + "/health").status_code == 200
    assert httpx.get(keyed.url + "/version").status_code == 200
    assert httpx.get(keyed.url + "/metrics").status_code == 401
    r = httpx.get(keyed.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and "vllm:num_requests_running" in r.text
    s = Server(tiny_model, "--api-key", KEY, "--open-metrics", log_dir=logs, name="open-metrics")
    try:
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 401
    finally:
        assert s.stop() == 0, s.log()
