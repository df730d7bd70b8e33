"""ServeEngineClient: the EngineClient (server/engine_client.py) of the Ray Serve ingress. The
same FastAPI app as `paraspec serve` runs on it; each engine request becomes one streaming call
of ParaspecEngine.generate, routed by TriePrefixRouter, whose items are the engine's own Deltas
(or the exception the replica's engine raised, re-raised here so the app maps it as it always
does). A replica that dies under a request ends that request with HTTP 503 (a stream ends with an
error event): Serve retries only calls no replica has accepted yet."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from ray.exceptions import RayError

from ..sampling.params import SamplingParams
from ..server.async_engine import DEFAULT
from ..server.config import ServiceConfig
from ..server.engine_client import NOT_READY, Delta, DeltaStream, EngineDeadError, check_room

logger = logging.getLogger("paraspec.ray_serve")

METRICS_TIMEOUT_S = 5.0
SETTINGS_POLL_S = 2.0  # how soon the ingress follows a reconfigure() of the replicas


class RemoteStream(DeltaStream):
    def __init__(self, owner: "ServeEngineClient", response, request_id: str, n: int):
        self.owner, self.response, self.request_id, self.n = owner, response, request_id, n

    async def _receive(self) -> Delta | BaseException:
        try:
            return await self.response.__anext__()
        except StopAsyncIteration:
            self.close("finished")
            raise
        except RayError as e:
            self.close("error")
            raise EngineDeadError(
                f"the engine replica serving this request failed ({type(e).__name__}); "
                "retry the request"
            ) from None

    def _on_close(self, outcome: str | None) -> None:
        if not self.done:
            self.response.cancel()  # the replica's generator ends: its request is aborted
        self.owner._release(self)


class ServeEngineClient:
    def __init__(self, handle, config: ServiceConfig, default_plugin: str | None):
        self.handle = handle
        self.stream_handle = handle.options(stream=True)
        self.config = config
        self.max_in_flight = config.server.max_link_num
        self.default_plugin = default_plugin
        self._streams: dict[int, RemoteStream] = {}
        self._sequences = 0
        self._running = False
        self._follow: asyncio.Task | None = None

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def is_ready(self) -> bool:
        return self._running

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    async def start(self) -> None:
        self._running = True
        self._follow = asyncio.get_running_loop().create_task(self._follow_settings())

    async def shutdown(self, grace_s: float = 0.0) -> None:
        self._running = False
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
        for s in list(self._streams.values()):
            s.close("aborted")

    def check_capacity(self, sequences: int) -> None:
        if not self._running:
            raise EngineDeadError(NOT_READY)
        check_room(self._sequences, sequences, self.max_in_flight)

    def add(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str,
        drafter=DEFAULT,
        group: str | None = None,
        checked: bool = False,
    ) -> RemoteStream:
        if not checked:
            self.check_capacity(params.n)
        # the prompt first: TriePrefixRouter hashes args[0]
        response = self.stream_handle.generate.remote(
            list(prompt), params, request_id, drafter, group
        )
        stream = RemoteStream(self, response, request_id, params.n)
        self._streams[id(stream)] = stream
        self._sequences += params.n
        return stream

    async def _follow_settings(self) -> None:
        """reconfigure() swaps the replicas' drafter and speculationGamma; the app names the default
        drafter in its responses and checks a request's plugin_params against the gamma, so the
        ingress follows them: one replica's stats every SETTINGS_POLL_S, off the request path."""
        while self._running:
            await asyncio.sleep(SETTINGS_POLL_S)
            try:
                stats = await self.handle.stats.remote()
            except Exception as e:  # a replica restarting: keep the last known settings
                logger.debug("settings poll failed: %s", e)
                continue
            self.default_plugin = stats["plugin"]
            self.config.model_deploy.speculation_gamma = stats["gamma"]

    def _release(self, stream: RemoteStream) -> None:
        if self._streams.pop(id(stream), None) is not None:
            self._sequences -= stream.n

    async def metrics_text(self) -> bytes:
        """Every live replica's metrics, each sample labelled with its replica."""
        results = await self.handle.broadcast("metrics_text").results_async(
            timeout_s=METRICS_TIMEOUT_S, return_exceptions=True
        )
        parts = [r for r in results if isinstance(r, tuple)]
        return merge_metrics(parts)


def merge_metrics(parts: list[tuple[str, str]]) -> bytes:
    """Prometheus texts of several replicas -> one text, a `replica` label on every sample."""
    families: dict[str, Metric] = {}
    for replica, text in parts:
        for fam in text_string_to_metric_families(text):
            into = families.setdefault(
                fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit)
            )
            into.samples += [
                s._replace(labels={**s.labels, "replica": replica}) for s in fam.samples
            ]

    class _Merged:
        def collect(self):
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())
    return generate_latest(registry)
