"""Structured outputs with the official openai client: response_format json_schema / json_object
and vLLM's structured_outputs / guided_* on a random-weight model. Its unconstrained output is
byte noise, so valid output can only come from the token mask."""
import json
import re

import jsonschema
import openai
import pytest

from conftest import Server

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
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer",
                                                                                         "multipleOf": 3}}}},
     "response_format", "unsupported keyword 'multipleOf'"),
    ({"structured_outputs": {"json": {"type": "integer", "minimum": 10, "exclusiveMaximum": 10}}},
     "structured_outputs.json", "no integer satisfies minimum 10 and exclusiveMaximum 10"),
    ({"structured_outputs": {"json": {"type": "string", "format": "iri"}}}, "structured_outputs.json",
     "unsupported string format \"iri\""),
    ({"structured_outputs": {"json": {"type": "object"}, "whitespace_pattern": " *"}},
     "structured_outputs.whitespace_pattern", "not supported"),
    ({"structured_outputs": {"json": {"type": "object"}, "disable_any_whitespace": 1}},
     "structured_outputs.disable_any_whitespace", "boolean"),
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


# Numeric bounds (Pydantic's Field(ge=, le=, gt=, lt=)), item counts, a prefix, property counts
# and string formats: the output of a random-weight model must validate (jsonschema, formats
# checked where jsonschema can).
BOUNDED = {
    "type": "object",
    "properties": {
        "age": {"type": "integer", "minimum": -40, "maximum": 120},
        "score": {"type": "number", "minimum": -2, "exclusiveMaximum": 1.5},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.25},
        "ids": {"type": "array", "items": {"type": "integer", "exclusiveMinimum": 0, "maximum": 999}, "maxItems": 3},
        "pair": {"type": "array", "prefixItems": [{"type": "string", "format": "ipv4"}, {"type": "boolean"}],
                 "minItems": 1},
        "meta": {"type": "object", "patternProperties": {"^k[0-9]$": {"type": "integer", "maximum": -1}},
                 "minProperties": 1, "maxProperties": 2},
        "ip6": {"type": "string", "format": "ipv6"},
    },
    "required": ["age", "score", "ratio", "ids", "pair", "meta", "ip6"],
    "additionalProperties": False,
}
BOUNDED_RF = {"type": "json_schema", "json_schema": {"name": "bounded", "schema": BOUNDED, "strict": True}}


def validate_bounded(text):
    v = json.loads(text)
    jsonschema.Draft202012Validator(BOUNDED, format_checker=jsonschema.FormatChecker()).validate(v)
    return v


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_numeric_bounds_counts_and_formats_validate_streamed_and_not(client, seed):
    kw = dict(model="tiny", messages=MSGS, max_tokens=470, temperature=1.0, seed=seed, response_format=BOUNDED_RF)
    r = client.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    validate_bounded(r.choices[0].message.content)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    c = client.completions.create(model="tiny", prompt="Record:", max_tokens=500, temperature=1.0, seed=seed,
                                  extra_body={"structured_outputs": {"json": BOUNDED}})
    validate_bounded(c.choices[0].text)


@pytest.mark.parametrize("fmt", ["email", "hostname", "uri", "ipv4", "ipv6", "date-time"])
def test_string_formats(client, fmt):
    """Formats of unbounded length may not close within max_tokens (byte tokens): then the text
    is a prefix; when they close they validate (jsonschema checks email, ipv4, ipv6, date-time)."""
    schema = {"type": "string", "format": fmt}
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for seed in (1, 2):
        c = client.completions.create(model="tiny", prompt="x", max_tokens=500, temperature=1.0, seed=seed,
                                      extra_body={"structured_outputs": {"json": schema}})
        text, finish = c.choices[0].text, c.choices[0].finish_reason
        assert text.startswith('"'), text
        if fmt in ("ipv4", "ipv6"):
            assert finish == "stop", text  # bounded length
        if finish == "stop":
            checker.validate(json.loads(text))


COMPACT = {"type": "object",
           "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                          "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
                          "kind": {"enum": ["a", "b"]}},
           "required": ["n", "flags", "kind"], "additionalProperties": False}


def test_disable_any_whitespace_per_request(client):
    for seed in (1, 2):
        c = client.completions.create(model="tiny", prompt="x", max_tokens=200, temperature=1.0, seed=seed,
                                      extra_body={"structured_outputs": {"json": COMPACT,
                                                                         "disable_any_whitespace": True}})
        v = json.loads(c.choices[0].text)
        jsonschema.validate(v, COMPACT)
        assert c.choices[0].text == json.dumps(v)  # ", " and ": " exactly, nothing else


def test_disable_any_whitespace_server_flag(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--structured-outputs-config.disable_any_whitespace",
               log_dir=logs, name="compact")
    try:
        cl = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        r = cl.chat.completions.create(model="tiny", messages=MSGS, max_tokens=200, temperature=1.0, seed=3,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "c", "schema": COMPACT}})
        v = json.loads(r.choices[0].message.content)
        assert r.choices[0].message.content == json.dumps(v)
        # The request may turn it back on.
        r = cl.completions.create(model="tiny", prompt="x", max_tokens=5, temperature=0,
                                  extra_body={"structured_outputs": {"json_object": True,
                                                                     "disable_any_whitespace": False}})
        assert r.choices[0].text.startswith("{")
    finally:
        assert s.stop() == 0, s.log()


def test_json_schema_cut_by_max_tokens_returns_what_was_generated(client):
    kw = dict(model="tiny", messages=MSGS, max_tokens=6, temperature=1.0, seed=5, response_format=BOUNDED_RF)
    r = client.chat.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert ch.message.content.startswith('{') and len(ch.message.content) >= 6, ch.message.content  # byte tokens
    chunks = list(client.chat.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ch.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
