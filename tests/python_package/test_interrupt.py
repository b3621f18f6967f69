"""Ctrl-C during a long LLM.generate: KeyboardInterrupt comes quickly, and the engine (whose
requests were cancelled) then serves the next call normally."""
import os
import signal
import threading
import time

import pytest

from fp4lm import LLM, SamplingParams


def test_sigint_interrupts_generate_and_leaves_the_engine_usable(slow_model):
    llm = LLM(model=str(slow_model))  # 512 positions
    long = SamplingParams(temperature=0, max_tokens=500, ignore_eos=True)  # 16 x 500 steps: seconds at least
    prompts = [{"prompt_token_ids": [1 + i, 2, 3]} for i in range(16)]
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(prompts, long)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 60
    short = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    again = llm.generate(prompts, short)
    assert [len(o.outputs[0].token_ids) for o in again] == [4] * 16
    assert again[0].outputs[0].token_ids == llm.generate(prompts[0], short)[0].outputs[0].token_ids
