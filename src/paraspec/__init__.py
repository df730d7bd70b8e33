"""paraspec: an LLM inference engine built around lossless parallel decoding."""

from .sampling.params import SamplingParams
from .structured.params import StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "RequestOutput", "CompletionOutput"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # LLM and its outputs load torch and the model code: on first use, so that `paraspec --help`
    # (every sub-command module is under this package) starts without them
    if name in ("LLM", "RequestOutput", "CompletionOutput"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
