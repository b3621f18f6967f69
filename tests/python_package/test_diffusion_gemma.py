"""fp4lm.LLM on a DiffusionGemma checkpoint (issue 47 item 2): LLM.generate with prompt token ids
at temperature 0 equals transformers' generate (the fixture's goldens, which `fp4lm generate`
also equals), temperature 1 with a seed equals the CLI's sample, and what the diffusion loop
cannot honour raises ValueError naming it."""
import json
import shutil

import pytest

from fp4lm import LLM, BeamSearchParams, SamplingParams
from conftest import REPO, cli, write_byte_tokenizer

FIXTURE = REPO / "tests/model/fixtures/diffusion_gemma/tiny"
CASES = {c["name"]: c for c in json.loads((FIXTURE / "goldens.json").read_text())["cases"]}


@pytest.fixture(scope="module")
def llm():
    return LLM(model=str(FIXTURE), dtype="float32")


def test_generate_with_prompt_ids_at_temperature_0_equals_transformers(llm):
    names = ["two_canvases", "three_canvases_long_prompt"]
    prompts = [{"prompt_token_ids": CASES[n]["prompt_ids"]} for n in names]
    params = [SamplingParams(temperature=0, max_tokens=CASES[n]["max_tokens"], ignore_eos=True) for n in names]
    outs = llm.generate(prompts, params, use_tqdm=False)  # queued together, run batched
    for n, o in zip(names, outs):
        assert list(o.outputs[0].token_ids) == CASES[n]["output_ids"], n
        assert o.outputs[0].finish_reason == "length"
        assert list(o.prompt_token_ids) == CASES[n]["prompt_ids"]


def test_several_prompts_in_one_generate_equal_each_alone(llm):
    # One generate call queues them all: the engine runs their canvases in one batched decoder
    # pass per step; each output is the one it gets alone.
    prompts = [{"prompt_token_ids": CASES[n]["prompt_ids"]} for n in ("three_canvases_long_prompt", "two_canvases",
                                                                      "stop_token")]
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
              SamplingParams(temperature=1, seed=7, max_tokens=21, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[52])]
    together = llm.generate(prompts, params, use_tqdm=False)
    for p, sp, o in zip(prompts, params, together):
        alone = llm.generate(p, sp, use_tqdm=False)[0].outputs[0]
        assert list(o.outputs[0].token_ids) == list(alone.token_ids)
        assert o.outputs[0].finish_reason == alone.finish_reason
    assert len(together[0].outputs[0].token_ids) == 40 and len(together[1].outputs[0].token_ids) == 21
    assert together[2].outputs[0].finish_reason == "stop"


def test_a_stop_token_ends_the_output(llm):
    c = CASES["stop_token"]
    stop = c["stop_token_ids"][0]
    o = llm.generate({"prompt_token_ids": c["prompt_ids"]},
                     SamplingParams(temperature=0, max_tokens=c["max_tokens"], stop_token_ids=[stop]),
                     use_tqdm=False)[0].outputs[0]
    assert list(o.token_ids) == c["output_ids"][:c["output_ids"].index(stop) + 1]
    assert o.finish_reason == "stop" and o.stop_reason == stop


def test_temperature_1_with_a_seed_is_the_clis_sample(llm):
    c = CASES["two_canvases"]
    o = llm.generate({"prompt_token_ids": c["prompt_ids"]},
                     SamplingParams(temperature=1, seed=5, max_tokens=16, ignore_eos=True), use_tqdm=False)[0]
    r = cli("generate", "--model", FIXTURE, "--prompt-ids", ",".join(map(str, c["prompt_ids"])), "--max-tokens", 16,
            "--temperature", 1, "--seed", 5, "--ignore-eos", "--json", "--dtype", "float32")
    assert list(o.outputs[0].token_ids) == json.loads(r.stdout)["output_ids"]


def test_chat_with_a_tokenizer_renders_the_template(tmp_path):
    d = tmp_path / "dg"
    shutil.copytree(FIXTURE, d)
    write_byte_tokenizer(d, "{% for m in messages %}<{{ m['content'] }}>{% endfor %}=>")
    llm2 = LLM(model=str(d), dtype="float32")
    out = llm2.chat([{"role": "user", "content": "HI"}],
                                                  SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
                                                  use_tqdm=False)[0]
    assert list(out.prompt_token_ids) == list(b"<HI>=>")
    r = cli("generate", "--model", d, "--chat", "HI", "--max-tokens", 8, "--temperature", 0, "--ignore-eos", "--json",
            "--dtype", "float32")
    assert list(out.outputs[0].token_ids) == json.loads(r.stdout)["output_ids"]
    assert out.outputs[0].text == json.loads(r.stdout)["text"]
    # A stop string cuts the text before it, as `serve` and `fp4lm generate --stop` do.
    text = json.loads(r.stdout)["text"]
    stop = text[3:5]
    cut = llm2.chat([{"role": "user", "content": "HI"}],
                    SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, stop=[stop]), use_tqdm=False)[0]
    assert cut.outputs[0].text == text[:text.index(stop)]
    assert cut.outputs[0].finish_reason == "stop" and cut.outputs[0].stop_reason == stop
    assert len(cut.outputs[0].token_ids) == text.index(stop) + len(stop)


@pytest.mark.parametrize("params,name", [
    (dict(logprobs=1), "logprobs"),
    (dict(temperature=0.7), "temperature"),
    (dict(presence_penalty=0.5), "penalties"),
    (dict(stop=["A"]), "stop strings need the checkpoint's tokenizer"),  # this fixture has none
    (dict(temperature=1, top_k=4), "top-k"),  # at temperature 0 SamplingParams drops it, as vLLM
    (dict(n=1, best_of=2), "logprobs"),  # best_of > n ranks by logprobs
])
def test_what_the_loop_cannot_honour_raises_value_error(llm, params, name):
    sp = SamplingParams(**{"temperature": 0, "max_tokens": 8, **params})
    with pytest.raises(ValueError, match=name):
        llm.generate({"prompt_token_ids": [2, 30, 9]}, sp, use_tqdm=False)
    # The engine is still usable.
    assert len(llm.generate({"prompt_token_ids": [2, 30, 9]}, SamplingParams(temperature=0, max_tokens=8),
                            use_tqdm=False)[0].outputs[0].token_ids) >= 1


def test_beam_search_is_refused_by_name(llm):
    with pytest.raises(ValueError, match="DiffusionGemma does not support beam search"):
        llm.beam_search([{"prompt_token_ids": [2, 30, 9]}], BeamSearchParams(beam_width=2, max_tokens=8))


def test_max_tokens_none_takes_the_whole_canvases_that_fit(llm):
    prompt = [2, 30, 9]  # 253 positions left of 256: 31 whole canvases of 8
    o = llm.generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                     use_tqdm=False)[0].outputs[0]
    assert len(o.token_ids) == (256 - 3) // 8 * 8
