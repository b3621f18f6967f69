#!/usr/bin/env python3
"""Offline batched inference with fp4lm's vLLM-style API.

    python3 -m venv .venv && .venv/bin/pip install .       # once, from the repository root
    .venv/bin/python examples/offline_inference.py --model /path/to/nvfp4-checkpoint

Without --model it writes a small random NVFP4 Qwen3-MoE checkpoint (with `build/fp4lm synth`,
so build the CLI first: see the README's Quick start) and generates from token ids: the text
of a random model is noise, but every step of the real thing runs.
"""
import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from fp4lm import LLM, SamplingParams

REPO = Path(__file__).resolve().parents[1]


def random_checkpoint():
    fp4lm_bin = os.environ.get("FP4LM_BIN", str(REPO / "build" / "fp4lm"))
    out = Path(tempfile.mkdtemp(prefix="fp4lm-example-")) / "qwen3-moe-nvfp4"
    subprocess.run([fp4lm_bin, "synth", "--out", str(out), "--arch", "Qwen3MoeForCausalLM", "--algo", "NVFP4"],
                   check=True, capture_output=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: a random one from `fp4lm synth`)")
    ap.add_argument("--override-activation-dtype", default="bfloat16",
                    help="auto, bfloat16 or float16 (W4A4 layers through the W4A16 path)")
    args = ap.parse_args()

    model = args.model or str(random_checkpoint())
    llm = LLM(model=model, override_activation_dtype=args.override_activation_dtype)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=32, seed=0)
    if (Path(model) / "tokenizer.json").exists():
        prompts = ["Hello, my name is", "The president of the United States is",
                   "The capital of France is", "The future of AI is"]
    else:  # no tokenizer: prompts as token ids
        prompts = [{"prompt_token_ids": [1, 2, 3, 4]}, {"prompt_token_ids": [5, 6, 7]}]
    outputs = llm.generate(prompts, params)  # all prompts batched in the engine at once
    for out in outputs:
        completion = out.outputs[0]
        shown = out.prompt if out.prompt is not None else out.prompt_token_ids
        print(f"Prompt: {shown!r}")
        print(f"  -> {completion.text!r} token_ids={completion.token_ids} finish_reason={completion.finish_reason}")


if __name__ == "__main__":
    main()
