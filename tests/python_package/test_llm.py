"""fp4lm.LLM on checkpoints the tests write: the seed's smoke test, CLI parity, batch
invariance, outputs, errors."""
import re

import pytest

import fp4lm
from fp4lm import LLM, SamplingParams
from conftest import REPO, cli, cli_log_lines, tree_digest


def test_version_is_the_projects():
    version = re.search(r"project\(fp4lm VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    assert fp4lm.__version__ == version
    assert cli("version").stdout.splitlines()[0] == f"fp4lm {version}"


def _engine_lines(messages):
    keep = ("Detected ModelOpt", "NVFP4 W4A16 override", "Using '")
    return [m for m in messages if m.startswith(keep)]


@pytest.mark.parametrize("override", ["auto", "bfloat16"])
def test_seed_smoke_w4a4_qwen3_moe(moe_w4a4, fp4lm_log, override):
    before = tree_digest(moe_w4a4)
    llm = LLM(model=str(moe_w4a4), override_activation_dtype=override)
    outputs = llm.generate(["Hello, my name is", "The capital of France is"],
                           SamplingParams(temperature=0.8, top_p=0.95, max_tokens=8, ignore_eos=True, seed=1))
    assert [len(o.outputs[0].token_ids) for o in outputs] == [8, 8]
    assert all(o.outputs[0].finish_reason == "length" for o in outputs)
    assert outputs[0].outputs[0].text == llm.get_tokenizer().decode(outputs[0].outputs[0].token_ids,
                                                                     skip_special_tokens=True)
    assert tree_digest(moe_w4a4) == before  # the override never edits the checkpoint

    lines = _engine_lines(fp4lm_log.messages)
    assert lines[0] == "Detected ModelOpt NVFP4 checkpoint (quant_algo=NVFP4)"
    w4a16 = [m for m in lines if m.startswith("Using 'cpu_w4a16")]
    if override == "bfloat16":
        assert any(m.startswith("NVFP4 W4A16 override active (override_activation_dtype=bfloat16)") for m in lines)
        assert any("NVFP4 Linear backend" in m for m in w4a16) and any("NVFP4 MoE backend" in m for m in w4a16)
    else:
        assert not any("override active" in m for m in lines)
        assert not w4a16
    # Exactly the lines the CLI prints for the same load.
    r = cli("generate", "--model", moe_w4a4, "--prompt-ids", "1,2,3", "--max-tokens", "1", "--json",
            "--override-activation-dtype", override)
    assert lines == _engine_lines(cli_log_lines(r.stderr))


@pytest.mark.parametrize("override", ["auto", "bfloat16"])
@pytest.mark.parametrize("sampling", [
    dict(temperature=0.0),
    dict(temperature=0.9, top_k=20, top_p=0.9, seed=7),
    dict(temperature=1.3, min_p=0.05, seed=123),
])
def test_generate_matches_cli(moe_w4a4, override, sampling):
    import json
    prompt = [10, 20, 30, 40, 50]
    llm = LLM(model=str(moe_w4a4), override_activation_dtype=override)
    out = llm.generate({"prompt_token_ids": prompt}, SamplingParams(max_tokens=24, **sampling))[0]
    args = ["generate", "--model", moe_w4a4, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "24",
            "--json", "--override-activation-dtype", override]
    for key, flag in (("temperature", "--temperature"), ("top_k", "--top-k"), ("top_p", "--top-p"),
                      ("min_p", "--min-p"), ("seed", "--seed")):
        if key in sampling:
            args += [flag, str(sampling[key])]
    ref = json.loads(cli(*args).stdout)
    assert out.prompt_token_ids == ref["prompt_ids"]
    assert out.outputs[0].token_ids == ref["output_ids"]
    assert out.outputs[0].finish_reason == ref["finish_reason"]


def test_dynamic_activation_scale_matches_cli_and_is_batch_invariant(moe_w4a4):
    import json
    prompt = [10, 20, 30, 40, 50]
    llm = LLM(model=str(moe_w4a4), activation_scale="dynamic", max_num_seqs=8)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    out = llm.generate({"prompt_token_ids": prompt}, params)[0]
    ref = json.loads(cli("generate", "--model", moe_w4a4, "--prompt-ids", ",".join(map(str, prompt)),
                         "--max-tokens", "12", "--ignore-eos", "--json", "--activation-scale", "dynamic").stdout)
    assert out.outputs[0].token_ids == ref["output_ids"]
    # Per-token scales: a prompt's tokens do not depend on its batch-mates.
    prompts = [{"prompt_token_ids": [(11 * i + j) % 256 for j in range(2 + i % 4)]} for i in range(6)]
    batch = llm.generate([{"prompt_token_ids": prompt}] + prompts, params)
    assert batch[0].outputs[0].token_ids == out.outputs[0].token_ids
    with pytest.raises(ValueError, match="activation_scale must be static or dynamic"):
        LLM(model=str(moe_w4a4), activation_scale="per-call")


def test_batch_invariance_greedy(moe_w4a4):
    llm = LLM(model=str(moe_w4a4), max_num_seqs=16)
    prompts = [{"prompt_token_ids": [(7 * i + j) % 256 for j in range(3 + i % 5)]} for i in range(16)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    batch = llm.generate(prompts, params)
    assert [o.prompt_token_ids for o in batch] == [p["prompt_token_ids"] for p in prompts]  # input order
    for i in (0, 5, 15):
        alone = llm.generate(prompts[i], params)[0]
        assert alone.outputs[0].token_ids == batch[i].outputs[0].token_ids


def test_prefix_caching_changes_no_token(moe_w4a4):
    # Prompts sharing 40 tokens (two full 16-token blocks); the cache on (the default) and off.
    shared = [(11 * j + 5) % 256 for j in range(40)]
    prompts = [{"prompt_token_ids": shared + [i, i + 1]} for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    on = LLM(model=str(moe_w4a4))
    off = LLM(model=str(moe_w4a4), enable_prefix_caching=False)
    first = on.generate(prompts[0], params)  # fills the cache
    again = on.generate(prompts, params)     # every prompt finds the shared blocks
    cold = off.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in cold]
    assert first[0].outputs[0].token_ids == cold[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="block_size"):
        LLM(model=str(moe_w4a4), block_size=0)


def test_ngram_speculation_changes_no_greedy_token(moe_w4a4):
    prompts = [{"prompt_token_ids": [5, 6, 7, 8] * 4}, {"prompt_token_ids": [9, 10, 11] * 3}]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    spec = LLM(model=str(moe_w4a4), speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    plain = LLM(model=str(moe_w4a4))
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == \
        [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    with pytest.raises(ValueError, match="speculative_config: method 'eagle' is not supported"):
        LLM(model=str(moe_w4a4), speculative_config={"method": "eagle", "num_speculative_tokens": 2})
    # Qwen3-MoE ships no MTP head: method mtp (vLLM's qwen3_next_mtp) names what is missing.
    with pytest.raises(RuntimeError, match="the model has no MTP layers"):
        LLM(model=str(moe_w4a4), speculative_config={"method": "qwen3_next_mtp", "num_speculative_tokens": 2})


def test_outputs_shape_n_seed_and_logprobs(moe_w4a4):
    llm = LLM(model=str(moe_w4a4))
    prompt = {"prompt_token_ids": [1, 2, 3]}
    two = llm.generate(prompt, SamplingParams(n=2, temperature=1.0, seed=5, max_tokens=6, ignore_eos=True))[0]
    assert [c.index for c in two.outputs] == [0, 1]
    assert two.prompt is None and two.prompt_token_ids == [1, 2, 3] and two.finished
    # The i-th of n completions is the one a single request with seed + i gives (vLLM's rule).
    for i in range(2):
        single = llm.generate(prompt, SamplingParams(temperature=1.0, seed=5 + i, max_tokens=6, ignore_eos=True))
        assert single[0].outputs[0].token_ids == two.outputs[i].token_ids
    assert two.outputs[0].logprobs is None and two.outputs[0].cumulative_logprob is None

    lp = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=4, logprobs=3, ignore_eos=True))[0].outputs[0]
    assert len(lp.logprobs) == 4
    for token, entry in zip(lp.token_ids, lp.logprobs):
        assert token in entry and entry[token].rank == 1  # greedy picks the most probable
        assert 3 <= len(entry) <= 4 and all(v.logprob <= 0 for v in entry.values())
    assert lp.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in zip(lp.token_ids, lp.logprobs)))
    # Request ids are unique strings; a list of params pairs with the prompts.
    outs = llm.generate([prompt, prompt], [SamplingParams(max_tokens=1), SamplingParams(max_tokens=2)])
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2]
    assert len({o.request_id for o in outs}) == 2


def test_prompt_logprobs_and_best_of(moe_w4a4):
    llm = LLM(model=str(moe_w4a4))
    prompt = {"prompt_token_ids": [1, 2, 3, 4, 5]}
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2, logprobs=2))[0]
    plp = out.prompt_logprobs
    assert len(plp) == 5 and plp[0] is None
    for t in range(1, 5):
        entry = plp[t]
        assert t + 1 in entry  # the prompt token itself
        assert 2 <= len(entry) <= 3 and all(v.logprob <= 0 for v in entry.values())
        ranks = sorted(v.rank for k, v in entry.items() if k != t + 1)
        assert ranks == [1, 2][:len(ranks)]
    assert llm.generate(prompt, SamplingParams(temperature=0, max_tokens=2))[0].prompt_logprobs is None
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
    # best_of: the n of best_of seeded samples with the highest cumulative logprob.
    kw = dict(temperature=1.0, seed=9, max_tokens=5, ignore_eos=True, logprobs=0)
    every = llm.generate(prompt, SamplingParams(n=4, **kw))[0].outputs
    best = llm.generate(prompt, SamplingParams(n=2, best_of=4, **kw))[0].outputs
    order = sorted(range(4), key=lambda i: -every[i].cumulative_logprob)
    assert [c.token_ids for c in best] == [every[i].token_ids for i in order[:2]]
    assert [c.index for c in best] == order[:2]
    with pytest.raises(ValueError, match="best_of"):
        SamplingParams(n=3, best_of=2)


def test_logit_bias_and_structured_outputs(moe_w4a4):
    import json
    import re
    from fp4lm import StructuredOutputsParams as SO
    llm = LLM(model=str(moe_w4a4))
    prompt = {"prompt_token_ids": [1, 2, 3]}
    z = llm.get_tokenizer().encode("Z", add_special_tokens=False)[0]
    out = llm.generate(prompt, SamplingParams(temperature=1.0, seed=1, max_tokens=4, ignore_eos=True,
                                              logit_bias={z: 100}))[0].outputs[0]
    assert out.token_ids == [z] * 4
    with pytest.raises(ValueError, match="logit_bias"):
        llm.generate(prompt, SamplingParams(max_tokens=1, logit_bias={10**9: 1}))
    # A random-weight model writes byte noise: only the mask makes these outputs valid.
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    v = json.loads(llm.generate(prompt, SamplingParams(temperature=1.0, seed=2, max_tokens=200,
                                                        structured_outputs=SO(json=schema)))[0].outputs[0].text)
    assert set(v) == {"n", "ok"} and isinstance(v["n"], int) and isinstance(v["ok"], bool)
    assert re.fullmatch(r"[a-c]{4}", llm.generate(prompt, SamplingParams(
        temperature=1.0, seed=3, max_tokens=50, structured_outputs=SO(regex="[a-c]{4}")))[0].outputs[0].text)
    assert llm.generate(prompt, SamplingParams(temperature=1.0, seed=4, max_tokens=50, structured_outputs=SO(
        choice=["yes", "no"])))[0].outputs[0].text in ("yes", "no")
    with pytest.raises(ValueError, match="lookaround"):
        llm.generate(prompt, SamplingParams(max_tokens=5, structured_outputs=SO(regex="(?=x)")))


def test_text_prompt_stop_string_and_tokenizer(moe_w4a4):
    llm = LLM(model=str(moe_w4a4))
    tok = llm.get_tokenizer()
    assert tok.encode("Hi!") == [72, 105, 33] and tok.decode([72, 105]) == "Hi"
    assert tok.vocab_size == 256
    free = llm.generate("abc", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0].outputs[0]
    assert free.text == tok.decode(free.token_ids, skip_special_tokens=True)
    stop = free.text[3:5]
    if stop and stop not in free.text[:3]:
        cut = llm.generate("abc", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop=stop))
        c = cut[0].outputs[0]
        assert c.finish_reason == "stop" and c.stop_reason == stop
        assert c.text == free.text[:free.text.index(stop)]
    tid = free.token_ids[2]
    c = llm.generate("abc", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True,
                                           stop_token_ids=[tid]))[0].outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == tid and c.token_ids[-1] == tid


def test_errors_become_python_exceptions(moe_w4a4, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        LLM(model=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="override_activation_dtype|bfloat16"):
        LLM(model=str(moe_w4a4), override_activation_dtype="int8")
    with pytest.raises(ValueError, match="linear_backend: unknown backend 'nope'"):
        LLM(model=str(moe_w4a4), linear_backend="nope")
    # A broken checkpoint: the same one-line message as the CLI's.
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in moe_w4a4.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    r = cli("generate", "--model", broken, "--prompt-ids", "1", check=False)
    assert r.returncode == 1
    message = r.stderr.strip().splitlines()[-1]
    with pytest.raises(RuntimeError) as e:
        LLM(model=str(broken))
    assert str(e.value) in message and "\n" not in str(e.value)

    llm = LLM(model=str(moe_w4a4), max_model_len=64)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate({"prompt_token_ids": [1, 9999]})
    with pytest.raises(ValueError, match="empty"):
        llm.generate({"prompt_token_ids": []})
    # An over-long max_tokens is refused with the server's and the CLI's message (#40: one rule for
    # every front end; vLLM's offline LLM would cap it instead: docs/RUNTIME.md).
    with pytest.raises(ValueError, match=r"maximum context length is 64 tokens\. However, you requested 70 tokens "
                                         r"\(60 in the prompt, 10 for the completion\)"):
        llm.generate({"prompt_token_ids": [1] * 60}, SamplingParams(max_tokens=10))
    with pytest.raises(ValueError, match="maximum context length is 64 tokens. However, your prompt has 64"):
        llm.generate({"prompt_token_ids": [1] * 64}, SamplingParams(max_tokens=1))
    assert len(llm.generate({"prompt_token_ids": [1] * 60}, SamplingParams(max_tokens=4, ignore_eos=True))[0]
               .outputs[0].token_ids) == 4  # exactly the context is fine
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate(["a", "b"], [SamplingParams()])
    # The engine still works after every error.
    assert len(llm.generate("ok", SamplingParams(max_tokens=3, ignore_eos=True))[0].outputs[0].token_ids) == 3


def test_generation_config_defaults_as_the_servers(moe_w4a4, tmp_path):
    """get_default_sampling_params(): generation_config.json's values, read by the same C++ function
    as the server's (vLLM's keys; max_new_tokens is max_tokens; a value of another JSON type is
    not a default); a file that is not a JSON object is an error naming it."""
    import json
    d = tmp_path / "with-defaults"
    d.mkdir()
    for f in moe_w4a4.iterdir():
        if f.name != "generation_config.json":  # written below: never through a link into the shared model
            (d / f.name).symlink_to(f)
    (d / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "max_new_tokens": 7, "min_p": True, "do_sample": True}))
    llm = LLM(model=str(d), max_model_len=64)
    sp = llm.get_default_sampling_params()
    assert (sp.temperature, sp.top_k, sp.top_p, sp.max_tokens, sp.min_p) == (0.6, 20, 0.95, 7, 0.0)
    out = llm.generate({"prompt_token_ids": [3, 1, 4]})[0].outputs[0]  # the defaults apply
    assert len(out.token_ids) <= 7
    (d / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(RuntimeError, match="generation_config.json: expected a JSON object, found array"):
        LLM(model=str(d), max_model_len=64)


@pytest.mark.parametrize("kv", ["bfloat16", "float32"])
def test_kv_cache_dtype_matches_cli(moe_w4a4, kv):
    import json
    llm = LLM(model=str(moe_w4a4), kv_cache_dtype=kv)
    out = llm.generate({"prompt_token_ids": [3, 1, 4, 1, 5]}, SamplingParams(temperature=0, max_tokens=16))[0]
    ref = json.loads(cli("generate", "--model", moe_w4a4, "--prompt-ids", "3,1,4,1,5", "--max-tokens", "16",
                         "--json", "--kv-cache-dtype", kv).stdout)
    assert out.outputs[0].token_ids == ref["output_ids"]
    with pytest.raises(ValueError, match="kv-cache-dtype|kv_cache_dtype"):
        LLM(model=str(moe_w4a4), kv_cache_dtype="int3")


def test_beam_search_as_vllms(moe_w4a4):
    """LLM.beam_search: width 1 with EOS ignored is greedy decoding; wider searches return
    beam_width beams, best first by vLLM's score, each extending the prompt, and the same beams
    however the prompts are grouped."""
    from fp4lm import BeamSearchParams
    llm = LLM(str(moe_w4a4), max_model_len=64)
    prompts = [{"prompt_token_ids": [5, 6, 7, 8]}, {"prompt_token_ids": [40, 2, 9]}]
    greedy = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), use_tqdm=False)
    one = llm.beam_search(prompts, BeamSearchParams(beam_width=1, max_tokens=6, ignore_eos=True))
    for g, b in zip(greedy, one):
        (seq,) = b.sequences
        assert seq.tokens == g.prompt_token_ids + g.outputs[0].token_ids
        assert seq.finish_reason == "length"
    for penalty in (1.0, 0.5):
        p = BeamSearchParams(beam_width=3, max_tokens=5, length_penalty=penalty)
        both = llm.beam_search(prompts, p)
        alone = [llm.beam_search([q], p)[0] for q in prompts]
        for out, solo, q in zip(both, alone, prompts):
            assert len(out.sequences) == 3
            assert [s.tokens for s in out.sequences] == [s.tokens for s in solo.sequences]
            n = len(q["prompt_token_ids"])

            def score(s):
                length = len(s.tokens) - (1 if s.finish_reason == "stop" else 0)
                return s.cum_logprob / length ** penalty
            scores = [score(s) for s in out.sequences]
            assert scores == sorted(scores, reverse=True)
            for s in out.sequences:
                assert s.tokens[:n] == q["prompt_token_ids"] and 0 < len(s.tokens) - n <= 5
                assert len(s.logprobs) == len(s.tokens) - n and all(len(d) == 6 for d in s.logprobs)
                chosen = [d[t].logprob for d, t in zip(s.logprobs, s.tokens[n:])]
                assert abs(sum(chosen) - s.cum_logprob) < 1e-4
    with pytest.raises(ValueError):
        BeamSearchParams(beam_width=0, max_tokens=4)
    with pytest.raises(ValueError):
        llm.beam_search(prompts, BeamSearchParams(beam_width=11, max_tokens=4))
