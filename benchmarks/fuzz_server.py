"""Seeded fuzzing of a real `paraspec serve`: every endpoint and feature, malformed JSON and HTTP
framing, from concurrent senders (benchmarks/fuzz_cases.py makes the cases).

    python benchmarks/fuzz_server.py --cases 1000 --seed 7 --concurrency 4     # starts paraspec serve
    python benchmarks/fuzz_server.py --url http://127.0.0.1:1025 --cases 200   # a server already running
    python benchmarks/fuzz_server.py --replay 7:123                            # one case again, verbose

The rule for every case: no 5xx (but the documented overload answer, a 503 with code
server_busy), an answer within --timeout, a 4xx is one line of OpenAI-shaped error JSON naming
the field the case broke (in `param` or the message), a 200 stream ends properly ([DONE], or the
Responses API's completed event) with no error event of the server's own. After the run the
server is idle (/ready: no request in flight), healthy (/health), and a greedy request gives the
same text as before the fuzzing; a server this script started must exit 0 on SIGTERM and log no
traceback. Each failure prints its `--replay SEED:CASE`; the exit code is 1 if any case failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def _load(name: str):
    """A module of this folder, by its path: benchmarks/ on sys.path would shadow `kernels`."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


_cases = _load("fuzz_cases")
Case, make_case = _cases.Case, _cases.make_case

CANARY = {"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}
OVERLOAD = (503, "server_busy")  # the documented answer when maxLinkNum is reached
FINAL_EVENTS = ("response.completed", "response.incomplete")


@dataclass
class Answer:
    status: int | None = None
    text: str = ""
    statuses: list[int] = field(default_factory=list)  # raw cases: every response on the connection
    bodies: list[str] = field(default_factory=list)  # ... and its body
    error: str | None = None  # no answer: why


@dataclass
class Report:
    statuses: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    failures: list[tuple[Case, str]] = field(default_factory=list)


# ------------------------------------------------------------------------------------ sending


def send(case: Case, url: str, client: httpx.Client, timeout: float) -> Answer:
    if case.raw is not None or case.method not in ("GET", "POST", "HEAD", "DELETE", "OPTIONS"):
        return send_raw(case, url, timeout)
    try:
        with client.stream(
            case.method, case.path, content=case.body, headers=case.headers, timeout=timeout
        ) as r:
            if case.cut and r.status_code == 200:
                return Answer(r.status_code, next(r.iter_text(), ""))  # the client goes away
            return Answer(r.status_code, "".join(r.iter_text()))
    except httpx.TimeoutException:
        return Answer(error=f"no answer within {timeout:g} s")
    except httpx.HTTPError as e:
        return Answer(error=f"the connection failed: {type(e).__name__}: {e}")


def send_raw(case: Case, url: str, timeout: float) -> Answer:
    """Write the case's bytes on a new connection; read until the server closes it, or until a
    complete answer is followed by a second of silence (a kept-alive connection)."""
    host, port = url.split("//")[1].rsplit(":", 1)
    data = (
        case.raw
        if case.raw is not None
        else (
            f"{case.method} {case.path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ).encode()
    )
    out = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # refused half way (and closed): read what was answered
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(1.0 if _complete(out) else max(deadline - time.monotonic(), 0.01))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                if _complete(out):
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        else:
            if not _complete(out):
                return Answer(error=f"no answer and no close within {timeout:g} s")
    answers = _responses(out)
    return Answer(
        answers[0][0] if answers else None,
        answers[0][1] if answers else "",
        [status for status, _ in answers],
        bodies=[body for _, body in answers],
    )


def _responses(out: bytes) -> list[tuple[int, str]]:
    """(status, body) of each HTTP/1.1 response in the bytes read (bodies by Content-Length)."""
    answers = []
    while (m := re.match(rb"HTTP/1\.[01] (\d{3})[^\r]*\r\n(.*?)\r\n\r\n", out, re.S)) is not None:
        length = re.search(rb"(?:^|\r\n)content-length: *(\d+)", m.group(2), re.I)
        end = m.end() + (int(length.group(1)) if length else 0)
        answers.append((int(m.group(1)), out[m.end() : end].decode("utf-8", "replace")))
        out = out[end:]
    return answers


def _complete(out: bytes) -> bool:
    head, sep, body = out.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"content-length: *(\d+)", head, re.I)
    return m is not None and len(body) >= int(m.group(1))


# ------------------------------------------------------------------------------------ the rule


def check(case: Case, a: Answer) -> str | None:
    """Why the answer breaks the rule, or None."""
    if a.error is not None:
        return a.error
    for status in a.statuses or [a.status]:
        if status is not None and status >= 500 and (status, _code(a.text)) != OVERLOAD:
            return f"HTTP {status}: {a.text[:300]!r}"
    if case.raw is not None:  # framing: uvicorn answers what it cannot parse in one plain line
        for status, body in zip(a.statuses, a.bodies):
            several = f"HTTP {status} with a body of several lines: {body[:300]!r}"
            problem = (
                _check_error(case, Answer(status, body))
                if body.startswith("{")
                else None
                if "\n" not in body.strip()
                else several
            )
            if problem is not None and status >= 400:
                return problem
        return None
    if a.status is None or case.method == "HEAD":
        return None
    if 400 <= a.status < 500:
        return _check_error(case, a)
    if a.status == 200 and case.path.startswith("/v1/") and case.method == "POST" and not case.cut:
        return _check_stream(case, a.text) if case.stream else _check_json(case, a.text)
    return None


def _code(text: str) -> str | None:
    try:
        return json.loads(text)["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _check_error(case: Case, a: Answer) -> str | None:
    try:
        err = json.loads(a.text)["error"]
        message, param = err["message"], err.get("param") or ""
    except (ValueError, KeyError, TypeError):
        return f"HTTP {a.status} without OpenAI-shaped error JSON: {a.text[:300]!r}"
    if not isinstance(message, str) or "\n" in message or not message.strip():
        return f"HTTP {a.status} with an error message that is not one line: {message!r}"
    if case.blame:
        field_ = re.split(r"[.\[]", case.blame)[0]
        if field_ not in param and field_ not in message:
            return f"HTTP {a.status} does not name {case.blame!r} (param {param!r}): {message}"
    return None


def _check_json(case: Case, text: str) -> str | None:
    try:
        body = json.loads(text)
    except ValueError:
        return f"HTTP 200 whose body is not JSON: {text[:300]!r}"
    if case.path == "/v1/responses":
        return (
            None if body.get("object") == "response" else f"not a Response object: {text[:300]!r}"
        )
    want = _choices(json.loads(case.body))
    got = len(body.get("choices") or [])
    return None if got == want else f"HTTP 200 with {got} choices, not {want}: {text[:300]!r}"


def _choices(request: dict) -> int:
    """n per prompt: a completion's prompt may be a list of texts or of token-id lists."""
    prompt = request.get("prompt")
    prompts = (
        len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    )
    return prompts * (request.get("n") or 1)


def _check_stream(case: Case, text: str) -> str | None:
    data = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    if not data:
        return f"an empty stream: {text[:300]!r}"
    if case.path == "/v1/responses":
        last = json.loads(data[-1]).get("type")
        return None if last in FINAL_EVENTS else f"the stream ended with {last!r}: {data[-1][:300]}"
    if data[-1] != "[DONE]":
        return f"the stream did not end with [DONE]: {data[-1][:300]!r}"
    request = json.loads(case.body)
    if (
        (request.get("stream_options") or {}).get("include_usage")
        and len(data) > 1
        and not json.loads(data[-2]).get("usage")
    ):
        return f"include_usage, but the last chunk has no usage: {data[-2][:300]}"
    for d in data[:-1]:
        err = json.loads(d).get("error")
        if err is not None and err.get("type") != "invalid_request_error":
            return f"an error event in the stream: {d[:300]}"
    return None


# ------------------------------------------------------------------------------------ the run


def run(
    url: str,
    seed: int,
    cases: int,
    concurrency: int = 4,
    timeout: float = 120.0,
    body_timeout: float | None = None,
    api_key: str | None = None,
    first: int = 0,
    log=print,
) -> Report:
    """Cases first .. first + cases - 1 of `seed` against `url`, `concurrency` at a time."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    host = url.split("//")[1].rsplit(":", 1)[0]
    report = Report()
    limits = httpx.Limits(max_connections=concurrency * 2)
    with httpx.Client(base_url=url, headers=headers, limits=limits) as client:

        def one(i: int) -> None:
            case = make_case(seed, i, host, body_timeout)
            if case.stalls and body_timeout is None:
                return
            answer = send(case, url, client, timeout + (body_timeout or 0))
            problem = check(case, answer)
            report.statuses[answer.status] += 1
            report.kinds[case.kind.split("-")[0]] += 1
            if problem is not None:
                report.failures.append((case, problem))
                log(f"FAIL --replay {case.replay}: {problem}\n    {case.describe()}")

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(first, first + cases)))
    return report


def canary(url: str, api_key: str | None = None, timeout: float = 120.0) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.post(url + "/v1/completions", json=CANARY, headers=headers, timeout=timeout)
    r.raise_for_status()
    return r.json()["choices"][0]["text"]


def after_the_fuzz(
    url: str, before: str, api_key: str | None = None, wait_s: float = 120.0
) -> list[str]:
    """What is wrong with the server after the fuzzing: requests still held, not healthy, or a
    greedy answer that changed."""
    deadline = time.monotonic() + wait_s
    while (ready := httpx.get(url + "/ready", timeout=30)).json().get("requests_in_flight", 0):
        if time.monotonic() > deadline:
            return [f"requests still in flight {wait_s:g} s after the last case: {ready.text}"]
        time.sleep(0.2)
    problems = (
        [] if ready.status_code == 200 else [f"/ready answers {ready.status_code}: {ready.text}"]
    )
    health = httpx.get(url + "/health", timeout=30)
    problems += (
        []
        if health.status_code == 200
        else [f"/health answers {health.status_code}: {health.text}"]
    )
    again = canary(url, api_key)
    problems += [] if again == before else [f"the greedy canary changed: {before!r} -> {again!r}"]
    return problems


def start_server(
    model: str, body_timeout: float, workdir: Path
) -> tuple[subprocess.Popen, str, Path]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = workdir / "config.json"
    config.write_text(
        json.dumps(
            {
                "ServerConfig": {"port": port, "maxLinkNum": 64, "bodyTimeout": body_timeout},
                "BackendConfig": {
                    "ModelDeployConfig": {
                        "maxSeqLen": 1024,
                        "maxInputTokenLen": 512,
                        "ModelConfig": [{"modelName": "fuzz", "modelWeightPath": model}],
                    },
                    "ScheduleConfig": {"maxIterTimes": 64},
                },
            }
        )
    )
    log = workdir / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "paraspec.cli", "serve", "--config", str(config)],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"paraspec serve did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop_server(proc: subprocess.Popen, log: Path) -> list[str]:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return ["paraspec serve did not exit within 120 s of SIGTERM"]
    text = log.read_text()
    problems = [] if code == 0 else [f"paraspec serve exited {code} on SIGTERM"]
    if "Traceback" in text:
        i = text.index("Traceback")
        problems.append(f"the server logged a traceback:\n{text[max(0, i - 300) : i + 2500]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--url", default=None, help="fuzz this server instead of starting paraspec serve"
    )
    p.add_argument(
        "--model",
        default="default",
        help="the model paraspec serve loads (default: the bundled one)",
    )
    p.add_argument("--api-key", default=os.environ.get("PARASPEC_API_KEY"))
    p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds a case may wait for its answer"
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=None,
        help="the server's ServerConfig.bodyTimeout: with it, stalled bodies are fuzzed too "
        "(default: 2 for a server started here, none with --url)",
    )
    p.add_argument(
        "--replay", default=None, metavar="SEED:CASE", help="run one case, showing its answer"
    )
    args = p.parse_args(argv)
    body_timeout = args.body_timeout if args.url or args.body_timeout is not None else 2.0
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    with tempfile.TemporaryDirectory() as tmp:
        proc = log = None
        url = args.url.rstrip("/") if args.url else None
        if url is None:
            proc, url, log = start_server(args.model, body_timeout, Path(tmp))
        try:
            if args.replay:
                seed, index = (int(x) for x in args.replay.split(":"))
                case = make_case(seed, index, url.split("//")[1].rsplit(":", 1)[0], body_timeout)
                print(case.describe(5000))
                with httpx.Client(base_url=url) as client:
                    answer = send(case, url, client, args.timeout + (body_timeout or 0))
                print(f"-> {answer.status} {answer.error or ''}\n{answer.text[:3000]}")
                problem = check(case, answer)
                print("ok" if problem is None else f"FAIL: {problem}")
                return int(problem is not None)
            before = canary(url, args.api_key)
            print(f"fuzzing {url}: {args.cases} cases, seed {seed}, concurrency {args.concurrency}")
            t0 = time.monotonic()
            report = run(
                url, seed, args.cases, args.concurrency, args.timeout, body_timeout, args.api_key
            )
            problems = after_the_fuzz(url, before, args.api_key)
        finally:
            if proc is not None:
                stop = stop_server(proc, log)
        problems += stop if proc is not None else []
    print(f"{sum(report.statuses.values())} cases in {time.monotonic() - t0:.0f} s, seed {seed}")
    print(
        "statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(report.statuses.items(), key=str))
    )
    print("kinds: " + ", ".join(f"{k}: {v}" for k, v in sorted(report.kinds.items())))
    for case, problem in report.failures:
        print(f"FAIL --replay {case.replay}: {problem}")
    for problem in problems:
        print(f"FAIL after the fuzzing: {problem}")
    failed = len(report.failures) + len(problems)
    print(f"{failed} failures" if failed else "ok")
    return int(bool(report.failures or problems))


if __name__ == "__main__":
    sys.exit(main())
