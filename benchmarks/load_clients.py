"""The client side of load_soak.py: ShareGPT conversations cut into chat requests, N simulated
users sending them with the official openai client (streamed or not, some closed mid-stream), each
request's outcome and timings, the same requests again one at a time, the figures per run, and the
server's resident memory sampled meanwhile.

A user replays its conversations turn by turn; each turn's history is the conversation's own
earlier turns as the data has them (the user's questions and the data's answers), not the answers
the server gave. So every system gets the same requests in the same order whatever it answers, a
turn closed mid-stream leaves the next turn unchanged, and each request can be sent again alone
and must give the same greedy tokens.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

OVERLOAD_CODE = "server_busy"  # the documented 503 at maxLinkNum (docs/serving.md, Scheduling)
OVERLOAD_PAUSE_S = 0.5  # a refused user waits this long before its next turn


@dataclass(frozen=True)
class Turn:
    conversation: str
    index: int  # the user turn's number in its conversation, from 0
    messages: tuple[dict, ...]
    max_tokens: int


@dataclass
class Record:
    """One request and how it ended."""

    client: int
    turn: Turn
    stream: bool
    cancel_after: int | None  # content chunks read before the client closes the stream
    outcome: str = "ok"  # ok, cancelled, overload, 4xx, 5xx, stream_error, timeout, connection
    status: int | None = None
    detail: str = ""
    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None
    start: float = 0.0  # seconds since the run began
    latency_s: float = 0.0
    ttft_s: float | None = None  # streamed: to the first chunk with text
    decode_s: float | None = None  # streamed: first chunk with text to the last


# ------------------------------------------------------------------------------------ requests


def conversations(data: str, seed: int) -> tuple[list[list[dict]], str]:
    """The conversations to replay (role/content lists, alternating from a user turn) in a seeded
    order, and where they came from. data: "sharegpt" (the eval split of the fetched file; the
    bench's chat prompts where it is absent, said so), "chat", or a ShareGPT-format JSON file."""
    from paraspec import catalog, datasets
    from paraspec.bench.workload_tasks import _usable

    if data == "sharegpt" and not catalog.is_fetched("sharegpt"):
        print(
            "ShareGPT is not fetched (`paraspec fetch sharegpt` or `make models`): "
            "replaying the bench's chat prompts, one turn each",
            file=sys.stderr,
        )
        data = "chat"
    if data == "chat":
        from paraspec.bench.tasks import load_task_set

        convs = [
            list(t.messages or [{"role": "user", "content": t.prompt}])
            for t in load_task_set("chat")
        ]
        source = "the bench's chat prompts (one turn each)"
    else:
        if data == "sharegpt":
            found, source = datasets.sharegpt_split("eval"), "ShareGPT V3, eval split"
        else:
            found, source = (
                tuple(datasets.sharegpt_conversations(Path(data))),
                f"ShareGPT-format {data}",
            )
        convs = [msgs for c in found if (msgs := _usable(c))]
    random.Random(seed).shuffle(convs)
    return convs, source


def turns_of(conv_id: str, msgs: list[dict], prompt_chars: int, max_tokens: int) -> list[Turn]:
    """One request per user turn whose question fits prompt_chars; the whole exchanges before it
    as history, newest first while they fit (oldest dropped, never cut). max_tokens: the cap, or
    less where the data's own answer is short (the bench's answer_cap)."""
    from paraspec.bench.task import answer_cap

    out = []
    for q in range(0, len(msgs), 2):
        used = len(msgs[q]["content"])
        if used > prompt_chars:
            continue
        start = q
        while (
            start >= 2
            and (more := len(msgs[start - 2]["content"]) + len(msgs[start - 1]["content"])) + used
            <= prompt_chars
        ):
            start, used = start - 2, used + more
        cap = (
            max_tokens
            if q + 1 >= len(msgs)
            else min(max_tokens, answer_cap(len(msgs[q + 1]["content"])))
        )
        out.append(Turn(conv_id, q // 2, tuple(dict(m) for m in msgs[start : q + 1]), cap))
    return out


class Plan:
    """Which turns a user sends, in order, and which it streams or closes mid-stream. User i of n
    takes conversations i, i + n, i + 2n, ... (from the first again after the last); streams and
    cancels are spread evenly over its requests (a share of 0.1 is every tenth request, from a
    seeded phase), so short runs get their share too."""

    def __init__(
        self,
        convs: list[list[dict]],
        prompt_chars: int,
        max_tokens: int,
        stream_share: float,
        cancel_share: float,
        seed: int,
    ):
        self.convs = [
            ts
            for i, msgs in enumerate(convs)
            if (ts := turns_of(str(i), msgs, prompt_chars, max_tokens))
        ]
        if not self.convs:
            raise ValueError(
                f"no conversation has a user turn of at most {prompt_chars} characters "
                "(--prompt-chars)"
            )
        self.stream_share, self.cancel_share, self.seed = stream_share, cancel_share, seed

    def requests(self, client: int, n_clients: int):
        """(turn, streamed, chunks before closing it or None) for ever, in this user's order."""
        rng = random.Random(f"{self.seed}:{client}")
        cancel_phase, stream_phase = rng.random(), rng.random()
        k = plain = 0
        for c in range(client, 10**12, n_clients):
            for turn in self.convs[c % len(self.convs)]:
                if _nth(k, self.cancel_share, cancel_phase):
                    yield turn, True, 1 + rng.randrange(3)
                else:
                    yield turn, _nth(plain, self.stream_share, stream_phase), None
                    plain += 1
                k += 1


def _nth(k: int, share: float, phase: float) -> bool:
    """Whether the k-th of a series is picked, picking `share` of them evenly."""
    return math.floor((k + 1) * share + phase) > math.floor(k * share + phase)


# ------------------------------------------------------------------------------------ sending


async def send(
    client: openai.AsyncOpenAI, model: str, rec: Record, extra_body: dict | None, t0: float
) -> Record:
    body = dict(
        model=model,
        messages=list(rec.turn.messages),
        max_tokens=rec.turn.max_tokens,
        temperature=0,
        extra_body=extra_body,
    )
    start = time.perf_counter()
    rec.start = start - t0
    try:
        if rec.stream:
            await _streamed(client, body, rec, start)
        else:
            r = await client.chat.completions.create(**body)
            rec.text, rec.finish_reason = (
                r.choices[0].message.content or "",
                r.choices[0].finish_reason,
            )
            rec.tokens, rec.status = r.usage.completion_tokens if r.usage else 0, 200
    except openai.APIStatusError as e:
        rec.status, rec.detail = e.status_code, f"{e.code}: {e.message}"[:300]
        rec.outcome = (
            "overload"
            if (e.status_code, e.code) == (503, OVERLOAD_CODE)
            else "5xx"
            if e.status_code >= 500
            else "4xx"
        )
    except openai.APITimeoutError:
        rec.outcome, rec.detail = "timeout", "no answer within the client's timeout"
    except openai.APIConnectionError as e:
        rec.outcome, rec.detail = "connection", f"{type(e.__cause__ or e).__name__}: {e}"[:300]
    except openai.APIError as e:  # an error event inside a 200 stream
        rec.outcome = "overload" if e.code == OVERLOAD_CODE else "stream_error"
        rec.detail = f"{e.code}: {e.message}"[:300]
    except httpx.TimeoutException:  # inside a stream the client's errors come through unwrapped
        rec.outcome, rec.detail = "timeout", "no chunk within the client's timeout"
    except httpx.HTTPError as e:
        rec.outcome, rec.detail = "connection", f"{type(e).__name__}: {e}"[:300]
    rec.latency_s = time.perf_counter() - start
    return rec


async def _streamed(client: openai.AsyncOpenAI, body: dict, rec: Record, start: float) -> None:
    stream = await client.chat.completions.create(
        **body, stream=True, stream_options={"include_usage": True}
    )
    rec.status = 200
    parts, chunks, first, last, usage = [], 0, None, None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            if c.delta.content:
                now = time.perf_counter()
                first, last, chunks = first or now, now, chunks + 1
                parts.append(c.delta.content)
            rec.finish_reason = c.finish_reason or rec.finish_reason
        if (
            rec.cancel_after is not None
            and chunks >= rec.cancel_after
            and rec.finish_reason is None
        ):
            await stream.close()  # the user goes away mid-answer
            rec.outcome = "cancelled"
            break
    rec.text = "".join(parts)
    # a server without include_usage (a peer) sends one token per chunk
    rec.tokens = usage.completion_tokens if usage else chunks
    if first is not None:
        rec.ttft_s, rec.decode_s = first - start, last - first


async def user(
    client_no: int,
    client: openai.AsyncOpenAI,
    model: str,
    requests,
    extra_body: dict | None,
    t0: float,
    deadline: float | None,
    max_requests: int | None,
    out: list[Record],
) -> None:
    for n, (turn, stream, cancel_after) in enumerate(requests):
        if max_requests is not None and n >= max_requests:
            return
        if deadline is not None and time.perf_counter() >= deadline:
            return
        rec = await send(
            client, model, Record(client_no, turn, stream, cancel_after), extra_body, t0
        )
        out.append(rec)
        if rec.outcome == "overload":
            await asyncio.sleep(OVERLOAD_PAUSE_S)


def openai_client(url: str, timeout: float, api_key: str | None) -> openai.AsyncOpenAI:
    # no retries: a refused or failed request is counted, never hidden behind a second try
    return openai.AsyncOpenAI(
        base_url=url + "/v1", api_key=api_key or "none", timeout=timeout, max_retries=0
    )


async def run_users(
    url: str,
    model: str,
    plan: Plan,
    n_users: int,
    duration: float | None,
    max_requests: int | None,
    timeout: float,
    extra_body: dict | None = None,
    api_key: str | None = None,
) -> list[Record]:
    """n_users at once until `duration` seconds have passed (each ends the request it is in) or
    each has sent max_requests."""
    out: list[Record] = []
    clients = [openai_client(url, timeout, api_key) for _ in range(n_users)]
    t0 = time.perf_counter()
    deadline = t0 + duration if duration else None
    try:
        await asyncio.gather(
            *(
                user(
                    i,
                    c,
                    model,
                    plan.requests(i, n_users),
                    extra_body,
                    t0,
                    deadline,
                    max_requests,
                    out,
                )
                for i, c in enumerate(clients)
            )
        )
    finally:
        for c in clients:
            await c.close()
    return out


async def solo(
    url: str,
    model: str,
    records: list[Record],
    timeout: float,
    extra_body: dict | None = None,
    api_key: str | None = None,
) -> list[str]:
    """Each record's request again, alone and not streamed: what differs from its answer under load."""
    problems = []
    client = openai_client(url, timeout, api_key)
    try:
        for rec in records:
            again = await send(
                client, model, Record(-1, rec.turn, False, None), extra_body, time.perf_counter()
            )
            if again.outcome != "ok":
                problems.append(f"{_name(rec)} alone: {again.outcome} {again.detail}")
            elif (again.text, again.tokens, again.finish_reason) != (
                rec.text,
                rec.tokens,
                rec.finish_reason,
            ):
                at = next(
                    (i for i, (a, b) in enumerate(zip(rec.text, again.text)) if a != b),
                    min(len(rec.text), len(again.text)),
                )
                problems.append(
                    f"{_name(rec)} ({'streamed' if rec.stream else 'whole'}) under load: "
                    f"{rec.tokens} tokens ({rec.finish_reason}), alone: {again.tokens} "
                    f"({again.finish_reason}); texts part at character {at}: "
                    f"{rec.text[at : at + 40]!r} vs {again.text[at : at + 40]!r}"
                )
    finally:
        await client.close()
    return problems


def _name(rec: Record) -> str:
    return f"conversation {rec.turn.conversation} turn {rec.turn.index}"


def exact_sample(records: list[Record], k: int) -> list[Record]:
    """k of the answers that completed (evenly spaced in sending order; all where k is 0)."""
    done = sorted((r for r in records if r.outcome == "ok"), key=lambda r: r.start)
    if not k or k >= len(done):
        return done
    return [done[i * len(done) // k] for i in range(k)]


# ------------------------------------------------------------------------------------ figures


def percentile(xs: list[float], p: float) -> float | None:
    """The p-th percentile, nearest rank (None for no values)."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


def figures(records: list[Record], wall_s: float) -> dict:
    """Counts by outcome and the timings of one run (see docs/serving.md, 'Load and soak')."""
    ok = [r for r in records if r.outcome == "ok"]
    streamed = [r for r in ok if r.stream and r.ttft_s is not None]
    ttft = [r.ttft_s for r in streamed]
    decode = [(r.tokens - 1) / r.decode_s for r in streamed if r.tokens > 1 and r.decode_s]
    per_client: dict[int, list[Record]] = {}
    for r in ok:
        per_client.setdefault(r.client, []).append(r)
    client_tps = [
        sum(r.tokens for r in rs) / sum(r.latency_s for r in rs)
        for rs in per_client.values()
        if sum(r.latency_s for r in rs) > 0
    ]
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    r3 = lambda x: None if x is None else round(x, 3)  # noqa: E731
    return {
        "requests": len(records),
        "outcomes": outcomes,
        "streamed": sum(r.stream for r in records),
        "tokens": sum(r.tokens for r in ok),
        "tokens_per_s": r3(sum(r.tokens for r in ok) / wall_s),
        "ttft_p50_s": r3(percentile(ttft, 50)),
        "ttft_p99_s": r3(percentile(ttft, 99)),
        "decode_tokens_per_s_p50": r3(percentile(decode, 50)),
        "client_tokens_per_s_median": r3(statistics.median(client_tps)) if client_tps else None,
        "client_tokens_per_s_min": r3(min(client_tps)) if client_tps else None,
    }


def rule_breaks(records: list[Record]) -> list[str]:
    """The requests that break the rule: a 5xx other than the overload answer, an error event in a
    stream, no answer within the timeout, a lost connection."""
    return [
        f"{_name(r)}: {r.outcome} {r.status or ''} {r.detail}".rstrip()
        for r in records
        if r.outcome in ("5xx", "stream_error", "timeout", "connection")
    ]


# ------------------------------------------------------------------------------------ memory


class RssSampler(threading.Thread):
    """A process's resident set every `every` seconds: (seconds since start, bytes)."""

    def __init__(self, pid: int | None, every: float):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self.done = threading.Event()

    def run(self) -> None:
        if self.pid is None:
            return
        t0 = time.monotonic()
        while True:
            rss = rss_bytes(self.pid)
            if rss is not None:
                self.samples.append((time.monotonic() - t0, rss))
            if self.done.wait(self.every):
                return

    def stop(self) -> list[tuple[float, int]]:
        self.done.set()
        self.join()
        return self.samples


def rss_bytes(pid: int) -> int | None:
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except ImportError:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        return int(m.group(1)) * 1024 if m else None
    except Exception:  # psutil.NoSuchProcess and kin: the server is gone, the rule says why
        return None


def rss_figures(samples: list[tuple[float, int]], warmup_s: float) -> dict:
    """Start, end and peak RSS in MB, and the least-squares slope (MB/min) of the samples after warm-up."""
    if not samples:
        return {}
    mb = [(t, b / 2**20) for t, b in samples]
    after = [(t, m) for t, m in mb if t >= warmup_s]
    slope = None
    if len(after) >= 3:
        mt, mm = sum(t for t, _ in after) / len(after), sum(m for _, m in after) / len(after)
        var = sum((t - mt) ** 2 for t, _ in after)
        slope = round(60 * sum((t - mt) * (m - mm) for t, m in after) / var, 3) if var else None
    return {
        "samples": len(mb),
        "start_mb": round(mb[0][1], 1),
        "after_warmup_mb": round(after[0][1], 1) if after else None,
        "end_mb": round(mb[-1][1], 1),
        "peak_mb": round(max(m for _, m in mb), 1),
        "slope_mb_per_min": slope,
    }
