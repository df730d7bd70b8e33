"""The FastAPI app: thin routes over the serving handlers, health / readiness / metrics, and
OpenAI-style error JSON for everything a client can get wrong (`paraspec serve` is command.py).

    create_app(llm, config) -> FastAPI      (tests, embedders and serve_main: the engine in this process)
    app_for(client, model, config) -> FastAPI   (any EngineClient: also the Ray Serve ingress)
    build_llm(config) -> LLM                (the model and drafter a config describes)
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, Awaitable

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..api import LLM
from ..engine_args import DEFAULTS, EngineArgs
from ..errors import ParaspecError
from .async_engine import AsyncEngine, EngineDeadError, RequestTimeoutError, ServerBusyError
from .config import ServiceConfig
from .engine_client import EngineClient, ModelInfo
from .framing import BodySizeLimit, RequestFraming
from .metrics import ServingMetrics
from .playground import router as playground_router
from .protocol import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from .security import AccessGuard, default_allowed_hosts
from .api_errors import APIError, error_for, unexpected
from .serving_chat import OpenAIServingChat
from .serving_responses import OpenAIServingResponses, ResponsesRequest
from .serving_completion import OpenAIServingCompletion

logger = logging.getLogger("paraspec.server")

router = APIRouter()


# ------------------------------------------------------------------------------------ routes


@router.get("/health")
@router.head("/health", include_in_schema=False)  # probes that send HEAD
async def health(raw: Request) -> Response:
    """Liveness: the engine loop is alive (app.state.async_engine: the EngineClient)."""
    ok = raw.app.state.async_engine.is_running
    return JSONResponse(
        {"status": "ok" if ok else "engine loop stopped"}, status_code=200 if ok else 503
    )


@router.get("/ready")
@router.head("/ready", include_in_schema=False)  # probes that send HEAD
async def ready(raw: Request) -> Response:
    """Readiness: the model is loaded and requests are accepted (false while shutting down)."""
    engine: EngineClient = raw.app.state.async_engine
    ok = engine.is_ready
    return JSONResponse(
        {"status": "ready" if ok else "not ready", "requests_in_flight": engine.num_in_flight},
        status_code=200 if ok else 503,
    )


@router.get("/metrics")
async def metrics(raw: Request) -> Response:
    engine: EngineClient = raw.app.state.async_engine
    return Response(await engine.metrics_text(), media_type=ServingMetrics.content_type)


@router.get("/v1/models")
async def list_models(raw: Request) -> ModelList:
    return ModelList(data=[raw.app.state.model_card])


@router.post("/v1/completions")
async def create_completion(request: CompletionRequest, raw: Request) -> Response:
    handler: OpenAIServingCompletion = raw.app.state.serving_completion
    return await _respond(raw, handler.create_completion(request))


@router.post("/v1/chat/completions")
async def create_chat_completion(request: ChatCompletionRequest, raw: Request) -> Response:
    handler: OpenAIServingChat = raw.app.state.serving_chat
    return await _respond(raw, handler.create_chat_completion(request))


@router.post("/v1/responses")
async def create_response(request: ResponsesRequest, raw: Request) -> Response:
    handler: OpenAIServingResponses = raw.app.state.serving_responses
    return await _respond(raw, handler.create_response(request))


async def _respond(raw: Request, work: Awaitable[Any]) -> Response:
    """Run a handler, cancelling it if the client disconnects first (which aborts its requests and
    frees their KV). A stream is handed to StreamingResponse, which cancels it on disconnect."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(raw))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        return Response(status_code=499)  # nobody is listening
    try:
        result = task.result()
    except Exception as e:  # rendered here: an unhandled exception would also drop the connection
        if unexpected(e):
            logger.error("request failed", exc_info=e)
        return _error(error_for(e))
    if hasattr(result, "__aiter__"):
        return StreamingResponse(
            result,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    # pydantic writes inf/nan as null
    return Response(result.model_dump_json(), media_type="application/json")


async def _disconnected(raw: Request) -> None:
    # the body has been read, so the next ASGI message is the disconnect (uvicorn sends nothing else)
    while (await raw.receive())["type"] != "http.disconnect":
        pass


# ------------------------------------------------------------------------------------ errors


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.response().model_dump(), status_code=e.status)


def _add_exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, e: APIError) -> JSONResponse:
        return _error(e)

    async def _mapped(_: Request, e: Exception) -> JSONResponse:
        return _error(error_for(e))

    for kind in (ParaspecError, ServerBusyError, EngineDeadError, RequestTimeoutError):
        app.add_exception_handler(kind, _mapped)

    @app.exception_handler(RequestValidationError)
    async def _invalid(raw: Request, e: RequestValidationError) -> JSONResponse:
        return _error(_validation_error(e, raw.headers.get("content-type")))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        if e.status_code == 400 and e.__cause__ is not None:  # FastAPI's "error parsing the body"
            return _error(_unreadable_body(e.__cause__))
        kinds = {
            404: "not_found_error",
            405: "invalid_request_error",
            408: "invalid_request_error",
            413: "invalid_request_error",
        }
        error = APIError(
            str(e.detail), status=e.status_code, type=kinds.get(e.status_code, "api_error")
        )
        response = _error(error)
        response.headers.update(e.headers or {})  # a 408's Connection: close
        return response

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception) -> JSONResponse:
        logger.exception("unhandled error", exc_info=e)
        return _error(error_for(e))


def _unreadable_body(cause: BaseException) -> APIError:
    """A body json.loads could not read for another reason than its syntax, worded like a syntax error."""
    if isinstance(cause, UnicodeDecodeError):
        why = f"it is not UTF-8 text (byte {cause.start}: {cause.object[cause.start : cause.start + 1]!r})"
        fix = "encode the JSON as UTF-8"
    elif isinstance(cause, RecursionError):
        why, fix = "it nests arrays or objects too deep to read", "flatten it"
    else:
        why, fix = f"it could not be read ({type(cause).__name__})", "send a JSON object"
    return APIError(f"the request body is not valid JSON: {why}; {fix}", code="invalid_json")


def _validation_error(e: RequestValidationError, content_type: str | None) -> APIError:
    errors = e.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return APIError(
            f"the request body is not valid JSON ({detail}); send a JSON object",
            code="invalid_json",
        )
    if first.get("loc") == ("body",) and first.get("type") == "missing":
        return APIError("the request body is missing; send a JSON object")
    if first.get("loc") == ("body",):
        media = (content_type or "").split(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            sent = f"as {media!r}" if media else "without a Content-Type"
            return APIError(
                f"the request body was sent {sent}; send a JSON object with the header "
                "'Content-Type: application/json'",
                code="invalid_content_type",
            )
        kind = {
            list: "an array",
            str: "a string",
            type(None): "null",
            bool: "a boolean",
            int: "a number",
            float: "a number",
        }.get(type(first.get("input")), "not an object")
        return APIError(
            f"the request body is {kind}; send a JSON object such as "
            '{"model": "...", "prompt": "..."}',
            code="invalid_json",
        )
    parts, param = [], None
    for err in errors[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ())[1:]) or "body"
        param = param or loc
        parts.append(f"{loc}: {err.get('msg')}")
    return APIError("invalid request: " + "; ".join(parts), param=param)


# ------------------------------------------------------------------------------------ app


def create_app(
    llm: LLM, config: ServiceConfig | None = None, engine_thread: bool = True, docs: bool = False
) -> FastAPI:
    """An app serving `llm` under `config`. The engine loop runs on a thread of its own, or, with
    engine_thread=False, wherever the caller runs app.state.async_engine.run_in_this_thread().
    docs: serve /docs, /redoc and /openapi.json (off by default: they map the API for anyone)."""
    config = config or ServiceConfig()
    name = config.model_deploy.model.model_name or llm.model_name
    metrics = ServingMetrics(name)
    engine = AsyncEngine(
        llm.engine,
        max_in_flight=config.server.max_link_num,
        token_timeout=config.server.token_timeout,
        e2e_timeout=config.server.e2e_timeout,
        metrics=metrics,
        own_thread=engine_thread,
    )

    def started() -> None:
        drafter = llm.engine.default_drafter
        logger.info(
            "serving %r (plugin: %s, maxBatchSize %d; %s%s, CPU kernels %s)",
            name,
            drafter.name if drafter is not None else "none",
            llm.engine.max_batch_size,
            llm.config.dtype,
            f" + {llm.config.quantization}" if llm.config.quantization else "",
            llm.kernels.label,
        )

    model = ModelInfo(name, llm.tokenizer, llm.model.args.vocab_size, llm.model.args.max_seq_len)
    app = app_for(engine, model, config, docs, on_start=started)
    app.state.metrics = metrics
    return app


def app_for(
    engine: EngineClient, model: ModelInfo, config: ServiceConfig, docs: bool = False, on_start=None
) -> FastAPI:
    """The app over any EngineClient: the local AsyncEngine (create_app) or a Ray Serve handle
    (paraspec.ray_serve), started and shut down with the app."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await engine.start()
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            await engine.shutdown()

    app = FastAPI(
        title="paraspec",
        description="OpenAI-compatible API with lossless parallel decoding",
        lifespan=lifespan,
        **({} if docs else dict(docs_url=None, redoc_url=None, openapi_url=None)),
    )
    shared = dict(
        model_name=model.name, vocab_size=model.vocab_size, model_max_len=model.max_seq_len
    )
    app.state.async_engine = engine
    app.state.serving_completion = OpenAIServingCompletion(
        engine, model.tokenizer, config, **shared
    )
    app.state.serving_chat = OpenAIServingChat(engine, model.tokenizer, config, **shared)
    app.state.serving_responses = OpenAIServingResponses(app.state.serving_chat)
    app.state.model_card = ModelCard(
        id=model.name, max_model_len=app.state.serving_chat.max_seq_len
    )
    app.include_router(router)
    app.include_router(playground_router)
    _add_exception_handlers(app)
    app.add_middleware(BodySizeLimit)
    server = config.server
    hosts = (
        server.allowed_hosts
        if server.allowed_hosts is not None
        else default_allowed_hosts(server.ip_address)
    )
    app.add_middleware(
        AccessGuard, api_key=server.api_key, allowed_hosts=hosts, metrics_open=server.metrics_open
    )
    app.add_middleware(RequestFraming, body_timeout=server.body_timeout)
    return app


def build_llm(config: ServiceConfig, args: EngineArgs | None = None, **options) -> LLM:
    """The LLM a config describes, with the command line's model options: `args` (EngineArgs.from_cli)
    and/or EngineArgs fields as keywords. Its plugin_params were validated when the config was read."""
    deploy = config.model_deploy
    llm = LLM.from_engine_args(config.engine_args(replace(args or DEFAULTS, **options)))
    if deploy.max_seq_len > llm.model.args.max_seq_len:
        config.warnings.append(
            f"BackendConfig.ModelDeployConfig.maxSeqLen={deploy.max_seq_len} is above the "
            f"model's context of {llm.model.args.max_seq_len}; requests are limited to that"
        )
    return llm
