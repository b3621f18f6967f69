"""DiffusionGemma (block diffusion) through `fp4lm serve` (issue 47 item 2), with the official
openai client: at temperature 0 the served ids and text equal `fp4lm generate`'s, which equal
transformers' generate (the fixture's goldens); a stream sends one chunk per accepted canvas
and its chunks concatenate to the whole answer; /v1/chat/completions renders the checkpoint's
template; a stop string cuts the answer inside its canvas as the scheduler does; temperature 1
with a seed is the CLI's sample; what the diffusion loop cannot honour is a 400 naming the
parameter; concurrent requests run together (a decoder pass of each per engine step, counted by
/metrics' fp4lm:iteration_sequences) and each equals its answer alone. The fixture has no tokenizer: a copy gets a byte tokenizer whose
ids below the model's 96 are ASCII, and a template that only writes such bytes."""
import json
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import FP4LM, REPO, Server, write_byte_tokenizer

FIXTURE = REPO / "tests/model/fixtures/diffusion_gemma/tiny"
GOLDENS = json.loads((FIXTURE / "goldens.json").read_text())
CASES = {c["name"]: c for c in GOLDENS["cases"]}
TEMPLATE = ("{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
            "{% if add_generation_prompt %}=>{% endif %}")
CANVAS = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("models") / "diffusion_gemma"
    shutil.copytree(FIXTURE, d)
    write_byte_tokenizer(d, TEMPLATE)
    return d


@pytest.fixture(scope="module")
def server(model, logs):
    s = Server(model, "--served-model-name", "dg", "--dtype", "float32", log_dir=logs, name="diffusion")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def generate(model, *args):
    r = subprocess.run([FP4LM, "generate", "--model", str(model), "--json", "--dtype", "float32", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ids_arg(ids):
    return ",".join(map(str, ids))


@pytest.mark.parametrize("name", ["two_canvases", "three_canvases_long_prompt"])
def test_completions_at_temperature_0_equal_generate_and_transformers(client, model, name):
    c = CASES[name]
    r = client.completions.create(model="dg", prompt=c["prompt_ids"], max_tokens=c["max_tokens"], temperature=0,
                                  extra_body={"ignore_eos": True, "return_token_ids": True})
    ch = r.choices[0]
    cli = generate(model, "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-tokens", c["max_tokens"],
                   "--temperature", 0, "--ignore-eos")
    assert ch.token_ids == c["output_ids"] == cli["output_ids"]
    assert ch.text == cli["text"] and len(ch.text) == len(c["output_ids"])  # one byte per id
    assert ch.finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(c["prompt_ids"]), c["max_tokens"])
    assert r.usage.total_tokens == len(c["prompt_ids"]) + c["max_tokens"]


def test_a_stop_token_ends_the_answer_inside_its_canvas(client, model):
    c = CASES["stop_token"]
    stop = c["stop_token_ids"][0]
    r = client.completions.create(model="dg", prompt=c["prompt_ids"], max_tokens=c["max_tokens"], temperature=0,
                                  extra_body={"stop_token_ids": [stop], "return_token_ids": True})
    want = c["output_ids"][:c["output_ids"].index(stop) + 1]  # transformers pads after it; fp4lm ends
    ch = r.choices[0]
    assert ch.token_ids == want
    assert ch.finish_reason == "stop" and ch.stop_reason == stop
    assert r.usage.completion_tokens == len(want)
    cli = generate(model, "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-tokens", c["max_tokens"],
                   "--temperature", 0, "--stop-token-ids", stop)
    assert cli["output_ids"] == want and cli["text"] == ch.text


def test_a_stop_string_ends_the_answer_inside_a_canvas_as_the_scheduler_does(client, model):
    c = CASES["three_canvases_long_prompt"]
    args = dict(model="dg", prompt=c["prompt_ids"], max_tokens=c["max_tokens"], temperature=0)
    whole = client.completions.create(**args, extra_body={"ignore_eos": True}).choices[0].text
    stop = whole[10:12]  # inside the second canvas of 8
    cut = whole.index(stop)
    r = client.completions.create(**args, stop=[stop], extra_body={"ignore_eos": True, "return_token_ids": True})
    ch = r.choices[0]
    # The text ends before the stop string; the ids end with the token that completed it (vLLM's rule).
    assert ch.text == whole[:cut]
    assert ch.token_ids == c["output_ids"][:cut + len(stop)]
    assert ch.finish_reason == "stop" and ch.stop_reason == stop
    assert r.usage.completion_tokens == cut + len(stop)
    chunks = list(client.completions.create(**args, stop=[stop], stream=True, extra_body={"ignore_eos": True}))
    assert "".join(x.choices[0].text for x in chunks if x.choices) == whole[:cut]
    assert [x.choices[0].finish_reason for x in chunks if x.choices][-1] == "stop"
    cli = generate(model, "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-tokens", c["max_tokens"],
                   "--temperature", 0, "--ignore-eos", "--stop", stop)
    assert cli["output_ids"] == ch.token_ids and cli["text"] == ch.text
    assert cli["finish_reason"] == "stop" and cli["stop_reason"] == stop


def test_a_stream_sends_a_chunk_per_canvas_that_concatenate_to_the_answer(client):
    c = CASES["three_canvases_long_prompt"]
    args = dict(model="dg", prompt=c["prompt_ids"], max_tokens=c["max_tokens"], temperature=0)
    whole = client.completions.create(**args, extra_body={"ignore_eos": True})
    chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True, "return_token_ids": True}))
    texts = [ch.choices[0].text for ch in chunks if ch.choices]
    assert len(texts) == c["max_tokens"] // CANVAS == 3
    assert [ch.choices[0].token_ids for ch in chunks if ch.choices] == [
        c["output_ids"][k:k + CANVAS] for k in range(0, c["max_tokens"], CANVAS)]
    assert "".join(texts) == whole.choices[0].text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices] == [None, None, "length"]
    assert chunks[-1].usage.completion_tokens == c["max_tokens"]
    assert chunks[-1].usage.prompt_tokens == len(c["prompt_ids"])


def test_chat_renders_the_template_and_equals_generate(client, model):
    messages = [{"role": "user", "content": "HI THERE"}]
    r = client.chat.completions.create(model="dg", messages=messages, max_tokens=16, temperature=0,
                                       extra_body={"ignore_eos": True, "return_token_ids": True})
    assert r.prompt_token_ids == list(b"<HI THERE>=>")
    cli = generate(model, "--chat", "HI THERE", "--max-tokens", 16, "--temperature", 0, "--ignore-eos")
    assert r.choices[0].token_ids == cli["output_ids"]
    assert r.choices[0].message.content == cli["text"]
    assert r.usage.prompt_tokens == len("<HI THERE>=>") and r.usage.completion_tokens == 16
    stream = client.chat.completions.create(model="dg", messages=messages, max_tokens=16, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == cli["text"]


def test_chat_without_max_tokens_fills_the_context_with_whole_canvases(client):
    messages = [{"role": "user", "content": "HI"}]  # 6 prompt ids of 256: 31 canvases fit
    r = client.chat.completions.create(model="dg", messages=messages, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == (256 - 6) // CANVAS * CANVAS
    assert r.choices[0].finish_reason == "length"


def test_temperature_1_with_a_seed_is_the_clis_sample_and_n_samples_differ(client, model):
    c = CASES["two_canvases"]
    args = dict(model="dg", prompt=c["prompt_ids"], max_tokens=16, temperature=1, seed=11,
                extra_body={"ignore_eos": True, "return_token_ids": True})
    a = client.completions.create(**args).choices[0].token_ids
    assert a == client.completions.create(**args).choices[0].token_ids
    cli = generate(model, "--prompt-ids", ids_arg(c["prompt_ids"]), "--max-tokens", 16, "--temperature", 1,
                   "--seed", 11, "--ignore-eos")
    assert a == cli["output_ids"]
    two = client.completions.create(**args, n=2).choices
    assert two[0].token_ids == a  # sample 0 keeps the seed; sample 1 takes seed + 1, as vLLM
    assert two[1].token_ids != a and len(two[1].token_ids) == 16


@pytest.mark.parametrize("endpoint,fields,param", [
    ("completions", {"logprobs": 1}, "logprobs"),
    ("chat", {"logprobs": True, "top_logprobs": 2}, "logprobs"),
    ("completions", {"echo": True, "logprobs": 0}, "logprobs"),
    ("completions", {"prompt_logprobs": 1}, "prompt_logprobs"),
    ("completions", {"n": 1, "best_of": 2}, "best_of"),
    ("completions", {"use_beam_search": True, "n": 2}, "use_beam_search"),
    ("completions", {"presence_penalty": 0.5}, "presence_penalty"),
    ("completions", {"frequency_penalty": 0.5}, "frequency_penalty"),
    ("chat", {"repetition_penalty": 1.2}, "repetition_penalty"),
    ("completions", {"temperature": 0.7}, "temperature"),
    ("chat", {"top_p": 0.9}, "top_p"),
    ("completions", {"top_k": 5}, "top_k"),
    ("completions", {"min_tokens": 4}, "min_tokens"),
    ("completions", {"logit_bias": {"5": 1.0}}, "logit_bias"),
    ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
    ("completions", {"max_tokens": 250}, "max_tokens"),  # 4 + 32 canvases of 8 > 256 positions
])
def test_what_the_diffusion_loop_cannot_honour_is_a_400_naming_it(server, endpoint, fields, param):
    body = {"model": "dg", "max_tokens": 8, "temperature": 0, **fields}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "HI"}]
    else:
        body["prompt"] = [2, 30, 9, 42]
    r = httpx.post(f"{server.url}/v1/{'chat/' if endpoint == 'chat' else ''}completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["type"] == "BadRequestError"
    assert "DiffusionGemma" in err["message"] or param == "max_tokens", err


def test_a_refusal_through_the_openai_client_is_a_bad_request_error(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="dg", prompt=[2, 30], max_tokens=8, temperature=0, logprobs=2)
    assert "DiffusionGemma does not support logprobs" in str(e.value)


def step_counts(server):
    """(steps, steps that ran one sequence) from fp4lm:iteration_sequences."""
    steps = one = 0
    for line in server.metrics().splitlines():
        if line.startswith("fp4lm:iteration_sequences_count{"):
            steps = float(line.split()[-1])
        elif line.startswith("fp4lm:iteration_sequences_bucket{") and 'le="1.0"' in line:
            one = float(line.split()[-1])
    return steps, one


def test_concurrent_requests_run_together_and_each_equals_its_answer_alone(client, server):
    # Three prompts of different lengths and max_tokens (long enough that they are still running
    # when the others arrive), one with a stop id, one sampled with a seed.
    reqs = [dict(prompt=CASES["three_canvases_long_prompt"]["prompt_ids"], max_tokens=203, temperature=0,
                 extra_body={"ignore_eos": True, "return_token_ids": True}),
            dict(prompt=CASES["two_canvases"]["prompt_ids"], max_tokens=150, temperature=1, seed=3,
                 extra_body={"ignore_eos": True, "return_token_ids": True}),
            dict(prompt=[2, 50, 8, 61, 62], max_tokens=176, temperature=0,
                 extra_body={"stop_token_ids": [52], "return_token_ids": True})]

    def ask(r):
        ch = client.completions.create(model="dg", **r).choices[0]
        return ch.token_ids, ch.text, ch.finish_reason, ch.stop_reason

    steps0, one0 = step_counts(server)
    alone = [ask(r) for r in reqs]
    steps1, one1 = step_counts(server)
    assert steps1 - steps0 == one1 - one0  # one sequence per step when sent one after the other
    barrier = threading.Barrier(len(reqs))

    def ask_together(r):
        barrier.wait()
        return ask(r)

    with ThreadPoolExecutor(len(reqs)) as pool:
        together = list(pool.map(ask_together, reqs))
    steps2, one2 = step_counts(server)
    assert together == alone
    assert len(alone[0][0]) == 203 and alone[0][2] == "length"
    # They overlapped: steps ran several sequences, and all three took fewer steps than in turn.
    assert (steps2 - steps1) - (one2 - one1) > 0
    assert steps2 - steps1 < steps1 - steps0
    print(f"steps: {steps1 - steps0:.0f} one after the other, {steps2 - steps1:.0f} together")
