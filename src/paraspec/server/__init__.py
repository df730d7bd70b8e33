"""OpenAI-compatible HTTP server: `paraspec serve`.

    config.py        MindIE-style config.json -> typed, validated ServiceConfig
    protocol.py      OpenAI request/response schemas (pydantic); requests -> SamplingParams
    async_engine.py  the Engine's step loop on one thread, fed from asyncio; abort / timeout / 503
    serving.py       completion and chat handlers: full responses or SSE chunks, logprobs, stats
    metrics.py       Prometheus collectors in a per-app registry
    app.py           FastAPI app, routes, error JSON, serve_main
"""
from .app import create_app, serve_main
from .config import ServiceConfig, load_config

__all__ = ["ServiceConfig", "create_app", "load_config", "serve_main"]
