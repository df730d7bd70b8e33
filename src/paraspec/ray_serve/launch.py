"""build_app: the Serve application a config.json describes (what `serve run`, `serve deploy`
and a KubeRay RayService's serveConfigV2 import as `paraspec.ray_serve:build_app`), and
`paraspec serve --ray`, which starts or joins a Ray cluster and runs it there.

build_app's args (strings from `serve run ... key=value` are converted): config (config.json;
default: the built-in defaults), model, and any RayServeOptions field (replicas, threads, queue,
affinity_tokens, sync_interval_s, snapshot_path, ...). From Python, `service_config` (a
ServiceConfig) and `options` (a RayServeOptions) may be passed instead.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading

from ray import serve
from ray.serve.config import RequestRouterConfig

from ..engine_args import EngineArgs, spec
from ..errors import ParaspecError
from ..server.config import ServiceConfig
from ..server.config_loader import load_config
from .deployments import OpenAIIngress, ParaspecEngine
from .options import HUB_NAMESPACE, RayServeOptions, engine_deployment_options

logger = logging.getLogger("paraspec.ray_serve")

ROUTER = "paraspec.ray_serve.router.TriePrefixRouter"


def build_app(args: dict | None = None):
    args = dict(args or {})
    config: ServiceConfig = args.pop("service_config", None) or load_config(
        args.pop("config", None), model=args.pop("model", None)
    )
    docs = _bool(args.pop("docs", False))
    opts: RayServeOptions = args.pop("options", None) or _options(args)
    engine = serve.deployment(
        ParaspecEngine,
        name="ParaspecEngine",
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER,
            request_router_kwargs={"affinity_tokens": opts.affinity_tokens},
        ),
        **engine_deployment_options(config, opts),
    )
    # the ingress only parses and relays (async): it holds up to maxLinkNum requests, as `paraspec
    # serve` does; Serve's default of 5 would starve the replicas and hide a full owner from the router
    ingress = serve.deployment(
        OpenAIIngress,
        name="OpenAIIngress",
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=config.server.max_link_num,
    )
    # user_config travels in the deployment config only: a change of it alone is then a light
    # update (reconfigure() on the running replicas), not a restart
    return ingress.bind(
        engine.bind(config, dataclasses.replace(opts, user_config={})), config, docs
    )


def _options(args: dict) -> RayServeOptions:
    fields = {f.name: f for f in dataclasses.fields(RayServeOptions) if f.name != "engine"}
    engine = {k: args.pop(k) for k in ENGINE_KEYS if k in args}  # the model's numerics: EngineArgs
    unknown = set(args) - set(fields)
    if unknown:
        raise ParaspecError(
            f"build_app: unknown arguments {sorted(unknown)}; use config, model, docs or one of "
            f"{sorted([*fields, *ENGINE_KEYS])}"
        )
    kw: dict = {"engine": EngineArgs(**engine).check()}
    for k, v in args.items():
        default = fields[k].default
        if isinstance(v, str) and (isinstance(default, (int, float)) or k == "max_replicas"):
            try:
                v = float(v) if isinstance(default, float) else int(v)
            except ValueError:
                raise ParaspecError(f"build_app: {k}={v!r} is not a number") from None
        kw[k] = v
    return RayServeOptions(**kw)


ENGINE_KEYS = tuple(
    f.name
    for f in dataclasses.fields(EngineArgs)
    if spec(f.name).group == "model" and f.name not in ("model", "num_threads")
)


def _bool(v) -> bool:
    return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")


def kill_hub(opts: RayServeOptions) -> None:
    """End the detached TrieHub (its snapshot file stays, for the next start)."""
    import ray

    try:
        hub = ray.get_actor(opts.hub_name, namespace=HUB_NAMESPACE)
        ray.get(hub.maybe_save.remote(True), timeout=10)
        ray.kill(hub, no_restart=True)
    except Exception:  # none was started (sync off, or no memory drafter)
        pass


def serve_ray(
    config: ServiceConfig, opts: RayServeOptions, address: str | None, docs: bool = False
) -> int:
    """`paraspec serve --ray`: serve on a Ray cluster (address: 'auto' or ray://...; None: start a
    local one sized for the replicas) until SIGINT / SIGTERM."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=opts.replicas * opts.threads, include_dashboard=False)
    # right after ray.init, which installs a SIGTERM handler that aborts: a stop that arrives while
    # the app deploys still shuts down in order
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = config.server
    serve.start(http_options={"host": server.ip_address, "port": server.port})
    serve.run(
        build_app({"service_config": config, "options": opts, "docs": docs}),
        name=opts.app_name,
        route_prefix=opts.route_prefix,
    )
    logger.info(
        "serving on http://%s:%d with %d replicas (Ray Serve)",
        server.ip_address,
        server.port,
        opts.replicas,
    )
    while not stop.wait(1.0):
        pass
    serve.delete(opts.app_name)
    kill_hub(opts)
    if not address:
        serve.shutdown()
    ray.shutdown()
    return 0
