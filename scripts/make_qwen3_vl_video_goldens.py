#!/usr/bin/env python3
"""Goldens for Qwen3-VL video input given as frames (issue 43): tests/vision/qwen_vl_video_test.cpp
and tests/engine/qwen3_vl_video_logits_test.cpp.

transformers 5.24's Qwen3VLVideoProcessor needs torchvision (its resize is torchvision's uint8
antialiased bicubic, not Pillow's), which /work/venvs/torch lacks; this script was run with
torchvision 0.24.1 (the build for torch 2.9.1) installed beside it:
  pip install --no-deps --target /tmp/tv torchvision==0.24.1
  PYTHONPATH=/tmp/tv /work/venvs/torch/bin/python scripts/make_qwen3_vl_video_goldens.py

Writes
  tests/vision/data/video/           frames (PNG), torch's uint8 resize outputs (.u8), the video
                                     processor's pixel_values_videos (.f32) and manifest.json
                                     (smart_resize table, resize and preprocess cases)
  tests/cli/fixtures/qwen3_vl_e2e/dense/video_preprocessor_config.json and chat_template.jinja
                                     (the image template with a video part added; images render
                                     as before, so make_qwen3_vl_goldens.py's goldens hold)
  tests/cli/fixtures/qwen3_vl_video/golden.json, frames4_logits.f64, frames3_logits.f64
                                     the processor's prompt for [video, text] (timestamps between
                                     the frame groups), get_rope_index's positions and delta, the
                                     float64 forward's logits at every position and its greedy
                                     tokens, for 4 frames and for 3 (the odd count padded).
Frames are given as they are (do_sample_frames false, as vLLM passes pre-sampled frames) with no
metadata: the processor's fps default of 24 names the timestamps.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import PreTrainedTokenizerFast, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor, smart_resize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_vl_e2e_goldens import CHAT_TEMPLATE, IDS, PREPROCESSOR  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "vision", "data", "video")
DENSE = os.path.join(ROOT, "tests", "cli", "fixtures", "qwen3_vl_e2e", "dense")
OUT = os.path.join(ROOT, "tests", "cli", "fixtures", "qwen3_vl_video")
TEXT_PROMPT = "What happens in the video?"
GREEDY_TOKENS = 6

VIDEO_TEMPLATE = CHAT_TEMPLATE.replace(
    "{%- elif part.type == 'text' -%}",
    "{%- elif part.type == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part.type == 'text' -%}")
assert VIDEO_TEMPLATE != CHAT_TEMPLATE

# The tiny model's video processor: its image processor's patching, the tiny size budget.
VIDEO_PREPROCESSOR = dict(size={"longest_edge": 16384, "shortest_edge": 256}, patch_size=8, temporal_patch_size=2,
                          merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3, do_sample_frames=False,
                          cap_pixels_per_frame=False)


def frames(n, w, h, seed):
    """Smooth gradients that move from frame to frame, plus noise: resizing shows in every pixel."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for f in range(n):
        r = 127 + 100 * np.sin(xx / (3 + f) + yy / 7)
        g = 127 + 100 * np.cos(yy / (4 + f) - xx / 9)
        b = (xx * 5 + yy * 3 + 40 * f) % 256
        img = np.stack([r, g, b], -1) + rng.normal(0, 20, (h, w, 3))
        out.append(np.clip(np.round(img), 0, 255).astype(np.uint8))
    return out


def save_frames(name, fs):
    files = []
    for i, a in enumerate(fs):
        fn = f"{name}_{i}.png"
        Image.fromarray(a).save(os.path.join(DATA, fn))
        files.append("video/" + fn)
    return files


def torch_resize(a, h, w):
    t = torch.from_numpy(a).permute(2, 0, 1)[None].contiguous()
    return F.interpolate(t, size=[h, w], mode="bicubic", align_corners=False, antialias=True)[0].permute(1, 2, 0)


def main():
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    manifest = {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                "torchvision": __import__("torchvision").__version__}

    # smart_resize over sizes, frame counts and budgets (including the small-side upscale branch).
    table = []
    for (t, h, w, factor, lo, hi) in [(4, 44, 60, 16, 256, 16384), (3, 37, 83, 16, 256, 16384),
                                      (2, 10, 300, 16, 256, 16384), (8, 480, 640, 32, 131072, 786432),
                                      (5, 1080, 1920, 32, 131072, 786432), (2, 20, 20, 32, 131072, 786432),
                                      (16, 333, 517, 28, 12544, 602112), (7, 17, 1000, 28, 3136, 100000),
                                      (9, 2000, 30, 16, 4096, 65536), (2, 300, 200, 32, 4096, 8192)]:
        rh, rw = smart_resize(t, h, w, temporal_factor=2, factor=factor, min_pixels=lo, max_pixels=hi)
        table.append({"frames": t, "height": h, "width": w, "factor": factor, "min_pixels": lo, "max_pixels": hi,
                      "resized": [rh, rw]})
    manifest["smart_resize"] = table

    # torch's uint8 antialiased bicubic resize (what the processor's torchvision resize runs on CPU).
    rng = np.random.default_rng(43)
    resize_cases = []
    for i, (h, w, nh, nw) in enumerate([(37, 53, 32, 64), (100, 80, 64, 64), (44, 60, 48, 64), (120, 90, 24, 40),
                                        (31, 17, 96, 80), (64, 64, 64, 48)]):
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        src = f"resize_{i}_{w}x{h}.png"
        Image.fromarray(a).save(os.path.join(DATA, src))
        want = torch_resize(a, nh, nw).numpy()
        dst = f"resize_{i}_{nw}x{nh}.u8"
        want.tofile(os.path.join(DATA, dst))
        resize_cases.append({"file": "video/" + src, "height": nh, "width": nw, "rgb": "video/" + dst})
    manifest["resize"] = resize_cases

    # The tiny model's processor and a default Qwen3-VL one on the frames.
    tiny = Qwen3VLVideoProcessor(**VIDEO_PREPROCESSOR)
    tiny_file = "video/tiny_video_preprocessor_config.json"
    tiny.to_json_file(os.path.join(DATA, "tiny_video_preprocessor_config.json"))
    # Qwen3-VL's own patching (patch 16, its mean / std) with a budget small enough for a fixture.
    patch16 = Qwen3VLVideoProcessor(size={"longest_edge": 32768, "shortest_edge": 4096}, do_sample_frames=False,
                                    cap_pixels_per_frame=False)
    patch16.to_json_file(os.path.join(DATA, "patch16_video_preprocessor_config.json"))
    # CLIP's mean and std (not halves): the fused (x - mean * 255) / (std * 255) rounding shows.
    clip = Qwen3VLVideoProcessor(**dict(VIDEO_PREPROCESSOR, image_mean=[0.48145466, 0.4578275, 0.40821073],
                                        image_std=[0.26862954, 0.26130258, 0.27577711]))
    clip.to_json_file(os.path.join(DATA, "clip_video_preprocessor_config.json"))
    videos = {"frames4": (frames(4, 60, 44, 1), tiny, tiny_file),
              "frames3": (frames(3, 83, 37, 2), tiny, tiny_file),
              "frames5": (frames(5, 70, 50, 3), patch16, "video/patch16_video_preprocessor_config.json"),
              "frames2": (frames(2, 30, 90, 4), tiny, tiny_file),
              "frames3clip": (frames(3, 41, 29, 5), clip, "video/clip_video_preprocessor_config.json")}
    cases = []
    for name, (fs, proc, cfg_file) in videos.items():
        files = save_frames(name, fs)
        pil = [Image.open(os.path.join(DATA, os.path.basename(f))).convert("RGB") for f in files]
        out = proc(videos=[pil], return_tensors="pt")
        pv = out["pixel_values_videos"].numpy().astype("<f4")
        pv_file = f"video/{name}.f32"
        pv.tofile(os.path.join(DATA, os.path.basename(pv_file)))
        cases.append({"name": name, "frames": files, "config": cfg_file,
                      "grid_thw": out["video_grid_thw"][0].tolist(), "rows": pv.shape[0], "cols": pv.shape[1],
                      "pixel_values": pv_file})
        print(name, "grid", cases[-1]["grid_thw"], "rows", pv.shape)
    manifest["preprocess"] = cases
    with open(os.path.join(DATA, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    # The model: the Qwen3-VL dense fixture, given the video processor and a template with videos.
    with open(os.path.join(DENSE, "video_preprocessor_config.json"), "w") as f:
        f.write(tiny.to_json_string())
    with open(os.path.join(DENSE, "chat_template.jinja"), "w") as f:
        f.write(VIDEO_TEMPLATE)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(DENSE, "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    ip = Qwen2VLImageProcessorPil(size=PREPROCESSOR["size"], patch_size=8, temporal_patch_size=2, merge_size=2,
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=tiny,
                                 chat_template=VIDEO_TEMPLATE)
    m64 = Qwen3VLForConditionalGeneration.from_pretrained(DENSE, dtype=torch.float64).eval()
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": TEXT_PROMPT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    golden = {"text": TEXT_PROMPT, "rendered": text, "videos": {}}
    for name in ("frames4", "frames3"):
        files = [c for c in cases if c["name"] == name][0]["frames"]
        pil = [Image.open(os.path.join(DATA, os.path.basename(f))).convert("RGB") for f in files]
        batch = processor(text=[text], videos=[pil], return_tensors="pt")
        ids = batch["input_ids"]
        with torch.no_grad():
            out = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"],
                      pixel_values_videos=batch["pixel_values_videos"].to(torch.float64),
                      video_grid_thw=batch["video_grid_thw"])
            gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"],
                               mm_token_type_ids=batch["mm_token_type_ids"],
                               pixel_values_videos=batch["pixel_values_videos"].to(torch.float64),
                               video_grid_thw=batch["video_grid_thw"], max_new_tokens=GREEDY_TOKENS,
                               min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
            pos, delta = m64.model.get_rope_index(ids, batch["mm_token_type_ids"], None, batch["video_grid_thw"],
                                                  attention_mask=batch["attention_mask"])
        logits = out.logits[0].numpy()
        logits.astype("<f8").tofile(os.path.join(OUT, f"{name}_logits.f64"))
        golden["videos"][name] = {"frames": ["tests/vision/data/" + f for f in files],
                                  "prompt_ids": ids[0].tolist(), "video_grid_thw": batch["video_grid_thw"][0].tolist(),
                                  "positions": pos[:, 0].tolist(), "rope_delta": int(delta.reshape(-1)[0]),
                                  "expanded": processor.batch_decode(ids)[0],
                                  "logits_rows": logits.shape[0], "logits_cols": logits.shape[1],
                                  "logit_range": float(logits.max() - logits.min()),
                                  "greedy_ids": gen[0, ids.shape[1]:].tolist()}
        print(name, "prompt", ids.shape[1], "grid", golden["videos"][name]["video_grid_thw"])
        print(golden["videos"][name]["expanded"])
    golden["transformers"] = __import__("transformers").__version__
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)


if __name__ == "__main__":
    main()
