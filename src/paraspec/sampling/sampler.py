"""RequestSampler: draws the next token of one sequence, with its own penalty context.

Randomness is counter-based: the draw for output token i uses a uniform number that is a pure
function of (seed, i), turned into a token by inverse-CDF over the filtered distribution. So a
seeded request gives the same tokens whatever the decoding mode: when parallel decoding visits
the node for output token i, its logits are bit-identical to the autoregressive step's (the
engine is row-invariant) and the same uniform picks the same token. The distribution of each
token is exactly the model's: the uniform is fresh for every position.
"""

from __future__ import annotations

import os

import torch

from .params import SamplingParams
from .processors import apply_penalties, filtered_probs

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def first_max(logits: torch.Tensor) -> list[int] | int:
    """torch.argmax over the last axis (the first maximum, as torch's): numpy's SIMD argmax for
    fp32 CPU rows (much faster than torch's over a large vocabulary on one thread), torch otherwise."""
    if logits.dtype == torch.float32 and logits.device.type == "cpu" and not logits.requires_grad:
        return logits.numpy().argmax(-1).tolist()
    return logits.argmax(-1).tolist()


def uniform(seed: int, index: int) -> float:
    """A uniform number in [0, 1) determined by (seed, index)."""
    return (_splitmix64(_splitmix64(seed & _MASK64) ^ index) >> 11) * (1.0 / (1 << 53))


class RequestSampler:
    constrained = False  # a grammar masks its draws (structured/sampler.py)

    def __init__(
        self, params: SamplingParams, prompt: list[int], vocab_size: int, seed: int | None = None
    ):
        self.params = params
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
        self.greedy = params.greedy
        self.penalties = params.uses_penalties
        self.index = 0  # output tokens drawn so far
        if self.penalties:
            self.seen = torch.zeros(vocab_size, dtype=torch.bool)
            self.seen[
                torch.tensor([t for t in prompt if 0 <= t < vocab_size], dtype=torch.long)
            ] = True
            self.output_counts = torch.zeros(vocab_size)

    @property
    def argmax_suffices(self) -> bool:
        """Greedy without penalties: the verifier can take argmax of all rows at once."""
        return self.greedy and not self.penalties

    def processed_logits(self, logits: torch.Tensor) -> torch.Tensor:
        p = self.params
        if self.penalties:
            logits = apply_penalties(
                logits,
                self.seen,
                self.output_counts,
                p.repetition_penalty,
                p.presence_penalty,
                p.frequency_penalty,
            )
        return logits

    def draw(self, logits: torch.Tensor) -> int:
        """The next token given logits [vocab] computed with this sequence's exact context."""
        x = self.processed_logits(logits)
        if self.greedy:
            return first_max(x)
        p = self.params
        probs, ids = filtered_probs(x, p.temperature, p.top_k, p.top_p, p.min_p)
        cdf = probs.double().cumsum(0)
        u = uniform(self.seed, self.index) * float(cdf[-1])
        k = min(
            int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)),
            probs.shape[0] - 1,
        )
        while probs[k] == 0 and k > 0:  # never land on a token the filters removed
            k -= 1
        return int(ids[k]) if ids is not None else k

    def append(self, token: int) -> None:
        """Record an emitted token (penalty context and the position counter)."""
        self.index += 1
        if self.penalties:
            self.seen[token] = True
            self.output_counts[token] += 1

    def stats(self) -> dict:
        return {}
