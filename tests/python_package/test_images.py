"""fp4lm.LLM with images (vLLM's multi_modal_data and chat image parts) on the tiny Qwen3.5 VL
fixtures of tests/cli/fixtures/qwen3_5_vl_e2e (scripts/make_qwen_vl_e2e_goldens.py): the prompt ids
equal transformers' Qwen3VLProcessor's, every prompt token's logprob and top-20 logprobs equal the
log-softmax of Qwen3_5ForConditionalGeneration's float64 logits (expected_logits.f64), and the
greedy tokens transformers' (golden.json), whatever form the image comes in; the tokens equal
`fp4lm generate --image`'s; plus the errors."""
import base64
import io
import json
import logging
import math
import shutil
import struct
from pathlib import Path

import pytest
from PIL import Image

from fp4lm import LLM, SamplingParams
from fp4lm import _images
from conftest import REPO, cli

FIXTURES = REPO / "tests" / "cli" / "fixtures" / "qwen3_5_vl_e2e"
IMAGE = REPO / "tests" / "vision" / "data" / "rgb_56x84.png"
PAD = "<|vision_start|><|image_pad|><|vision_end|>"


def golden(kind):
    """golden.json, with "ref_logprobs": the log-softmax of each row of expected_logits.f64 (row i:
    the float64 logits after prompt token i)."""
    g = json.loads((FIXTURES / kind / "golden.json").read_text())
    return with_ref_logprobs(g, FIXTURES / kind / "expected_logits.f64")


def with_ref_logprobs(g, logits_file):
    """g with "ref_logprobs": the log-softmax of each of logits_file's float64 rows."""
    rows, cols = g["logits_rows"], g["logits_cols"]
    flat = struct.unpack(f"<{rows * cols}d", Path(logits_file).read_bytes())
    g["ref_logprobs"] = []
    for i in range(rows):
        row = flat[i * cols:(i + 1) * cols]
        top = max(row)
        lse = top + math.log(sum(math.exp(x - top) for x in row))
        g["ref_logprobs"].append([x - lse for x in row])
    return g


def prompt_logprob_error(out, g):
    """The largest difference between the engine's prompt logprobs (each token's and its top 20)
    and the float64 reference's."""
    assert len(out.prompt_logprobs) == len(g["prompt_ids"]) and out.prompt_logprobs[0] is None
    err = 0.0
    for i, entry in enumerate(out.prompt_logprobs[1:]):
        assert len(entry) >= 20
        for token, lp in entry.items():
            err = max(err, abs(lp.logprob - g["ref_logprobs"][i][token]))
    return err


@pytest.fixture(scope="module", params=["dense", "moe"])
def vl(request):
    """(kind, LLM on the fixture in float32 as the goldens' reference, golden.json)."""
    return request.param, LLM(model=str(FIXTURES / request.param), dtype="float32"), golden(request.param)


def greedy(g):
    return SamplingParams(temperature=0, max_tokens=len(g["greedy_ids"]), ignore_eos=True, prompt_logprobs=20)


def data_url(path=IMAGE):
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def assert_golden(out, g):
    assert out.prompt_token_ids == g["prompt_ids"]
    # float32 activations against float64: measured 3e-7; another image of the same size gives 0.07.
    assert prompt_logprob_error(out, g) < 1e-4
    assert out.outputs[0].token_ids == g["greedy_ids"]


def one_pad_ids(g):
    """The golden prompt ids with the image's placeholder run collapsed to the one <|image_pad|>
    the processor sees before expansion."""
    pad = 261  # <|image_pad|> in the fixtures' tokenizer (config.json's image_token_id)
    ids = []
    for t in g["prompt_ids"]:
        if t != pad or not ids or ids[-1] != pad:
            ids.append(t)
    return ids


@pytest.mark.parametrize("form", ["bytes", "path", "pathlike", "pil", "list"])
def test_generate_with_image_equals_transformers(vl, form):
    _, llm, g = vl
    image = {"bytes": IMAGE.read_bytes(), "path": str(IMAGE), "pathlike": IMAGE,
             "pil": Image.open(IMAGE), "list": [IMAGE.read_bytes()]}[form]
    out = llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": image}}, greedy(g))[0]
    assert out.prompt == g["rendered"]
    assert_golden(out, g)


def test_the_images_pixels_reach_the_model(vl):
    """The check above can fail: the same image mirrored (same size, so the same prompt ids) is
    far from the reference (the tiny model's greedy tokens happen not to change)."""
    _, llm, g = vl
    mirrored = Image.open(IMAGE).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    out = llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": mirrored}}, greedy(g))[0]
    assert out.prompt_token_ids == g["prompt_ids"]
    assert prompt_logprob_error(out, g) > 1e-2


def test_generate_with_prompt_token_ids(vl):
    _, llm, g = vl
    out = llm.generate({"prompt_token_ids": one_pad_ids(g), "multi_modal_data": {"image": IMAGE.read_bytes()}},
                       greedy(g))[0]
    assert_golden(out, g)


def test_generate_equals_the_cli(vl):
    kind, llm, g = vl
    n = 12  # past the goldens' tokens: the CLI is the reference for these
    r = cli("generate", "--model", FIXTURES / kind, "--chat", g["text"], "--image", IMAGE, "--json",
            "--dtype", "float32", "--ignore-eos", "--max-tokens", n)
    ref = json.loads(r.stdout)
    out = llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": Image.open(IMAGE)}},
                       SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))[0]
    assert out.prompt_token_ids == ref["prompt_ids"]
    assert out.outputs[0].token_ids == ref["output_ids"]


def test_image_prompt_in_a_batch_and_n_samples(vl):
    _, llm, g = vl
    p = {"prompt": g["rendered"], "multi_modal_data": {"image": IMAGE.read_bytes()}}
    outs = llm.generate([{"prompt_token_ids": [10, 20, 30]}, p, p], [greedy(g), greedy(g),
                        SamplingParams(n=2, temperature=0, max_tokens=len(g["greedy_ids"]), ignore_eos=True)])
    assert_golden(outs[1], g)
    assert [c.token_ids for c in outs[2].outputs] == [g["greedy_ids"]] * 2
    assert outs[0].prompt_token_ids == [10, 20, 30]


def chat_message(g, image_part):
    return [{"role": "user", "content": [image_part, {"type": "text", "text": g["text"]}]}]


def test_chat_with_a_data_url(vl):
    _, llm, g = vl
    part = {"type": "image_url", "image_url": {"url": data_url()}}
    out = llm.chat(chat_message(g, part), greedy(g))[0]
    assert out.prompt == g["rendered"]
    assert_golden(out, g)
    # The URL as a plain string, and vLLM's image_pil part.
    for part in ({"type": "image_url", "image_url": data_url()}, {"type": "image_pil", "image_pil": Image.open(IMAGE)}):
        assert_golden(llm.chat(chat_message(g, part), greedy(g))[0], g)


def family_cases():
    """(id, checkpoint, golden) for the other vision families' fixtures: Qwen3-VL dense and MoE
    (tests/cli/fixtures/qwen3_vl_e2e, scripts/make_qwen3_vl_goldens.py: DeepStack), Qwen2.5-VL and
    Qwen2-VL (tests/cli/fixtures/qwen2_5_vl_e2e, scripts/make_qwen2_5_vl_goldens.py: windowed and
    plain towers), Gemma 3 (tests/model/fixtures/gemma3_vl, scripts/make_gemma3_vl_goldens.py:
    SigLIP, bidirectional image blocks) and Gemma 4 (tests/model/fixtures/gemma4_vl,
    scripts/make_gemma4_vl_goldens.py: 2-D RoPE tower, image blocks on sliding layers) — the Gemma
    fixtures' "plain" case — and Nemotron Omni (tests/model/fixtures/nemotron_h_omni,
    scripts/make_nemotron_h_omni_goldens.py: RADIO tower, pixel shuffle, Mamba-2 language model),
    each golden as golden() gives it."""
    cases = []
    for kind in ("dense", "moe"):
        d = REPO / "tests" / "cli" / "fixtures" / "qwen3_vl_e2e" / kind
        g = json.loads((d / "golden.json").read_text())
        cases.append((f"qwen3_vl_{kind}", d, g, d / "expected_logits.f64"))
    for kind in ("qwen2_5_vl", "qwen2_vl"):
        d = REPO / "tests" / "cli" / "fixtures" / "qwen2_5_vl_e2e" / kind
        g = json.loads((d / "golden.json").read_text())
        cases.append((kind, d, g, d / "expected_logits.f64"))
    for family in ("gemma3", "gemma4"):
        d = REPO / "tests" / "model" / "fixtures" / f"{family}_vl"
        g = next(c for c in json.loads((d / "golden.json").read_text())["e2e"] if c["case"] == "plain")
        cases.append((family, d, g, d / g["file"]))
    d = REPO / "tests" / "model" / "fixtures" / "nemotron_h_omni"
    cases.append(("nemotron_h_omni", d, json.loads((d / "golden.json").read_text()), d / "expected_logits.f64"))
    return [pytest.param(d, with_ref_logprobs(g, logits), id=name) for name, d, g, logits in cases]


@pytest.mark.parametrize("checkpoint,g", family_cases())
def test_every_vision_family_through_chat_and_generate(checkpoint, g):
    """Qwen3-VL (dense, MoE), Qwen2.5-VL, Qwen2-VL, Gemma 3, Gemma 4 and Nemotron Omni images through LLM.chat (a data: URL) and LLM.generate
    (the rendered prompt and the image's bytes): the processor's prompt ids, every prompt token's
    logprobs within 1e-4 of transformers' float64 and its greedy tokens; a mirrored image is far
    from them (the check can fail)."""
    image = REPO / g["image"]
    llm = LLM(model=str(checkpoint), dtype="float32")
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    out = llm.chat(chat_message(g, {"type": "image_url", "image_url": {"url": url}}), greedy(g))[0]
    assert out.prompt == g["rendered"]
    assert_golden(out, g)
    ids = llm.get_tokenizer().encode(g["rendered"], add_special_tokens=False)  # one placeholder
    out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"image": image.read_bytes()}}, greedy(g))[0]
    assert_golden(out, g)
    mirrored = Image.open(image).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"image": mirrored}}, greedy(g))[0]
    assert out.prompt_token_ids == g["prompt_ids"]
    assert prompt_logprob_error(out, g) > 1e-2


def test_chat_file_url_needs_allowed_local_media_path(tmp_path):
    g = golden("dense")
    media = tmp_path / "media"
    media.mkdir()
    shutil.copy(IMAGE, media / "img.png")
    part = {"type": "image_url", "image_url": {"url": (media / "img.png").as_uri()}}
    llm = LLM(model=str(FIXTURES / "dense"), dtype="float32", allowed_local_media_path=str(media))
    assert_golden(llm.chat(chat_message(g, part), greedy(g))[0], g)
    outside = {"type": "image_url", "image_url": {"url": IMAGE.as_uri()}}
    with pytest.raises(ValueError, match=r"conversation 0: messages\[0\]\.content\[0\] \(image_url\): the file "
                                         r"path .* must be a subpath of `allowed_local_media_path /.*/media`"):
        llm.chat(chat_message(g, outside), greedy(g))
    plain = LLM(model=str(FIXTURES / "dense"), dtype="float32")
    with pytest.raises(ValueError, match=r"cannot load local files \(file:// URLs\) without `allowed_local_media_path`"):
        plain.chat(chat_message(g, part), greedy(g))
    with pytest.raises(ValueError, match="allowed_local_media_path: '.*nope': No such file or directory"):
        LLM(model=str(FIXTURES / "dense"), allowed_local_media_path=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="allowed_local_media_path: '.*img.png' is not a directory"):
        LLM(model=str(FIXTURES / "dense"), allowed_local_media_path=str(media / "img.png"))


def test_chat_part_errors():
    g = golden("dense")
    llm = LLM(model=str(FIXTURES / "dense"), dtype="float32")
    cases = [
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,***"}}, ValueError,
         r"the data: URL's data is not base64: byte 0x2a at offset 0"),
        ({"type": "image_url", "image_url": {"url": "data:image/png," + "x"}}, ValueError, "only base64 data URLs"),
        ({"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}, ValueError,
         "media type 'text/plain'; expected an image"),
        ({"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}, ValueError,
         r"remote fetching is not enabled \(allowed_media_domains\)"),
        ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, ValueError,
         "must be a data:, file:// or http\\(s\\) URL"),
        ({"type": "image_url", "image_url": {"url": 7}}, TypeError, "the image URL must be a string"),
        ({"type": "image_pil", "image_pil": b"png"}, TypeError, "image_pil must be a PIL.Image.Image"),
        ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}, ValueError,
         "content part type 'video_url' is not supported"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"GIF89a").decode()}},
         ValueError, r"messages\[0\]\.content\[0\] \(image_url\): not an image fp4lm decodes"),
    ]
    for part, exc, msg in cases:
        with pytest.raises(exc, match="conversation 0: .*" + msg):
            llm.chat(chat_message(g, part), greedy(g))


def test_generate_errors(moe_w4a4):
    g = golden("dense")
    llm = LLM(model=str(FIXTURES / "dense"), dtype="float32", limit_mm_per_prompt={"image": 1})
    png = IMAGE.read_bytes()
    # Two images for one placeholder, and an image for a prompt without one.
    with pytest.raises(ValueError, match=r"prompt 0: the prompt has 1 image placeholder\(s\) .* for 2 image\(s\)"):
        LLM(model=str(FIXTURES / "dense"), dtype="float32").generate(
            {"prompt": g["rendered"], "multi_modal_data": {"image": [png, png]}}, greedy(g))
    with pytest.raises(ValueError, match=r"prompt 1: the prompt has 0 image placeholder\(s\)"):
        llm.generate([{"prompt": g["rendered"], "multi_modal_data": {"image": png}},
                      {"prompt": "hello", "multi_modal_data": {"image": png}}], greedy(g))
    # Bytes that are no image, a type that is none, a missing file: named by prompt and image.
    with pytest.raises(ValueError, match=r'prompt 0: multi_modal_data\["image"\] \(6 bytes\): not an image fp4lm '
                                         r"decodes: expected JPEG, PNG or WebP data"):
        llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": b"GIF89a"}}, greedy(g))
    with pytest.raises(TypeError, match=r'prompt 0: multi_modal_data\["image"\]\[0\]: expected a PIL.Image.Image, '
                                        r"encoded image bytes .* got builtins.int"):
        llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": [7]}}, greedy(g))
    with pytest.raises(ValueError, match=r"prompt 0: .*cannot read image file '/nonexistent/x.png'"):
        llm.generate({"prompt": g["rendered"], "multi_modal_data": {"image": "/nonexistent/x.png"}}, greedy(g))
    with pytest.raises(ValueError, match=r"prompt 0: multi_modal_data\['audio'\] is not supported"):
        llm.generate({"prompt": g["rendered"], "multi_modal_data": {"audio": png}}, greedy(g))
    with pytest.raises(ValueError, match=r"prompt 0: unsupported prompt key\(s\) \['mm_processor_kwargs'\]"):
        llm.generate({"prompt": g["rendered"], "mm_processor_kwargs": {}}, greedy(g))
    # Over limit_mm_per_prompt, in generate and chat (vLLM's message).
    with pytest.raises(ValueError, match=r"prompt 0: At most 1 image\(s\) may be provided in one prompt"):
        llm.generate({"prompt": PAD + PAD, "multi_modal_data": {"image": [png, png]}}, greedy(g))
    two = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url()}}] * 2}]
    with pytest.raises(ValueError, match=r"conversation 0: At most 1 image\(s\) may be provided in one prompt"):
        llm.chat(two, greedy(g))
    with pytest.raises(ValueError, match=r"prompt 0: beam_search does not take multi_modal_data"):
        from fp4lm import BeamSearchParams
        llm.beam_search([{"prompt": g["rendered"], "multi_modal_data": {"image": png}}],
                        BeamSearchParams(beam_width=2, max_tokens=2))
    # A prompt the image makes longer than max_model_len (its 20 tokens on 44 of text).
    short = LLM(model=str(FIXTURES / "dense"), dtype="float32", max_model_len=60)
    with pytest.raises(ValueError, match=r"prompt 0: image 1 \(20 tokens for its 8x10 patch grid\) makes the prompt "
                                         r"64 tokens, more than the model's context of 60"):
        short.generate({"prompt": g["rendered"], "multi_modal_data": {"image": png}}, greedy(g))
    # A model without a vision tower: named.
    text_only = LLM(model=str(moe_w4a4))
    with pytest.raises(ValueError, match=f"prompt 0: model '{moe_w4a4}' has no vision tower fp4lm runs"):
        text_only.generate({"prompt_token_ids": [1, 2, 3], "multi_modal_data": {"image": png}},
                           SamplingParams(max_tokens=1))
    part = {"type": "image_url", "image_url": {"url": data_url()}}
    with pytest.raises(ValueError, match=f"conversation 0: model '{moe_w4a4}' has no vision tower"):
        text_only.chat([{"role": "user", "content": [part]}], SamplingParams(max_tokens=1))


def test_limit_mm_per_prompt_values(caplog):
    """The engine's rule, the one `fp4lm serve --limit-mm-per-prompt` applies (engine/mm_limits.h)."""
    assert _images.parse_limit(None) == 999
    assert _images.parse_limit({"image": 3, "video": 0}) == 3
    assert _images.parse_limit({"image": {"count": 0}}) == 0
    with caplog.at_level(logging.WARNING, logger="fp4lm"):
        assert _images.parse_limit({"image": 2, "video": 1, "audio": 1}) == 2
    # fp4lm.LLM counts videos (frames, Qwen3-VL: test_video.py); audio has no effect.
    assert "the video limit" not in caplog.text
    assert "limit_mm_per_prompt: the audio limit (1) has no effect: fp4lm takes images only" in caplog.text
    for bad, msg in (({"image": -1}, "limit_mm_per_prompt: 'image' must be a count >= 0, got -1"),
                     ({"image": True}, "'image' must be a count >= 0, got true"),
                     ({"images": 1}, "unknown modality 'images'"), ([1], "must be a dict"),
                     ({"image": {1, 2}}, "limit_mm_per_prompt: .*not JSON serializable"),
                     ({"image": {"count": 1, "width": 5}}, r"'image.width': only 'count' is read")):
        with pytest.raises(ValueError, match=msg):
            LLM(model=str(FIXTURES / "dense"), limit_mm_per_prompt=bad)


def test_chat_fetches_http_urls_only_from_allowed_media_domains():
    """vLLM's allowed_media_domains: an http URL from a listed host is fetched (by the engine's
    fetcher, the one `fp4lm serve` uses), any other host refused before a connection is made, and
    more image parts than limit_mm_per_prompt refused before any is fetched."""
    import http.server
    import threading
    g = golden("dense")
    png = IMAGE.read_bytes()
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png)))
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/cat.png"
        part = {"type": "image_url", "image_url": {"url": url}}
        llm = LLM(model=str(FIXTURES / "dense"), dtype="float32", allowed_media_domains=["127.0.0.1"],
                  limit_mm_per_prompt={"image": 1})
        assert_golden(llm.chat(chat_message(g, part), greedy(g))[0], g)
        assert hits == ["/cat.png"]
        other = {"type": "image_url", "image_url": {"url": url.replace("127.0.0.1", "localhost")}}
        with pytest.raises(ValueError, match=r"allowed domains \(allowed_media_domains\), got host 'localhost'"):
            llm.chat(chat_message(g, other), greedy(g))
        two = [{"role": "user", "content": [part, part]}]
        with pytest.raises(ValueError, match=r"conversation 0: At most 1 image\(s\) may be provided in one prompt"):
            llm.chat(two, greedy(g))
        assert hits == ["/cat.png"]
        with pytest.raises(ValueError, match="allowed_media_domains: 'http://x' is not a host name"):
            LLM(model=str(FIXTURES / "dense"), allowed_media_domains=["http://x"])
        with pytest.raises(ValueError, match="allowed_media_domains must be a list of host names"):
            LLM(model=str(FIXTURES / "dense"), allowed_media_domains="127.0.0.1")
    finally:
        httpd.shutdown()


def test_pil_images_go_over_as_their_pixels(tmp_path):
    """A PIL image goes over as a PNG of its own pixels: no EXIF orientation applied or kept (the
    processors use a PIL image's pixels as they are), other modes through convert("RGBA")."""
    img = Image.open(REPO / "tests" / "vision" / "data" / "exif6_30x20.jpg")
    assert img.getexif().get(0x0112) == 6
    name, data = _images.image_bytes(img, "x")
    back = Image.open(io.BytesIO(data))
    assert name == f"x (PIL image RGB {img.width}x{img.height})"
    assert back.size == img.size and not back.getexif()
    assert list(back.convert("RGB").getdata()) == list(img.convert("RGB").getdata())
    cmyk = Image.open(REPO / "tests" / "vision" / "data" / "cmyk_24x18.jpg")
    assert cmyk.mode == "CMYK"
    back = Image.open(io.BytesIO(_images.image_bytes(cmyk, "x")[1]))
    assert back.mode == "RGBA" and list(back.convert("RGB").getdata()) == list(cmyk.convert("RGB").getdata())
