"""SamplingParams: what a request asks of generation, in vLLM's names, validated once."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SamplingParamsError
from ..structured.params import StructuredOutputsParams


SAMPLING_EPS = 1e-5  # temperatures below it sample greedily


@dataclass
class SamplingParams:
    """Generation settings of one request (vLLM field names and defaults).

    temperature 0 (or below SAMPLING_EPS) means greedy. Penalties follow the usual semantics:
    repetition_penalty (HF / MindIE) divides positive and multiplies negative logits of every token already in the
    prompt or output; presence/frequency penalties (OpenAI) subtract from tokens of the output.
    """

    n: int = 1
    max_tokens: int | None = 128  # new tokens; None = up to the context length
    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: off
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = None  # number of top log-probabilities per token (0 = sampled only)
    skip_special_tokens: bool = True
    structured_outputs: StructuredOutputsParams | None = (
        None  # a grammar every token obeys (structured/)
    )

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self.validate()

    @property
    def greedy(self) -> bool:
        # below SAMPLING_EPS the tempered distribution is the argmax's (as in vLLM), and
        # logits / temperature would overflow fp32 toward 1e-38 (inf, then NaN probabilities)
        return self.temperature < SAMPLING_EPS

    def answer_identity(self, seed: int | None = None) -> bytes | None:
        """What besides the prompt decides the tokens a request writes, for a memory that replays
        an earlier answer to a request that will write it again (output_memory.py): empty for
        plain greedy decoding; the parameters that shape the tokens otherwise, with `seed` (the
        sequence's own) when it samples; None when its answer is a draw (sampling, no seed).
        Cuts (max_tokens, stop strings and ids) are left out: up to the cut the tokens are the same."""
        if not self.greedy and self.seed is None:
            return None
        shape = []
        if not self.greedy:
            shape += [("sample", self.temperature, self.top_k, self.top_p, self.min_p, seed)]
        if self.uses_penalties:
            shape += [
                (
                    "penalties",
                    self.repetition_penalty,
                    self.presence_penalty,
                    self.frequency_penalty,
                )
            ]
        if self.structured_outputs is not None:
            shape += [("structured", self.structured_outputs)]
        return repr(shape).encode() if shape else b""

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    def validate(self) -> None:
        def bad(name: str, value, rule: str) -> SamplingParamsError:
            return SamplingParamsError(f"{name}={value!r} is invalid: {rule}", param=name)

        def number(name: str) -> float:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise bad(name, v, "it must be a number")
            return float(v)

        if not isinstance(self.n, int) or isinstance(self.n, bool) or not 1 <= self.n <= 16:
            raise bad("n", self.n, "use an integer from 1 to 16")
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int)
            or isinstance(self.max_tokens, bool)
            or self.max_tokens < 1
        ):
            raise bad("max_tokens", self.max_tokens, "use a positive integer")
        t = number("temperature")
        if not 0.0 <= t <= 100.0 or t != t:
            raise bad("temperature", self.temperature, "use a value from 0 (greedy) to 100")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise bad("top_k", self.top_k, "use a positive integer, or 0/-1 to disable it")
        if not 0.0 < number("top_p") <= 1.0:
            raise bad("top_p", self.top_p, "use a value in (0, 1]")
        if not 0.0 <= number("min_p") <= 1.0:
            raise bad("min_p", self.min_p, "use a value in [0, 1]")
        if not 0.0 < number("repetition_penalty") <= 10.0:
            raise bad(
                "repetition_penalty",
                self.repetition_penalty,
                "use a value in (0, 10]; 1 disables it",
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= number(name) <= 2.0:
                raise bad(name, getattr(self, name), "use a value from -2 to 2; 0 disables it")
        if self.seed is not None and (
            not isinstance(self.seed, int) or isinstance(self.seed, bool)
        ):
            raise bad("seed", self.seed, "use an integer")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", self.stop, "use non-empty strings")
        if len(self.stop) > 16:
            raise bad("stop", f"{len(self.stop)} strings", "use at most 16 stop strings")
        if not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            raise bad("stop_token_ids", self.stop_token_ids, "use non-negative token ids")
        if self.logprobs is not None and (
            not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20
        ):
            raise bad("logprobs", self.logprobs, "use an integer from 0 to 20")
        if self.structured_outputs is not None:
            if not isinstance(self.structured_outputs, StructuredOutputsParams):
                raise bad(
                    "structured_outputs", self.structured_outputs, "use a StructuredOutputsParams"
                )
            if self.ignore_eos:
                raise bad(
                    "ignore_eos",
                    True,
                    "structured outputs end where the grammar ends; drop ignore_eos",
                )
