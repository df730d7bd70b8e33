"""The two Serve deployments.

ParaspecEngine: one engine per replica (its own scheduler, KV cache and local trie), the same
AsyncEngine `paraspec serve` runs. `generate` streams each accepted run of tokens as the engine's
Delta; `check_health` fails when the step loop is dead (Serve then replaces the replica);
`reconfigure(user_config)` hot-reloads plugin_params and speculationGamma; its trie syncs with
the TrieHub (trie_sync.py) and is bootstrapped from it before the replica takes traffic.

OpenAIIngress: paraspec's own FastAPI app (server/app.py, app_for) over a ServeEngineClient, so
schemas, SSE, errors and metrics are `paraspec serve`'s, line for line.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import os
import uuid

from ray import serve
from ray.util import get_node_ip_address

from ..config import parse_plugin_params
from ..engine import Engine
from ..errors import ConfigError
from ..server.async_engine import DEFAULT, AsyncEngine
from ..server.config import ServiceConfig
from ..server.engine_client import ModelInfo
from ..server.metrics import ServingMetrics
from .client import ServeEngineClient
from .options import RayServeOptions
from .trie_hub import output_count
from .trie_sync import TrieSync

logger = logging.getLogger("paraspec.ray_serve")


class ParaspecEngine:
    async def __init__(self, config: ServiceConfig, opts: RayServeOptions):
        from ..server.app import build_llm  # torch and the model load in the replica only

        self.config, self.opts = config, opts
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.llm = build_llm(config, opts.engine_args())
        self.name = config.model_deploy.model.model_name or self.llm.model_name
        self.metrics = ServingMetrics(self.name)
        server = config.server
        self.engine = AsyncEngine(
            self.llm.engine,
            max_in_flight=server.max_link_num,
            token_timeout=server.token_timeout,
            e2e_timeout=server.e2e_timeout,
            metrics=self.metrics,
        )
        await self.engine.start()
        self.sync: TrieSync | None = None
        self._sync_task: asyncio.Task | None = None
        if opts.sync_interval_s > 0 and self.llm.engine.drafters.has_trie:
            self.sync = TrieSync(
                self.engine, self.llm.engine.drafters.trie(), opts, self.replica_id
            )
            # before the first request: Serve routes none until __init__ returns
            await self.sync.bootstrap()
            self._sync_task = asyncio.create_task(self.sync.run())

    async def generate(
        self, prompt: list[int], params, request_id: str, drafter=DEFAULT, group: str | None = None
    ):
        """The request's Deltas as the engine makes them; an error is yielded, not raised, so the
        ingress re-raises the engine's own exception (HTTP status and message unchanged)."""
        try:
            stream = self.engine.add(prompt, params, request_id, drafter, group)
        except Exception as e:
            yield e
            return
        try:
            async for d in stream:
                if d.stats is not None:
                    d = dataclasses.replace(d, stats={**d.stats, "replica": self.replica_id})
                yield d
        except Exception as e:
            yield e
        finally:
            stream.close()  # cancelled (client gone): aborts the request, frees its KV

    def check_health(self) -> None:
        if not self.engine.is_running:
            raise RuntimeError("paraspec: the engine step loop is not running")

    async def reconfigure(self, user_config: dict) -> None:
        """user_config: {"plugin_params": ..., "speculationGamma": N}; either may be left out."""
        unknown = set(user_config) - {"plugin_params", "speculationGamma"}
        if unknown:
            raise ConfigError(
                f"user_config: unknown keys {sorted(unknown)}; use plugin_params, speculationGamma"
            )
        deploy = self.config.model_deploy
        gamma = user_config.get("speculationGamma", deploy.speculation_gamma)
        value = user_config.get("plugin_params", deploy.model.plugin_params)
        if isinstance(value, str) and value.strip().lower() in ("none", ""):
            value = None  # plain decoding, as `--plugin none`
        plugin = parse_plugin_params(value, gamma)  # raises: Serve keeps the old config

        def swap(engine: Engine) -> None:
            engine.default_drafter = engine.drafters.drafter(plugin)

        await self.engine.call(swap)
        deploy.speculation_gamma = gamma
        deploy.model.plugin_params, deploy.model.plugin = value, plugin
        logger.info(
            "reconfigured: plugin %s, speculationGamma %s",
            plugin.plugin_type if plugin else "none",
            gamma,
        )

    # ---------------------------------------------------------------- control plane (broadcast)

    def model_info(self) -> tuple[ModelInfo, str | None]:
        args = self.llm.model.args
        tokenizer = copy.copy(self.llm.tokenizer)
        tokenizer._template = None  # a compiled jinja template does not pickle; it is rebuilt
        return ModelInfo(
            self.name, tokenizer, args.vocab_size, args.max_seq_len
        ), self.engine.default_plugin

    def metrics_text(self) -> tuple[str, str]:
        return self.replica_id, self.metrics.render().decode()

    async def stats(self) -> dict:
        trie = self.llm.engine.drafters.trie() if self.llm.engine.drafters.has_trie else None
        out = {
            "replica": self.replica_id,
            "pid": os.getpid(),
            "node": get_node_ip_address(),
            "in_flight": self.engine.num_in_flight,
            "plugin": self.engine.default_plugin,
            "gamma": self.config.model_deploy.speculation_gamma,
            "trie_nodes": len(trie) if trie is not None else 0,
        }
        if self.sync is not None:
            out["sync"] = dataclasses.asdict(self.sync.stats) | {"version": self.sync.version}
        return out

    async def trie_count(self, path: list[int]) -> tuple[str, int]:
        """The output count of a token path in this replica's trie (tests, diagnostics)."""
        count = await self.engine.call(
            lambda e: output_count(e.drafters.trie(), path) if e.drafters.has_trie else 0
        )
        return self.replica_id, count

    async def generate_here(self, replica_id: str, prompt: list[int], params) -> dict | None:
        """Run one request on the replica `replica_id` only (via broadcast: the others return
        None): measuring one replica's acceptance whatever the router would choose."""
        if replica_id != self.replica_id:
            return None
        tokens, stats = [], {}
        async for d in self.generate(prompt, params, f"here-{uuid.uuid4().hex}"):
            if isinstance(d, BaseException):
                raise d
            tokens += d.token_ids
            stats = d.stats or stats
        return {"replica": self.replica_id, "token_ids": tokens, "stats": stats}

    async def __del__(self):
        if self._sync_task is not None:
            self._sync_task.cancel()
        await self.engine.shutdown()


@serve.ingress()
class OpenAIIngress:
    def __init__(self, engine, config: ServiceConfig, docs: bool = False):
        self.engine_handle, self.config, self.docs = engine, config, docs

    async def __serve_build_asgi_app__(self):
        from ..server.app import app_for

        model, plugin = await self.engine_handle.model_info.remote()
        client = ServeEngineClient(self.engine_handle, self.config, plugin)
        return app_for(client, model, self.config, self.docs)
