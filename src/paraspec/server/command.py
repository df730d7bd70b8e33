"""`paraspec serve`: its flags, config.json plus the command line's overrides -> ServiceConfig, and
the process: the LLM the config describes, uvicorn on a thread, the engine loop on the main thread.
FastAPI, torch and the model load in serve_main, not at import: `paraspec --help` stays quick."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys

from ..cli_flags import add_model_args, add_plugin_args, plugin_params_from_args
from ..engine_args import EngineArgs, add_cli_args
from ..errors import ParaspecError
from .config import ServerConfig, ServiceConfig
from .config_loader import load_config
from .security import API_KEY_ENV

logger = logging.getLogger("paraspec.server")

# the default time running requests get after SIGTERM
SHUTDOWN_GRACE_S = ServerConfig.shutdown_grace


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    s.add_argument("--config", default=None, help="MindIE-style config.json")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument(
        "--docs", action="store_true", help="serve /docs and /openapi.json (off by default)"
    )
    s.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' on /v1/* and /metrics (also ${API_KEY_ENV} or "
        "ServerConfig.apiKey; the flag wins, then the variable)",
    )
    s.add_argument(
        "--allowed-hosts",
        default=None,
        help="comma-separated Host names to answer ('*' for any; default: the bind address, localhost, "
        "127.0.0.1, ::1)",
    )
    s.add_argument(
        "--metrics-open",
        action="store_true",
        default=None,
        help="serve /metrics without the API key",
    )
    add_cli_args(s, "schedule", overrides=True)  # --prefix-cache-mb
    ray = s.add_argument_group(
        "Ray Serve (the paraspec[ray] extra; see README, 'Scale out on Ray Serve')"
    )
    ray.add_argument(
        "--ray",
        action="store_true",
        help="serve N engine replicas on Ray Serve behind the same API",
    )
    ray.add_argument(
        "--address",
        default=None,
        help="with --ray: the cluster to join ('auto': the local `ray start` one; default: start one "
        "in this process sized for the replicas)",
    )
    ray.add_argument(
        "--replicas", type=int, default=2, help="with --ray: engine replicas (default 2)"
    )
    add_model_args(s)
    add_plugin_args(s, default_plugin=None)
    s.set_defaults(func=serve_main)


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    """--config (or the defaults) with the command line's overrides applied."""
    # serve's --plugin is None unless given: then the config file (or, without one, memory_decoding)
    # decides; `--plugin none` and `--plugin-params none` turn parallel decoding off.
    plugin = plugin_params_from_args(args)
    plugin_flags = plugin is not None or args.plugin == "none"
    if isinstance(plugin, str) and plugin.strip().lower() in ("none", ""):
        plugin = None
    model = args.model
    api_key = args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    hosts = (
        [h.strip() for h in args.allowed_hosts.split(",")]
        if args.allowed_hosts is not None
        else None
    )
    if args.config is not None and model == "default":
        model = None  # the file's modelWeightPath wins over the flag's default
    return load_config(
        args.config,
        host=args.host,
        port=args.port,
        model=model,
        plugin_params=plugin,
        plugin_flags=plugin_flags,
        speculation_gamma=args.speculation_gamma,
        api_key=api_key,
        allowed_hosts=hosts,
        metrics_open=args.metrics_open,
        prefix_cache_mb=getattr(args, "prefix_cache_mb", None),
    )


def serve_main(args: argparse.Namespace) -> int:
    """`paraspec serve`: refuses to start (exit code 2, one line on stderr) on an invalid config or
    an address it cannot listen on, both found before the model loads. After SIGTERM or Ctrl-C
    (shutdown.py) it exits 0 when every request finished, 1 when it had to cut any."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if getattr(args, "ray", False):
        return _serve_on_ray(args)
    try:
        config = config_from_args(args)
        sock = bind_socket(config.server)
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        return 2
    try:
        from .app import build_llm, create_app  # (FastAPI, torch and the model code load here)

        logging.getLogger("paraspec").setLevel(config.log_level)
        llm = build_llm(config, EngineArgs.from_cli(args, groups=("model",)))
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        sock.close()
        return 2
    except KeyboardInterrupt:
        print("paraspec: interrupted while loading the model", file=sys.stderr)
        return 130
    for note in config.warnings:
        logger.warning("%s", note)
    import signal
    import threading

    import uvicorn

    from .shutdown import FLUSH_S, GracefulShutdown

    # the engine loop runs on the main thread (torch is faster there than on a second thread,
    # see AsyncEngine), uvicorn's event loop on another
    app = create_app(llm, config, engine_thread=False, docs=args.docs)
    engine = app.state.async_engine
    # uvicorn is told to exit once the drain (shutdown.py) holds no request: its own grace only
    # bounds the last bytes' way to a client that reads slowly
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=logging.getLevelName(config.log_level).lower(),
            timeout_graceful_shutdown=FLUSH_S,
        )
    )

    def serve_http() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            # uvicorn skips the app's shutdown when told to exit during its startup: the engine
            # loop must end whenever the HTTP side does, or the process never exits
            engine.stop_loop()

    shutdown = GracefulShutdown(server, engine, config.server.shutdown_grace)
    http = threading.Thread(target=serve_http, name="paraspec-http", daemon=True)
    signal.signal(signal.SIGTERM, shutdown.on_signal)
    signal.signal(signal.SIGINT, shutdown.on_signal)
    http.start()
    engine.run_in_this_thread(should_stop=lambda: not http.is_alive())
    while http.is_alive():  # in steps, as the engine loop waits: a later signal's handler runs
        http.join(0.25)
    return 0 if server.started and not engine.cut_requests else 1


def _serve_on_ray(args: argparse.Namespace) -> int:
    """`paraspec serve --ray`: the same config.json, served by Ray Serve (paraspec.ray_serve)."""
    try:
        config = config_from_args(args)
        from ..ray_serve.launch import serve_ray
        from ..ray_serve.options import RayServeOptions

        opts = RayServeOptions(
            replicas=args.replicas,
            threads=args.threads or 1,
            engine=EngineArgs.from_cli(args, groups=("model",)).check(),
        )
    except ImportError:
        print(
            "paraspec: error: --ray needs Ray Serve; install the extra: pip install 'paraspec[ray]'",
            file=sys.stderr,
        )
        return 2
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        return 2
    for note in config.warnings:
        logger.warning("%s", note)
    return serve_ray(config, opts, args.address, docs=args.docs)


def bind_socket(server: ServerConfig) -> socket.socket:
    """The listening address, bound before the model loads: a port in use or an address of another
    machine is a one-line error in a second, not after the load."""
    host, port = server.ip_address, server.port
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        # as uvicorn does: restart over TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
    except OSError as e:
        hint = {
            errno.EADDRINUSE: "another process is listening there; stop it or choose another --port "
            "(ServerConfig.port)",
            errno.EADDRNOTAVAIL: "it is not an address of this machine; use one of its own addresses "
            "(ServerConfig.ipAddress / --host)",
            errno.EACCES: "this user may not bind it; choose a port from 1024 up",
        }.get(e.errno, "check --host and --port")
        raise ParaspecError(f"cannot listen on {host}:{port}: {e.strerror or e}; {hint}") from None
    sock.set_inheritable(True)
    return sock
