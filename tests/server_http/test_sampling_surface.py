"""The rest of vLLM's sampling surface with the official openai client: n samples, lists of
prompts (text and token ids), logit_bias, logprobs=0, stream_options.continuous_usage_stats,
return_token_ids with the prompt's ids, chat echo / continue_final_message, and the fields that
are refused with a 400 naming them."""
import httpx
import openai
import pytest

MSGS = [{"role": "user", "content": "Tell me a story."}]


def tokenize(server, text):
    r = httpx.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=30)
    return r.json()["tokens"]


def test_n_samples_are_the_seeded_single_samples(client):
    r = client.completions.create(model="tiny", prompt="Once", n=3, max_tokens=6, temperature=1.0, seed=5)
    assert [c.index for c in r.choices] == [0, 1, 2]
    # Sample i is seeded seed + i, as vLLM seeds parallel samples.
    for c in r.choices:
        one = client.completions.create(model="tiny", prompt="Once", max_tokens=6, temperature=1.0, seed=5 + c.index)
        assert c.text == one.choices[0].text
    assert len({c.text for c in r.choices}) > 1
    assert r.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    assert r.usage.completion_tokens == 18


def test_n_chat_streamed_equals_whole(client):
    kw = dict(model="tiny", messages=MSGS, n=2, max_tokens=5, temperature=0.9, seed=3)
    whole = client.chat.completions.create(**kw)
    texts = {0: "", 1: ""}
    finish = {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finish == {0: "length", 1: "length"}


def test_a_list_of_prompts_answers_each(client, server):
    prompts = ["Once", "Upon a", "time", "there"]
    r = client.completions.create(model="tiny", prompt=prompts, max_tokens=4, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    total_prompt = 0
    for p, c in zip(prompts, r.choices):
        one = client.completions.create(model="tiny", prompt=p, max_tokens=4, temperature=0)
        assert c.text == one.choices[0].text
        total_prompt += one.usage.prompt_tokens
    assert r.usage.prompt_tokens == total_prompt and r.usage.completion_tokens == 16
    # Token-id prompts, each sampled twice: choice = prompt * n + sample.
    ids = [tokenize(server, p) for p in prompts[:2]]
    r2 = client.completions.create(model="tiny", prompt=ids, n=2, max_tokens=4, temperature=0,
                                   extra_body={"return_token_ids": True})
    assert [c.index for c in r2.choices] == [0, 1, 2, 3]
    assert [c.text for c in r2.choices] == [r.choices[0].text] * 2 + [r.choices[1].text] * 2
    assert [c.model_extra["prompt_token_ids"] for c in r2.choices] == [ids[0], ids[0], ids[1], ids[1]]


def test_logit_bias_plus_100_makes_the_token_the_output(client, server):
    (z,) = tokenize(server, "Z")
    r = client.completions.create(model="tiny", prompt="Once", max_tokens=5, temperature=1.0, seed=1,
                                  logit_bias={str(z): 100})
    assert r.choices[0].text == "ZZZZZ"
    ids = {"return_token_ids": True}
    greedy = client.completions.create(model="tiny", prompt="Once", max_tokens=1, temperature=0, extra_body=ids)
    (g,) = greedy.choices[0].model_extra["token_ids"]
    banned = client.completions.create(model="tiny", prompt="Once", max_tokens=1, temperature=0,
                                       logit_bias={str(g): -100}, extra_body=ids)
    assert banned.choices[0].model_extra["token_ids"] != [g]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="Once", max_tokens=1, logit_bias={"999999": 5})
    assert e.value.body["param"] == "logit_bias"


def test_logprobs_zero_holds_the_sampled_token(client):
    r = client.completions.create(model="tiny", prompt="Once", max_tokens=4, temperature=1.0, seed=2, logprobs=0)
    lp = r.choices[0].logprobs
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert top == {tok: val}
    r = client.completions.create(model="tiny", prompt="Once", max_tokens=4, temperature=1.0, seed=2, logprobs=2)
    for tok, val, top in zip(r.choices[0].logprobs.tokens, r.choices[0].logprobs.token_logprobs,
                             r.choices[0].logprobs.top_logprobs):
        # The sampled token plus the top 2 (byte tokens that decode alike share an entry).
        assert tok in top and 1 <= len(top) <= 3
        assert val <= max(top.values())


def test_continuous_usage_stats(client):
    chunks = list(client.completions.create(model="tiny", prompt="Once", max_tokens=5, temperature=0, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True}))
    with_choices = [c for c in chunks if c.choices]
    assert all(c.usage is not None for c in with_choices)
    counts = [c.usage.completion_tokens for c in with_choices]
    assert counts == sorted(counts) and counts[-1] == 5
    assert chunks[-1].usage.completion_tokens == 5 and not chunks[-1].choices


def test_return_token_ids_gives_the_prompt_ids(client, server):
    r = client.completions.create(model="tiny", prompt="Once", max_tokens=3, temperature=0,
                                  extra_body={"return_token_ids": True})
    c = r.choices[0].model_extra
    assert c["prompt_token_ids"] == httpx.post(server.url + "/tokenize", json={"prompt": "Once"}).json()["tokens"]
    assert len(c["token_ids"]) == 3
    chat = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=3, temperature=0,
                                          extra_body={"return_token_ids": True})
    assert chat.model_extra["prompt_token_ids"] == \
        httpx.post(server.url + "/tokenize", json={"messages": MSGS}).json()["tokens"]


def test_chat_echo_and_continue_final_message(client):
    msgs = MSGS + [{"role": "assistant", "content": "Once upon"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0,
                                       extra_body={"echo": True, "continue_final_message": True,
                                                   "add_generation_prompt": False})
    assert r.choices[0].message.content.startswith("Once upon")
    cont = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=3, temperature=0,
                                          extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert r.choices[0].message.content == "Once upon" + cont.choices[0].message.content


@pytest.mark.parametrize("extra,param", [
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"best_of": 3, "stream": True}, "best_of"),
    ({"n": 0}, "n"),
    ({"use_beam_search": True, "stream": True}, "stream"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
])
def test_unsupported_or_invalid_fields_are_400s(server, extra, param):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 2, **extra}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
