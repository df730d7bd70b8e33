"""`paraspec serve`: its flags, config.json plus the command line's overrides -> ServiceConfig, and
the process: the LLM the config describes, uvicorn on a thread, the engine loop on the main thread.
FastAPI, torch and the model load in serve_main, not at import: `paraspec --help` stays quick."""
from __future__ import annotations

import argparse
import logging
import os
import sys

from ..cli_flags import add_model_args, add_plugin_args, plugin_params_from_args
from ..errors import ParaspecError
from .config import ServiceConfig, load_config
from .security import API_KEY_ENV

logger = logging.getLogger("paraspec.server")

SHUTDOWN_GRACE_S = 30                 # on SIGTERM, running requests get this long to finish


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    s.add_argument("--config", default=None, help="MindIE-style config.json")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json (off by default)")
    s.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on /v1/* and /metrics (also ${API_KEY_ENV} or "
                        "ServerConfig.apiKey; the flag wins, then the variable)")
    s.add_argument("--allowed-hosts", default=None,
                   help="comma-separated Host names to answer ('*' for any; default: the bind address, localhost, "
                        "127.0.0.1, ::1)")
    s.add_argument("--metrics-open", action="store_true", default=None,
                   help="serve /metrics without the API key")
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
    hosts = [h.strip() for h in args.allowed_hosts.split(",")] if args.allowed_hosts is not None else None
    if args.config is not None and model == "default":
        model = None                      # the file's modelWeightPath wins over the flag's default
    return load_config(args.config, host=args.host, port=args.port, model=model, plugin_params=plugin,
                       plugin_flags=plugin_flags, speculation_gamma=args.speculation_gamma, api_key=api_key,
                       allowed_hosts=hosts, metrics_open=args.metrics_open)


def serve_main(args: argparse.Namespace) -> int:
    """`paraspec serve`: refuses to start (exit code 2, one line on stderr) on an invalid config."""
    from .app import build_llm, create_app   # (FastAPI, torch and the model code load here)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
        logging.getLogger("paraspec").setLevel(config.log_level)
        llm = build_llm(config, dtype=args.dtype, quantization=args.quantization, num_threads=args.threads)
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        return 2
    for note in config.warnings:
        logger.warning("%s", note)
    import signal
    import threading

    import uvicorn

    # the engine loop runs on the main thread (torch is ~1.5x faster there than on a second
    # thread, see AsyncEngine), uvicorn's event loop on another
    app = create_app(llm, config, engine_thread=False, docs=args.docs)
    server = uvicorn.Server(uvicorn.Config(app, host=config.server.ip_address, port=config.server.port,
                                           log_level=logging.getLevelName(config.log_level).lower(),
                                           timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
    http = threading.Thread(target=server.run, name="paraspec-http", daemon=True)

    def stop(*_) -> None:
        server.should_exit = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    http.start()
    app.state.async_engine.run_in_this_thread(should_stop=lambda: not http.is_alive())
    http.join()
    return 0 if server.started else 1
