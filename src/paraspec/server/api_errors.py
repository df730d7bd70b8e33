"""The API's errors: APIError (an HTTP status with OpenAI's error fields) and the mapping from any
exception a handler meets to the one a client sees (error_for)."""

from __future__ import annotations

from ..errors import ParaspecError
from .engine_client import (
    EngineDeadError,
    EngineStepError,
    RequestTimeoutError,
    ServerBusyError,
    ShuttingDownError,
)
from .protocol import ErrorInfo, ErrorResponse


class APIError(Exception):
    """An error with its HTTP status and OpenAI error fields; app.py renders it."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type, param, code

    def response(self) -> ErrorResponse:
        return ErrorResponse(
            error=ErrorInfo(message=str(self), type=self.type, param=self.param, code=self.code)
        )


def error_for(e: BaseException) -> APIError:
    """Any exception -> the APIError a client sees (500 for bugs, without internals)."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ParaspecError):
        return APIError(str(e), param=e.param)
    if isinstance(e, RequestTimeoutError):
        return APIError(str(e), status=504, type="timeout_error", code="timeout")
    if isinstance(e, ShuttingDownError):
        return APIError(str(e), status=503, type="service_unavailable_error", code="shutting_down")
    if isinstance(e, EngineDeadError):
        return APIError(str(e), status=503, type="service_unavailable_error")
    if isinstance(e, EngineStepError):
        return APIError(str(e), status=500, type="internal_server_error", code="engine_step_failed")
    if isinstance(e, ServerBusyError):
        return APIError(str(e), status=503, type="service_unavailable_error", code="server_busy")
    return APIError(
        "internal server error; the request was cancelled (see the server log)",
        status=500,
        type="internal_server_error",
    )


def unexpected(e: BaseException) -> bool:
    """Whether a handler logs e's traceback: a bug's, not an engine step's failure (logged once, with
    its cause, where it happened, however many requests it failed)."""
    return error_for(e).type == "internal_server_error" and not isinstance(e, EngineStepError)
