"""OpenAI-compatible HTTP server: `paraspec serve`.

config.py              MindIE-style config.json's sections as typed dataclasses (ServiceConfig)
config_loader.py       config.json + command-line overrides -> a validated ServiceConfig
config_model.py        the one ModelConfig entry: weights, name, plugin_params vs speculationGamma
protocol.py            OpenAI request/response schemas (pydantic); requests -> SamplingParams
async_engine.py        the Engine's step loop on one thread, fed from asyncio; abort / timeout / 503
engine_loop.py         the loop thread's side: commands between steps, step updates -> Deltas
serving.py             what both endpoints share: validation, limits, plugin overrides, logprobs
serving_outputs.py     usage, stats and SSE chunks built from the engine's deltas
api_errors.py          APIError and the mapping from any exception to the one a client sees
serving_completion.py  /v1/completions: a full response or SSE chunks
serving_chat.py        /v1/chat/completions: a full response or SSE chunks
metrics.py             Prometheus collectors in a per-app registry
app.py                 FastAPI app, routes, error JSON
command.py             `paraspec serve`: flags, config + overrides, the process
"""

from .command import serve_main
from .config import ServiceConfig
from .config_loader import load_config

__all__ = ["ServiceConfig", "create_app", "load_config", "serve_main"]


def __getattr__(name: str):
    # create_app loads FastAPI, torch and the model code: on first use, so that the CLI, which
    # imports command.py through this package, parses its flags without them
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
