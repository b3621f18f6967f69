"""Real trained models from ../shared (skipped when absent): the prompt_token_ids of each
reference line give the reference greedy continuation exactly, through the batching engine
(all lines in one generate call)."""
import json

import pytest

from fp4lm import LLM, SamplingParams
from conftest import SHARED


@pytest.mark.parametrize("name", ["stories260k", "tiny-qwen3-moe"])
def test_reference_greedy_continuations(name):
    path = SHARED / "models" / name / "reference_greedy.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    expected = [r.get("greedy_continuation", r.get("greedy_ids")) for r in records]
    llm = LLM(model=str(path.parent), dtype="float32")
    params = [SamplingParams(temperature=0, max_tokens=len(e)) for e in expected]
    outputs = llm.generate([{"prompt_token_ids": r["prompt_ids"]} for r in records], params)
    for i, (out, want) in enumerate(zip(outputs, expected)):
        assert out.outputs[0].token_ids == want, f"{name} line {i + 1}"
        assert out.outputs[0].finish_reason == "length"
