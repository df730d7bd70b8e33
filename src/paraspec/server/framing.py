"""How a request's body may arrive, checked before the app reads it (ASGI middleware):

    RequestFraming(app, body_timeout)   outermost: Content-Length with Transfer-Encoding is a 400,
                                        a body slower than body_timeout a 408; both close the connection
    BodySizeLimit(app, max_bytes)       a body over max_bytes is a 413

uvicorn's HTTP/1.1 parser (h11) frames a request that names both Content-Length and
`Transfer-Encoding: chunked` by the chunks and ignores the length; a proxy in front that trusts the
length frames it otherwise, and the bytes between the two readings become a second, smuggled
request. RFC 9112 (6.1) lets a server refuse such a request and says to close the connection after
it: that is done here. Nor does uvicorn bound how long a body may take (its keep-alive timeout
covers idle connections between requests, not a body that stops half way), so a client could hold
a connection and its request for as long as it liked.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException as StarletteHTTPException

from .security import reject

MAX_BODY_BYTES = 16 * 1024 * 1024  # a request body larger than this is refused (HTTP 413)
CLOSE = {"Connection": "close"}


class RequestFraming:
    """Refuses ambiguous framing (400) and bounds the time the whole body may take (408), counted
    from the app's first read of it (ServerConfig.bodyTimeout); both answers close the connection,
    since the rest of the bytes on it cannot be trusted to start a request."""

    def __init__(self, app, body_timeout: float):
        self.app, self.body_timeout = app, body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        names = {name for name, _ in scope["headers"]}  # ASGI names are lower case
        if b"transfer-encoding" in names and b"content-length" in names:
            return await reject(
                send,
                400,
                "the request has both Content-Length and Transfer-Encoding headers, "
                "which frame its body two ways; send one of them",
                "invalid_request_error",
                "invalid_framing",
                [(b"connection", b"close")],
            )
        deadline: float | None = None
        complete = False

        async def timed_receive():
            nonlocal deadline, complete
            if complete:  # the body is in; what follows is the disconnect
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = deadline if deadline is not None else loop.time() + self.body_timeout
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                # raised to FastAPI's body read, which re-raises HTTP errors: app.py renders it
                raise StarletteHTTPException(
                    408,
                    f"the request body did not arrive within {self.body_timeout:g} s "
                    "(ServerConfig.bodyTimeout); send it whole, without pauses",
                    headers=CLOSE,
                ) from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return await self.app(scope, timed_receive, send)


class BodySizeLimit:
    """Refuses bodies over max_bytes (HTTP 413), by Content-Length and while reading a chunked body."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await reject(
                send,
                413,
                f"the request body is larger than {self.max_bytes} bytes",
                "invalid_request_error",
                None,
            )
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # FastAPI re-raises HTTPException while reading the body
                    raise StarletteHTTPException(
                        413, f"the request body is larger than {self.max_bytes} bytes"
                    )
            return message

        return await self.app(scope, limited, send)
