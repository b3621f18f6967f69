"""/v1/chat/completions with the official openai client (after llama.cpp's chat_completion tests)."""
import httpx
import openai
import pytest

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


def test_chat_completion(client, server):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=10, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    prompt = httpx.post(server.url + "/tokenize", json={"messages": MSGS}).json()["count"]
    assert r.usage.prompt_tokens == prompt
    assert r.usage.completion_tokens == 10 and r.usage.total_tokens == prompt + 10


def test_chat_stream_matches_non_stream_and_starts_with_the_role(client):
    kw = dict(model="tiny", messages=MSGS, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert chunks[-1].usage.completion_tokens == 16


def test_chat_default_max_tokens_is_the_rest_of_the_context(client):
    # ignore_eos with no max_tokens: runs to the model length (512).
    r = client.chat.completions.create(model="tiny", messages=MSGS, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens + r.usage.completion_tokens == 512
    assert r.choices[0].finish_reason == "length"


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=3, temperature=0, logprobs=True,
                                       top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    for item in content:
        assert len(item.top_logprobs) == 3
        assert abs(item.top_logprobs[0].logprob - item.logprob) < 1e-6


def test_chat_template_kwargs_and_add_generation_prompt(server):
    r = httpx.post(server.url + "/tokenize", json={"messages": MSGS, "add_generation_prompt": False}).json()
    assert not bytes(r["tokens"]).decode().endswith("<|assistant|>")


def test_chat_errors(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[], max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=MSGS, response_format={"type": "xml"})
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=MSGS, top_logprobs=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=MSGS)
