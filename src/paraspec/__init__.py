"""paraspec: an LLM inference engine built around lossless parallel decoding."""
from .api import LLM, CompletionOutput, RequestOutput
from .sampling.params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]
__version__ = "0.1.0"
