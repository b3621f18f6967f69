#!/usr/bin/env python3
"""Goldens for `fp4lm generate --image` end to end (tests/cli/generate_image_cli_test.cpp).

A tiny random Qwen3_5ForConditionalGeneration (dense; and the MoE) with the vision tower of
scripts/make_qwen_vl_tower_goldens.py, but a 264-token vocabulary that a tiny byte-level BPE
tokenizer (256 byte tokens, no merges, Qwen's special tokens at 256..262) fills, a Qwen-VL-style
chat template (an image part -> <|vision_start|><|image_pad|><|vision_end|>) and an explicit
interleaved mrope_section, so that the image's 3-D positions reach the text. For one PNG +
text, writes transformers' Qwen3VLProcessor prompt ids (chat template applied), the float64
logits of the whole model with pixel_values at every prompt position, and its greedy tokens.

  /work/venvs/img43/bin/python scripts/make_qwen_vl_e2e_goldens.py   (transformers 5.24.0, torch, Pillow)
writes tests/cli/fixtures/qwen3_5_vl_e2e/{dense,moe}/.
"""
import json
import os
import shutil

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (PreTrainedTokenizerFast, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration, Qwen3VLProcessor)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "cli", "fixtures", "qwen3_5_vl_e2e")
IMAGE = os.path.join(ROOT, "tests", "vision", "data", "rgb_56x84.png")
TEXT_PROMPT = "What is in the picture?"
GREEDY_TOKENS = 6

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
VOCAB = 264
IDS = {s: 256 + i for i, s in enumerate(SPECIALS)}

# Written for this fixture (the shape of Qwen-VL templates): a user message may be a string or
# a list of parts; an image part becomes the vision placeholder.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part.type == 'text' -%}{{- part.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")

VISION = dict(depth=2, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=48, num_heads=2,
              in_channels=3, patch_size=8, spatial_merge_size=2, temporal_patch_size=2,
              num_position_embeddings=16, out_hidden_size=40)
TEXT = dict(vocab_size=VOCAB, hidden_size=40, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
            linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"],
            max_position_embeddings=256, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1], "mrope_interleaved": True},
            eos_token_id=IDS["<|im_end|>"])
TOKEN_IDS = dict(image_token_id=IDS["<|image_pad|>"], video_token_id=IDS["<|video_pad|>"],
                 vision_start_token_id=IDS["<|vision_start|>"], vision_end_token_id=IDS["<|vision_end|>"])
PREPROCESSOR = {
    "size": {"longest_edge": 16384, "shortest_edge": 1024},
    "patch_size": 8, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast",
}


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
    assert set(out) == set(pre_tokenizers.ByteLevel.alphabet())
    return out


def write_tokenizer(d):
    vocab = {ch: i for i, ch in enumerate(byte_symbols())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    assert [tok.token_to_id(s) for s in SPECIALS] == [IDS[s] for s in SPECIALS]
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "bos_token": None, "add_bos_token": False, "model_max_length": 256}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)


def build(kind):
    torch.manual_seed(143 if kind == "dense" else 144)
    if kind == "dense":
        cfg = Qwen3_5Config(text_config=dict(TEXT, intermediate_size=48), vision_config=VISION, **TOKEN_IDS)
        model = Qwen3_5ForConditionalGeneration(cfg)
    else:
        cfg = Qwen3_5MoeConfig(text_config=dict(TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                                shared_expert_intermediate_size=24),
                               vision_config=VISION, **TOKEN_IDS)
        model = Qwen3_5MoeForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model.to(torch.bfloat16)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    image = Image.open(IMAGE).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT_PROMPT}]}]
    for kind in ("dense", "moe"):
        d = os.path.join(OUT, kind)
        os.makedirs(d)
        write_tokenizer(d)
        model = build(kind)
        model.save_pretrained(d)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(PREPROCESSOR, f, indent=2)
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), eos_token="<|im_end|>",
                                            pad_token="<|endoftext|>")
        ip = Qwen2VLImageProcessorPil(size=PREPROCESSOR["size"], patch_size=8, temporal_patch_size=2, merge_size=2,
                                      image_mean=[0.5] * 3, image_std=[0.5] * 3)
        processor = Qwen3VLProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(),
                                     chat_template=CHAT_TEMPLATE)
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        batch = processor(text=[text], images=[image], return_tensors="pt")
        ids = batch["input_ids"]
        # What fp4lm reads: the saved bf16 weights, run in float64.
        cls = type(model)
        m64 = cls.from_pretrained(d, dtype=torch.float64).eval()
        if kind == "moe":
            m64.set_experts_implementation("eager")  # grouped_mm has no float64
        with torch.no_grad():
            out = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=batch["pixel_values"].to(torch.float64),
                      image_grid_thw=batch["image_grid_thw"])
            gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"],
                               mm_token_type_ids=batch["mm_token_type_ids"],
                               pixel_values=batch["pixel_values"].to(torch.float64),
                               image_grid_thw=batch["image_grid_thw"], max_new_tokens=GREEDY_TOKENS,
                               min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
            again = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"],
                        pixel_values=batch["pixel_values"].to(torch.float64), image_grid_thw=batch["image_grid_thw"])
        assert torch.equal(out.logits, again.logits), "the float64 forward is not deterministic"
        logits = out.logits[0].numpy()
        logits.astype("<f8").tofile(os.path.join(d, "expected_logits.f64"))
        golden = {"text": TEXT_PROMPT, "image": "tests/vision/data/rgb_56x84.png", "rendered": text,
                  "prompt_ids": ids[0].tolist(), "image_grid_thw": batch["image_grid_thw"][0].tolist(),
                  "logits_rows": logits.shape[0], "logits_cols": logits.shape[1],
                  "greedy_ids": gen[0, ids.shape[1]:].tolist()}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        print(kind, "prompt", ids.shape[1], "grid", golden["image_grid_thw"], "greedy", golden["greedy_ids"],
              "logit range", float(logits.max() - logits.min()))


if __name__ == "__main__":
    main()
