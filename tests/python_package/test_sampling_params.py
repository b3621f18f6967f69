"""SamplingParams: vLLM's defaults, and a ValueError naming the field for every bad value."""
import pytest

from fp4lm import SamplingParams


def test_defaults_are_vllms():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.seed) == (1, 1.0, 1.0, -1, 0.0, None)
    assert (p.max_tokens, p.min_tokens, p.stop, p.stop_token_ids) == (16, 0, [], [])
    assert (p.ignore_eos, p.logprobs, p.skip_special_tokens) == (False, None, True)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)


def test_normalization():
    assert SamplingParams(stop="x").stop == ["x"]
    assert SamplingParams(top_k=0).top_k == 0
    greedy = SamplingParams(temperature=0, top_p=0.5, top_k=3, min_p=0.2)
    assert (greedy.top_p, greedy.top_k, greedy.min_p) == (1.0, -1, 0.0)  # vLLM resets them for greedy
    assert SamplingParams(max_tokens=None).max_tokens is None


@pytest.mark.parametrize("field, value", [
    ("n", 0), ("n", 1.5), ("n", True),
    ("presence_penalty", -2.5), ("presence_penalty", 3), ("frequency_penalty", 2.1),
    ("frequency_penalty", "x"), ("repetition_penalty", 0), ("repetition_penalty", -1.0),
    ("temperature", -0.1), ("temperature", float("inf")), ("temperature", float("nan")), ("temperature", None),
    ("top_p", 0), ("top_p", 1.5), ("top_p", float("nan")),
    ("top_k", -2), ("top_k", 2.5),
    ("min_p", -0.1), ("min_p", 1.1),
    ("seed", -1), ("seed", 1.5), ("seed", 2**64),
    ("stop", [1]), ("stop", [""]), ("stop", ""),
    ("stop_token_ids", [-1]), ("stop_token_ids", ["a"]),
    ("ignore_eos", 1),
    ("max_tokens", 0), ("max_tokens", -5), ("max_tokens", 2.0),
    ("min_tokens", -1), ("min_tokens", 1.0),
    ("logprobs", -1), ("logprobs", 21), ("logprobs", 1.0),
    ("skip_special_tokens", None),
])
def test_every_bad_value_is_a_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        SamplingParams(**{field: value})


def test_min_tokens_above_max_tokens():
    with pytest.raises(ValueError, match=r"^min_tokens must be <= max_tokens \(4\)"):
        SamplingParams(max_tokens=4, min_tokens=5)


def test_logit_bias_and_structured_outputs_are_checked():
    from fp4lm import StructuredOutputsParams
    assert SamplingParams(logit_bias={3: 500}).logit_bias == {3: 100.0}  # clamped as vLLM's server does
    for bad in ({"3": 1.0}, {-1: 1.0}, {3: "x"}, [1]):
        with pytest.raises(ValueError, match="logit_bias"):
            SamplingParams(logit_bias=bad)
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams(regex="a", choice=["b"])
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(ValueError, match="choice"):
        StructuredOutputsParams(choice=[1])
    with pytest.raises(ValueError, match="structured_outputs"):
        SamplingParams(structured_outputs={"regex": "a"})
