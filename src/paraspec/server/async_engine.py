"""AsyncEngine: the Engine's step loop on ONE background thread, fed from asyncio handlers.

    handlers (event loop)                       loop thread (owns the Engine: engine_loop.py)
    add() ── AddCommand ──> commands (SimpleQueue) ──> engine.add_request ─┐
    RequestStream.close() ── AbortCommand ──────────> engine.abort        │  engine.step()
    RequestStream <── Delta batches ── loop.call_soon_threadsafe <──┘  (one forward per step
                                                                        over all running requests)

The Engine, its drafters and the shared trie are single-threaded: only the loop thread touches them,
so nothing in them needs a lock, and whatever happens to one request (disconnect, timeout, error)
reaches the engine as one `abort` between two steps, which frees its KV cache and ends its drafter
state. What crosses to the event loop is an immutable `Delta` snapshot, never a live Sequence.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Callable

from ..decoding.drafters.registry import PluginConfig
from ..engine import Engine
from ..errors import RequestError
from ..sampling.params import SamplingParams
from .engine_client import (
    CUT,
    DEFAULT,
    NOT_READY,
    SHUTTING_DOWN,
    Delta,
    DeltaStream,
    EngineDeadError,
    RequestTimeoutError,
    ServerBusyError,
    ShuttingDownError,
    check_room,
)
from .engine_loop import EngineLoop
from .loop_commands import AbortCommand, AddCommand, CallCommand, StopCommand
from .metrics import ServingMetrics

logger = logging.getLogger("paraspec.server")


class RequestStream(DeltaStream):
    """The deltas of one engine request, as an async iterator; `close()` cancels it if unfinished.

    Iteration raises RequestTimeoutError past the deadlines, or the error the engine reported."""

    def __init__(
        self,
        owner: "AsyncEngine",
        request_id: str,
        n: int,
        token_timeout: float,
        e2e_timeout: float,
    ):
        self.owner, self.request_id, self.n = owner, request_id, n
        self.queue: asyncio.Queue = asyncio.Queue()
        self.token_timeout = token_timeout
        self.deadline = time.monotonic() + e2e_timeout
        self.was_cut = False  # by the shutdown (AsyncEngine.cut)

    async def _receive(self) -> Delta | BaseException:
        timeout = min(self.token_timeout, self.deadline - time.monotonic())
        try:
            return await asyncio.wait_for(self.queue.get(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            self.close("timeout")
            raise RequestTimeoutError(
                f"request {self.request_id} timed out and was cancelled (ServerConfig."
                "tokenTimeout / e2eTimeout); ask for fewer tokens or retry later"
            ) from None

    def _on_close(self, outcome: str | None) -> None:
        # an unfinished request is aborted in the engine (KV freed, drafter state ended)
        self.owner._release(self, outcome or ("finished" if self.done else "aborted"))


class AsyncEngine:
    def __init__(
        self,
        engine: Engine,
        *,
        max_in_flight: int = 1000,
        token_timeout: float = 600.0,
        e2e_timeout: float = 600.0,
        metrics: ServingMetrics | None = None,
        own_thread: bool = True,
    ):
        # own_thread=False: the caller runs the loop with run_in_this_thread(). `paraspec serve`
        # does that on the main thread, with uvicorn on another: torch forwards run slower from a
        # second thread than from the main one (its OpenMP team competes with the main thread's;
        # docs/design-notes.md, figures), which would cost every served token.
        self.own_thread = own_thread
        self._started = threading.Event()
        self._stopped = threading.Event()
        self.engine = engine
        self.max_in_flight = max_in_flight
        self.token_timeout, self.e2e_timeout = token_timeout, e2e_timeout
        self.metrics = metrics
        if metrics is not None:
            metrics.watch_cost(lambda: engine.cost_info(measure=False))
            metrics.watch_prefix_cache(engine.prefix_cache.info)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, RequestStream] = {}  # event-loop side only
        self._sequences = 0  # sum of the streams' n
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._draining = False
        self.cut_requests = 0  # requests the shutdown ended unfinished
        self._outbox: list[tuple[str, Delta | BaseException]] = []  # loop thread -> event loop
        self._outbox_lock = threading.Lock()
        # loop-thread side only
        self._engine_loop = EngineLoop(engine, self._commands, self._post, metrics)

    # ---------------------------------------------------------------- lifecycle (event loop)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.own_thread:
            self._thread = threading.Thread(
                target=self._engine_loop.run, name="paraspec-engine", daemon=True
            )
            self._thread.start()
        self._accepting = True
        self._started.set()

    def run_in_this_thread(self, should_stop=lambda: False) -> None:
        """With own_thread=False: run the engine loop here once the app has started, until the
        app shuts down (or should_stop() turns true while waiting to start)."""
        while not self._started.wait(0.1):
            if should_stop():
                return
        self._thread = threading.current_thread()
        try:
            self._engine_loop.run()
        finally:
            self._stopped.set()

    async def shutdown(self, grace_s: float = 0.0) -> None:
        """Stop accepting; let running requests finish for up to grace_s; cut the rest; stop the thread."""
        self.stop_accepting()
        deadline = time.monotonic() + grace_s
        while self._streams and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.cut("the server stopped")
        if self._thread is not None:
            self._commands.put(StopCommand())
            if self.own_thread:
                await asyncio.to_thread(self._thread.join, 30)
            else:
                await asyncio.to_thread(self._stopped.wait, 30)

    def stop_accepting(self) -> None:
        """Drain (event loop): new requests get HTTP 503, /ready says not ready, the running ones go on."""
        self._accepting, self._draining = False, True

    def cut(self, why: str) -> None:
        """End every request still held with ShuttingDownError (event loop): a stream sends it as an
        error event, a whole response as HTTP 503; each one's abort reaches the engine; one log line each."""
        for request_id, stream in self._streams.items():
            if not stream.was_cut:
                stream.was_cut = True
                stream.queue.put_nowait(ShuttingDownError(CUT))
                logger.warning("request %s was cut by the shutdown (%s)", request_id, why)
                self.cut_requests += 1

    def stop_loop(self) -> None:
        """End the loop thread after its current step (idempotent; from any thread)."""
        self._accepting = False
        self._commands.put(StopCommand())

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:  # the app's, once started
        return self._loop

    @property
    def is_running(self) -> bool:
        if not self.own_thread:
            return self._started.is_set() and not self._stopped.is_set()
        return self._thread is not None and self._thread.is_alive()

    @property
    def is_ready(self) -> bool:
        return self._accepting and self.is_running

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    @property
    def default_plugin(self) -> str | None:
        drafter = self.engine.default_drafter
        return drafter.name if drafter is not None else None

    async def metrics_text(self) -> bytes:
        return self.metrics.render() if self.metrics else b""

    async def call(self, fn: Callable[[Engine], Any]) -> Any:
        """fn(engine) on the loop thread between two steps (the trie and drafters are its alone)."""
        if not self.is_running:
            raise EngineDeadError("the engine loop is not running")
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(CallCommand(fn, done))
        return await asyncio.wrap_future(done)

    @property
    def num_sequences(self) -> int:
        """Sequences held (a request of n samples holds n)."""
        return self._sequences

    def held(self) -> dict[str, int]:
        """Per-request state of the loop (streams, their sequences, loop-side records): all 0 once
        every request has ended."""
        return {
            "streams": len(self._streams),
            "sequences": self._sequences,
            "records": len(self._engine_loop.records),
        }

    # ---------------------------------------------------------------- requests (event loop)

    def check_capacity(self, sequences: int) -> None:
        """Raise unless `sequences` more (prompts x n, of one client request) fit: ServerBusyError
        while others hold the room, RequestError (HTTP 400) when they could never fit."""
        if self._draining:
            raise ShuttingDownError(SHUTTING_DOWN)
        if not self.is_ready:
            raise EngineDeadError(NOT_READY)
        try:
            check_room(self.num_sequences, sequences, self.max_in_flight)
        except ServerBusyError:
            if self.metrics:
                self.metrics.requests.labels("rejected").inc()
            raise

    def add(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        drafter: str | PluginConfig | None = DEFAULT,
        group: str | None = None,
        checked: bool = False,
    ) -> RequestStream:
        """Queue a request for the loop thread; its deltas arrive on the returned stream.
        `group`: the client request it belongs to; `checked`: check_capacity covered it already."""
        if not checked:
            self.check_capacity(params.n)
        if request_id in self._streams:
            raise RequestError(f"request id {request_id!r} is already in use")
        stream = RequestStream(self, request_id, params.n, self.token_timeout, self.e2e_timeout)
        self._streams[request_id] = stream
        self._sequences += stream.n
        if self.metrics:
            self.metrics.in_flight.set(len(self._streams))
        self._commands.put(
            AddCommand(request_id, prompt, params, drafter, time.perf_counter(), group)
        )
        return stream

    def _release(self, stream: RequestStream, outcome: str) -> None:
        if self._streams.get(stream.request_id) is stream:
            del self._streams[stream.request_id]
            self._sequences -= stream.n
        if not stream.done:
            self._commands.put(AbortCommand(stream.request_id))
        if self.metrics:
            self.metrics.requests.labels(outcome).inc()
            self.metrics.in_flight.set(len(self._streams))

    def _deliver(self) -> None:
        with self._outbox_lock:
            batch, self._outbox = self._outbox, []
        for request_id, item in batch:
            stream = self._streams.get(request_id)
            if stream is not None:  # else: closed already (client gone); the abort is queued
                stream.queue.put_nowait(item)

    def _post(self, items: list[tuple[str, Delta | BaseException]]) -> None:
        """Hand deltas to the event loop (from the loop thread: EngineLoop.post): one wake-up per
        batch, and none while one is still pending, so an event loop that lags behind the steps
        does not cost one GIL hand-off per step."""
        with self._outbox_lock:
            wake = not self._outbox
            self._outbox += items
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the event loop is closed: nobody is left to deliver to
                pass
