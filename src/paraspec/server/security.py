"""Who may talk to the server: an API key on the API, and which Host names it answers to.

    AccessGuard(app, api_key, allowed_hosts, metrics_open)    ASGI middleware, outermost

- API key: `Authorization: Bearer <key>` on /v1/* (and /metrics unless metrics_open), compared in
  constant time; a missing or wrong key is 401 in OpenAI's error shape. /health and /ready stay
  open (orchestrators probe them without secrets), and so does `/` (a page holds no data).
- Allowed hosts: the Host header must name one of them (the port is ignored). A local server is
  otherwise reachable from any web page through DNS rebinding: the page's own domain re-resolves to
  127.0.0.1 and the browser sends `Host: evil.example`. Refused with 400 (HTTP's answer for a
  Host the server does not serve).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging

from .protocol import ErrorInfo, ErrorResponse

logger = logging.getLogger("paraspec.server")

API_KEY_ENV = "PARASPEC_API_KEY"
OPEN_PATHS = ("/health", "/ready")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def default_allowed_hosts(bind: str) -> list[str] | None:
    """The bind address and the loopback names; None (any Host) when bound to every interface,
    where the names clients use are not known here (set ServerConfig.allowedHosts there)."""
    try:
        if ipaddress.ip_address(bind).is_unspecified:
            return None
    except ValueError:
        pass
    return sorted({bind, *LOCAL_HOSTS})


def host_name(header: str) -> str:
    """The host part of a Host header: `[::1]:8000` -> `::1`, `Example.com:80` -> `example.com`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    if header.count(":") == 1:
        return header.split(":", 1)[0]
    return header


class AccessGuard:
    """ASGI middleware: the Host check, then the API key (see the module docstring)."""

    def __init__(
        self,
        app,
        api_key: str | None = None,
        allowed_hosts: list[str] | None = None,
        metrics_open: bool = False,
    ):
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.hosts = (
            None
            if allowed_hosts is None or "*" in allowed_hosts
            else {host_name(h) for h in allowed_hosts}
        )
        self.metrics_open = metrics_open

    def needs_key(self, path: str) -> bool:
        if self.key is None or path in OPEN_PATHS:
            return False
        if path == "/metrics":
            return not self.metrics_open
        return (
            path.startswith("/v1/")
            or path == "/v1"
            or path.startswith("/docs")
            or path.startswith("/redoc")
            or path == "/openapi.json"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.hosts is not None:
            host = headers.get(b"host", b"").decode("latin-1")
            if host_name(host) not in self.hosts:
                return await reject(
                    send,
                    400,
                    f"the Host header {host[:100]!r} is not one this server answers "
                    "to; use one of ServerConfig.allowedHosts / --allowed-hosts",
                    "invalid_request_error",
                    "invalid_host",
                )
        if self.needs_key(scope["path"]) and not self._authorized(
            headers.get(b"authorization", b"")
        ):
            return await reject(
                send,
                401,
                "Incorrect or missing API key; send it as the header 'Authorization: Bearer <key>'",
                "invalid_request_error",
                "invalid_api_key",
                [(b"www-authenticate", b"Bearer")],
            )
        return await self.app(scope, receive, send)

    def _authorized(self, header: bytes) -> bool:
        scheme, _, token = header.partition(b" ")
        # compare_digest takes time independent of where the bytes differ; the length leaks, not the key
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)


async def reject(
    send,
    status: int,
    message: str,
    type_: str,
    code: str | None,
    extra: list[tuple[bytes, bytes]] = (),
) -> None:
    """An OpenAI-shaped error answered before the app runs (ASGI middleware)."""
    body = (
        ErrorResponse(error=ErrorInfo(message=message, type=type_, code=code))
        .model_dump_json()
        .encode()
    )
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
