"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, standard library only.

`--remote-debugging-pipe` makes Chromium read protocol messages from fd 3 and write them to fd 4,
each a JSON object ended by a NUL byte: no websocket client and no downloaded browser needed.
One page target, attached in flat mode; events are kept for the test to inspect.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

BINARY = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
]


class ChromiumError(RuntimeError):
    pass


class Chromium:
    def __init__(
        self, user_data_dir: Path, binary: str = BINARY, width: int = 1400, height: int = 900
    ):
        self.log_path = Path(user_data_dir).parent / "chromium.log"
        self._log = open(self.log_path, "wb")  # a file, not a pipe: nobody drains Chromium's stderr
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # bash moves the pipe ends to fds 3 and 4 and execs Chromium (no preexec_fn: the test process
        # runs uvicorn on a thread, where forking Python code is unsafe; dash takes one-digit fds only)
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
                binary,
                *FLAGS,
                f"--user-data-dir={user_data_dir}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        self.size = (width, height)

    # ---------------------------------------------------------------- protocol

    def send(self, method: str, timeout: float = 30.0, **params) -> dict:
        """One command (to the attached page once there is one); its result, or ChromiumError."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise ChromiumError("Chromium did not answer in time")
            data = os.read(self._from_chrome, 1 << 16)
            if not data:
                raise ChromiumError("Chromium closed the pipe: " + self._stderr())
            self._buffer += data
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _stderr(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    # ---------------------------------------------------------------- page

    def open(self, url: str) -> None:
        """A new page at url, attached; console, exceptions and network requests are recorded."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")
        width, height = self.size
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str, timeout: float = 30.0):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send(
            "Runtime.evaluate",
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise ChromiumError(
                f"{expression[:60]!r} threw: "
                f"{details.get('exception', {}).get('description') or details.get('text')}"
            )
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, poll: float = 0.1):
        """Until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise ChromiumError(f"timed out waiting for {expression!r} (last value {value!r})")
            time.sleep(poll)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=False)[
            "data"
        ]
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self) -> list[str]:
        """Exceptions, console errors and log errors (CSP violations among them) seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(
                    p["exceptionDetails"].get("exception", {}).get("description", "exception")
                )
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))
                )
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requested_urls(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (ChromiumError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._log.close()

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def available(binary: str = BINARY) -> bool:
    return Path(binary).exists() and shutil.which(binary) is not None
