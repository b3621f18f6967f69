"""fp4lm: NVFP4 (ModelOpt) LLM inference on CPUs, with vLLM's offline API.

    from fp4lm import LLM, SamplingParams
    llm = LLM(model="path/to/checkpoint", override_activation_dtype="bfloat16")
    outputs = llm.generate(["Hello, my name is"], SamplingParams(temperature=0.8, max_tokens=32))
    print(outputs[0].outputs[0].text)
"""
from . import _logging
from ._core import __version__
from .llm import LLM
from .outputs import BeamSearchOutput, BeamSearchSequence, CompletionOutput, Logprob, RequestOutput
from .sampling_params import BeamSearchParams, SamplingParams, StructuredOutputsParams
from .tokenizer import Tokenizer

_logging.configure()

__all__ = ["LLM", "SamplingParams", "BeamSearchParams", "BeamSearchOutput", "BeamSearchSequence", "StructuredOutputsParams", "RequestOutput", "CompletionOutput", "Logprob", "Tokenizer", "__version__"]
