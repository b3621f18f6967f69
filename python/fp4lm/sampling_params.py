"""SamplingParams: vLLM's names, defaults and meanings (the subset fp4lm's engine implements)."""
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

# vLLM treats temperatures below this as greedy.
_SAMPLING_EPS = 1e-5


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class StructuredOutputsParams:
    """What the output must match (vLLM's StructuredOutputsParams): exactly one of json (a JSON
    schema, as a dict or its text), json_object (any JSON object), regex, choice (a list of
    strings) or grammar (GBNF / EBNF). Enforced by a token mask at every step."""

    json: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None

    def __post_init__(self):
        given = [k for k in ("json", "regex", "choice", "grammar", "json_object") if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"StructuredOutputsParams takes exactly one of json, regex, choice, grammar, json_object; "
                             f"got {given or 'none'}")
        if self.choice is not None and (not isinstance(self.choice, (list, tuple)) or not self.choice
                                        or not all(isinstance(c, str) for c in self.choice)):
            raise ValueError("StructuredOutputsParams.choice must be a non-empty list of strings")
        for k in ("regex", "grammar"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"StructuredOutputsParams.{k} must be a non-empty string")
        if self.json is not None and not isinstance(self.json, (str, dict, bool)):
            raise ValueError("StructuredOutputsParams.json must be a JSON schema (a dict or its JSON text)")

    def _spec(self):
        """(kind, text, choices) for the engine."""
        if self.json is not None:
            schema = json.loads(self.json) if isinstance(self.json, str) else self.json
            return ("json", json.dumps(schema), [])
        if self.json_object:
            return ("json_object", "", [])
        if self.regex is not None:
            return ("regex", self.regex, [])
        if self.choice is not None:
            return ("choice", "", list(self.choice))
        return ("grammar", self.grammar, [])


@dataclass
class SamplingParams:
    """How to sample one prompt's completions (see vLLM's SamplingParams).

    n: completions per prompt. best_of: samples per prompt (>= n; None: n), of which the n of the
    highest cumulative logprob are returned (vLLM v0's best_of). presence_penalty, frequency_penalty: in [-2, 2] (0 = off).
    repetition_penalty: > 0 (1 = off). temperature: 0 = greedy. top_p: in (0, 1].
    top_k: -1 or 0 = all tokens. min_p: in [0, 1]. seed: per request (None: from the LLM's seed).
    stop: strings that end the completion (not included in the text). stop_token_ids: tokens
    that end it like EOS. ignore_eos: keep going past EOS. max_tokens: most tokens per
    completion (None: up to the model length). min_tokens: EOS/stop_token_ids are blocked
    before this many. logprobs: the sampled token's and this many top tokens' log-probabilities
    per position (None = none). prompt_logprobs: every prompt token's log-probability and this
    many top tokens' at its position (None = none; at most 20). skip_special_tokens: leave special tokens out of the text.
    logit_bias: {token id: bias} added to the logits before sampling (biases clamped to
    [-100, 100], as vLLM's server does). structured_outputs: a StructuredOutputsParams the output
    must match.
    """

    n: int = 1
    best_of: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    logit_bias: Optional[Dict[int, float]] = None
    structured_outputs: Optional[StructuredOutputsParams] = None

    def __post_init__(self):
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        else:
            self.stop = list(self.stop)
        self.stop_token_ids = [] if self.stop_token_ids is None else list(self.stop_token_ids)
        self._verify()
        if self.temperature < _SAMPLING_EPS:
            # Greedy: vLLM resets the filters, which then cannot change the argmax anyway.
            self.top_p, self.top_k, self.min_p = 1.0, -1, 0.0

    def _verify(self):
        def bad(name, expected):
            raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}.")

        if not _is_int(self.n) or self.n < 1:
            bad("n", "an integer >= 1")
        if self.best_of is not None and (not _is_int(self.best_of) or self.best_of < self.n):
            bad("best_of", f"None or an integer >= n ({self.n})")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not _is_number(v) or not -2.0 <= v <= 2.0:
                bad(name, "a number in [-2, 2]")
        if not _is_number(self.repetition_penalty) or not 0.0 < self.repetition_penalty <= 2.0:
            bad("repetition_penalty", "a number in (0, 2]")
        if not _is_number(self.temperature) or not 0.0 <= self.temperature < float("inf"):
            bad("temperature", "a finite number >= 0")
        if not _is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            bad("top_p", "a number in (0, 1]")
        if not _is_int(self.top_k) or self.top_k < -1:
            bad("top_k", "-1 or 0 (disable), or at least 1")
        if not _is_number(self.min_p) or not 0.0 <= self.min_p <= 1.0:
            bad("min_p", "a number in [0, 1]")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**64):
            bad("seed", "None or an integer in [0, 2**64)")
        if not all(isinstance(s, str) for s in self.stop):
            bad("stop", "a string or a list of strings")
        if any(s == "" for s in self.stop):
            bad("stop", "free of empty strings")
        if not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "a list of non-negative token ids")
        if not isinstance(self.ignore_eos, bool):
            bad("ignore_eos", "a bool")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens < 1):
            bad("max_tokens", "None or an integer >= 1")
        if not _is_int(self.min_tokens) or self.min_tokens < 0:
            bad("min_tokens", "an integer >= 0")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            bad("min_tokens", f"<= max_tokens ({self.max_tokens})")
        if self.logprobs is not None and (not _is_int(self.logprobs) or not 0 <= self.logprobs <= 20):
            bad("logprobs", "None or an integer in [0, 20]")
        if self.prompt_logprobs is not None and (not _is_int(self.prompt_logprobs)
                                                 or not 0 <= self.prompt_logprobs <= 20):
            bad("prompt_logprobs", "None or an integer in [0, 20]")
        if not isinstance(self.skip_special_tokens, bool):
            bad("skip_special_tokens", "a bool")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict) or not all(
                    _is_int(t) and t >= 0 and _is_number(b) for t, b in self.logit_bias.items()):
                bad("logit_bias", "None or a dict of token id -> number")
            self.logit_bias = {t: min(100.0, max(-100.0, float(b))) for t, b in self.logit_bias.items()}
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            bad("structured_outputs", "None or a StructuredOutputsParams")

    def _structured_spec(self):
        return self.structured_outputs._spec() if self.structured_outputs is not None else ("", "", [])

    @property
    def sampling_type_greedy(self):
        return self.temperature < _SAMPLING_EPS


@dataclass
class BeamSearchParams:
    """vLLM's BeamSearchParams for LLM.beam_search: beam_width beams, at most max_tokens new
    tokens each; a beam's score is its cumulative logprob / length ** length_penalty (length
    counting the prompt, not a final EOS). ignore_eos: EOS is an ordinary token. temperature is
    accepted as vLLM's is (the steps here are greedy: the candidates are the top 2 * beam_width).
    early_stopping: stop once beam_width beams have ended in EOS (Hugging Face's True).
    """

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    early_stopping: bool = False

    def __post_init__(self):
        for name in ("beam_width", "max_tokens"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not _is_number(self.length_penalty):
            raise ValueError(f"length_penalty must be a number, got {self.length_penalty!r}")
        if self.include_stop_str_in_output:
            raise ValueError("include_stop_str_in_output is not supported (beam search has no stop strings here)")
