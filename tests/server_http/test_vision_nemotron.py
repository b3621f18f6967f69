"""Nemotron VL / Omni images through `fp4lm serve` with the official openai client (docs/VISION.md,
"Nemotron VL / Omni"), on the tiny NemotronH_Omni_Reasoning_V3 of scripts/make_nemotron_h_omni_goldens.py
(tests/model/fixtures/nemotron_h_omni: Mamba-2 / attention / MLP language model, C-RADIO tower,
pixel-shuffle projector): a PNG as a data: URL, and two images in one message, give
NemotronH_Omni_Reasoning_V3Processor's prompt ids (<img> + <image> x tokens + </img> per image),
every prompt token's logprob within 1e-4 of the logit range of transformers' float64 forward (its
log-softmax), and transformers' greedy tokens."""
import base64
import json
import math
import struct

import openai
import pytest

from conftest import REPO, Server

FIXTURE = REPO / "tests/model/fixtures/nemotron_h_omni"
IMAGE, IMG_START, IMG_END = 259, 260, 261


def data_url(path):
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def nemotron(logs):
    s = Server(FIXTURE, "--served-model-name", "nh", "--dtype", "float32", log_dir=logs, name="nemotron-vl")
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    assert s.stop() == 0, s.log()


def runs(ids):
    """The lengths of the <image> runs between <img> and </img>."""
    out, i = [], 0
    while i < len(ids):
        if ids[i] == IMG_START:
            j = i + 1
            while ids[j] == IMAGE:
                j += 1
            assert ids[j] == IMG_END
            out.append(j - i - 1)
            i = j
        i += 1
    return out


@pytest.mark.parametrize("golden_file,logits_file", [("golden.json", "expected_logits.f64"),
                                                     ("golden_two_images.json", "expected_logits_two_images.f64")])
def test_images_equal_transformers(nemotron, golden_file, logits_file):
    golden = json.loads((FIXTURE / golden_file).read_text())
    images = golden.get("images", [golden.get("image")])
    content = [{"type": "image_url", "image_url": {"url": data_url(REPO / im)}} for im in images]
    messages = [{"role": "user", "content": content + [{"type": "text", "text": golden["text"]}]}]
    r = nemotron.chat.completions.create(
        model="nh", messages=messages, temperature=0, max_tokens=len(golden["greedy_ids"]),
        extra_body={"ignore_eos": True, "return_token_ids": True, "prompt_logprobs": 0})
    ids = r.model_extra["prompt_token_ids"]
    assert ids == golden["prompt_ids"]
    # One run per image, h * w / 4 tokens for the processor's patch grid (2 x 2 pixel shuffle).
    grids = golden["image_grid_hw"] if len(images) > 1 else [golden["image_grid_hw"]]
    assert runs(ids) == [h * w // 4 for h, w in grids]
    assert r.choices[0].model_extra["token_ids"] == golden["greedy_ids"]
    rows, cols = golden["logits_rows"], golden["logits_cols"]
    vals = struct.unpack(f"<{rows * cols}d", (FIXTURE / logits_file).read_bytes())
    plp = r.model_extra["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    worst = 0.0
    for t in range(1, len(ids)):
        row = vals[(t - 1) * cols:t * cols]
        mx = max(row)
        want = row[ids[t]] - (mx + math.log(sum(math.exp(v - mx) for v in row)))
        got = plp[t][str(ids[t])]["logprob"]
        worst = max(worst, abs(got - want) / (mx - min(row)))
    print(f"{golden_file}: max |logprob - float64| / logit range = {worst:.2e}")
    assert worst <= 1e-4
