"""The task sets built from the Python standard library's own source files and its language
reference (`pydoc_data.topics`), read as text, never imported:

- ``grounded``: code edits (rename a parameter, add type hints), extraction (list the functions of a
  source excerpt), retrieval (find and quote a function), summaries with quotes and retrieval QA on
  the reference (reference_tasks.py);
- ``repeated``: the type-hint edit over many functions of one module, then the same requests again.

The stdlib files are parsed once, lazily, with the cyclic GC paused.
"""

from __future__ import annotations

import ast
import math
import random
import re
import sysconfig
import textwrap
import zlib
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from ..gc_pause import gc_paused
from .reference_tasks import reference_reading
from .task import MATERIAL_CHARS, PY, Task, answer_cap, copy_task, user_turn

STDLIB = Path(sysconfig.get_paths()["stdlib"])
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)

# Disjoint module lists, so no two sets (and no two grounded kinds) quote the same code: otherwise an
# engine that remembers earlier requests would be helped by a neighbour task's text.
_EDIT_MODULES = (
    "textwrap",
    "shlex",
    "fnmatch",
    "colorsys",
    "statistics",
    "base64",
    "csv",
    "gettext",
    "pprint",
    "mimetypes",
    "tokenize",
    "urllib.parse",
    "email.utils",
    "string",
)
_CHUNK_MODULES = (
    "genericpath",
    "ntpath",
    "heapq",
    "bisect",
    "html",
    "json.encoder",
    "json.decoder",
    "functools",
    "copy",
    "glob",
    "quopri",
    "netrc",
    "reprlib",
    "locale",
    "random",
    "email.quoprimime",
    "email.base64mime",
    "operator",
    "linecache",
    "traceback",
    "tempfile",
    "contextlib",
    "weakref",
    "warnings",
)
_REPEATED_MODULES = ("difflib", "fractions", "pathlib", "zipfile", "calendar", "argparse")


@lru_cache(
    maxsize=None
)  # cleared by _gc_paused once a builder is done: the tasks are kept, not the trees
def _module(name: str) -> tuple[tuple[str, ...], ast.Module] | None:
    """The lines and syntax tree of a stdlib module, read as text (never imported); None if absent."""
    rel = name.replace(".", "/")
    for path in (STDLIB / f"{rel}.py", STDLIB / rel / "__init__.py"):
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
    return textwrap.dedent("\n".join(lines[_first_line(first) - 1 : last.end_lineno]))


def _stdlib_source(mod: str) -> str:
    return f"Python {PY} standard library, module {mod} (PSF License)"


def _params(fn: ast.FunctionDef) -> list[ast.arg]:
    a = fn.args
    return [
        p
        for p in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg)
        if p is not None and p.arg not in ("self", "cls")
    ]


def _editable(mod: str) -> list[tuple[str, ast.FunctionDef, str]]:
    """(qualified name, node, dedented source) of the module's functions and methods that suit an edit:
    answers of ~60-250 tokens, and no annotations yet (else the type-hint edit is a no-op)."""
    if (parsed := _module(mod)) is None:
        return []
    lines, tree = parsed
    found, seen = [], set()
    for node in tree.body:
        members = (
            [(node.name, node)]
            if isinstance(node, _DEF)
            else [(f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, _DEF)]
            if isinstance(node, ast.ClassDef)
            else []
        )
        for qual, fn in members:
            src = _span(lines, fn, fn)
            ps = _params(fn)
            # (A name defined twice, e.g. a property's getter and setter, keeps its first definition.)
            if (
                qual not in seen
                and 200 <= len(src) <= 750
                and ps
                and fn.returns is None
                and all(p.annotation is None for p in ps)
            ):
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


_RENAME = (
    "Rename the parameter `{old}` to `{new}` in this function from Python's `{mod}` module and update "
    "every use of it. Reply with the whole updated function in one ```python block and nothing else."
    "\n\n```python\n{code}\n```"
)
_HINTS = (
    "Add type hints to every parameter and to the return value of this function from Python's `{mod}` "
    "module, changing nothing else. Reply with the whole updated function in one ```python block and "
    "nothing else.\n\n```python\n{code}\n```"
)
_EXTRACT = (
    "List every top-level function and class defined in this code from Python's `{mod}` module, in "
    "order, one per line as `name: first line of its docstring` (`name: -` if it has none). Reply "
    "with the list only.\n\n```python\n{code}\n```"
)
_FIND = (
    "Find the function `{name}` in this code from Python's `{mod}` module. Quote its complete "
    "definition exactly, then say in one sentence what it returns.\n\n```python\n{code}\n```"
)


def _hints_task(task_set: str, task_id: str, mod: str, src: str) -> Task:
    # Hints add ~15 % to the function's text.
    return Task(
        task_set,
        task_id,
        None,
        user_turn(_HINTS.format(mod=mod, code=src)),
        answer_cap(int(len(src) * 1.15)),
        _stdlib_source(mod),
    )


def _edits() -> Iterator[Task]:
    i = 0
    for mod in _EDIT_MODULES:
        for qual, fn, src in _editable(mod):
            # Alternate the two edit kinds over the functions; fall back to hints with nothing to rename.
            if i % 2 == 0 and (target := _rename(fn, src)):
                old, new = target
                yield Task(
                    "grounded",
                    f"edit-rename/{mod}.{qual}",
                    None,
                    user_turn(_RENAME.format(old=old, new=new, mod=mod, code=src)),
                    answer_cap(len(src)),
                    _stdlib_source(mod),
                )
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
    # None: flush
    for node in [n for n in tree.body if isinstance(n, (*_DEF, ast.ClassDef))] + [None]:
        if node is not None and len(window) < max_defs and size(window + [node]) <= MATERIAL_CHARS:
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
            funcs = [
                (n.name, src)
                for n in window
                if isinstance(n, _DEF)
                and names[n.name] == 1
                and 150 <= len(src := _span(lines, n, n)) <= 750
            ]
            listing = sum(
                len(n.name) + 3 + len((ast.get_docstring(n) or "-").partition("\n")[0])
                for n in window
            )
            # odd windows: retrieve and quote one function (picked by a stable hash)
            if i % 2 and funcs:
                name, src = max(funcs, key=lambda f: zlib.crc32(f[0].encode()))
                yield Task(
                    "grounded",
                    f"find/{mod}.{name}",
                    None,
                    user_turn(_FIND.format(name=name, mod=mod, code=code)),
                    answer_cap(len(src) + 160),
                    _stdlib_source(mod),
                )
            elif listing >= 200:  # even windows: list the defs and docstring lines (>= ~60 tokens)
                yield Task(
                    "grounded",
                    f"extract/{mod}.{first}",
                    None,
                    user_turn(_EXTRACT.format(mod=mod, code=code)),
                    answer_cap(listing),
                    _stdlib_source(mod),
                )
            else:
                continue
            i += 1


@lru_cache(maxsize=1)
def _grounded_cached() -> tuple[Task, ...]:
    with _gc_paused():
        return (*_edits(), *_code_reading(), *reference_reading())


def grounded() -> list[Task]:
    return [copy_task(t) for t in _grounded_cached()]


_REPEAT_DISTINCT = 12  # distinct requests in a full run; each is asked twice


def repeated(n: int | None, seed: int) -> list[Task]:
    """The type-hint edit over functions of one module (chosen by seed), then the same requests again."""
    rng = random.Random(seed)
    mods = list(_REPEATED_MODULES)
    rng.shuffle(mods)
    pool = next(((m, list(fns)) for m in mods if len(fns := _repeat_pool(m)) >= 8), None)
    if pool is None:
        raise RuntimeError(f"no module of {_REPEATED_MODULES} has 8 editable functions in {STDLIB}")
    mod, fns = pool
    rng.shuffle(fns)
    distinct = _REPEAT_DISTINCT if n is None else math.ceil(n / 2)
    first = [
        _hints_task("repeated", f"hints/{mod}.{qual}#1", mod, src) for qual, src in fns[:distinct]
    ]
    tasks = first + [repeat_of(t) for t in first]
    return tasks if n is None else tasks[:n]


@lru_cache(maxsize=None)
def _repeat_pool(mod: str) -> tuple[tuple[str, str], ...]:
    with _gc_paused():
        return tuple((qual, src) for qual, _, src in _editable(mod))


def repeat_of(t: Task) -> Task:
    return Task(
        t.task_set,
        t.task_id[:-2] + "#2",
        t.prompt,
        copy_task(t).messages,
        t.max_new_tokens,
        t.source,
        t.stop,
    )
