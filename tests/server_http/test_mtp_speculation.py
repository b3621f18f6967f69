"""Speculative decoding with the MTP head behind `fp4lm serve`, through the official openai client:
a Qwen3.5-MoE hybrid written by `fp4lm synth --mtp-head` served twice, plain and with
`--speculative-config '{"method": "qwen3_next_mtp", ...}'` (vLLM's spelling). Four concurrent greedy
requests give the same tokens from both servers (the hybrid's recurrent state is rewound past
rejected drafts); the speculating server's /metrics counts drafts, draft tokens and accepted
tokens as vLLM names them."""
import re
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import Server, synth, write_byte_tokenizer

PROMPTS = ["Once upon a time", "abcabcabc", "The quick brown fox", "0123456789"]


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory):
    d = synth(tmp_path_factory.mktemp("models") / "mtp", "--arch", "Qwen3_5MoeForCausalLM", "--algo", "NVFP4",
              "--mtp-head")
    write_byte_tokenizer(d)
    return d


def completions(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    def one(prompt):
        r = c.completions.create(model=c.models.list().data[0].id, prompt=prompt, max_tokens=24, temperature=0,
                                 extra_body={"ignore_eos": True, "return_token_ids": True})
        return r.choices[0].token_ids

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, PROMPTS))


def counter(text, name):
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    assert m, f"{name} not in /metrics:\n{text}"
    return float(m.group(1))


def test_mtp_speculation_keeps_greedy_tokens_and_shows_in_metrics(mtp_model, logs):
    plain = Server(mtp_model, "--max-num-seqs", "4", log_dir=logs, name="plain")
    try:
        want = completions(plain)
    finally:
        assert plain.stop() == 0, plain.log()
    spec = Server(mtp_model, "--max-num-seqs", "4", "--speculative-config",
                  '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}', log_dir=logs, name="mtp")
    try:
        got = completions(spec)
        text = spec.metrics()
        assert "drafts per step from the model's MTP head" in spec.log()
    finally:
        assert spec.stop() == 0, spec.log()
    assert all(len(t) == 24 for t in want)
    assert got == want
    drafts = counter(text, "vllm:spec_decode_num_drafts_total")
    assert drafts > 0
    assert counter(text, "vllm:spec_decode_num_draft_tokens_total") >= drafts
    # (Random weights: the head's drafts are rarely accepted, so only the counter's presence is checked.)
    assert counter(text, "vllm:spec_decode_num_accepted_tokens_total") <= counter(
        text, "vllm:spec_decode_num_draft_tokens_total")
