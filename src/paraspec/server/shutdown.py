"""`paraspec serve`'s SIGTERM and Ctrl-C: drain, then cut what is left.

    first signal       the engine stops accepting: new generation requests get HTTP 503 ("the server
                       is shutting down"), /ready answers 503, and the listener stays open for /health,
                       /ready and the requests in flight, which get ServerConfig.shutdownGrace seconds
    the grace's end,   every request still held is cut: a stream gets an SSE error event and [DONE],
    or a second signal a whole response HTTP 503, and the log one line per request; then uvicorn stops
    a third signal     uvicorn's own forced exit (for a client that does not read its error event)

uvicorn's own graceful shutdown closes the listener at once (callers of /ready get "connection
refused", not 503) and, at its timeout, cancels the requests' tasks mid-body: the client's stream
just stops, and the log gets a CancelledError traceback per request. Here uvicorn is told to exit
only once no request is held, so its shutdown has nothing left to cancel.

Exit code (serve_main): 0 when every request finished, 1 when any was cut.
"""

from __future__ import annotations

import asyncio
import logging

from .async_engine import AsyncEngine

logger = logging.getLogger("paraspec.server")

POLL_S = 0.05
FLUSH_S = 5.0  # after the drain, how long uvicorn waits for the last bytes to reach slow readers


class GracefulShutdown:
    """The signal handler (`on_signal`, installed on the main thread) and the drain it starts on
    the app's event loop."""

    def __init__(self, server, engine: AsyncEngine, grace_s: float):
        self.server, self.engine, self.grace_s = server, engine, grace_s  # server: a uvicorn.Server
        self.signals = 0
        self._cut_now: asyncio.Event | None = None
        self._drain_task: asyncio.Task | None = None

    def on_signal(self, *_) -> None:
        self.signals += 1
        loop = self.engine.loop
        if loop is None:  # still starting: nothing can be in flight
            self._exit(force=self.signals > 1)
            return
        try:
            loop.call_soon_threadsafe(self._on_loop, self.signals)
        except RuntimeError:  # the event loop has closed: uvicorn is on its way out
            self._exit(force=True)

    def _exit(self, force: bool) -> None:
        self.server.force_exit = self.server.force_exit or force
        self.server.should_exit = True

    def _on_loop(self, signals: int) -> None:
        if signals == 1:
            self._cut_now = asyncio.Event()
            self._drain_task = asyncio.ensure_future(self._drain())
        elif signals == 2:
            self._cut_now.set()
        else:
            self._exit(force=True)

    async def _drain(self) -> None:
        engine = self.engine
        logger.info(
            "shutting down: %d request(s) in flight get up to %g s to finish (a second signal cuts "
            "them)",
            engine.num_in_flight,
            self.grace_s,
        )
        engine.stop_accepting()
        clock = asyncio.get_running_loop().time
        deadline = clock() + self.grace_s
        while engine.num_in_flight and not self._cut_now.is_set() and clock() < deadline:
            await asyncio.sleep(POLL_S)
        if engine.num_in_flight:
            why = (
                "a second signal"
                if self._cut_now.is_set()
                else f"the {self.grace_s:g} s grace period ended"
            )
            engine.cut(why)
            deadline = clock() + FLUSH_S
            while engine.num_in_flight and clock() < deadline:
                # the handlers send the error events, their streams close
                await asyncio.sleep(POLL_S)
        self.server.should_exit = True
