"""What an engine keeps per request, and a check that it all went when its requests did: for the
tests that cancel, fail or fuzz requests through a live server (read it only while the engine
loop is idle: LiveServer.wait_idle, or from the loop thread by AsyncEngine.call).

`held_keys` walks everything reachable from the engine (its queues, drafters, the shared trie,
the cost refresh, the prefix cache; the model's weights and tokenizer left out) for a request
key, so a per-request dict that a new drafter or cache adds is covered without naming it here.
"""

from __future__ import annotations

import weakref
from collections import deque

import numpy as np
import torch

SKIP_ATTRS = {
    "runner",
    "model",
    "tokenizer",
    "tok",
    "_tok",
    "_parent",
    "_depth",
    "_out",
    "_pin",
    "_kids",
}


def held_keys(root: object, keys: set[str], max_depth: int = 8) -> list[str]:
    """Paths under `root` (attributes, dict keys and values, items) that hold one of `keys`,
    as a string or inside a tuple; [] when none does."""
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[object, str, int]] = [(root, "engine", 0)]
    while stack:
        obj, path, depth = stack.pop()
        if isinstance(obj, str):
            if obj in keys:
                found.append(path)
            continue
        if (
            id(obj) in seen
            or depth > max_depth
            or obj is None
            or isinstance(
                obj, (int, float, bool, bytes, torch.Tensor, np.ndarray, type, weakref.ref)
            )
            or callable(obj)
        ):
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                stack.append((k, f"{path}[key {k!r}]", depth + 1))
                stack.append((v, f"{path}[{k!r}]", depth + 1))
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            items = list(obj)
            if items and isinstance(items[0], (int, float)) and len(items) > 64:
                continue  # token lists and counters: no keys in them
            for i, v in enumerate(items):
                stack.append((v, f"{path}[{i}]", depth + 1))
        else:
            attrs = getattr(obj, "__dict__", None) or {
                s: getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s)
            }
            for name, v in attrs.items():
                if name not in SKIP_ATTRS:
                    stack.append((v, f"{path}.{name}", depth + 1))
    return found


def idle_problems(engine, async_engine=None) -> list[str]:
    """What a quiet engine (and its AsyncEngine) should not hold: sequences queued, prefilling or
    running, twin logits, streams or loop-side records, a trie prompt, stream or pin, a broken
    trie invariant."""
    problems = [f"{name}: {v}" for name, v in engine.held().items() if v]
    if async_engine is not None:
        problems += [f"AsyncEngine.{name}: {v}" for name, v in async_engine.held().items() if v]
    drafters = [engine.default_drafter, *engine.drafters.drafters()]
    tries = [engine.drafters.trie() if engine.drafters.has_trie else None]
    tries += [getattr(d, "trie", None) for d in drafters]
    tries = {id(t): t for t in tries if t is not None}
    for trie in tries.values():  # the engine's, and a private drafter's own
        trie.check_invariants()
        stats = trie.stats()
        problems += [
            f"trie.{name}: {v}"
            for name, v in (
                ("active_prompts", stats.active_prompts),
                ("open_streams", stats.open_streams),
                ("pinned nodes", stats.pinned_nodes),
                ("prompt kids", stats.prompt_children),
            )
            if v
        ]
    return problems
