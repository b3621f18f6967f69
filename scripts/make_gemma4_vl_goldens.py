#!/usr/bin/env python3
"""Goldens for Gemma 4 image input (issue 43): the vision tower + multimodal embedder
(tests/model/gemma4_vision_tower_test.cpp) and the whole model with an image
(tests/engine/gemma4_vl_image_logits_test.cpp).

A tiny random Gemma4ForConditionalGeneration saved by transformers 5.24 (bf16): a vision encoder
with 2 layers, hidden 32, 2 heads of 16, patch 4, pooling 3, a 64-entry position table, clipped
linears with finite (random) clip values and `standardize` on, so every piece of the tower is
exercised; a Gemma 4 text model with a sliding layer (window 8, shorter than an image's soft
tokens) and a full one, use_bidirectional_attention "vision"; a 264-token byte-level tokenizer
(no merges) whose ids 256..263 are the special tokens, a Gemma-4-style chat template written for
the fixture; max_soft_tokens 70.

And a second model in the form of the small published ones (E2B / E4B), tests/model/fixtures/gemma4_vl_ple:
per-layer input embeddings (hidden_size_per_layer_input 8; transformers looks the image tokens up as
pad_token_id there), no use_bidirectional_attention (images causal), standardize off; its e2e
goldens only.

Writes tests/model/fixtures/gemma4_vl/:
  the checkpoint (config.json, model.safetensors, tokenizer files, preprocessor_config.json),
  pixels_<case>.f32 / positions_<case>.i64: Gemma4ImageProcessorPil's pixel_values and
    image_position_ids (so the tower test runs on exactly the processor's input),
  tower_<case>.f64: float64 get_image_features(...).pooler_output per case,
  logits_<case>.f64: float64 logits at every prompt position (input_ids, pixel_values,
    image_position_ids, mm_token_type_ids as Gemma4Processor returns them), and golden.json.

  /work/venvs/torch/bin/python scripts/make_gemma4_vl_goldens.py   (transformers 5.24.0, torch, Pillow)
"""
import json
import os
import shutil

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import Gemma4Config, Gemma4ForConditionalGeneration, Gemma4Processor, PreTrainedTokenizerFast
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "model", "fixtures", "gemma4_vl")
DATA = os.path.join(ROOT, "tests", "vision", "data")
TEXT_PROMPT = "What is in the picture?"
GREEDY_TOKENS = 6

SPECIALS = ["<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>"]
IDS = {s: 256 + i for i, s in enumerate(SPECIALS)}
VOCAB = 264

# The shape of Gemma 4's template: bos, turns, an image part -> <|image|>, text trimmed.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content | trim -}}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}{{- '<|image|>' -}}"
    "{%- elif part.type == 'text' -%}{{- part.text | trim -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}")

VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=2, head_dim=16, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
              pooling_kernel_size=3, patch_size=4, position_embedding_size=64, use_clipped_linears=True,
              standardize=True, rope_parameters={"rope_type": "default", "rope_theta": 100.0})
TEXT = dict(vocab_size=VOCAB, hidden_size=40, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, global_head_dim=16, sliding_window=8,
            layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
            final_logit_softcapping=30.0, hidden_size_per_layer_input=0, vocab_size_per_layer_input=VOCAB,
            use_bidirectional_attention="vision", pad_token_id=IDS["<pad>"], bos_token_id=IDS["<bos>"],
            eos_token_id=IDS["<turn|>"])
PREPROCESSOR = {
    "do_convert_rgb": True, "do_normalize": False, "do_rescale": True, "do_resize": True,
    "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0], "rescale_factor": 1 / 255,
    "max_soft_tokens": 70, "patch_size": 4, "pooling_kernel_size": 3, "resample": 3,
    "image_processor_type": "Gemma4ImageProcessor", "processor_class": "Gemma4Processor",
}
CASES = (("plain", "rgb_56x84.png"), ("wide", "wide_97x31.png"))
OUT_PLE = os.path.join(ROOT, "tests", "model", "fixtures", "gemma4_vl_ple")
TEXT_PLE = dict(TEXT, hidden_size_per_layer_input=8, use_bidirectional_attention=None)
VISION_PLE = dict(VISION, standardize=False)


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


EXTRA = {"boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>",
         # Gemma4Processor.validate_inputs needs the audio markers to exist (audio is not used).
         "boa_token": "<|turn>", "eoa_token": "<turn|>"}


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
           "extra_special_tokens": {k: v for k, v in EXTRA.items() if k in ("boi_token", "eoi_token", "image_token")}}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)


def tokenizer(d):
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>", extra_special_tokens=dict(EXTRA))


def build(text=TEXT, vision=VISION, seed=443):
    torch.manual_seed(seed)
    cfg = Gemma4Config(text_config=text, vision_config=vision, audio_config=None,
                       boi_token_id=IDS["<|image>"], eoi_token_id=IDS["<image|>"],
                       image_token_id=IDS["<|image|>"], video_token_id=IDS["<pad>"], audio_token_id=IDS["<pad>"],
                       boa_token_id=IDS["<|turn>"], eoa_token_index=IDS["<turn|>"], tie_word_embeddings=True)
    model = Gemma4ForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "position_embedding" in name or "layer_scalar" in name:
                p.add_(torch.randn_like(p) * 0.1)
        vt = model.model.vision_tower
        if vision["standardize"]:
            vt.std_bias.copy_(torch.randn_like(vt.std_bias) * 0.5)
            vt.std_scale.copy_(1 + torch.randn_like(vt.std_scale) * 0.2)
        # Clip values that bind: each clipped linear's input and output clamped at random bounds a
        # little inside the activations' range, so a tower that ignored them would differ.
        for name, m in vt.named_modules():
            if hasattr(m, "input_min"):
                m.input_min.fill_(-float(torch.empty(()).uniform_(0.8, 1.5)))
                m.input_max.fill_(float(torch.empty(()).uniform_(0.8, 1.5)))
                m.output_min.fill_(-float(torch.empty(()).uniform_(0.3, 0.6)))
                m.output_max.fill_(float(torch.empty(()).uniform_(0.3, 0.6)))
    return model.to(torch.bfloat16)


def image(name):
    return Image.open(os.path.join(DATA, name)).convert("RGB")


def image_processor():
    kw = {k: v for k, v in PREPROCESSOR.items() if k not in ("image_processor_type", "processor_class")}
    return Gemma4ImageProcessorPil(**kw)


def write_model(out, model):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    write_tokenizer(out)
    model.save_pretrained(out)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    return Gemma4ForConditionalGeneration.from_pretrained(out, dtype=torch.float64).eval()


def main():
    m64 = write_model(OUT, build())
    golden = {"tower": [], "e2e": []}

    ip = image_processor()
    for case, name in CASES:
        px = ip(images=[image(name)], return_tensors="pt")
        pv, pos = px["pixel_values"], px["image_position_ids"]
        pv.numpy().astype("<f4").tofile(os.path.join(OUT, f"pixels_{case}.f32"))
        pos.numpy().astype("<i8").tofile(os.path.join(OUT, f"positions_{case}.i64"))
        with torch.no_grad():
            feats = m64.model.get_image_features(pv.to(torch.float64), pos).pooler_output
            # The same without the clip values: shows the test would see a tower that ignored them.
            saved = {}
            for mname, m in m64.model.vision_tower.named_modules():
                if hasattr(m, "input_min"):
                    saved[mname] = m.use_clipped_linears
                    m.use_clipped_linears = False
            unclipped = m64.model.get_image_features(pv.to(torch.float64), pos).pooler_output
            for mname, m in m64.model.vision_tower.named_modules():
                if mname in saved:
                    m.use_clipped_linears = saved[mname]
        feats = torch.cat(list(feats), 0).numpy()
        unclipped = torch.cat(list(unclipped), 0).numpy()
        feats.astype("<f8").tofile(os.path.join(OUT, f"tower_{case}.f64"))
        rng = float(np.abs(feats).max())
        golden["tower"].append({"case": case, "image": f"tests/vision/data/{name}",
                                "pixel_rows": int(pv.shape[1]), "pixel_cols": int(pv.shape[2]),
                                "num_soft_tokens": int(px["num_soft_tokens_per_image"][0]),
                                "rows": int(feats.shape[0]), "cols": int(feats.shape[1]),
                                "file": f"tower_{case}.f64", "pixels": f"pixels_{case}.f32",
                                "positions": f"positions_{case}.i64",
                                "unclipped_error": float(np.abs(unclipped - feats).max()) / rng})
        print("tower", case, feats.shape, "unclipped error / range", golden["tower"][-1]["unclipped_error"])

    golden["e2e"] = e2e(m64, OUT, CASES)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)

    m64 = write_model(OUT_PLE, build(TEXT_PLE, VISION_PLE, seed=444))
    with open(os.path.join(OUT_PLE, "golden.json"), "w") as f:
        json.dump({"e2e": e2e(m64, OUT_PLE, CASES[:1])}, f, indent=1)


def e2e(m64, out_dir, cases):
    cases_out = []
    tok = tokenizer(out_dir)
    Gemma4Processor.check_argument_for_proper_class = lambda self, name, arg: None  # no torchvision here
    processor = Gemma4Processor(feature_extractor=None, image_processor=image_processor(), tokenizer=tok,
                                video_processor=None, chat_template=CHAT_TEMPLATE, image_seq_length=70)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT_PROMPT}]}]
    for case, name in cases:
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        batch = processor(text=[text], images=[image(name)], return_tensors="pt")
        ids = batch["input_ids"]
        pv = batch["pixel_values"].to(torch.float64)
        kw = dict(input_ids=ids, pixel_values=pv, image_position_ids=batch["image_position_ids"])
        with torch.no_grad():
            out = m64(**kw, mm_token_type_ids=batch["mm_token_type_ids"])
            again = m64(**kw, mm_token_type_ids=batch["mm_token_type_ids"])
            causal = m64(**kw)  # without the bidirectional image blocks
            # The per-layer inputs of the image tokens looked up as the image token itself, not as
            # pad_token_id (only models with per-layer embeddings have them).
            pad = m64.config.text_config.pad_token_id
            m64.config.text_config.pad_token_id = m64.config.image_token_id
            unmapped = m64(**kw, mm_token_type_ids=batch["mm_token_type_ids"])
            m64.config.text_config.pad_token_id = pad
            gen = m64.generate(**kw, mm_token_type_ids=batch["mm_token_type_ids"],
                               attention_mask=batch["attention_mask"], max_new_tokens=GREEDY_TOKENS,
                               min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None,
                               pad_token_id=IDS["<pad>"])
        assert torch.equal(out.logits, again.logits), "the float64 forward is not deterministic"
        logits = out.logits[0].numpy()
        logits.astype("<f8").tofile(os.path.join(out_dir, f"logits_{case}.f64"))
        rng = float(logits.max() - logits.min())
        causal_err = float(np.abs(causal.logits[0].numpy() - logits).max()) / rng
        cases_out.append({"case": case, "image": f"tests/vision/data/{name}", "text": TEXT_PROMPT,
                              "rendered": text, "prompt_ids": ids[0].tolist(),
                              "mm_token_type_ids": batch["mm_token_type_ids"][0].tolist(),
                              "logits_rows": logits.shape[0], "logits_cols": logits.shape[1],
                              "file": f"logits_{case}.f64", "greedy_ids": gen[0, ids.shape[1]:].tolist(),
                              "causal_only_error": causal_err,
                              "ple_unmapped_error": float(np.abs(unmapped.logits[0].numpy() - logits).max()) / rng})
        print(out_dir, "e2e", case, "prompt", ids.shape[1], "greedy", cases_out[-1]["greedy_ids"], "range", rng,
              "causal-only error / range", causal_err,
              "ple unmapped", cases_out[-1]["ple_unmapped_error"])
    return cases_out


if __name__ == "__main__":
    main()
