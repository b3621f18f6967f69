#!/usr/bin/env python3
"""Goldens for engine/prompt_images.h: the prompt token ids of the Hugging Face Qwen3-VL processor
(Qwen3.5 / Qwen3.6 name it) with the Qwen3 tokenizer (../shared/tokenizers/qwen3, which has the
vision tokens) and Qwen3.5's preprocessor config, for prompts with images of known sizes.

    /work/venvs/img43/bin/python scripts/make_image_prompt_goldens.py \
        ../shared/tokenizers/qwen3 tests/vision/data/preprocessor_qwen35.json tests/engine/data/image_prompt_ids.json
(transformers 5.24 + Pillow, no torch.) Each case: the text (one <|image_pad|> per image), the
image sizes (height, width), and the processor's input_ids and image_grid_thw.
"""
import json
import sys

import numpy as np
import transformers
from PIL import Image
from transformers import AutoTokenizer
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

IMG = "<|vision_start|><|image_pad|><|vision_end|>"
CASES = [
    ("<|im_start|>user\n" + IMG + "What is in the picture?<|im_end|>\n<|im_start|>assistant\n", [(448, 448)]),
    ("<|im_start|>user\nCompare " + IMG + " with " + IMG + "<|im_end|>\n<|im_start|>assistant\n",
     [(300, 500), (64, 40)]),
    (IMG + "caption:", [(1024, 768)]),
]


def main():
    tok_dir, pre, out_path = sys.argv[1:4]
    cfg = json.load(open(pre))
    ip = Qwen2VLImageProcessor(**{k: v for k, v in cfg.items() if k not in ("processor_class", "image_processor_type")})
    tok = AutoTokenizer.from_pretrained(tok_dir)
    proc = Qwen3VLProcessor(image_processor=ip, tokenizer=tok, video_processor=Qwen3VLVideoProcessor())
    rng = np.random.default_rng(0)
    cases = []
    for text, sizes in CASES:
        imgs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
        enc = proc(text=[text], images=imgs, return_tensors="np")
        cases.append({"text": text, "sizes": sizes, "input_ids": enc["input_ids"][0].tolist(),
                      "image_grid_thw": enc["image_grid_thw"].tolist(),
                      "text_ids": tok(text)["input_ids"]})
    with open(out_path, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
