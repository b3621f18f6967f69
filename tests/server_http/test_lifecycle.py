"""Client aborts, slots freed, graceful shutdown. Uses a model slow enough per token that the
client can act mid-stream; every wait is bounded."""
import json
import signal
import socket
import threading
import time

import httpx
import pytest

from conftest import Server
from test_metrics import value


@pytest.fixture(scope="module")
def slow(slow_model, logs):
    s = Server(slow_model, "--served-model-name", "slow", "--max-num-seqs", "2", log_dir=logs, name="slow")
    yield s
    assert s.stop() == 0, s.log()


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_a_closed_stream_is_aborted_and_frees_its_slot(slow):
    before = value(slow.metrics(), "vllm:request_success_total", finished_reason="abort")
    body = {"prompt": "abort me", "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", slow.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # one chunk, then hang up
    closed = time.monotonic()
    assert wait_for(lambda: value(slow.metrics(), "vllm:request_success_total", finished_reason="abort")
                    == before + 1, 2.0), slow.metrics()
    assert wait_for(lambda: value(slow.metrics(), "vllm:num_requests_running") == 0, 2.0)
    assert time.monotonic() - closed < 2.5
    # The slot is free: a new request runs at once.
    r = httpx.post(slow.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "ignore_eos": True},
                   timeout=60)
    assert r.status_code == 200


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "abort me"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "abort me"}]}),
])
def test_a_non_streaming_request_whose_client_hangs_up_is_aborted_and_frees_its_slot(slow, path, body):
    m = slow.metrics()
    aborted = value(m, "vllm:request_success_total", finished_reason="abort")
    ran_out = value(m, "vllm:request_success_total", finished_reason="length")
    # Long enough (400 tokens) that it is still generating when the client leaves.
    data = json.dumps({**body, "max_tokens": 400, "temperature": 0, "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", slow.port), timeout=60) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        assert wait_for(lambda: value(slow.metrics(), "vllm:num_requests_running") == 1, 30), slow.metrics()
    # The client is gone before any response: the server cancels the sequence instead of
    # generating the rest for nobody.
    assert wait_for(lambda: value(slow.metrics(), "vllm:request_success_total", finished_reason="abort")
                    == aborted + 1, 30), slow.metrics()
    m = slow.metrics()
    assert value(m, "vllm:request_success_total", finished_reason="length") == ran_out
    assert wait_for(lambda: value(slow.metrics(), "vllm:num_requests_running") == 0, 30)
    assert wait_for(lambda: f'"POST {path}" 499' in slow.log(), 30), slow.log()
    # The slot is free: a new request runs.
    r = httpx.post(slow.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "ignore_eos": True},
                   timeout=60)
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] == "length"


def stream_in_thread(url, body, result, started):
    def run():
        events = []
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        started.set()
        except httpx.HTTPError as e:
            result["error"] = repr(e)
        result["events"] = events
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("grace,tokens,expect", [("60", 60, "length"), ("0", 500, "abort")])
def test_sigterm_finishes_or_aborts_in_flight_streams_then_exits_0(slow_model, logs, grace, tokens, expect):
    s = Server(slow_model, "--served-model-name", "slow", "--shutdown-grace", grace, log_dir=logs,
               name=f"shutdown{grace}")
    try:
        result, started = {}, threading.Event()
        t = stream_in_thread(s.url, {"prompt": "x", "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
                                     "stream": True}, result, started)
        assert started.wait(30)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        r = None
        try:
            r = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
        except httpx.HTTPError:
            pass  # already closed: also a refusal
        assert r is None or r.status_code == 503
        t.join(timeout=90)
        assert not t.is_alive()
        code = s.stop(timeout=90)
        assert code == 0, f"exit code {code}:\n{s.log()}"
        events = result["events"]
        assert events and events[-1] == "[DONE]", result
        finals = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
        assert finals[-1] == expect
        assert "serve: stopped" in s.log()
    finally:
        s.stop(timeout=30)
