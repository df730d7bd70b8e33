"""The playground: one static page at `/` (HTML, a script, a stylesheet; package data under
server/playground/, no build step) that talks to this server's own OpenAI endpoints and /metrics,
and draws each decode step's run of tokens from the stream's opt-in `paraspec.steps` trace.

The page needs no API key to load (it asks for one and sends it as a Bearer token), and its
Content-Security-Policy allows nothing but this origin: the page cannot fetch from anywhere else.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter()

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "playground.js": "text/javascript; charset=utf-8",
    "conversation.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",  # a newer paraspec serves a newer page
}


@cache
def asset(name: str) -> bytes:
    return (resources.files("paraspec.server") / "playground" / name).read_bytes()


def _serve(name: str) -> Response:
    return Response(asset(name), media_type=ASSETS[name], headers=HEADERS)


@router.get("/", include_in_schema=False)
async def page() -> Response:
    return _serve("index.html")


@router.get("/playground.js", include_in_schema=False)
async def script() -> Response:
    return _serve("playground.js")


@router.get("/conversation.js", include_in_schema=False)
async def conversation_script() -> Response:
    return _serve("conversation.js")


@router.get("/playground.css", include_in_schema=False)
async def stylesheet() -> Response:
    return _serve("playground.css")
