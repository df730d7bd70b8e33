"""How `paraspec serve --ray` sizes its deployments, from the same config.json as `paraspec serve`
(no Ray import here: the numbers are plain arithmetic, and testable without the extra).

  * one engine replica = one engine process with `threads` torch threads, so it asks Ray for
    num_cpus = threads (Ray also sets OMP_NUM_THREADS from it);
  * max_ongoing_requests = maxBatchSize + a small queue: a replica refuses work beyond that, which
    is what lets the prefix router spill a full owner's requests to the next replica;
  * autoscaling (when min < max replicas) targets maxBatchSize / 2 ongoing requests a replica:
    Serve's default of 2 would scale out a batching engine long before its batch fills.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..engine_args import DEFAULTS, EngineArgs
from ..errors import ParaspecError
from ..server.config import ServiceConfig

HUB_NAMESPACE = "paraspec"


@dataclass
class RayServeOptions:
    replicas: int = 2  # engine replicas (min_replicas when autoscaling)
    max_replicas: int | None = None  # > replicas: autoscale between the two
    threads: int = 1  # torch threads (and Ray CPUs) per engine replica
    queue: int = 4  # requests a replica queues beyond maxBatchSize
    affinity_tokens: int = 32  # K: prompt tokens the router hashes (system prompt + start)
    sync_interval_s: float = 1.0  # trie delta push / pull period; 0 turns sharing off
    snapshot_path: str | None = None  # the TrieHub's file; default under ~/.cache/paraspec
    snapshot_interval_s: float = 5.0
    app_name: str = "paraspec"
    route_prefix: str = "/"
    engine: EngineArgs = DEFAULTS  # each replica's model options (threads: num_threads)
    health_check_period_s: float = 2.0
    # reconfigure(): plugin_params, speculationGamma
    user_config: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            (self.replicas >= 1, "replicas must be >= 1"),
            (
                self.max_replicas is None or self.max_replicas >= self.replicas,
                "max_replicas must be >= replicas",
            ),
            (self.threads >= 1, "threads must be >= 1"),
            (self.queue >= 0, "queue must be >= 0"),
            (self.affinity_tokens >= 1, "affinity_tokens must be >= 1"),
            (self.sync_interval_s >= 0, "sync_interval_s must be >= 0 (0: no sharing)"),
        ]
        for ok, why in checks:
            if not ok:
                raise ParaspecError(f"ray serve options: {why}")

    def engine_args(self) -> EngineArgs:
        """A replica's model options: `engine` on `threads` torch threads."""
        return replace(self.engine, num_threads=self.threads)

    @property
    def hub_name(self) -> str:
        return f"paraspec-triehub-{self.app_name}"

    def hub_file(self) -> str:
        if self.snapshot_path:
            return self.snapshot_path
        return str(Path(os.path.expanduser("~/.cache/paraspec")) / f"triehub-{self.app_name}.npz")


def engine_deployment_options(config: ServiceConfig, opts: RayServeOptions) -> dict:
    """serve.deployment options of the engine replicas."""
    batch = config.schedule.max_batch_size
    out: dict = dict(
        ray_actor_options={"num_cpus": opts.threads},
        max_ongoing_requests=batch + opts.queue,
        health_check_period_s=opts.health_check_period_s,
        health_check_timeout_s=30,
        graceful_shutdown_timeout_s=5,
    )
    if opts.max_replicas is not None and opts.max_replicas > opts.replicas:
        out["autoscaling_config"] = {
            "min_replicas": opts.replicas,
            "max_replicas": opts.max_replicas,
            "target_ongoing_requests": max(1, batch // 2),
        }
    else:
        out["num_replicas"] = opts.replicas
    if opts.user_config:
        out["user_config"] = opts.user_config
    return out
