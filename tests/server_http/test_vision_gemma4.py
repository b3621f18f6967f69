"""Gemma 4 images through `fp4lm serve` with the official openai client (docs/VISION.md, "Gemma 4
vision tower"), on the tiny Gemma 4 fixtures of scripts/make_gemma4_vl_goldens.py
(tests/model/fixtures/gemma4_vl: bidirectional image tokens on the sliding layer; gemma4_vl_ple:
per-layer input embeddings): a PNG as a data: URL gives Gemma4Processor's prompt ids, every prompt
token's logprob within 1e-4 of the logit range of transformers' float64 forward (its log-softmax),
and transformers' greedy tokens."""
import base64
import json
import math
import struct

import openai
import pytest

from conftest import REPO, Server

FIXTURES = REPO / "tests/model/fixtures"
DATA = REPO / "tests/vision/data"


def data_url(path):
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.mark.parametrize("name", ["gemma4_vl", "gemma4_vl_ple"])
def test_a_data_url_image_equals_transformers(logs, name):
    fixture = FIXTURES / name
    golden = json.loads((fixture / "golden.json").read_text())["e2e"][0]
    s = Server(fixture, "--served-model-name", "g4", "--dtype", "float32", log_dir=logs, name=name)
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(REPO / golden["image"])}},
            {"type": "text", "text": golden["text"]}]}]
        r = client.chat.completions.create(
            model="g4", messages=messages, temperature=0, max_tokens=len(golden["greedy_ids"]),
            extra_body={"ignore_eos": True, "return_token_ids": True, "prompt_logprobs": 0})
        ids = r.model_extra["prompt_token_ids"]
        assert ids == golden["prompt_ids"]  # <|image|> -> boi, the image's soft tokens, eoi
        assert r.choices[0].model_extra["token_ids"] == golden["greedy_ids"]
        rows, cols = golden["logits_rows"], golden["logits_cols"]
        vals = struct.unpack(f"<{rows * cols}d", (fixture / golden["file"]).read_bytes())
        plp = r.model_extra["prompt_logprobs"]
        assert len(plp) == len(ids) and plp[0] is None
        for t in range(1, len(ids)):
            row = vals[(t - 1) * cols:t * cols]
            mx = max(row)
            want = row[ids[t]] - (mx + math.log(sum(math.exp(v - mx) for v in row)))
            got = plp[t][str(ids[t])]["logprob"]
            assert abs(got - want) <= 1e-4 * (mx - min(row)), (t, got, want)
    finally:
        assert s.stop() == 0, s.log()
