"""Image parts in chat messages (docs/VISION.md, "Images in `fp4lm serve`") with the official openai
client, on the tiny Qwen3.5 VL fixture tests/cli/fixtures/qwen3_5_vl_e2e/dense, against
transformers 5.24 (scripts/make_qwen_vl_e2e_goldens.py): an image as a data: URL gives
Qwen3VLProcessor's prompt ids, prompt logprobs within 1e-4 of the logit range of the float64
forward's log-softmax, and transformers' greedy tokens. Two images, a JPEG, file:// URLs, http
URLs from a local server under --allowed-media-domains, and every hostile case (a 400 naming the
image within seconds, the server still up)."""
import base64
import json
import math
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import httpx
import openai
import pytest

from conftest import FP4LM, REPO, Server

FIXTURE = REPO / "tests/cli/fixtures/qwen3_5_vl_e2e/dense"
DATA = REPO / "tests/vision/data"
GOLDEN = json.loads((FIXTURE / "golden.json").read_text())
TEXT = GOLDEN["text"]
PAD, VSTART, VEND = 261, 259, 260


def data_url(path_or_bytes, media="image/png"):
    b = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    return f"data:{media};base64," + base64.b64encode(b).decode()


def png_bomb():
    """A PNG whose header says 20000 x 20000 pixels (1.2 GB of RGB), CRC correct."""
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")


def message(*urls, text=TEXT):
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": content + [{"type": "text", "text": text}]}]


def expected_logits(fixture):
    """The float64 forward's logits, [rows][cols] (expected_logits.f64, little-endian)."""
    golden = json.loads((fixture / "golden.json").read_text())
    raw = (fixture / "expected_logits.f64").read_bytes()
    rows, cols = golden["logits_rows"], golden["logits_cols"]
    vals = struct.unpack(f"<{rows * cols}d", raw)
    return [vals[r * cols:(r + 1) * cols] for r in range(rows)]


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    (d / "inside").mkdir()
    shutil.copy(DATA / "rgb_56x84.png", d / "inside" / "cat.png")
    shutil.copy(DATA / "rgb_56x84.png", d / "outside.png")
    return d


@pytest.fixture(scope="module")
def vl_server(logs, media_dir):
    s = Server(FIXTURE, "--served-model-name", "vl", "--dtype", "float32", "--max-num-seqs", "4",
               "--enable-prompt-tokens-details", "--allowed-local-media-path", str(media_dir / "inside"),
               log_dir=logs, name="vl")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def vl(vl_server):
    return openai.OpenAI(base_url=vl_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(client, messages, **extra):
    return client.chat.completions.create(model="vl", messages=messages, temperature=0, max_tokens=6,
                                          extra_body={"ignore_eos": True, "return_token_ids": True, **extra})


def check_against_goldens(client, fixture):
    golden = json.loads((fixture / "golden.json").read_text())
    r = chat(client, message(data_url(DATA / "rgb_56x84.png")), prompt_logprobs=0)
    ids = r.model_extra["prompt_token_ids"]
    assert ids == golden["prompt_ids"]  # Qwen3VLProcessor's, the image's 20 placeholders expanded
    assert r.choices[0].model_extra["token_ids"] == golden["greedy_ids"]
    assert r.usage.prompt_tokens == len(ids)
    # Every prompt token's logprob (the image's placeholders and the text after them) against the
    # float64 forward's log-softmax: within 1e-4 of that row's logit range.
    plp = r.model_extra["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    logits = expected_logits(fixture)
    for t in range(1, len(ids)):
        row = logits[t - 1]
        mx = max(row)
        lse = mx + math.log(sum(math.exp(v - mx) for v in row))
        want = row[ids[t]] - lse
        got = plp[t][str(ids[t])]["logprob"]
        assert abs(got - want) <= 1e-4 * (mx - min(row)), (t, got, want)


def test_a_data_url_image_equals_transformers(vl):
    check_against_goldens(vl, FIXTURE)
    # n samples and a stream carry the images too.
    msgs = message(data_url(DATA / "rgb_56x84.png"))
    r = vl.chat.completions.create(model="vl", messages=msgs, temperature=0, max_tokens=6, n=2,
                                   extra_body={"ignore_eos": True, "return_token_ids": True})
    assert [c.model_extra["token_ids"] for c in r.choices] == [GOLDEN["greedy_ids"]] * 2
    stream = vl.chat.completions.create(model="vl", messages=msgs, temperature=0, max_tokens=6, stream=True,
                                        extra_body={"ignore_eos": True})
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == r.choices[0].message.content


def test_the_moe_model_too(logs):
    moe = FIXTURE.parent / "moe"
    s = Server(moe, "--served-model-name", "vl", "--dtype", "float32", log_dir=logs, name="vl-moe")
    try:
        check_against_goldens(openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60), moe)
    finally:
        assert s.stop() == 0, s.log()


def png_of(width, height, pixel):
    """An 8-bit RGB PNG whose pixel (x, y) is pixel(x, y)."""
    rows = b"".join(b"\0" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_the_prefix_cache_keys_images_by_content(vl):
    """A prompt longer than 128 tokens (the hybrid model resumes at multiples of 64): the same
    image again reads cached blocks and answers the same; another image of the same size (the
    same placeholder ids) reads none past the text before it."""
    text = TEXT + " Describe it in detail, please, with every colour and shape you can see in it."
    url = data_url(DATA / "rgb_56x84.png")
    a = chat(vl, message(url, text=text))
    assert len(a.model_extra["prompt_token_ids"]) > 128
    b = chat(vl, message(url, text=text))
    assert b.usage.prompt_tokens_details.cached_tokens >= 64
    assert b.choices[0].model_extra["token_ids"] == a.choices[0].model_extra["token_ids"]
    other = data_url(png_of(84, 56, lambda x, y: (3 * x % 256, 5 * y % 256, (x * y) % 256)))
    c = chat(vl, message(other, text=text))
    assert c.model_extra["prompt_token_ids"] == a.model_extra["prompt_token_ids"]
    assert c.usage.prompt_tokens_details.cached_tokens == 0


def generate_json(*images):
    """`fp4lm generate --image ...` on the same message: the CLI's prompt ids and greedy tokens."""
    args = [FP4LM, "generate", "--model", str(FIXTURE), "--chat", TEXT, "--json", "--dtype", "float32",
            "--ignore-eos", "--max-tokens", "6"]
    for im in images:
        args += ["--image", str(im)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def runs(ids):
    """The lengths of the placeholder runs between <|vision_start|> and <|vision_end|>."""
    out, i = [], 0
    while i < len(ids):
        if ids[i] == VSTART:
            j = i + 1
            while ids[j] == PAD:
                j += 1
            assert ids[j] == VEND
            out.append(j - i - 1)
            i = j
        i += 1
    return out


def test_two_images_and_a_jpeg(vl):
    png, jpg = DATA / "rgb_56x84.png", DATA / "rgb_33x47.jpg"
    r = chat(vl, message(data_url(png), data_url(jpg, "image/jpeg")))
    ids = r.model_extra["prompt_token_ids"]
    # The PNG's run is the processor's (golden grid 1 x 8 x 10 -> 20); the JPEG (47 x 33) resizes to
    # 48 x 32 (multiples of patch 8 x merge 2) -> a 4 x 6 patch grid -> 6 tokens after the 2 x 2 merge.
    assert runs(ids) == [20, 6]
    # The same message through `fp4lm generate --image --image` (the engine path the CLI goldens test).
    g = generate_json(png, jpg)
    assert ids == g["prompt_ids"] and r.choices[0].model_extra["token_ids"] == g["output_ids"]
    # Two images as two messages' parts, and the untyped {"image_url": "..."} form vLLM accepts.
    r2 = chat(vl, [{"role": "user", "content": [{"image_url": data_url(png)},
                                                {"image_url": {"url": data_url(jpg, "image/jpeg")}},
                                                {"type": "text", "text": TEXT}]}])
    assert r2.model_extra["prompt_token_ids"] == ids


def test_file_urls_under_the_allowed_path(vl, media_dir):
    r = chat(vl, message((media_dir / "inside" / "cat.png").as_uri()))
    assert r.model_extra["prompt_token_ids"] == GOLDEN["prompt_ids"]
    for url in [(media_dir / "outside.png").as_uri(), (media_dir / "inside").as_uri() + "/../outside.png",
                "file:///etc/passwd"]:
        e = bad(vl, message(url))
        assert "must be a subpath of `--allowed-local-media-path" in e["message"], url


def bad(client, messages, model="vl"):
    """The 400's error object, in OpenAI's shape, within seconds."""
    t0 = time.monotonic()
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=model, messages=messages, max_tokens=2)
    assert time.monotonic() - t0 < 10
    err = ei.value.body
    assert ei.value.status_code == 400
    assert set(err) >= {"message", "type", "param", "code"} and err["type"] == "BadRequestError", err
    return err


def test_hostile_images_are_400s_naming_the_image(vl, vl_server):
    png = (DATA / "rgb_56x84.png").read_bytes()
    good = data_url(png)
    field = "messages[0].content[1].image_url.url"
    cases = {
        "PNG image of 20000x20000 pixels is larger than the limit": data_url(png_bomb()),
        "corrupt or truncated PNG": data_url(png[: len(png) // 2]),
        "media type 'text/plain'": "data:text/plain;base64," + base64.b64encode(b"hello").decode(),
        "not an image fp4lm decodes": data_url(b"hello, I am not an image"),
        "not base64": "data:image/png;base64,iVBOR$$$",
        "remote fetching is not enabled": "https://example.com/cat.png",
    }
    for what, url in cases.items():
        e = bad(vl, message(good, url))
        assert e["message"].startswith("image 2: ") and what in e["message"], e
        assert e["param"] == field
    # Too large for the context (256): rgb_150x100.png is 54 tokens, so the 4th image overflows.
    big = data_url(DATA / "rgb_150x100.png")
    e = bad(vl, message(big, big, big, big, big))
    assert e["message"].startswith("image 4 (54 tokens for its 150x100 pixels) makes the prompt"), e
    assert e["param"] == "messages[0].content[3].image_url.url"
    # Still up, and still right.
    assert httpx.get(vl_server.url + "/health", timeout=5).status_code == 200
    assert chat(vl, message(good)).choices[0].model_extra["token_ids"] == GOLDEN["greedy_ids"]


def test_file_urls_refused_without_the_flag_and_the_image_limit(logs, media_dir):
    s = Server(FIXTURE, "--served-model-name", "vl", "--limit-mm-per-prompt", '{"image": 1}', log_dir=logs,
               name="vl-limits")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        e = bad(client, message((media_dir / "inside" / "cat.png").as_uri()))
        assert e["message"].startswith("image 1: ") and "without `--allowed-local-media-path`" in e["message"], e
        good = data_url(DATA / "rgb_56x84.png")
        e = bad(client, message(good, good))
        assert e["message"] == ("image 2: At most 1 image(s) may be provided in one prompt (--limit-mm-per-prompt), "
                                "and this request has 2"), e
        assert e["param"] == "messages[0].content[1].image_url.url"
        assert httpx.get(s.url + "/props", timeout=5).json()["modalities"]["vision"] is True
    finally:
        assert s.stop() == 0, s.log()


def test_a_model_without_a_vision_tower_names_itself(server, client):
    e = bad(client, [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(DATA / "rgb_56x84.png")}}, {"type": "text", "text": "hi"}]}],
        model="tiny")
    assert e["message"] == "model 'tiny' has no vision tower fp4lm runs: it does not accept image inputs", e


@pytest.fixture(scope="module")
def media_http():
    """A local HTTP server: /cat.png, /missing (404), /redirect (302 to /cat.png), /slow (8 s)."""
    import http.server
    import threading
    png = (DATA / "rgb_56x84.png").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/slow":
                time.sleep(8)
            if self.path in ("/cat.png", "/slow"):
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)
            elif self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/cat.png")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_error(404)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_http_urls_only_from_allowed_domains(logs, media_http, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # libcurl honours proxies from the environment
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    s = Server(FIXTURE, "--served-model-name", "vl", "--dtype", "float32", "--allowed-media-domains", "127.0.0.1",
               log_dir=logs, name="vl-remote")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        r = chat(client, message(f"http://{media_http}/cat.png"))
        assert r.model_extra["prompt_token_ids"] == GOLDEN["prompt_ids"]
        assert r.choices[0].model_extra["token_ids"] == GOLDEN["greedy_ids"]
        port = media_http.split(":")[1]
        for url, what in [(f"http://localhost:{port}/cat.png", "allowed domains (--allowed-media-domains), got host "
                                                              "'localhost'"),
                          (f"http://{media_http}/missing", "HTTP 404"),
                          (f"http://{media_http}/redirect", "redirects are not followed")]:
            e = bad(client, message(url))
            assert e["message"].startswith("image 1: ") and what in e["message"], e
        # Fetches that hang hold only the image thread: with two of them in flight (as many as the
        # HTTP workers), a text request still answers at once; the second image request waits its
        # turn behind the first (one image request at a time).
        import threading
        slow = []

        def fetch_slow():
            t0 = time.monotonic()
            r = httpx.post(s.url + "/v1/chat/completions", timeout=30,
                           json={"model": "vl", "messages": message(f"http://{media_http}/slow"), "max_tokens": 2})
            slow.append((time.monotonic() - t0, r.status_code, r.json()["error"]["message"]))

        threads = [threading.Thread(target=fetch_slow) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1)
        t_text = time.monotonic()
        text = client.chat.completions.create(model="vl", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert text.choices[0].finish_reason == "length" and time.monotonic() - t_text < 2
        assert not slow  # both still fetching or queued
        for t in threads:
            t.join(30)
        slow.sort()
        assert [x[1] for x in slow] == [400, 400], slow
        assert all("no complete response within 5 s" in x[2] for x in slow), slow
        assert 4.5 < slow[0][0] < 8 and 9 < slow[1][0] < 16, slow
    finally:
        assert s.stop() == 0, s.log()
