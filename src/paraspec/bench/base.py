"""What every system `paraspec bench` compares shares: the interface, the task and run parameters
it takes and the Measurement it returns.

    prepare()                    load what the system needs (not timed)
    begin_set(name)              a new task set: memory systems start from an empty trie (or --memory)
    begin_task() / end_task()    around all runs of one task (see paraspec_systems.py)
    run(task, params)            one generation -> Measurement
    close()

A system that cannot run here (a peer not installed, a model it cannot read) raises SkipSystem
from its constructor or prepare(); the run lists it as skipped with the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

GREEDY, SAMPLED = "greedy", "sampled"
SAMPLED_TEMPERATURE = 0.8
SAMPLED_TOP_P = 0.95


@dataclass
class BenchTask:
    """A task as every system sees it: the same prompt token ids (paraspec's tokenizer)."""

    task_set: str
    task_id: str
    prompt_ids: list[int]
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    source: str = ""


@dataclass
class RunParams:
    mode: str = GREEDY  # GREEDY | SAMPLED
    seed: int = 0
    repeat: int = 0
    target_tokens: int | None = None  # peers: paraspec AR's generated token count for this run


@dataclass
class Measurement:
    """One generation of one task by one system. Times in seconds, memory in bytes."""

    suite: str  # "main" | "sweep" | "ttft"
    system: str
    task_set: str
    task_id: str
    mode: str
    repeat: int
    prompt_tokens: int
    generated_tokens: int
    wall_s: float  # the whole generate call
    ttft_s: float  # prefill (+ drafter.begin) until the first token
    decode_s: float  # after the first token
    decode_tokens_per_s: float  # (generated - 1) / decode_s
    forward_passes: int | None  # prefill (counted once) + decode/verify forwards
    mean_accepted_tokens_per_step: float | None  # tokens a decode step emits, bonus included
    acceptance_rate: float | None
    accepted_hist: dict[str, int] | None  # tokens emitted per step -> steps
    draft_s: float | None
    # VmHWM above the RSS at the start of this run (None: unmeasured)
    peak_rss_delta_bytes: int | None
    kv_cache_bytes: int | None
    finish_reason: str | None
    token_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SystemInfo:
    name: str
    kind: str  # "paraspec" | "peer"
    description: str
    plugin_params: dict | None = None
    status: str = "ok"  # "ok" | "skipped"
    note: str = ""
    memory: str = ""  # what a peer's draft state starts from (markdown's memory column)


class System(Protocol):
    info: SystemInfo

    def prepare(self) -> None: ...
    def begin_set(self, task_set: str) -> None: ...
    def begin_task(self) -> None: ...
    def run(self, task: BenchTask, params: RunParams) -> Measurement: ...
    def end_task(self) -> None: ...
    def close(self) -> None: ...


class SkipSystem(Exception):
    """Raised by a system's constructor or prepare() when it cannot run here; the message says why."""
