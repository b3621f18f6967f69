#!/usr/bin/env python3
"""Load test for `fp4lm serve` (or any OpenAI-compatible server): N concurrent streaming
completions x R rounds, with a hard timeout. Parses the SSE streams itself, so it can time them.

Checks, for every request: a 200, a finish reason, a usage chunk, `data: [DONE]` last, and
completion_tokens equal to the tokens streamed; with --check-greedy also that each greedy output
equals the same prompt's output run alone. Prints p50/p99 time to first token (TTFT) and
inter-token latency (ITL, gaps between streamed chunks), and aggregate generated tokens/s.
Exit status 1 when any request was lost or differs.

  python3 scripts/loadtest.py --url http://127.0.0.1:8000 --concurrency 8 --rounds 2 --check-greedy

Needs httpx (tests/server_http/requirements.txt). Prompts are token ids below 256, so it also works
on checkpoints without a tokenizer.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def prompt_ids(i, length):
    # Distinct, deterministic prompts of token ids in [3, 256).
    return [3 + (i * 37 + j * 11) % 253 for j in range(length)]


def body(args, i, stream):
    b = {"prompt": prompt_ids(i, args.prompt_len), "max_tokens": args.max_tokens, "temperature": 0,
         "ignore_eos": True, "return_token_ids": True, "stream": stream}
    if args.model:
        b["model"] = args.model
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


async def one_stream(client, args, i):
    """Returns a record of one streamed request (problems listed under 'errors')."""
    rec = {"index": i, "ids": [], "chunk_times": [], "errors": []}
    t0 = time.perf_counter()
    finish = usage = None
    done = False
    async with client.stream("POST", "/v1/completions", json=body(args, i, True)) as r:
        if r.status_code != 200:
            rec["errors"].append(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
            return rec
        async for line in r.aiter_lines():
            if not line or line.startswith(":"):
                continue  # blank separators and keep-alive comments
            if not line.startswith("data: "):
                rec["errors"].append(f"not an SSE data line: {line[:80]!r}")
                continue
            data = line[len("data: "):]
            if done:
                rec["errors"].append("data after [DONE]")
            if data == "[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                rec["errors"].append(f"error event: {chunk['error']}")
                continue
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                ids = c.get("token_ids") or []
                if ids:
                    rec["ids"].extend(ids)
                    rec["chunk_times"].append(time.perf_counter() - t0)
                if c.get("finish_reason"):
                    finish = c["finish_reason"]
    if not done:
        rec["errors"].append("no [DONE]")
    if finish is None:
        rec["errors"].append("no finish_reason")
    if usage is None:
        rec["errors"].append("no usage chunk")
    elif usage["completion_tokens"] != len(rec["ids"]):
        rec["errors"].append(f"usage.completion_tokens {usage['completion_tokens']} != {len(rec['ids'])} streamed")
    return rec


async def run(args):
    limits = httpx.Limits(max_connections=args.concurrency + 2, max_keepalive_connections=args.concurrency + 2)
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout, limits=limits) as client:
        reference = {}
        if args.check_greedy:
            for i in range(args.concurrency):
                r = await client.post("/v1/completions", json=body(args, i, False))
                r.raise_for_status()
                reference[i] = r.json()["choices"][0]["token_ids"]
        records, wall = [], 0.0
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            results = await asyncio.gather(*(one_stream(client, args, i) for i in range(args.concurrency)),
                                           return_exceptions=True)  # one failure must not close the others
            for i, r in enumerate(results):
                if isinstance(r, BaseException):
                    r = {"index": i, "ids": [], "chunk_times": [], "errors": [f"{type(r).__name__}: {r}"]}
                records.append(r)
            wall += time.perf_counter() - t0
    return records, reference, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None, help="model name to send (default: none, the server's)")
    ap.add_argument("--concurrency", "-n", type=int, default=8)
    ap.add_argument("--rounds", "-r", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=600, help="hard limit for the whole run, seconds")
    ap.add_argument("--check-greedy", action="store_true", help="compare with each prompt run alone first")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args()

    try:
        records, reference, wall = asyncio.run(asyncio.wait_for(run(args), args.timeout))
    except asyncio.TimeoutError:
        print(f"loadtest: FAILED: not finished within {args.timeout} s", file=sys.stderr)
        return 1
    lost = 0
    for rec in records:
        if args.check_greedy and not rec["errors"] and rec["ids"] != reference[rec["index"]]:
            rec["errors"].append("greedy output differs from the same prompt run alone")
        if rec["errors"]:
            lost += 1
            print(f"loadtest: request {rec['index']}: {'; '.join(rec['errors'])}", file=sys.stderr)
    ttft = [r["chunk_times"][0] for r in records if r["chunk_times"]]
    itl = [b - a for r in records for a, b in zip(r["chunk_times"], r["chunk_times"][1:])]
    tokens = sum(len(r["ids"]) for r in records)
    out = {
        "concurrency": args.concurrency, "rounds": args.rounds, "requests": len(records), "lost": lost,
        "max_tokens": args.max_tokens, "prompt_len": args.prompt_len, "generated_tokens": tokens,
        "wall_s": round(wall, 3), "aggregate_tok_s": round(tokens / wall, 2) if wall > 0 else 0.0,
        "ttft_p50_ms": round(percentile(ttft, 50) * 1e3, 2), "ttft_p99_ms": round(percentile(ttft, 99) * 1e3, 2),
        "itl_p50_ms": round(percentile(itl, 50) * 1e3, 2), "itl_p99_ms": round(percentile(itl, 99) * 1e3, 2),
        "itl_mean_ms": round(statistics.fmean(itl) * 1e3, 2) if itl else float("nan"),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"requests {out['requests']} (lost {lost}), {tokens} tokens in {out['wall_s']} s: "
              f"{out['aggregate_tok_s']} tok/s aggregate; TTFT p50 {out['ttft_p50_ms']} ms p99 "
              f"{out['ttft_p99_ms']} ms; ITL p50 {out['itl_p50_ms']} ms p99 {out['itl_p99_ms']} ms")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
