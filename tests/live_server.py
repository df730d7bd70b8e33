"""A real uvicorn serving an app on 127.0.0.1 (a free port) in a background thread, for the server tests."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import uvicorn


class LiveServer:
    """uvicorn serving `app` on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app, api_key: str = "unused"):
        self.app, self.api_key = app, api_key
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, (
                "the server did not start"
            )
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(
            base_url=self.url, timeout=30, headers={"Authorization": f"Bearer {self.api_key}"}
        )
        self.client = openai.OpenAI(
            base_url=self.url + "/v1", api_key=self.api_key, max_retries=0, timeout=60
        )
        return self

    def __exit__(self, *exc) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(30)

    @property
    def engine(self):
        return self.app.state.async_engine

    def call(self, fn, timeout: float = 60.0):
        """fn(engine) on the engine's loop thread between two steps (AsyncEngine.call)."""
        return asyncio.run_coroutine_threadsafe(self.engine.call(fn), self.engine.loop).result(
            timeout
        )

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until no request is held and the engine has nothing left (aborts are processed)."""
        deadline = time.monotonic() + timeout
        while self.engine.num_in_flight or self.engine.engine.has_work():
            assert time.monotonic() < deadline, "requests still held"
            time.sleep(0.01)
