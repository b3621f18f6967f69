"""Two `fp4lm serve` replicas behind nginx (examples/nginx/fp4lm-replicas.conf.in), started by
scripts/replicas.sh on loopback: requests are spread over both, streams arrive while the replica
still generates, the API key passes through, and a replica SIGKILLed mid-run loses no request that
had not started streaming. Every wait is bounded; no assertion depends on how fast the machine is,
only on order (a request is still running when we look)."""
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helpers"))
from synth_checkpoints import FP4LM, REPO, synth, write_byte_tokenizer  # noqa: E402

KEY = "sk-replicas-test"
# Slow enough per token (bf16, 8 layers of 1024) that a request of LONG tokens is still running
# while the test looks at it; small enough to write in a few seconds.
MODEL_ARGS = ("--arch", "LlamaForCausalLM", "--algo", "none", "--hidden", "1024", "--layers", "8")
LONG = 96
LONG_KILL = 200  # the kill test sets up four requests before it looks: more margin


def free_port():
    """A free loopback port below Linux's ephemeral range (32768-60999), so that no other test's
    port-0 bind or outgoing connection can take it between this check and the server's bind."""
    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def metric(text, name, **labels):
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


class Cluster:
    """scripts/replicas.sh with two replicas of `model`, nginx on a free loopback port."""

    def __init__(self, model, prefix):
        self.port = free_port()
        self.replica_ports = [free_port(), free_port()]
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix = prefix
        self.log_path = prefix.parent / "replicas.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "replicas.sh"), "--port", str(self.port),
             "--replica-ports", ",".join(map(str, self.replica_ports)), "--prefix", str(prefix),
             "--fp4lm", FP4LM, "--ready-timeout", "60", "--",
             "--model", str(model), "--served-model-name", "m", "--api-key", KEY, "--threads", "1",
             "--max-num-seqs", "8", "--shutdown-grace", "2"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.proc.poll() is not None or "replicas.sh: ready:" in self.log(), 90,
                 "replicas.sh ready")
        assert self.proc.poll() is None, f"replicas.sh exited early:\n{self.log()}"
        self.pids = [int((prefix / f"replica-{i}.pid").read_text()) for i in range(2)]
        self.nginx_pid = int((prefix / "nginx.pid").read_text())
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=120)

    def log(self):
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def metrics(self, i):
        r = httpx.get(f"{self.url}/replica/{i}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert r.status_code == 200, r.text
        return r.text

    def running(self, i):
        return metric(self.metrics(i), "vllm:num_requests_running")

    def finished(self, i):
        return metric(self.metrics(i), "vllm:request_success_total")

    def stop(self, timeout=40):
        """SIGTERM to the launcher; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = synth(tmp_path_factory.mktemp("models") / "m", *MODEL_ARGS)
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def cluster(model, tmp_path_factory):
    c = Cluster(model, tmp_path_factory.mktemp("lb") / "prefix")
    yield c
    c.stop()


def body(max_tokens, stream, prompt=(5, 6, 7)):
    b = {"model": "m", "prompt": list(prompt), "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b


class Stream:
    """A streamed completion read in a thread: events as they arrive, the error that ended it."""

    def __init__(self, url, max_tokens):
        self.events, self.error, self.first = [], None, threading.Event()
        self.thread = threading.Thread(target=self._run, args=(url, max_tokens))
        self.thread.start()

    def _run(self, url, max_tokens):
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body(max_tokens, True),
                              headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line[6:])
                        self.first.set()
        except Exception as e:  # noqa: BLE001 - recorded for the assertions
            self.error = e
        self.first.set()

    def join(self):
        self.thread.join(timeout=120)
        assert not self.thread.is_alive()
        return self

    def completed(self):
        return self.error is None and self.events and self.events[-1] == "[DONE]"


def completion(cluster, stream, max_tokens=8, client=None):
    """One request through nginx with the official client; returns the completion tokens."""
    args = dict(model="m", prompt=[5, 6, 7], max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True})
    client = client or cluster.client
    if not stream:
        return client.completions.create(**args).usage.completion_tokens
    usage = None
    for chunk in client.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
    return usage.completion_tokens


def test_requests_are_spread_over_both_replicas(cluster):
    before = [cluster.finished(i) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        tokens = list(pool.map(lambda k: completion(cluster, stream=k % 2 == 0), range(8)))
    assert tokens == [8] * 8
    # A replica counts a request once its last byte is sent: wait for the eighth.
    served = lambda: [cluster.finished(i) - before[i] for i in range(2)]  # noqa: E731
    wait_for(lambda: sum(served()) == 8, 30, f"8 requests counted: {served()}")
    served = served()
    assert all(n >= 1 for n in served), f"least_conn sent every request to one replica: {served}"


def test_the_api_key_passes_through(cluster):
    r = httpx.post(cluster.url + "/v1/completions", json=body(1, False), timeout=30)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "AuthenticationError"  # the replica's answer, passed through
    bad = openai.OpenAI(base_url=cluster.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        completion(cluster, stream=False, max_tokens=1, client=bad)
    for i in range(2):
        # /health stays open; /metrics needs the key like the replica itself (no --open-metrics).
        assert httpx.get(f"{cluster.url}/replica/{i}/health", timeout=10).status_code == 200
        assert httpx.get(f"{cluster.url}/replica/{i}/metrics", timeout=10).status_code == 401
        assert "vllm:num_requests_running" in cluster.metrics(i)
    r = httpx.get(f"{cluster.url}/replica/2/metrics", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def idle(cluster):
    return cluster.running(0) + cluster.running(1) == 0


def test_a_stream_arrives_while_the_replica_still_generates(cluster):
    wait_for(lambda: idle(cluster), 30, "no request running")
    before = cluster.metrics(0) + cluster.metrics(1)
    s = Stream(cluster.url, LONG)
    assert s.first.wait(60) and s.error is None, s.error
    # The first event is here: the replica must still be generating this request (nginx
    # relayed the event at once instead of holding the response).
    now = cluster.metrics(0) + cluster.metrics(1)
    generated = (metric(now, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total"))
    assert metric(now, "vllm:num_requests_running") == 1, f"the request had finished; {generated} tokens"
    assert generated < LONG
    s.join()
    assert s.completed(), (s.error, s.events[-3:])
    assert len([e for e in s.events if e != "[DONE]"]) > 1


def test_a_killed_replica_loses_no_request_that_had_not_started_streaming(cluster):
    wait_for(lambda: idle(cluster), 30, "no request running")
    # Two long non-streaming requests: least_conn puts the second on the replica that has none,
    # so each replica holds one.
    results, errors = {}, {}

    def long_request(k):
        try:
            results[k] = completion(cluster, stream=False, max_tokens=LONG_KILL)
        except Exception as e:  # noqa: BLE001
            errors[k] = e

    plain = []
    for k in range(2):
        plain.append(threading.Thread(target=long_request, args=(k,)))
        plain[-1].start()
        wait_for(lambda: cluster.running(0) + cluster.running(1) == k + 1, 30, f"long request {k} running")
    assert [cluster.running(i) for i in range(2)] == [1, 1]
    # Two long streams, one on each replica for the same reason; both have started streaming.
    streams = []
    for k in range(2):
        streams.append(Stream(cluster.url, LONG_KILL))
        assert streams[-1].first.wait(60) and streams[-1].error is None, streams[-1].error
    assert [cluster.running(i) for i in range(2)] == [2, 2], "a long request ended before the kill"

    survivor_before = cluster.finished(0)
    subprocess.run(["kill", "-KILL", str(cluster.pids[1])], check=True)
    killed_at = time.monotonic()

    # Requests started after the kill: every one succeeds (nginx retries a refused connect on
    # replica 0), streaming or not.
    with ThreadPoolExecutor(2) as pool:
        after_kill = list(pool.map(lambda k: completion(cluster, stream=k % 2 == 0), range(10)))
    assert after_kill == [8] * 10

    for t in plain:
        t.join(timeout=120)
        assert not t.is_alive()
    for s in streams:
        s.join()
    # The non-streaming request that was running on the killed replica had not sent a byte: nginx
    # resent it to replica 0, so both complete in full.
    assert errors == {} and results == {0: LONG_KILL, 1: LONG_KILL}, (results, errors)
    # The stream on the killed replica had started, so it is cut short (no [DONE]); the other ends.
    done = [s.completed() for s in streams]
    assert sorted(done) == [False, True], [(s.error, s.events[-2:]) for s in streams]
    cut = streams[done.index(False)]
    assert cut.error is not None and len(cut.events) >= 1

    # Replica 0 answered its own two long requests, the resent one and all ten new ones.
    wait_for(lambda: cluster.finished(0) - survivor_before == 13, 30, "replica 0's count")
    log = (cluster.prefix / "access.log").read_text()
    p0, p1 = cluster.replica_ports
    assert re.search(rf'"POST /v1/completions HTTP/1.1" 200 .* upstream=127.0.0.1:{p1}, 127.0.0.1:{p0} '
                     r'upstream_status=502, 200', log), log
    r = httpx.get(f"{cluster.url}/replica/1/health", timeout=10)
    assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailableError"
    assert httpx.get(cluster.url + "/health", timeout=10).status_code == 200
    wait_for(lambda: "replica 1 (pid" in cluster.log(), 10, "the launcher reports the dead replica")
    assert time.monotonic() - killed_at < 120


def test_the_launcher_stops_nginx_and_the_replicas_on_sigterm(cluster):
    pids = [cluster.pids[0], cluster.nginx_pid]
    assert cluster.stop() == 0, cluster.log()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), pid
    assert "stopping nginx and the replicas" in cluster.log()
    assert not (cluster.prefix / "nginx.pid").exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(cluster.url + "/health", timeout=5)


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unknown option '--bogus'"),
    (["--replicas", "0", "--", "--model", "x"], "--replicas: expected a count >= 1, found '0'"),
    (["--port", "99999"], "--port: expected 1..65535, found '99999'"),
    (["--upstream", "nohost"], "--upstream: expected HOST:PORT, found 'nohost'"),
    ([], "fp4lm serve needs --model DIR after --"),
    (["--print-config", "--upstream", "a:1"], "--print-config needs --prefix DIR"),
])
def test_launcher_usage_errors_exit_2(args, message):
    r = subprocess.run(["bash", str(REPO / "scripts" / "replicas.sh"), *args], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_printed_config_names_every_upstream(tmp_path):
    r = subprocess.run(["bash", str(REPO / "scripts" / "replicas.sh"), "--print-config", "--prefix", str(tmp_path),
                        "--listen", "0.0.0.0:9000", "--upstream", "10.0.0.11:8000", "--upstream", "10.0.0.12:8000"],
                       capture_output=True, text=True, timeout=30, check=True)
    conf = r.stdout
    assert re.search(r"@[A-Z_]+@", conf) is None  # every placeholder filled
    assert "listen 0.0.0.0:9000;" in conf and f"pid {tmp_path}/nginx.pid;" in conf
    assert "server 10.0.0.11:8000 max_fails=1 fail_timeout=10s;" in conf
    assert "upstream fp4lm_replica_1 { server 10.0.0.12:8000; }" in conf
    (tmp_path / "tmp").mkdir()
    (tmp_path / "nginx.conf").write_text(conf)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    t = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                       capture_output=True, text=True, timeout=30)
    assert t.returncode == 0, t.stderr
