#!/usr/bin/env python3
"""Goldens for model/layers/mrope_positions.h: transformers' Qwen3.5 get_rope_index on known prompts.

Run with a venv that has transformers 5.x and torch (e.g. /work/venvs/modelopt/bin/python):
    python scripts/make_mrope_goldens.py tests/model/fixtures/mrope/get_rope_index.json
Each case: the token types (0 text, 1 image), the image grids (t, h, w in patches), the merge size,
and what get_rope_index returns (position_ids [3][n], rope_deltas). And per mrope_section, which
position each frequency pair of Qwen3_5TextRotaryEmbedding takes (interleaved_axes).
"""
import json
import sys
import types

import torch
import transformers
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Model

CASES = [
    # (segments: ("text", n) | ("image", (t, h, w))), merge size
    ([("text", 5), ("image", (1, 4, 6)), ("text", 4)], 2),
    ([("image", (1, 8, 4)), ("text", 3)], 2),
    ([("text", 2), ("image", (1, 6, 2)), ("text", 1), ("image", (1, 2, 2)), ("text", 6)], 2),
    ([("text", 3), ("image", (1, 4, 4)), ("text", 2), ("image", (1, 2, 4)), ("text", 2)], 2),
    ([("text", 7)], 2),
    ([("text", 1), ("image", (1, 3, 5)), ("text", 2)], 1),
]


def run(segments, merge):
    types_, grids = [], []
    for kind, v in segments:
        if kind == "text":
            types_ += [0] * v
        else:
            t, h, w = v
            types_ += [1] * (t * (h // merge) * (w // merge))
            grids.append(list(v))
    n = len(types_)
    fake = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=merge)))
    fake.get_vision_position_ids = types.MethodType(Qwen3_5Model.get_vision_position_ids, fake)
    ids = torch.zeros((1, n), dtype=torch.long)
    pos, delta = Qwen3_5Model.get_rope_index(
        fake, ids, torch.tensor([types_], dtype=torch.int),
        image_grid_thw=torch.tensor(grids, dtype=torch.long) if grids else None)
    return {"token_types": types_, "grids": grids, "merge_size": merge,
            "positions": pos[:, 0, :].tolist(), "delta": int(delta[0, 0])}


def axes(section, pairs):
    """Which of (t, h, w) each frequency pair takes: recomposition_frequencies on freq[a] = a."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding
    fake = types.SimpleNamespace(mrope_section=section)
    freq = torch.arange(3, dtype=torch.float).view(3, 1, 1, 1).expand(3, 1, 1, pairs).clone()
    out = Qwen3_5TextRotaryEmbedding.recomposition_frequencies(fake, freq)
    return {"section": section, "pairs": pairs, "axis": [int(v) for v in out[0, 0, :pairs].tolist()]}


def main():
    out = {"transformers": transformers.__version__, "cases": [run(s, m) for s, m in CASES],
           "interleaved_axes": [axes([11, 11, 10], 32), axes([2, 1, 1], 4), axes([1, 1, 0], 2),
                                axes([24, 20, 20], 64)]}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
