#!/usr/bin/env python3
"""Time to first token of /v1/completions with and without a JSON-schema response_format on one
`fp4lm serve`: the structured requests' first step pays for the vocabulary trie (once per server),
compiling the schema (once per schema) and the first state's token mask (once per schema).
Prints per case the median TTFT over --rounds and its ratio to the plain requests' of the same run.
Standard library only. Usage: structured_ttft_bench.py --url http://127.0.0.1:PORT [--rounds N]
[--delay S] (S: seconds between the server's readiness and the first request)."""
import argparse
import json
import statistics
import threading
import time
import urllib.request

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}}, "role": {"enum": ["admin", "user", "guest"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"]},
    "born": {"type": "string", "format": "date"}}, "required": ["name", "age", "role"]}


def ttft(url, body):
    """Seconds from sending the request to the first streamed chunk carrying text."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    first = time.perf_counter() - t0
                    for _ in r:  # drain the stream
                        pass
                    return first
    raise RuntimeError("no text came back")


def schema_body(i):
    s = json.loads(json.dumps(SCHEMA))
    s["properties"][f"extra{i}"] = {"type": "string"}  # a schema never seen before: compiled afresh
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": s}}}


def gaps_while(url, others):
    """Inter-chunk gaps (s) of one long plain stream while `others` (request bodies) run one after
    another beside it: what a new request's first step costs the streams already running."""
    req = urllib.request.Request(url + "/v1/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
                                                  "ignore_eos": True, "stream": True}).encode())
    times, started = [], threading.Event()

    def side():
        started.wait()
        for body in others:
            ttft(url, body)

    t = threading.Thread(target=side)
    t.start()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter())
                if len(times) == 20:
                    started.set()
    t.join()
    return [b - a for a, b in zip(times[20:], times[21:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--delay", type=float, default=0, help="seconds to wait before the first request")
    ap.add_argument("--stall", action="store_true",
                    help="instead: the longest gap of a running stream while new-schema requests arrive")
    a = ap.parse_args()
    time.sleep(a.delay)
    base = {"prompt": "Write a person as JSON:", "max_tokens": 4, "temperature": 0}
    if a.stall:
        ttft(a.url, {**base, **schema_body(0)})  # the trie and the machinery warm
        plain = gaps_while(a.url, [base] * a.rounds)
        schemas = gaps_while(a.url, [{**base, **schema_body(100 + i)} for i in range(a.rounds)])
        for name, g in (("beside plain requests     ", plain), ("beside new-schema requests", schemas)):
            print(f"stream gaps {name}: max {max(g) * 1e3:7.1f} ms (x{max(g) / max(plain):.2f}), "
                  f"median {statistics.median(g) * 1e3:6.1f} ms")
        return
    first_ever = ttft(a.url, {**base, **schema_body(0)})  # the server's first structured request
    plain, new_schema, same_schema = [], [], []
    for i in range(1, a.rounds + 1):
        plain.append(ttft(a.url, base))
        new_schema.append(ttft(a.url, {**base, **schema_body(i)}))
        same_schema.append(ttft(a.url, {**base, **schema_body(i)}))
    p = statistics.median(plain)
    print(f"plain                        : median TTFT {p * 1e3:8.1f} ms (x1.00)")
    print(f"first structured request ever: TTFT        {first_ever * 1e3:8.1f} ms (x{first_ever / p:.2f})")
    for name, xs in (("new schema (compiled afresh)", new_schema), ("same schema again (cached) ", same_schema)):
        m = statistics.median(xs)
        print(f"{name} : median TTFT {m * 1e3:8.1f} ms (x{m / p:.2f})")


if __name__ == "__main__":
    main()
