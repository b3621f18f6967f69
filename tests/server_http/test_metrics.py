"""/metrics in vLLM's names, parsed with prometheus-client (after llama.cpp's metrics test)."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server


@pytest.fixture(scope="module")
def server(tiny_model, logs):
    # --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens (null without it, as vLLM).
    s = Server(tiny_model, "--served-model-name", "tiny", "--max-num-seqs", "8", "--enable-prompt-tokens-details",
               log_dir=logs)
    yield s
    assert s.stop() == 0, s.log()


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine"))))] = s.value
    return out


def value(text, name, **labels):
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_names_and_counts(server, client):
    before = server.metrics()
    r = client.completions.create(model="tiny", prompt="metrics!", max_tokens=5, temperature=0,
                                  extra_body={"ignore_eos": True})
    after = server.metrics()
    fams = {f.name: f for f in text_string_to_metric_families(after)}
    for name, typ in [("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                      ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:prompt_tokens", "counter"),
                      ("vllm:generation_tokens", "counter"), ("vllm:request_success", "counter"),
                      ("vllm:time_to_first_token_seconds", "histogram"),
                      ("vllm:inter_token_latency_seconds", "histogram"),
                      ("vllm:e2e_request_latency_seconds", "histogram"),
                      ("vllm:request_queue_time_seconds", "histogram"),
                      ("vllm:iteration_tokens_total", "histogram")]:
        assert name in fams, name
        assert fams[name].type == typ, name
        assert all(s.labels.get("model_name") == "tiny" for s in fams[name].samples), name
    d = lambda name, **kw: value(after, name, **kw) - value(before, name, **kw)
    assert d("vllm:prompt_tokens_total") == r.usage.prompt_tokens
    assert d("vllm:generation_tokens_total") == r.usage.completion_tokens
    assert d("vllm:request_success_total", finished_reason="length") == 1
    assert d("vllm:time_to_first_token_seconds_count") == 1
    assert d("vllm:inter_token_latency_seconds_count") == 4
    assert d("vllm:e2e_request_latency_seconds_count") == 1
    assert value(after, "vllm:num_requests_running") == 0
    assert value(after, "vllm:kv_cache_usage_perc") == 0
    buckets = [s for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
    les = [s.labels["le"] for s in buckets]
    assert les[:3] == ["0.001", "0.005", "0.01"] and les[-1] == "+Inf"
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)  # cumulative


def test_prefix_cache_hits_in_usage_and_metrics(server, client):
    # A long prompt twice: the second finds its full blocks (16 tokens each) cached.
    prompt = "The same long system prompt, shared by two requests, " * 3
    before = server.metrics()
    r1 = client.completions.create(model="tiny", prompt=prompt + "one", max_tokens=3, temperature=0,
                                   extra_body={"ignore_eos": True})
    r2 = client.completions.create(model="tiny", prompt=prompt + "two", max_tokens=3, temperature=0,
                                   extra_body={"ignore_eos": True})
    after = server.metrics()
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= 16 and cached % 16 == 0 and cached < r2.usage.prompt_tokens
    d = lambda name: value(after, name) - value(before, name)
    assert d("vllm:prefix_cache_queries_total") == r1.usage.prompt_tokens + r2.usage.prompt_tokens
    first = r1.usage.prompt_tokens_details  # null when nothing was cached, as vLLM
    assert d("vllm:prefix_cache_hits_total") == (first.cached_tokens if first else 0) + cached
    assert d("vllm:prompt_tokens_total") == r1.usage.prompt_tokens + r2.usage.prompt_tokens
