#!/usr/bin/env python3
"""Soak test for `fp4lm serve` (issue 28; not run in CI): minutes of mixed traffic plus slow and
idle clients against a tiny synthetic model, reporting RSS and latency.

  python3 scripts/soak.py --fp4lm build/fp4lm [--minutes 10] [--model DIR]

Traffic, all at once for the whole run:
  - streaming and non-streaming completions and chat requests (random lengths), 6 client threads;
  - /tokenize with large prompts (up to 256 KiB), 1 thread;
  - 20 slowloris connections (a header line every 2 s; reconnect when cut);
  - 200 idle connections (reconnect when closed);
  - a /health probe every 0.25 s.
The baseline is the same probe on the idle server for the first 15 s (same run). Printed: requests
and errors per kind, request latency p50/p99, /health p50/p99/max and its ratio to the baseline,
and the server's RSS (start, peak, end) sampled from /proc. Uses only the standard library."""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python_helpers"))


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.lat = {}
        self.errors = {}

    def add(self, kind, seconds, ok):
        with self.mu:
            self.lat.setdefault(kind, []).append(seconds)
            if not ok:
                self.errors[kind] = self.errors.get(kind, 0) + 1


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        payload = r.read()
        return r.status, payload
    finally:
        c.close()


def traffic(port, stop, stats, rng):
    while not stop.is_set():
        chat = rng.random() < 0.5
        stream = rng.random() < 0.5
        n = rng.randint(1, 64)
        body = {"max_tokens": n, "ignore_eos": True, "stream": stream, "temperature": 0.7}
        if chat:
            body["messages"] = [{"role": "user", "content": "hello " * rng.randint(1, 50)}]
        else:
            body["prompt"] = "x" * rng.randint(1, 300)
        kind = ("chat" if chat else "completion") + ("-stream" if stream else "")
        t0 = time.monotonic()
        try:
            status, _ = request(port, "POST", "/v1/chat/completions" if chat else "/v1/completions", body)
            stats.add(kind, time.monotonic() - t0, status == 200)
        except OSError:
            stats.add(kind, time.monotonic() - t0, False)


def big_tokenize(port, stop, stats, rng):
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            status, _ = request(port, "POST", "/tokenize", {"prompt": "a" * rng.randint(1, 256 * 1024)})
            stats.add("tokenize-large", time.monotonic() - t0, status == 200)
        except OSError:
            stats.add("tokenize-large", time.monotonic() - t0, False)


def slowloris(port, stop):
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                while not stop.is_set():
                    time.sleep(2)
                    s.sendall(b"X-Slow: 1\r\n")
        except OSError:
            time.sleep(0.1)  # cut by the header deadline: come back


def idler(port, stop):
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.recv(1)  # returns when the server closes the idle connection
        except OSError:
            pass
        time.sleep(0.05)


def probe(port, stop, out):
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            status, _ = request(port, "GET", "/health", timeout=30)
            out.append(time.monotonic() - t0 if status == 200 else float("inf"))
        except OSError:
            out.append(float("inf"))
        time.sleep(0.25)


def start_server(fp4lm, model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([fp4lm, "serve", "--model", str(model), "--port", str(port), "--max-num-seqs", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if request(port, "GET", "/health", timeout=2)[0] == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("server did not become ready")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp4lm", default=str(REPO / "build" / "fp4lm"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--model", help="checkpoint dir (default: a tiny synthetic Llama with a byte tokenizer)")
    a = ap.parse_args()
    os.environ.setdefault("FP4LM_BIN", a.fp4lm)
    model = a.model
    if not model:
        from synth_checkpoints import synth, write_byte_tokenizer
        tmp = Path(tempfile.mkdtemp(prefix="soak-"))
        model = synth(tmp / "tiny", "--arch", "LlamaForCausalLM", "--algo", "NVFP4")
        write_byte_tokenizer(model, "{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    proc, port = start_server(a.fp4lm, model)
    print(f"load before: {os.getloadavg()}")
    stop_base, base = threading.Event(), []
    t = threading.Thread(target=probe, args=(port, stop_base, base))
    t.start()
    time.sleep(15)
    stop_base.set()
    t.join()
    stop, stats, health, rss = threading.Event(), Stats(), [], [rss_mib(proc.pid)]
    threads = [threading.Thread(target=traffic, args=(port, stop, stats, random.Random(i))) for i in range(6)]
    threads += [threading.Thread(target=big_tokenize, args=(port, stop, stats, random.Random(99)))]
    threads += [threading.Thread(target=slowloris, args=(port, stop)) for _ in range(20)]
    threads += [threading.Thread(target=idler, args=(port, stop)) for _ in range(200)]
    threads += [threading.Thread(target=probe, args=(port, stop, health))]
    for th in threads:
        th.daemon = True
        th.start()
    end = time.monotonic() + a.minutes * 60
    while time.monotonic() < end:
        time.sleep(5)
        rss.append(rss_mib(proc.pid))
    stop.set()
    time.sleep(3)
    rss.append(rss_mib(proc.pid))
    proc.terminate()
    code = proc.wait(timeout=60)
    print(f"load after: {os.getloadavg()}; server exit code {code}")
    print(f"minutes {a.minutes}; RSS MiB start {rss[0]:.1f} peak {max(rss):.1f} end {rss[-1]:.1f}")
    for kind, xs in sorted(stats.lat.items()):
        print(f"{kind:20s} n={len(xs):6d} errors={stats.errors.get(kind, 0):4d} "
              f"p50={percentile(xs, 50) * 1000:8.1f} ms p99={percentile(xs, 99) * 1000:8.1f} ms")
    b50, h50 = percentile(base, 50), percentile(health, 50)
    print(f"/health idle baseline n={len(base)} p50={b50 * 1000:.2f} ms p99={percentile(base, 99) * 1000:.2f} ms")
    print(f"/health under load    n={len(health)} p50={h50 * 1000:.2f} ms p99={percentile(health, 99) * 1000:.2f} ms "
          f"max={max(health) * 1000:.2f} ms; p50 ratio to baseline {h50 / b50:.2f}x")
    failed = sum(stats.errors.values()) + sum(1 for x in health if x == float("inf"))
    sys.exit(1 if failed or code != 0 else 0)


if __name__ == "__main__":
    main()
