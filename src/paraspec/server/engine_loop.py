"""The loop thread's side of AsyncEngine (async_engine.py): between two steps it takes the commands
the event loop queued (add, abort, call, stop), then runs one engine.step() over every running
request and turns its SequenceUpdates into immutable Delta snapshots, with the step's metrics.
Only this thread touches the Engine, its drafters and the trie."""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from typing import Callable

from ..decoding.drafters.registry import PluginConfig
from ..engine import Engine
from ..errors import ParaspecError
from ..sequence import SequenceUpdate, sequence_stats
from .engine_client import DEFAULT, Delta, EngineDeadError, EngineStepError
from .loop_commands import AddCommand, CallCommand, StopCommand
from .metrics import ServingMetrics

logger = logging.getLogger("paraspec.server")

IDLE_WAKE_S = 0.25  # the longest an idle loop waits for a command before it runs Python again
Outbox = Callable[[list[tuple[str, Delta | BaseException]]], None]


@dataclass
class _RequestRecord:  # bookkeeping for metrics
    submitted: float
    first_token_seen: bool = False


class EngineLoop:
    """Steps the Engine while it has work, else waits for a command; hands each batch of deltas
    (or a request's error) to `post`, which wakes the event loop."""

    def __init__(
        self,
        engine: Engine,
        commands: queue.SimpleQueue,
        post: Outbox,
        metrics: ServingMetrics | None = None,
    ):
        self.engine, self.commands, self.post, self.metrics = engine, commands, post, metrics
        self.records: dict[str, _RequestRecord] = {}

    def run(self) -> None:
        engine = self.engine
        while True:
            commands = self._drain(block=not engine.has_work())
            if any(isinstance(c, StopCommand) for c in commands):
                for c in commands:
                    if isinstance(c, CallCommand):
                        c.done.set_exception(EngineDeadError("the engine loop stopped"))
                self._abort_all()
                return
            out: list[tuple[str, Delta | BaseException]] = []
            for c in commands:
                if isinstance(c, AddCommand):
                    self._handle_add(c, out)
                elif isinstance(c, CallCommand):
                    self._handle_call(c)
                else:
                    self._abort(c.request_id)
            try:
                if engine.has_work():
                    out += self._snapshot(engine.step())
                self._publish()
            except Exception as e:  # a bug, not a user error: fail what is in flight, keep serving
                logger.exception("engine step failed; failing the requests in flight")
                failed = EngineStepError(
                    f"an engine step failed ({type(e).__name__}) and cancelled every "
                    "request in flight; retry it (the server log has the cause)"
                )
                out += [(s.request_id, failed) for s in engine.sequences()]
                self._abort_all()
            if out:
                self.post(out)

    def _drain(self, block: bool) -> list:
        commands = []
        while block and not commands:
            # a bounded wait: where this loop runs on the main thread (`paraspec serve`), Python
            # runs a signal's handler when that thread next runs Python, and a SIGTERM the kernel
            # gave another thread would otherwise wait, with the idle loop, for the next request
            try:
                commands.append(self.commands.get(timeout=IDLE_WAKE_S))
            except queue.Empty:
                pass
        while True:
            try:
                commands.append(self.commands.get_nowait())
            except queue.Empty:
                return commands

    def _handle_add(self, c: AddCommand, out: list) -> None:
        try:
            drafter = self._drafter(c.drafter)
            self.engine.add_request(c.prompt, c.params, c.request_id, drafter, c.group)
        except Exception as e:  # ParaspecError: the client's (HTTP 400); anything else: a bug (500)
            if not isinstance(e, ParaspecError):
                logger.exception("could not add request %s", c.request_id)
            out.append((c.request_id, e))
            return
        self.records[c.request_id] = _RequestRecord(c.submitted)

    def _handle_call(self, c: CallCommand) -> None:
        try:
            c.done.set_result(c.fn(self.engine))
        except BaseException as e:  # the caller's to handle
            c.done.set_exception(e)

    def _drafter(self, spec: str | PluginConfig | None):
        """A request's drafter: the server's, none, or the engine's for a plugin override (built
        once per config and kept, so it shares the engine's trie and measured acceptance)."""
        if spec == DEFAULT or spec is None:
            return spec
        return self.engine.drafters.drafter(spec)

    def _snapshot(self, updates: list[SequenceUpdate]) -> list[tuple[str, Delta]]:
        out = []
        now = time.perf_counter()
        decoded = any(u.seq.stats.decode_steps > 0 for u in updates)  # else this step was a prefill
        if self.metrics and decoded:
            self.metrics.decode_steps.inc()
        for u in updates:
            seq = u.seq
            if u.error is not None:  # this sequence alone failed: its request ends with the error
                out.append((seq.request_id, u.error))
                continue
            rec = self.records.get(seq.request_id)
            stats = sequence_stats(seq) if u.finished else None
            if self.metrics:
                self.metrics.observe_update(u, decoded, stats)
                if rec is not None and not rec.first_token_seen:
                    rec.first_token_seen = True
                    self.metrics.ttft.observe(now - rec.submitted)
                    self.metrics.prompt_tokens.inc(len(seq.prompt))
            out.append(
                (
                    seq.request_id,
                    Delta(
                        seq.index,
                        list(u.new_token_ids),
                        u.new_text,
                        list(u.new_logprobs) if u.new_logprobs else None,
                        seq.finish_reason if u.finished else None,
                        stats,
                        u.trace,
                    ),
                )
            )
            if u.finished and all(s.finished for s in self._siblings(seq.request_id)):
                self._end_request(seq.request_id)
        return out

    def _siblings(self, request_id: str):
        return [s for s in self.engine.sequences() if s.request_id == request_id]

    def _end_request(self, request_id: str) -> None:
        rec = self.records.pop(request_id, None)
        if rec is not None and self.metrics:
            self.metrics.e2e_latency.observe(time.perf_counter() - rec.submitted)

    def _abort(self, request_id: str) -> None:
        try:
            self.engine.abort(request_id)
        except Exception:  # a drafter failing in end(): drop the request's sequences anyway
            logger.exception("abort of %s failed; dropping its sequences", request_id)
            self.engine.drop(request_id)
        self._end_request(request_id)

    def _abort_all(self) -> None:
        for request_id in {s.request_id for s in self.engine.sequences()}:
            self._abort(request_id)

    def _publish(self) -> None:
        if not self.metrics:
            return
        self.metrics.queue_length.set(
            len(self.engine.waiting) + len(self.engine.prefilling) + self.commands.qsize()
        )
        self.metrics.running.set(len(self.engine.running))
        # memory drafters share the engine's trie
        if self.engine.drafters.has_trie:
            self.metrics.trie_nodes.set(len(self.engine.drafters.trie()))
