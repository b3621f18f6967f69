#!/usr/bin/env python3
"""Goldens for Qwen2.5-VL and Qwen2-VL (tests/model/qwen2_5_vl_test.cpp, the text models;
tests/engine/qwen2_5_vl_image_logits_test.cpp and tests/cli/generate_image_cli_test.cpp, images).

Tiny random Qwen2_5_VLForConditionalGeneration and Qwen2VLForConditionalGeneration built and saved
(bf16) by transformers 5.24: a 3-layer Qwen2 text model (q/k/v biases, contiguous M-RoPE with
mrope_section [4, 3, 3] over head_dim 20); Qwen2.5-VL's 4-block vision tower with patch 14, window
attention (window_size 56: 2 x 2 merge units) and full attention in blocks 1 and 3; Qwen2-VL's
2-block tower (LayerNorm, QuickGELU MLP of embed_dim x mlp_ratio, no windows). The config.json
is rewritten in the published configs' flat form (the text keys at the top level beside
vision_config, rope_scaling {"type": "mrope", "mrope_section"} and rope_theta), which transformers is
checked to read to the same logits; transformers saves the tensors in the published layout
(model.layers.*, lm_head.weight, visual.*). The tokenizer and chat template are those of
scripts/make_qwen_vl_e2e_goldens.py; the preprocessor config is in Qwen2.5-VL's form (min_pixels /
max_pixels keys, patch_size 14). The image (150 x 100) resizes to 140 x 112: a 10 x 8 patch grid,
5 x 4 merge units, 3 x 2 windows of which the last column's are cut.

Per checkpoint, golden.json and float64 files:
  text_logits.f64      the float64 forward's logits at every position of TEXT_TOKENS (no image)
  expected_logits.f64  (Qwen2.5-VL) the float64 forward's logits at every position of the processor's
                       prompt (chat template + one PNG, pixel_values), and golden.json's greedy_ids
  /work/venvs/torch/bin/python scripts/make_qwen2_5_vl_goldens.py   (transformers 5.24.0, torch, Pillow)
writes tests/cli/fixtures/qwen2_5_vl_e2e/{qwen2_5_vl,qwen2_vl}/.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image
from transformers import (PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                          Qwen2_5_VLProcessor, Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_vl_e2e_goldens import CHAT_TEMPLATE, IDS, TEXT_PROMPT, VOCAB, write_tokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "cli", "fixtures", "qwen2_5_vl_e2e")
IMAGE = os.path.join(ROOT, "tests", "vision", "data", "rgb_150x100.png")
GREEDY_TOKENS = 6
TEXT_TOKENS = [3, 17, 42, 8, 61, 5, 29, 200, 12, 50, 7, 144, 19, 2, 58, 126, 38, 11, 63, 21]

VISION_25 = dict(depth=4, hidden_size=32, hidden_act="silu", intermediate_size=48, num_heads=2, in_channels=3,
                 patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56, out_hidden_size=40,
                 fullatt_block_indexes=[1, 3], tokens_per_second=2)
VISION_2 = dict(depth=2, embed_dim=32, hidden_size=40, hidden_act="quick_gelu", mlp_ratio=2, num_heads=2,
                in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
TEXT = dict(vocab_size=VOCAB, hidden_size=40, intermediate_size=48, num_hidden_layers=3, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 3, 3]},
            bos_token_id=None, eos_token_id=IDS["<|im_end|>"])
TOKEN_IDS = dict(image_token_id=IDS["<|image_pad|>"], video_token_id=IDS["<|video_pad|>"],
                 vision_start_token_id=IDS["<|vision_start|>"], vision_end_token_id=IDS["<|vision_end|>"])
# Qwen2.5-VL's published preprocessor_config.json form (Qwen/Qwen2.5-VL-7B-Instruct's keys), this
# fixture's mean / std.
PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056,
    "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
}


def build(kind):
    torch.manual_seed(4750 if kind == "qwen2_5_vl" else 4751)
    if kind == "qwen2_5_vl":
        model = Qwen2_5_VLForConditionalGeneration(
            Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION_25, tie_word_embeddings=False, **TOKEN_IDS))
    else:
        model = Qwen2VLForConditionalGeneration(
            Qwen2VLConfig(text_config=TEXT, vision_config=VISION_2, tie_word_embeddings=False, **TOKEN_IDS))
    # Weights large enough for the logits to spread; norms and biases not all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_q" in name:
                p.add_(torch.randn_like(p) * 0.1)
            elif "language_model" in name or "lm_head" in name:
                p.copy_(torch.randn_like(p) * 0.25)
    return model.to(torch.bfloat16)


def flatten_config(d):
    """config.json as the published Qwen2-VL / Qwen2.5-VL configs write it: the text keys at the top."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    text = cfg.pop("text_config")
    rope = text.pop("rope_parameters")
    for k in ("model_type", "layer_types", "pad_token_id"):
        text.pop(k, None)
    cfg.update(text)
    cfg["rope_theta"] = rope["rope_theta"]
    cfg["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def text_logits(cls, d):
    m = cls.from_pretrained(d, dtype=torch.float64).eval()
    with torch.no_grad():
        return m(input_ids=torch.tensor([TEXT_TOKENS])).logits[0].numpy()


# Without torchvision (not in /work/venvs/torch), ProcessorMixin's class check of the video
# processor fails on transformers' lazy mapping; the image path does not use it.
Qwen2_5_VLProcessor.check_argument_for_proper_class = lambda self, name, arg: None
Qwen2VLProcessor.check_argument_for_proper_class = lambda self, name, arg: None


def image_goldens(d, golden, kind):
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    ip = Qwen2VLImageProcessorPil(min_pixels=PREPROCESSOR["min_pixels"], max_pixels=PREPROCESSOR["max_pixels"],
                                  patch_size=14, temporal_patch_size=2, merge_size=2,
                                  image_mean=PREPROCESSOR["image_mean"], image_std=PREPROCESSOR["image_std"])
    pcls = Qwen2_5_VLProcessor if kind == "qwen2_5_vl" else Qwen2VLProcessor
    processor = pcls(image_processor=ip, tokenizer=tokenizer, video_processor=None, chat_template=CHAT_TEMPLATE)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT_PROMPT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    batch = processor(text=[text], images=[Image.open(IMAGE).convert("RGB")], return_tensors="pt")
    ids = batch["input_ids"]
    cls = Qwen2_5_VLForConditionalGeneration if kind == "qwen2_5_vl" else Qwen2VLForConditionalGeneration
    m64 = cls.from_pretrained(d, dtype=torch.float64).eval()
    pix = batch["pixel_values"].to(torch.float64)
    with torch.no_grad():
        out = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=pix,
                  image_grid_thw=batch["image_grid_thw"])
        gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"],
                           mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=pix,
                           image_grid_thw=batch["image_grid_thw"], max_new_tokens=GREEDY_TOKENS,
                           min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
        if kind == "qwen2_5_vl":
            # The same tower with every block attending to the whole image: how far the test's
            # bound is from missing the windows.
            vis = m64.model.visual
            saved = vis.fullatt_block_indexes
            vis.fullatt_block_indexes = list(range(len(vis.blocks)))
            no_win = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=pix,
                         image_grid_thw=batch["image_grid_thw"]).logits[0].numpy()
            vis.fullatt_block_indexes = saved
    logits = out.logits[0].numpy()
    logits.astype("<f8").tofile(os.path.join(d, "expected_logits.f64"))
    rng = float(logits.max() - logits.min())
    golden.update({"text": TEXT_PROMPT, "image": "tests/vision/data/rgb_150x100.png", "rendered": text,
                   "prompt_ids": ids[0].tolist(), "image_grid_thw": batch["image_grid_thw"][0].tolist(),
                   "logits_rows": logits.shape[0], "greedy_ids": gen[0, ids.shape[1]:].tolist()})
    if kind == "qwen2_5_vl":
        golden["no_windows_rel_diff"] = float(abs(no_win - logits).max()) / rng
    print("prompt", ids.shape[1], "grid", golden["image_grid_thw"], "greedy", golden["greedy_ids"], "logit range",
          rng, "without windows", golden.get("no_windows_rel_diff"))


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    for kind in ("qwen2_5_vl", "qwen2_vl"):
        d = os.path.join(OUT, kind)
        os.makedirs(d)
        write_tokenizer(d)
        model = build(kind)
        model.save_pretrained(d)
        cls = type(model)
        want = text_logits(cls, d)
        flatten_config(d)
        assert np.array_equal(text_logits(cls, d), want), "the flat config.json reads differently in transformers"
        want.astype("<f8").tofile(os.path.join(d, "text_logits.f64"))
        golden = {"text_tokens": TEXT_TOKENS, "text_logits_rows": want.shape[0], "logits_cols": want.shape[1],
                  "transformers": __import__("transformers").__version__, "torch": torch.__version__}
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(dict(PREPROCESSOR, processor_class="Qwen2_5_VLProcessor" if kind == "qwen2_5_vl"
                           else "Qwen2VLProcessor"), f, indent=2)
        image_goldens(d, golden, kind)
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        print(kind, "text logit range", float(want.max() - want.min()))


if __name__ == "__main__":
    main()
