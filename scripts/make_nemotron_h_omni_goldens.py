#!/usr/bin/env python3
"""Goldens for Nemotron-H Omni / VL image input (issue 43): tests/vision/nemotron_preprocess_test.cpp
and tests/model/nemotron_h_omni_test.cpp.

1. Preprocessing: transformers 5.24's NemotronH_Omni_Reasoning_V3ImageProcessor (the torchvision
   backend: the image as float32, torch's antialiased bicubic resize to a patch grid chosen by
   get_patch_grid_size, the rescale fused into the normalization, patches flattened channel-major)
   on synthetic PNGs of tests/vision/data, for three processor configs. Written as
   tests/vision/data/nemotron__<config>__<file>.tv.f32 (float32 little-endian, patches x 3*p*p)
   and listed in manifest_nemotron.json with image_grid_hw.
2. A tiny random NemotronH_Omni_Reasoning_V3 (seeded) built and saved (bf16) by transformers into
   tests/model/fixtures/nemotron_h_omni/: a 4-layer Nemotron-H language model (Mamba-2, attention,
   relu2 MLP, Mamba-2), a 2-layer RADIO tower (patch 4, 2 cls + 2 register tokens, a 8 x 8 position
   table interpolated to the image's grid), the RMSNorm + relu2 projector after a 2x2 pixel
   shuffle. transformers saves the published layout (vision_model.radio_model.*, mlp1.*). A
   byte-level BPE tokenizer with <image>, <img>, </img> as special tokens, a chat template whose
   image part is <image>, and the processor's prompt for one PNG + text; writes the float64
   logits at every prompt position (expected_logits.f64), greedy tokens and the prompt ids
   (golden.json).
3. The same model on one message with two images (golden_two_images.json, expected_logits_two_images.f64);
   `--two-images` writes only these, from the saved fixture.
4. The remote-code checkpoints' preprocessing as vLLM's nano_nemotron_vl.py runs it (tiles of
   force_image_size with a thumbnail; dynamic resolution with torch's uint8 resize):
   tests/vision/data/nemotron_remote.json and nemotron_remote_*.f32 (`--remote` writes only these).

transformers' processor needs torchvision, which /work/venvs/torch lacks: run with torchvision
0.24.1 (torch 2.9.1's) on the path, e.g.
  pip install --no-deps torchvision==0.24.1 --target /work/tv_site
  PYTHONPATH=/work/tv_site /work/venvs/torch/bin/python scripts/make_nemotron_h_omni_goldens.py
"""
import json
import os
import shutil

import numpy as np
import torch
import torchvision
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
import transformers
from transformers import (NemotronH_Omni_Reasoning_V3, NemotronH_Omni_Reasoning_V3_Config,
                          NemotronH_Omni_Reasoning_V3ImageProcessor, NemotronH_Omni_Reasoning_V3Processor,
                          PreTrainedTokenizerFast)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "tests", "vision", "data")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "nemotron_h_omni")
IMAGE = "rgb_150x100.png"
TEXT_PROMPT = "What is in the picture?"
GREEDY_TOKENS = 6

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<img>", "</img>", "<video>", "<so_embedding>"]
VOCAB = 264
IDS = {s: 256 + i for i, s in enumerate(SPECIALS)}

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}{{- '<image>\\n' -}}"
    "{%- elif part.type == 'text' -%}{{- part.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")

TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4,
            layers_block_type=["mamba", "attention", "mlp", "mamba"], num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, intermediate_size=48, mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=8, n_groups=2,
            conv_kernel=4, chunk_size=16, tie_word_embeddings=False, eos_token_id=IDS["<|im_end|>"],
            bos_token_id=None, pad_token_id=IDS["<|endoftext|>"])
VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=4, max_img_size=32,
              num_cls_tokens=2, num_registers=2, video_temporal_patch_size=2)

# The model's processor config (the keys NVIDIA's preprocessor_config.json uses, norm_mean /
# norm_std read as image_mean / image_std) and two more for the preprocessing goldens: a budget
# that upscales small images (min_num_patches), and one with a small max_model_len.
PREPROCESSORS = {
    "tiny": {"image_processor_type": "NemotronH_Omni_Reasoning_V3ImageProcessor", "patch_size": 4,
             "downsample_ratio": 0.5, "min_num_patches": 16, "max_num_patches": 64, "max_model_len": 16384,
             "norm_mean": [0.48145466, 0.4578275, 0.40821073], "norm_std": [0.26862954, 0.26130258, 0.27577711]},
    "upscale": {"patch_size": 8, "downsample_ratio": 0.5, "min_num_patches": 96, "max_num_patches": 256,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
    "default16": {"patch_size": 16, "downsample_ratio": 0.5, "min_num_patches": 4, "max_num_patches": 13312,
                  "max_model_len": 8},
}
PREPROCESS_FILES = ["rgb_150x100.png", "rgb_56x84.png", "grey_40x30.png", "wide_97x31.png", "tall_23x71.png",
                    "palette_45x23.png"]  # strip_300x2.png: the processor divides by zero (a 0-patch side)


def byte_symbols():
    """Byte-level BPE's printable symbol for each byte 0..255, in byte order (id = byte)."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def write_tokenizer(d):
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(byte_symbols())}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    assert [tok.token_to_id(s) for s in SPECIALS] == [IDS[s] for s in SPECIALS]
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "bos_token": None, "add_bos_token": False, "model_max_length": 512}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)


def image_processor(cfg):
    kw = {k: v for k, v in cfg.items() if k != "image_processor_type"}
    return NemotronH_Omni_Reasoning_V3ImageProcessor(**kw)


def preprocess_goldens():
    cases = []
    for cname, cfg in PREPROCESSORS.items():
        with open(os.path.join(DATA, f"preprocessor_nemotron_{cname}.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        ip = image_processor(cfg)
        for file in PREPROCESS_FILES:
            image = Image.open(os.path.join(DATA, file)).convert("RGB")
            out = ip(images=[image], return_tensors="pt")
            pv = out["pixel_values"].numpy().astype("<f4")
            name = f"nemotron__{cname}__{file}.tv.f32"
            pv.tofile(os.path.join(DATA, name))
            cases.append({"config": f"preprocessor_nemotron_{cname}.json", "file": file, "pixel_values": name,
                          "shape": list(pv.shape), "image_grid_hw": out["image_grid_hw"][0].tolist()})
            print(cname, file, image.size, "->", cases[-1]["image_grid_hw"])
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__,
                "torchvision": torchvision.__version__, "preprocess": cases}
    with open(os.path.join(DATA, "manifest_nemotron.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def build():
    torch.manual_seed(4343)
    cfg = NemotronH_Omni_Reasoning_V3_Config(text_config=TEXT, vision_config=VISION, projector_hidden_size=48,
                                             vision_hidden_size=32, image_token_id=IDS["<image>"],
                                             video_token_id=IDS["<video>"])
    model = NemotronH_Omni_Reasoning_V3(cfg)
    # Weights large enough for the image to move the logits; norms, biases and layer scales not
    # all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "lambda1" in name:
                p.add_(torch.randn_like(p) * 0.1)
            elif "language_model" in name:
                p.copy_(torch.randn_like(p) * 0.25)
            elif "position_embedding" in name or "cls_register" in name:
                p.copy_(torch.randn_like(p) * 0.5)
            elif p.dim() == 2:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
    return model.to(torch.bfloat16)


# The image path needs no video processor or feature extractor; ProcessorMixin's class check of
# the absent ones would refuse None.
NemotronH_Omni_Reasoning_V3Processor.check_argument_for_proper_class = lambda self, name, arg: None


def model_goldens():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    write_tokenizer(OUT)
    model = build()
    model.save_pretrained(OUT)
    with open(os.path.join(OUT, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSORS["tiny"], f, indent=2)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(OUT, "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    processor = NemotronH_Omni_Reasoning_V3Processor(image_processor=image_processor(PREPROCESSORS["tiny"]),
                                                     tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT_PROMPT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    image = Image.open(os.path.join(DATA, IMAGE)).convert("RGB")
    batch = processor(text=[text], images=[image], return_tensors="pt")
    ids = batch["input_ids"]
    m64 = NemotronH_Omni_Reasoning_V3.from_pretrained(OUT, dtype=torch.float64).eval()
    pix = batch["pixel_values"].to(torch.float64)
    grid = batch["image_grid_hw"]
    with torch.no_grad():
        out = m64(input_ids=ids, pixel_values=pix, image_grid_hw=grid)
        blank = m64(input_ids=ids, pixel_values=torch.zeros_like(pix), image_grid_hw=grid).logits[0].numpy()
        features = m64.get_image_features(pix, grid).pooler_output[0].numpy()
        gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"], pixel_values=pix,
                           image_grid_hw=grid, max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS,
                           do_sample=False, eos_token_id=None, pad_token_id=0)
    logits = out.logits[0].numpy()
    logits.astype("<f8").tofile(os.path.join(OUT, "expected_logits.f64"))
    features.astype("<f8").tofile(os.path.join(OUT, "image_features.f64"))
    rng = float(logits.max() - logits.min())
    ids_list = ids[0].tolist()
    last_image = max(i for i, t in enumerate(ids_list) if t == IDS["<image>"])
    effect = float(abs(blank[last_image + 1:] - logits[last_image + 1:]).max()) / rng
    assert effect > 1e-2, f"the image barely changes the logits ({effect})"
    golden = {"text": TEXT_PROMPT, "image": f"tests/vision/data/{IMAGE}", "rendered": text, "prompt_ids": ids_list,
              "image_grid_hw": grid[0].tolist(), "image_tokens": int((ids == IDS["<image>"]).sum()),
              "image_features_shape": list(features.shape), "logits_rows": logits.shape[0],
              "logits_cols": logits.shape[1], "greedy_ids": gen[0, ids.shape[1]:].tolist(),
              "blank_image_rel_diff": effect, "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print("prompt", ids.shape[1], "grid", golden["image_grid_hw"], "greedy", golden["greedy_ids"], "logit range", rng,
          "blank image moves the logits by", effect)


TWO_IMAGES = ["rgb_150x100.png", "wide_97x31.png"]
TWO_TEXT = "Compare the two pictures."


def two_image_goldens():
    """One user message with two images (tests/server_http/test_vision_nemotron.py), from the saved
    fixture: the processor's prompt ids (both images in one processor call, as a chat request's
    images), the float64 logits at every prompt position (expected_logits_two_images.f64) and the
    greedy tokens (golden_two_images.json). Leaves the other fixture files as they are."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(OUT, "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    processor = NemotronH_Omni_Reasoning_V3Processor(image_processor=image_processor(PREPROCESSORS["tiny"]),
                                                     tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": TWO_TEXT}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    images = [Image.open(os.path.join(DATA, f)).convert("RGB") for f in TWO_IMAGES]
    batch = processor(text=[text], images=images, return_tensors="pt")
    ids = batch["input_ids"]
    m64 = NemotronH_Omni_Reasoning_V3.from_pretrained(OUT, dtype=torch.float64).eval()
    pix, grid = batch["pixel_values"].to(torch.float64), batch["image_grid_hw"]
    with torch.no_grad():
        logits = m64(input_ids=ids, pixel_values=pix, image_grid_hw=grid).logits[0].numpy()
        gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"], pixel_values=pix,
                           image_grid_hw=grid, max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS,
                           do_sample=False, eos_token_id=None, pad_token_id=0)
    logits.astype("<f8").tofile(os.path.join(OUT, "expected_logits_two_images.f64"))
    golden = {"text": TWO_TEXT, "images": [f"tests/vision/data/{f}" for f in TWO_IMAGES], "rendered": text,
              "prompt_ids": ids[0].tolist(), "image_grid_hw": grid.tolist(),
              "file": "expected_logits_two_images.f64", "logits_rows": logits.shape[0],
              "logits_cols": logits.shape[1], "greedy_ids": gen[0, ids.shape[1]:].tolist(),
              "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "golden_two_images.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print("two images: prompt", ids.shape[1], "grids", golden["image_grid_hw"], "greedy", golden["greedy_ids"])


def internvl_grid(width, height, tile, max_tiles):
    """The remote-code checkpoints' tile grid (vLLM's nano_nemotron_vl.py dynamic_preprocess, InternVL's
    rule, restated): candidates (cols, rows) with cols * rows <= max_tiles in vLLM's order (the set
    of get_internvl_target_ratios sorted by cols * rows), the closest cols / rows to width / height,
    on an equal distance the later candidate when the image's area exceeds half the tiles'."""
    cands = sorted({(i, j) for n in range(1, max_tiles + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                    if 1 <= i * j <= max_tiles}, key=lambda r: r[0] * r[1])
    best, best_d = (1, 1), float("inf")
    for c, r in cands:
        d = abs(width / height - c / r)
        if d < best_d:
            best, best_d = (c, r), d
        elif d == best_d and width * height > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best


def uint8_resize(chw_u8, h, w):
    """vLLM's _bicubic_from_ndarray: F.interpolate on the uint8 tensor (antialiased bicubic), / 255."""
    out = torch.nn.functional.interpolate(chw_u8.unsqueeze(0), size=(h, w), mode="bicubic", align_corners=False,
                                          antialias=True)
    assert out.dtype == torch.uint8
    return out[0] / 255.0


REMOTE_NORM = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
REMOTE_TILE, REMOTE_PATCH, REMOTE_MAX_TILES = 32, 8, 6
REMOTE_FILES = ["rgb_150x100.png", "wide_97x31.png", "tall_23x71.png", "rgb_56x84.png"]


def patches_of(chw, p):
    c, h, w = chw.shape
    return chw.reshape(c, h // p, p, w // p, p).permute(1, 3, 0, 2, 4).reshape(-1, c * p * p)


def remote_goldens():
    """The remote-code preprocessing (tests/vision/nemotron_tiling_test.cpp): the tile grid of many
    image sizes (nemotron_tiling.json), and for a few PNGs the tiles' patches (tile 32, patch 8, at
    most 6 tiles + the thumbnail) and the dynamic-resolution patches with vLLM's uint8 resize
    (nemotron_remote__<file>.f32), each normalized as vLLM's input_conditioner."""
    sizes = []
    for w in [1, 2, 3, 5, 7, 10, 16, 31, 32, 33, 47, 64, 100, 128, 150, 200, 255, 256, 300, 448, 512, 640, 768, 800,
              1000, 1024, 1080, 1280, 1536, 1920, 2048, 3000, 4096]:
        for h in [1, 3, 9, 16, 32, 50, 64, 97, 128, 200, 256, 333, 480, 512, 600, 720, 1024, 1080, 1440, 2000, 4000]:
            sizes.append((w, h))
    grids = []
    for tile, max_tiles in [(512, 12), (448, 6), (32, 6)]:
        for w, h in sizes:
            grids.append([w, h, tile, max_tiles, *internvl_grid(w, h, tile, max_tiles)])
    mean = torch.tensor(REMOTE_NORM[0], dtype=torch.float32).reshape(3, 1, 1)
    std = torch.tensor(REMOTE_NORM[1], dtype=torch.float32).reshape(3, 1, 1)
    cases = []
    for file in REMOTE_FILES:
        img = np.asarray(Image.open(os.path.join(DATA, file)).convert("RGB"), dtype=np.uint8)
        chw = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
        h, w = img.shape[:2]
        c, r = internvl_grid(w, h, REMOTE_TILE, REMOTE_MAX_TILES)
        big = uint8_resize(chw, r * REMOTE_TILE, c * REMOTE_TILE)
        tiles = [big[:, y * REMOTE_TILE:(y + 1) * REMOTE_TILE, x * REMOTE_TILE:(x + 1) * REMOTE_TILE]
                 for y in range(r) for x in range(c)]
        if len(tiles) > 1:
            tiles.append(uint8_resize(chw, REMOTE_TILE, REMOTE_TILE))
        pv = torch.cat([patches_of((t - mean) / std, REMOTE_PATCH) for t in tiles]).numpy().astype("<f4")
        name = f"nemotron_remote_tiles__{file}.f32"
        pv.tofile(os.path.join(DATA, name))
        cases.append({"file": file, "kind": "tiles", "pixel_values": name, "shape": list(pv.shape),
                      "grid": [c, r], "tiles": len(tiles)})
        # Dynamic resolution (the Omni checkpoint): the processor's grid (patch 8, budget 64), vLLM's resize.
        ip = image_processor({"patch_size": REMOTE_PATCH, "downsample_ratio": 0.5, "min_num_patches": 16,
                              "max_num_patches": 64, "max_model_len": 16384})
        gh, gw = ip(images=[Image.fromarray(img)], return_tensors="pt")["image_grid_hw"][0].tolist()
        dyn = (uint8_resize(chw, gh * REMOTE_PATCH, gw * REMOTE_PATCH) - mean) / std
        pv = patches_of(dyn, REMOTE_PATCH).numpy().astype("<f4")
        name = f"nemotron_remote_dynamic__{file}.f32"
        pv.tofile(os.path.join(DATA, name))
        cases.append({"file": file, "kind": "dynamic", "pixel_values": name, "shape": list(pv.shape),
                      "grid_hw": [gh, gw]})
    with open(os.path.join(DATA, "nemotron_remote.json"), "w") as f:
        json.dump({"torch": torch.__version__, "tile": REMOTE_TILE, "patch": REMOTE_PATCH,
                   "max_num_tiles": REMOTE_MAX_TILES, "norm_mean": REMOTE_NORM[0], "norm_std": REMOTE_NORM[1],
                   "cases": cases, "grids": grids}, f)
    print("remote:", len(grids), "grids;", [(k["file"], k["kind"], k["shape"]) for k in cases])


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--remote"]:  # only the remote-code preprocessing goldens
        remote_goldens()
    elif sys.argv[1:] == ["--two-images"]:  # only the two-image golden, from the saved fixture
        two_image_goldens()
    else:
        preprocess_goldens()
        model_goldens()
        two_image_goldens()
        remote_goldens()
