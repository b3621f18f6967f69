#!/usr/bin/env python3
"""Does nvidia-modelopt's AWQ for NVFP4 (NVFP4_AWQ_LITE_CFG, awq_lite) run on CPU?

docs/QUANTIZE.md "AWQ": fp4lm's --awq could not be compared with ModelOpt's own run because
ModelOpt's alpha search fake-quantizes NVFP4 weights with a CUDA-only kernel. This reproduces it
on a tiny random Llama (max calibration, NVFP4_DEFAULT_CFG, runs; awq_lite stops with
"amax must be a CUDA tensor for dynamic block quantization."). Needs the venv of
scripts/requirements-validate.txt. Never in CI.
"""
import traceback

import torch
import transformers
import modelopt
import modelopt.torch.quantization as mtq

print("torch", torch.__version__, "transformers", transformers.__version__, "modelopt", modelopt.__version__,
      "cuda available:", torch.cuda.is_available())
cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)
ids = torch.randint(0, 256, (1, 32))
status = 0
for name in ["NVFP4_DEFAULT_CFG", "NVFP4_AWQ_LITE_CFG"]:
    model = transformers.LlamaForCausalLM(cfg).eval()
    try:
        mtq.quantize(model, getattr(mtq, name), lambda m: m(input_ids=ids))
        print(name, "runs on CPU")
    except Exception as e:  # report and go on: the point is which recipe fails and how
        print(name, "fails on CPU:", type(e).__name__, e)
        traceback.print_exc(limit=-2)
        status = 1
raise SystemExit(status)
