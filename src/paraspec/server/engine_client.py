"""The seam between the HTTP app and whatever runs the engine: the app (app.py, serving*.py) talks
to an EngineClient, which is the in-process AsyncEngine for `paraspec serve` and a Ray Serve
handle adapter for `paraspec serve --ray` (paraspec.ray_serve.client). One code path for the
schemas, SSE, errors and metrics whichever runs the steps.

What the app needs of an engine is small: admission (check_capacity), submission (add, returning
a stream of Deltas that close() cancels), liveness for /health and /ready, the default drafter's
name for the response stats, and the Prometheus text for /metrics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from ..model.tokenizer import Tokenizer
from ..sampling.params import SamplingParams
from .async_engine import Delta


class EngineStream(Protocol):
    """The Deltas of one engine request; close() cancels it if unfinished (idempotent)."""

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    def close(self, outcome: str | None = None) -> None: ...


class EngineClient(Protocol):
    is_running: bool                 # /health: the step loop (or the replicas behind it) is alive
    is_ready: bool                   # /ready: requests are accepted
    num_in_flight: int
    default_plugin: str | None       # the configured drafter's name, for the response stats

    async def start(self) -> None: ...

    async def shutdown(self, grace_s: float = 0.0) -> None: ...

    def check_capacity(self, sequences: int) -> None: ...

    def add(self, prompt: list[int], params: SamplingParams, request_id: str, drafter=..., group: str | None = None,
            checked: bool = False) -> EngineStream: ...

    async def metrics_text(self) -> bytes: ...


@dataclass(frozen=True)
class ModelInfo:
    """What the app needs of the model besides the engine: its name, tokenizer and limits."""

    name: str
    tokenizer: Tokenizer
    vocab_size: int
    max_seq_len: int
