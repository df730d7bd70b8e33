"""The seam between the HTTP app and whatever runs the engine: the app (app.py, serving*.py) talks
to an EngineClient, which is the in-process AsyncEngine for `paraspec serve` and a Ray Serve
handle adapter for `paraspec serve --ray` (paraspec.ray_serve.client). One code path for the
schemas, SSE, errors and metrics whichever runs the steps.

What the app needs of an engine is small: admission (check_capacity), submission (add, returning
a stream of Deltas that close() cancels), liveness for /health and /ready, the default drafter's
name for the response stats, and the Prometheus text for /metrics. What crosses the seam lives
here too: Delta, the stream and admission rules both clients share, and the errors the app maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from ..errors import ParaspecError, RequestError
from ..model.tokenizer import Tokenizer
from ..outputs import StepTrace, TokenLogprob
from ..sampling.params import SamplingParams

NOT_READY = "the server is not ready (starting up or shutting down); retry shortly"
SHUTTING_DOWN = "the server is shutting down; retry on another server or once it is back"
CUT = (
    "the server is shutting down and cut this request unfinished; retry on another server or once it "
    "is back"
)
DEFAULT = "default"  # drafter spec: the server's configured drafter


class ServerBusyError(Exception):
    """The server holds maxLinkNum requests already (HTTP 503)."""


class RequestTimeoutError(Exception):
    """The request ran past tokenTimeout / e2eTimeout and was cancelled (HTTP 504)."""


class EngineDeadError(Exception):
    """The engine loop is not running (shut down, or crashed) (HTTP 503)."""


class ShuttingDownError(EngineDeadError):
    """The server is draining after SIGTERM: no new work, and what was cut at the end (HTTP 503)."""


class EngineStepError(Exception):
    """An engine step raised (a bug, not the client's): every request in flight failed (HTTP 500).
    The message names the exception's class; its text and traceback stay in the server log."""


def outcome_of(error: BaseException) -> str:
    """paraspec_requests_total's outcome for a request that ended on `error`: a client's mistake
    (HTTP 4xx) is not an engine error."""
    if isinstance(error, ParaspecError):
        return "invalid_request"
    if isinstance(error, ShuttingDownError):
        return "shutdown"
    return "error"


@dataclass(frozen=True)
class Delta:
    """What one engine step produced for one sample of a request."""

    index: int  # sample index within the request (n > 1)
    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None = None  # set on the sample's last delta
    stats: dict[str, Any] | None = None  # sequence_stats(), on the sample's last delta
    trace: StepTrace | None = None  # the step's draft and text offsets (opt-in stream field)


class DeltaStream:
    """What every engine request's stream shares (this one, and the Ray Serve client's): n samples,
    closed once all have finished or one item was an error (raised to the reader). A subclass
    says where items come from (`_receive`, which may raise after closing the stream) and what
    closing does (`_on_close`, run once)."""

    n: int
    finished_samples: int = 0
    closed: bool = False

    @property
    def done(self) -> bool:
        return self.finished_samples >= self.n

    def __aiter__(self) -> "DeltaStream":
        return self

    async def __anext__(self) -> "Delta":
        if self.done or self.closed:
            raise StopAsyncIteration
        return self._accept(await self._receive())

    def close(self, outcome: str | None = None) -> None:
        """Idempotent. An unfinished request is cancelled where it runs."""
        if self.closed:
            return
        self.closed = True
        self._on_close(outcome)

    async def _receive(self) -> "Delta | BaseException":
        raise NotImplementedError

    def _on_close(self, outcome: str | None) -> None:
        raise NotImplementedError

    def _accept(self, item: "Delta | BaseException") -> "Delta":
        if isinstance(item, BaseException):
            self.close(outcome_of(item))
            raise item
        if item.finish_reason is not None:
            self.finished_samples += 1
            if self.done:
                self.close("finished")
        return item


def check_room(held: int, sequences: int, max_in_flight: int) -> None:
    """Raise unless `sequences` more fit beside `held`: ServerBusyError while others hold the room,
    RequestError (HTTP 400) when they could never fit."""
    if sequences > max_in_flight:
        raise RequestError(
            f"this request asks for {sequences} sequences (prompts x n), more than this server "
            f"ever holds ({max_in_flight}, ServerConfig.maxLinkNum); split it"
        )
    if held + sequences > max_in_flight:
        raise ServerBusyError(
            f"the server is at capacity ({held} of {max_in_flight} sequences "
            "held, ServerConfig.maxLinkNum); retry later"
        )


class EngineStream(Protocol):
    """The Deltas of one engine request; close() cancels it if unfinished (idempotent)."""

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    def close(self, outcome: str | None = None) -> None: ...


class EngineClient(Protocol):
    is_running: bool  # /health: the step loop (or the replicas behind it) is alive
    is_ready: bool  # /ready: requests are accepted
    num_in_flight: int
    default_plugin: str | None  # the configured drafter's name, for the response stats

    async def start(self) -> None: ...

    async def shutdown(self, grace_s: float = 0.0) -> None: ...

    def check_capacity(self, sequences: int) -> None: ...

    def add(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        drafter=...,
        group: str | None = None,
        checked: bool = False,
    ) -> EngineStream: ...

    async def metrics_text(self) -> bytes: ...


@dataclass(frozen=True)
class ModelInfo:
    """What the app needs of the model besides the engine: its name, tokenizer and limits."""

    name: str
    tokenizer: Tokenizer
    vocab_size: int
    max_seq_len: int
