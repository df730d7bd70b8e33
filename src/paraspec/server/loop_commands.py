"""What the event loop (AsyncEngine) asks of the engine's loop thread (EngineLoop): one command
per request, queued, so only the loop thread ever touches the Engine, its drafters and the trie."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..sampling.params import SamplingParams

if TYPE_CHECKING:
    from ..engine import Engine


@dataclass
class AddCommand:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    drafter: Any  # DEFAULT, None (plain decoding) or a PluginConfig
    submitted: float
    group: str | None = None  # the client request (fair scheduling)


@dataclass
class AbortCommand:
    request_id: str


@dataclass
class StopCommand:
    pass


@dataclass
class CallCommand:  # run fn(engine) on the loop thread between two steps
    fn: Callable[[Engine], Any]
    done: concurrent.futures.Future
