"""Generation results, shaped as vLLM's RequestOutput / CompletionOutput / Logprob."""
from dataclasses import dataclass
from typing import Dict, List, Optional, Union


@dataclass
class Logprob:
    """One token's log-probability; rank is 1 for the most probable token (None if unknown)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One completion of a prompt.

    finish_reason: "stop" (EOS, a stop string or a stop token) or "length" (max_tokens or the
    model length). stop_reason: the stop string or stop token id that ended it (None for EOS or
    length). cumulative_logprob and logprobs are None unless SamplingParams.logprobs was set;
    then logprobs holds one {token_id: Logprob} per generated token.
    """

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """All completions of one prompt. prompt is None when the prompt was given as token ids.
    prompt_logprobs (with SamplingParams.prompt_logprobs): None for the first prompt token, then
    per token {token_id: Logprob} for it and the top k."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = None


@dataclass
class BeamSearchSequence:
    """One beam, as vLLM's: tokens are the prompt's followed by the generated ones; logprobs one
    {token_id: Logprob} per generated token (the step's top 2 * beam_width); text the generated
    tokens decoded; finish_reason "stop" (EOS) or "length"."""

    tokens: List[int]
    logprobs: List[Dict[int, Logprob]]
    cum_logprob: float = 0.0
    text: Optional[str] = None
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None


@dataclass
class BeamSearchOutput:
    """The best beams of one prompt, best first."""

    sequences: List[BeamSearchSequence]
