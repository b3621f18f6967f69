#!/usr/bin/env python3
"""Goldens for Gemma 3 image input (issue 43): the SigLIP tower + projector
(tests/model/gemma3_vision_tower_test.cpp) and the whole model with an image
(tests/engine/gemma3_vl_image_logits_test.cpp, tests/cli/generate_image_cli_test.cpp).

A tiny random Gemma3ForConditionalGeneration saved by transformers (bf16): SigLIP with 2 layers,
hidden 32, image 32 x 32 in 4 x 4 patches (an 8 x 8 grid), mm_tokens_per_image 16 (2 x 2 average
pooling); a Gemma 3 text model with a sliding layer (window 8, shorter than an image's 16 soft
tokens) and a full one; a 264-token byte-level tokenizer (no merges) whose ids 256..263 are
Gemma's special tokens, and a Gemma-style chat template written for the fixture.

Writes tests/model/fixtures/gemma3_vl/:
  the checkpoint (config.json, model.safetensors, tokenizer files, preprocessor_config.json),
  tower_<case>.f64: float64 get_image_features(pixel_values).pooler_output per tower case,
  logits_<case>.f64: float64 logits at every prompt position (input_ids, pixel_values,
    token_type_ids as Gemma3Processor returns them), and golden.json: prompt ids, greedy tokens.

  /work/venvs/torch/bin/python scripts/make_gemma3_vl_goldens.py   (transformers 5.24.0, torch, Pillow)
"""
import json
import os
import shutil

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor, PreTrainedTokenizerFast
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "gemma3_vl")
DATA = os.path.join(ROOT, "tests", "vision", "data")
TEXT_PROMPT = "What is in the picture?"
GREEDY_TOKENS = 6

SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
            "<image_soft_token>"]
IDS = {s: 256 + i for i, s in enumerate(SPECIALS)}
VOCAB = 264

# The shape of Gemma 3's template: bos, turns, an image part -> <start_of_image>, text trimmed.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content | trim -}}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}{{- '<start_of_image>' -}}"
    "{%- elif part.type == 'text' -%}{{- part.text | trim -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}")

VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, num_channels=3,
              image_size=32, patch_size=4, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
              vision_use_head=False)
TEXT = dict(vocab_size=VOCAB, hidden_size=40, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
            layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
            final_logit_softcapping=None, attn_logit_softcapping=None, pad_token_id=IDS["<pad>"],
            bos_token_id=IDS["<bos>"], eos_token_id=IDS["<end_of_turn>"])
PREPROCESSOR = {
    "size": {"height": 32, "width": 32}, "resample": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "rescale_factor": 1 / 255, "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": None,
    "do_pan_and_scan": None, "pan_and_scan_min_crop_size": None, "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_ratio_to_activate": None, "image_seq_length": 16,
    "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
}
PAN_AND_SCAN = dict(do_pan_and_scan=True, pan_and_scan_min_crop_size=8, pan_and_scan_max_num_crops=4,
                    pan_and_scan_min_ratio_to_activate=1.2)


def byte_symbols():
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
    vocab = {ch: i for i, ch in enumerate(byte_symbols())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    assert [tok.token_to_id(s) for s in SPECIALS] == [IDS[s] for s in SPECIALS]
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
           "pad_token": "<pad>", "add_bos_token": False, "model_max_length": 256,
           "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                    "image_token": "<image_soft_token>"}}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)


def tokenizer(d):
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>",
                                   extra_special_tokens={"boi_token": "<start_of_image>",
                                                         "eoi_token": "<end_of_image>",
                                                         "image_token": "<image_soft_token>"})


def build():
    torch.manual_seed(343)
    cfg = Gemma3Config(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=16,
                       boi_token_index=IDS["<start_of_image>"], eoi_token_index=IDS["<end_of_image>"],
                       image_token_index=IDS["<image_soft_token>"], tie_word_embeddings=True)
    model = Gemma3ForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "position_embedding" in name:
                p.add_(torch.randn_like(p) * 0.1)
            if "mm_input_projection_weight" in name:  # zeros at init
                p.copy_(torch.randn_like(p) * 0.2)
    return model.to(torch.bfloat16)


def image(name):
    return Image.open(os.path.join(DATA, name)).convert("RGB")


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    write_tokenizer(OUT)
    build().save_pretrained(OUT)
    with open(os.path.join(OUT, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    m64 = Gemma3ForConditionalGeneration.from_pretrained(OUT, dtype=torch.float64).eval()
    golden = {"tower": [], "e2e": []}

    # The tower: one image without crops, one with pan-and-scan crops (image + crops in one batch).
    ip = Gemma3ImageProcessorPil(size={"height": 32, "width": 32}, resample=2, image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3)
    for case, name, kw in (("plain", "rgb_56x84.png", {}), ("pas", "wide_97x31.png", PAN_AND_SCAN)):
        px = ip(images=[image(name)], return_tensors="pt", **kw)
        with torch.no_grad():
            feats = m64.get_image_features(px["pixel_values"].to(torch.float64)).pooler_output
        feats = feats.numpy()
        feats.astype("<f8").tofile(os.path.join(OUT, f"tower_{case}.f64"))
        golden["tower"].append({"case": case, "image": f"tests/vision/data/{name}", "processor": kw,
                                "num_crops": int(torch.as_tensor(px["num_crops"]).reshape(-1)[0]),
                                "images": int(feats.shape[0]), "rows": int(feats.shape[0] * feats.shape[1]),
                                "cols": int(feats.shape[2]), "file": f"tower_{case}.f64"})
        print("tower", case, feats.shape)

    # The whole model: the checkpoint's processor (pan-and-scan off), and the same with crops.
    tok = tokenizer(OUT)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT_PROMPT}]}]
    for case, name, kw in (("plain", "rgb_56x84.png", {}), ("pas", "wide_97x31.png", PAN_AND_SCAN)):
        proc_ip = Gemma3ImageProcessorPil(size={"height": 32, "width": 32}, resample=2, image_mean=[0.5] * 3,
                                          image_std=[0.5] * 3, **kw)
        processor = Gemma3Processor(image_processor=proc_ip, tokenizer=tok, chat_template=CHAT_TEMPLATE,
                                    image_seq_length=16)
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        batch = processor(text=[text], images=[image(name)], return_tensors="pt", **kw)
        ids = batch["input_ids"]
        pv = batch["pixel_values"].to(torch.float64)
        with torch.no_grad():
            out = m64(input_ids=ids, pixel_values=pv, token_type_ids=batch["token_type_ids"])
            again = m64(input_ids=ids, pixel_values=pv, token_type_ids=batch["token_type_ids"])
            causal = m64(input_ids=ids, pixel_values=pv)  # without the bidirectional image blocks
            gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"], pixel_values=pv,
                               token_type_ids=batch["token_type_ids"], max_new_tokens=GREEDY_TOKENS,
                               min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None,
                               pad_token_id=IDS["<pad>"])
        assert torch.equal(out.logits, again.logits), "the float64 forward is not deterministic"
        logits = out.logits[0].numpy()
        logits.astype("<f8").tofile(os.path.join(OUT, f"logits_{case}.f64"))
        rng = float(logits.max() - logits.min())
        causal_err = float(np.abs(causal.logits[0].numpy() - logits).max()) / rng
        golden["e2e"].append({"case": case, "image": f"tests/vision/data/{name}", "processor": kw, "text": TEXT_PROMPT,
                              "rendered": text, "prompt_ids": ids[0].tolist(),
                              "token_type_ids": batch["token_type_ids"][0].tolist(),
                              "logits_rows": logits.shape[0], "logits_cols": logits.shape[1],
                              "file": f"logits_{case}.f64", "greedy_ids": gen[0, ids.shape[1]:].tolist(),
                              "causal_only_error": causal_err})
        print("e2e", case, "prompt", ids.shape[1], "greedy", golden["e2e"][-1]["greedy_ids"], "range", rng,
              "causal-only error / range", causal_err)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)


if __name__ == "__main__":
    main()
