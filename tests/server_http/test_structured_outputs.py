"""Structured outputs with the official openai client: response_format json_schema / json_object
and vLLM's structured_outputs / guided_* on a random-weight model. Its unconstrained output is
byte noise, so valid output can only come from the token mask."""
import json
import re

import openai
import pytest

MSGS = [{"role": "user", "content": "Describe a city."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "size": {"enum": ["small", "large"]},
        "rank": {"type": "integer"},
        "capital": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    },
    "required": ["name", "size", "rank", "capital"],
    "additionalProperties": False,
}


def check_city(text):
    v = json.loads(text)
    assert set(v) <= set(SCHEMA["properties"]) and {"name", "size", "rank", "capital"} <= set(v), text
    assert isinstance(v["name"], str) and len(v["name"]) <= 6
    assert v["size"] in ("small", "large")
    assert isinstance(v["rank"], int) and not isinstance(v["rank"], bool)
    assert isinstance(v["capital"], bool)
    if "tags" in v:
        assert isinstance(v["tags"], list) and len(v["tags"]) <= 2
        assert all(isinstance(t, str) and len(t) <= 3 for t in v["tags"])


RF = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_chat_output_validates(client, seed):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=400, temperature=1.0, seed=seed,
                                       response_format=RF)
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    check_city(r.choices[0].message.content)


def test_json_schema_streamed_equals_whole_and_validates(client):
    kw = dict(model="tiny", messages=MSGS, max_tokens=400, temperature=0.8, seed=7, response_format=RF)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    check_city(text)


def test_json_object_and_completions_endpoint(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=400, temperature=0,
                                       response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":  # a free-form object may not close within max_tokens
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    c = client.completions.create(model="tiny", prompt="City:", max_tokens=400, temperature=0.5, seed=3,
                                  extra_body={"structured_outputs": {"json": SCHEMA}})
    check_city(c.choices[0].text)


def test_vllm_choice_regex_grammar_and_guided_fields(client):
    def ask(**extra):
        r = client.completions.create(model="tiny", prompt="x", max_tokens=400, temperature=1.0, seed=5,
                                      extra_body=extra)
        return r.choices[0].text

    assert ask(structured_outputs={"choice": ["red", "green", "blue"]}) in ("red", "green", "blue")
    assert ask(guided_choice=["yes", "no"]) in ("yes", "no")
    assert re.fullmatch(r"[a-f]{3}-\d{2}", ask(structured_outputs={"regex": r"[a-f]{3}-\d{2}"}))
    assert re.fullmatch(r"ID[0-9]{4}", ask(guided_regex=r"ID[0-9]{4}"))
    g = 'root ::= "(" num ("+" num){1,3} ")"\nnum ::= [1-9] [0-9]?'
    assert re.fullmatch(r"\([1-9][0-9]?(\+[1-9][0-9]?){1,3}\)", ask(structured_outputs={"grammar": g}))
    check_city(ask(guided_json=SCHEMA))


@pytest.mark.parametrize("extra,param,words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
                                                                                         "minProperties": 1}}}},
     "response_format", "minProperties"),
    ({"structured_outputs": {"regex": "a(?=b)"}}, "structured_outputs.regex", "lookaround"),
    ({"structured_outputs": {"grammar": "root ::= foo"}}, "structured_outputs.grammar", "undefined rule 'foo'"),
    ({"structured_outputs": {"json": {"type": "strin"}}}, "structured_outputs.json", "unknown type 'strin'"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "only one"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
])
def test_invalid_specs_are_400s_naming_the_problem(client, extra, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=5, extra_body=extra)
    assert e.value.body["param"] == param
    assert words in e.value.body["message"]
