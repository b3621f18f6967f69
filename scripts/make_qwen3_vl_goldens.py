#!/usr/bin/env python3
"""Goldens for Qwen3-VL and Qwen3-VL-MoE (tests/model/qwen3_vl_test.cpp, the text model;
tests/engine/qwen3_vl_image_logits_test.cpp and tests/cli/generate_image_cli_test.cpp, images).

Tiny random Qwen3VLForConditionalGeneration (dense) and Qwen3VLMoeForConditionalGeneration built
and saved (bf16) by transformers 5.24: a 3-layer text model (q/k norms, interleaved M-RoPE with an
explicit mrope_section of [4, 2, 2] over head_dim 16; the MoE with one dense layer through
mlp_only_layers) and a 3-block vision tower with DeepStack at blocks 0 and 1 (so its features are
added after decoder layers 0 and 1, not 2). The tokenizer, chat template and preprocessor are
those of scripts/make_qwen_vl_e2e_goldens.py (264-token byte-level vocabulary, Qwen's specials at
256..262). moe_per_expert and moe_input_major (same goldens) are the MoE checkpoint with its fused experts
rewritten per expert and transposed (rewrite_experts).

Per checkpoint, golden.json and two float64 files:
  text_logits.f64      the float64 forward's logits at every position of TEXT_TOKENS (no image)
  expected_logits.f64  the float64 forward's logits at every position of the processor's prompt
                       (chat template + one PNG, pixel_values), and golden.json's greedy_ids
  /work/venvs/torch/bin/python scripts/make_qwen3_vl_goldens.py   (transformers 5.24.0, torch, Pillow)
writes tests/cli/fixtures/qwen3_vl_e2e/{dense,moe,moe_per_expert,moe_input_major}/.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                          Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_vl_e2e_goldens import CHAT_TEMPLATE, IDS, PREPROCESSOR, TEXT_PROMPT, VOCAB, write_tokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "cli", "fixtures", "qwen3_vl_e2e")
IMAGE = os.path.join(ROOT, "tests", "vision", "data", "rgb_56x84.png")
GREEDY_TOKENS = 6
TEXT_TOKENS = [3, 17, 42, 8, 61, 5, 29, 200, 12, 50, 7, 144, 19, 2, 58, 126, 38, 11, 63, 21]

VISION = dict(depth=3, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=48, num_heads=2,
              in_channels=3, patch_size=8, spatial_merge_size=2, temporal_patch_size=2,
              num_position_embeddings=16, out_hidden_size=40, deepstack_visual_indexes=[0, 1])
TEXT = dict(vocab_size=VOCAB, hidden_size=40, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, max_position_embeddings=256, tie_word_embeddings=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                             "mrope_interleaved": True},
            eos_token_id=IDS["<|im_end|>"])
TOKEN_IDS = dict(image_token_id=IDS["<|image_pad|>"], video_token_id=IDS["<|video_pad|>"],
                 vision_start_token_id=IDS["<|vision_start|>"], vision_end_token_id=IDS["<|vision_end|>"])


def build(kind):
    torch.manual_seed(470 if kind == "dense" else 471)
    if kind == "dense":
        cfg = Qwen3VLConfig(text_config=dict(TEXT, intermediate_size=48), vision_config=VISION, **TOKEN_IDS)
        model = Qwen3VLForConditionalGeneration(cfg)
    else:
        cfg = Qwen3VLMoeConfig(text_config=dict(TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                                intermediate_size=24, mlp_only_layers=[2], decoder_sparse_step=1),
                               vision_config=VISION, **TOKEN_IDS)
        model = Qwen3VLMoeForConditionalGeneration(cfg)
    # Weights large enough for the logits to spread; norms and biases not all 1 / 0, so a missed one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            elif "language_model" in name or "lm_head" in name:
                p.copy_(torch.randn_like(p) * 0.25)
    return model.to(torch.bfloat16)


def rewrite_experts(src, dst, cfg, form):
    """The fused MoE checkpoint (transformers 5.24 saves `experts.gate_up_proj` [E, 2I, D], gate rows
    then up rows, and `experts.down_proj` [E, D, I]) rewritten as `per_expert` (one 2-D tensor per
    expert and projection, as NVIDIA's / ModelOpt's exports name them) or `input_major` (the two
    fused tensors transposed, [E, D, 2I] and [E, I, D], as the Qwen/Qwen3-VL-*-A*B releases store them)."""
    shutil.copytree(src, dst)
    t = load_file(os.path.join(src, "model.safetensors"))
    text = cfg["text_config"]
    e_n, d, i_n = text["num_local_experts"], text["hidden_size"], text["moe_intermediate_size"]
    out = {}
    for name, v in t.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            assert tuple(v.shape) == (e_n, 2 * i_n, d), v.shape
            box = name[: -len("gate_up_proj")]
            if form == "input_major":
                out[name] = v.transpose(1, 2).contiguous()
            else:
                for e in range(e_n):
                    out[f"{box}{e}.gate_proj.weight"] = v[e, :i_n].contiguous()
                    out[f"{box}{e}.up_proj.weight"] = v[e, i_n:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            assert tuple(v.shape) == (e_n, d, i_n), v.shape
            box = name[: -len("down_proj")]
            if form == "input_major":
                out[name] = v.transpose(1, 2).contiguous()
            else:
                for e in range(e_n):
                    out[f"{box}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[name] = v
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


# Without torchvision (not in /work/venvs/torch), ProcessorMixin's class check of the video
# processor fails on transformers' lazy mapping; the image path does not use it.
Qwen3VLProcessor.check_argument_for_proper_class = lambda self, name, arg: None


def goldens(d, cls, kind, messages, image, extra=None):
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    ip = Qwen2VLImageProcessorPil(size=PREPROCESSOR["size"], patch_size=8, temporal_patch_size=2, merge_size=2,
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=None,
                                 chat_template=CHAT_TEMPLATE)
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    batch = processor(text=[text], images=[image], return_tensors="pt")
    ids = batch["input_ids"]
    m64 = cls.from_pretrained(d, dtype=torch.float64).eval()
    if kind != "dense":
        m64.set_experts_implementation("eager")  # grouped_mm has no float64
    pix = batch["pixel_values"].to(torch.float64)
    with torch.no_grad():
        text_logits = m64(input_ids=torch.tensor([TEXT_TOKENS])).logits[0].numpy()
        out = m64(input_ids=ids, mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=pix,
                  image_grid_thw=batch["image_grid_thw"])
        gen = m64.generate(input_ids=ids, attention_mask=batch["attention_mask"],
                           mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=pix,
                           image_grid_thw=batch["image_grid_thw"], max_new_tokens=GREEDY_TOKENS,
                           min_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
        # The same prompt without DeepStack: how far the test's bound is from missing it.
        feats = m64.model.get_image_features(pix, batch["image_grid_thw"])
        no_ds = m64.model.language_model
        emb = no_ds.embed_tokens(ids)
        mask = ids[0] == IDS["<|image_pad|>"]
        emb[0, mask] = torch.cat(feats.pooler_output, 0)
        pos, _ = m64.model.get_rope_index(ids, batch["mm_token_type_ids"], batch["image_grid_thw"], None,
                                          attention_mask=batch["attention_mask"])
        h = no_ds(inputs_embeds=emb, position_ids=pos).last_hidden_state
        no_ds_logits = m64.lm_head(h)[0].numpy()
    logits = out.logits[0].numpy()
    text_logits.astype("<f8").tofile(os.path.join(d, "text_logits.f64"))
    logits.astype("<f8").tofile(os.path.join(d, "expected_logits.f64"))
    rng = float(logits.max() - logits.min())
    golden = {"text": TEXT_PROMPT, "image": "tests/vision/data/rgb_56x84.png", "rendered": text,
              "prompt_ids": ids[0].tolist(), "image_grid_thw": batch["image_grid_thw"][0].tolist(),
              "logits_rows": logits.shape[0], "logits_cols": logits.shape[1],
              "greedy_ids": gen[0, ids.shape[1]:].tolist(),
              "text_tokens": TEXT_TOKENS, "text_logits_rows": text_logits.shape[0],
              "no_deepstack_rel_diff": float(abs(no_ds_logits - logits).max()) / rng,
              "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    if extra:
        golden.update(extra)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(os.path.basename(d), "prompt", ids.shape[1], "grid", golden["image_grid_thw"], "greedy",
          golden["greedy_ids"], "logit range", rng, "without deepstack", golden["no_deepstack_rel_diff"])


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
        goldens(d, type(model), kind, messages, image)
        if kind == "moe":
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            # The same weights: the MoE's goldens hold. transformers reads the input-major form too
            # (its Transpose with check_dims), which checks that; it does not read per-expert tensors.
            rewrite_experts(d, os.path.join(OUT, "moe_per_expert"), cfg, "per_expert")
            im = os.path.join(OUT, "moe_input_major")
            rewrite_experts(d, im, cfg, "input_major")
            m = Qwen3VLMoeForConditionalGeneration.from_pretrained(im, dtype=torch.float64).eval()
            m.set_experts_implementation("eager")
            with torch.no_grad():
                again = m(input_ids=torch.tensor([TEXT_TOKENS])).logits[0].numpy()
            want = np.fromfile(os.path.join(d, "text_logits.f64"), dtype="<f8").reshape(again.shape)
            assert np.array_equal(again, want), "the input-major checkpoint reads differently in transformers"


if __name__ == "__main__":
    main()
