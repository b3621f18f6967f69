"""fp4lm.LLM with video given as frames (issue 43) on the tiny Qwen3-VL of
tests/cli/fixtures/qwen3_vl_e2e/dense with its Qwen3VLVideoProcessor
(scripts/make_qwen3_vl_video_goldens.py, goldens in tests/cli/fixtures/qwen3_vl_video): the prompt
ids equal transformers' Qwen3VLProcessor's (timestamps between the frame groups) and every prompt
token's logprobs are within 1e-4 of the log-softmax of Qwen3VLForConditionalGeneration's float64
logits, and the greedy tokens transformers', for 4 frames and for 3, through LLM.generate (multi_modal_data={"video": frames}) and
LLM.chat ({"type": "video", "video": frames}); then the errors for hostile videos."""
import json

import pytest
from PIL import Image

from fp4lm import LLM, SamplingParams
from fp4lm import _images
from conftest import REPO
from test_images import prompt_logprob_error, with_ref_logprobs

MODEL = REPO / "tests" / "cli" / "fixtures" / "qwen3_vl_e2e" / "dense"
GOLDEN = REPO / "tests" / "cli" / "fixtures" / "qwen3_vl_video"
NO_VIDEO = REPO / "tests" / "cli" / "fixtures" / "qwen3_5_vl_e2e" / "dense"  # no video_preprocessor_config.json
VIDEO_PAD = "<|vision_start|><|video_pad|><|vision_end|>"


def golden(name):
    g = json.loads((GOLDEN / "golden.json").read_text())
    v = dict(g["videos"][name], text=g["text"], rendered=g["rendered"])
    return with_ref_logprobs(v, GOLDEN / f"{name}_logits.f64")


def frames(g):
    return [Image.open(REPO / f).convert("RGB") for f in g["frames"]]


def scoring():
    return SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=20)


@pytest.fixture(scope="module")
def llm():
    return LLM(model=str(MODEL), dtype="float32")


@pytest.mark.parametrize("name", ["frames4", "frames3"])
def test_generate_and_chat_equal_transformers(llm, name):
    g = golden(name)
    ids = llm.get_tokenizer().encode(g["rendered"], add_special_tokens=False)  # one <|video_pad|>
    out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"video": frames(g)}}, scoring())[0]
    assert out.prompt_token_ids == g["prompt_ids"]
    err = prompt_logprob_error(out, g)
    assert err < 1e-4
    # Decoding after the video (positions past its rope_delta): transformers' greedy tokens.
    greedy = SamplingParams(temperature=0, max_tokens=len(g["greedy_ids"]), ignore_eos=True)
    out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"video": frames(g)}}, greedy)[0]
    assert out.outputs[0].token_ids == g["greedy_ids"]
    # The frames as file paths, and through LLM.chat's video part.
    paths = [str(REPO / f) for f in g["frames"]]
    out = llm.generate({"prompt": g["rendered"], "multi_modal_data": {"video": paths}}, scoring())[0]
    assert out.prompt_token_ids == g["prompt_ids"]
    msg = [{"role": "user", "content": [{"type": "video", "video": frames(g)}, {"type": "text", "text": g["text"]}]}]
    out = llm.chat(msg, scoring())[0]
    assert out.prompt == g["rendered"]
    assert out.prompt_token_ids == g["prompt_ids"]
    assert prompt_logprob_error(out, g) < 1e-4
    # The frames in reverse order: the same prompt ids, logprobs far off (the check can fail).
    out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"video": frames(g)[::-1]}}, scoring())[0]
    assert out.prompt_token_ids == g["prompt_ids"]
    assert prompt_logprob_error(out, g) > 1e-3


def test_numpy_frames_equal_pil_frames(llm):
    np = pytest.importorskip("numpy")
    g = golden("frames4")
    ids = llm.get_tokenizer().encode(g["rendered"], add_special_tokens=False)
    video = np.stack([np.asarray(f) for f in frames(g)])
    for form in (video, list(video)):
        out = llm.generate({"prompt_token_ids": ids, "multi_modal_data": {"video": form}}, scoring())[0]
        assert out.prompt_token_ids == g["prompt_ids"]
        assert prompt_logprob_error(out, g) < 1e-4


def test_hostile_videos_are_clear_errors(llm):
    g = golden("frames4")
    f4, f3 = frames(g), frames(golden("frames3"))
    prompt = g["rendered"]
    cases = [
        ([], ValueError, r'prompt 0: multi_modal_data\["video"\]: a video of no frames'),
        ([f4[0]], ValueError, r"a video of 1 frame\(s\): the processor needs at least temporal_patch_size = 2"),
        ([f4[0], f3[0]], ValueError, r"video frame 2 is 83x37, but frame 1 is 60x44: a video's frames must all be "
                                     r"the same size"),
        ([f4[0], 7], TypeError, r'multi_modal_data\["video"\] frame 1: expected a PIL.Image.Image, a numpy'),
        (b"\x00\x00\x00\x18ftypmp42", TypeError, r"a video is a list of frames .* \(video files and \(frames, "
                                                 r"metadata\) pairs are not supported\)"),
    ]
    for video, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            llm.generate({"prompt": prompt, "multi_modal_data": {"video": video}}, scoring())
    with pytest.raises(ValueError, match=r"prompt 0: the prompt has 0 video placeholder\(s\) \(token id 262\) for 1"):
        llm.generate({"prompt": "hello", "multi_modal_data": {"video": f4}}, scoring())
    with pytest.raises(ValueError, match=r"prompt 0: the prompt has 1 video placeholder\(s\) \(token id 262\) for 2"):
        llm.generate({"prompt": prompt, "multi_modal_data": {"video": [f4, f4]}}, scoring())
    # Too long for the context: named with the video's frames and tokens.
    short = LLM(model=str(MODEL), dtype="float32", max_model_len=60)
    with pytest.raises(ValueError, match=r"prompt 0: video 1 \(4 frames, 12 tokens per frame group\) makes the "
                                         r"prompt 101 tokens, more than the model's context of 60"):
        short.generate({"prompt": prompt, "multi_modal_data": {"video": f4}}, scoring())
    # limit_mm_per_prompt counts videos, as vLLM.
    one = LLM(model=str(MODEL), dtype="float32", limit_mm_per_prompt={"video": 1})
    with pytest.raises(ValueError, match=r"prompt 0: At most 1 video\(s\) may be provided in one prompt"):
        one.generate({"prompt": VIDEO_PAD * 2, "multi_modal_data": {"video": [f4, f4]}}, scoring())
    two = [{"role": "user", "content": [{"type": "video", "video": f4}] * 2}]
    with pytest.raises(ValueError, match=r"conversation 0: At most 1 video\(s\) may be provided in one prompt"):
        one.chat(two, scoring())
    # A video file as a URL part: refused by name, frames are the form fp4lm takes.
    part = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}
    with pytest.raises(ValueError, match=r"messages\[0\]\.content\[0\]: content part type 'video_url' is not "
                                         r"supported: fp4lm takes video as frames"):
        llm.chat([{"role": "user", "content": [part]}], scoring())


def test_a_model_without_a_video_processor_refuses_videos():
    g = golden("frames4")
    llm = LLM(model=str(NO_VIDEO), dtype="float32")
    with pytest.raises(ValueError, match=r"prompt 0: multi_modal_data\[\"video\"\]: model '.*' takes no video: this "
                                         r"model has no video_preprocessor_config.json"):
        llm.generate({"prompt": VIDEO_PAD, "multi_modal_data": {"video": frames(g)}}, scoring())


def test_limit_mm_per_prompt_video_values():
    assert _images.parse_video_limit(None) == 999
    assert _images.parse_video_limit({"image": 3}) == 999
    assert _images.parse_video_limit({"video": {"count": 2}}) == 2
    with pytest.raises(ValueError, match="limit_mm_per_prompt: 'video' must be a count >= 0, got -1"):
        _images.parse_video_limit({"video": -1})
