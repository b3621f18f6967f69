#!/usr/bin/env python3
"""Goldens for the Qwen3.5 / Qwen3.6 vision tower (tests/model/qwen3_5_vision_tower_test.cpp).

Builds tiny random Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration models
with transformers 5.24 (a 2-layer text model and a 2-block vision tower: hidden 32, 2 heads,
patch 8, spatial_merge 2, temporal_patch 2, a 4x4 learned position grid so that every image's
grid is interpolated), saves each in bf16 with a Qwen3.5-style preprocessor_config.json, and
writes, for two RGB images of different non-square sizes, Qwen2VLImageProcessorPil's pixel_values
fed to get_image_features of the same weights run in float64.

  /work/venvs/img43/bin/python scripts/make_qwen_vl_tower_goldens.py   (transformers 5.24.0, torch, Pillow)
writes tests/model/fixtures/qwen3_5_vl_tower/{dense,moe}/ and images/ + manifest.json.
"""
import json
import os
import shutil

import numpy as np
import torch
from transformers import (Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3_5MoeConfig,
                          Qwen3_5MoeForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "fixtures",
                   "qwen3_5_vl_tower")

VISION = dict(depth=2, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=48, num_heads=2,
              in_channels=3, patch_size=8, spatial_merge_size=2, temporal_patch_size=2,
              num_position_embeddings=16, out_hidden_size=40)
TEXT = dict(vocab_size=64, hidden_size=40, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
            linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"],
            max_position_embeddings=256, tie_word_embeddings=True)
PREPROCESSOR = {
    "size": {"longest_edge": 16384, "shortest_edge": 1024},
    "patch_size": 8, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast",
}
IMAGES = [(45, 83), (70, 30)]  # (height, width): resized to 48x80 (6x10 patches) and 64x32 (8x4)


def build(kind):
    torch.manual_seed(43 if kind == "dense" else 44)
    if kind == "dense":
        cfg = Qwen3_5Config(text_config=dict(TEXT, intermediate_size=48), vision_config=VISION)
        model = Qwen3_5ForConditionalGeneration(cfg)
    else:
        cfg = Qwen3_5MoeConfig(text_config=dict(TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                                shared_expert_intermediate_size=24),
                               vision_config=VISION)
        model = Qwen3_5MoeForConditionalGeneration(cfg)
    # Non-trivial norms and biases (initialized to 1 / 0), so that a missed one shows.
    with torch.no_grad():
        for name, p in model.model.visual.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model.to(torch.bfloat16)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(os.path.join(OUT, "images"))
    rng = np.random.default_rng(43)
    proc = Qwen2VLImageProcessorPil(size=PREPROCESSOR["size"], patch_size=8, temporal_patch_size=2, merge_size=2,
                                    image_mean=[0.5] * 3, image_std=[0.5] * 3)
    images, manifest = [], {"images": [], "archs": {}}
    for i, (h, w) in enumerate(IMAGES):
        # A smooth gradient plus noise: resizing then has something to do.
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([yy * 255 / h, xx * 255 / w, (yy + xx) * 127 / (h + w)], -1)
        rgb = np.clip(base + rng.normal(0, 30, base.shape), 0, 255).astype(np.uint8)
        name = f"image{i}_{h}x{w}.rgb"
        rgb.tofile(os.path.join(OUT, "images", name))
        images.append(Image.fromarray(rgb, "RGB"))
        manifest["images"].append({"file": "images/" + name, "height": h, "width": w})
    batch = proc(images=images, return_tensors="pt")
    pixel_values, grid = batch["pixel_values"], batch["image_grid_thw"]
    for kind in ("dense", "moe"):
        model = build(kind)
        d = os.path.join(OUT, kind)
        model.save_pretrained(d)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(PREPROCESSOR, f, indent=2)
        m64 = model.to(torch.float64).eval()
        with torch.no_grad():
            feats = m64.model.get_image_features(pixel_values.to(torch.float64), image_grid_thw=grid).pooler_output
        entry = []
        for i, f in enumerate(feats):
            fname = f"expected_image{i}.f64"
            f.numpy().astype("<f8").tofile(os.path.join(d, fname))
            entry.append({"file": fname, "rows": f.shape[0], "cols": f.shape[1], "grid": grid[i].tolist()})
        manifest["archs"][kind] = entry
        print(kind, [tuple(f.shape) for f in feats], "max|x|", max(float(f.abs().max()) for f in feats))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


if __name__ == "__main__":
    main()
