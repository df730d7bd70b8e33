"""A drafting memory on disk: a versioned, compressed .npz of the trie's output counts (prompt
counts belong to live requests and are not saved) and, in an engine's memory file, its output
memory's past outputs; always replaced atomically, so a crash never leaves half a file.

    meta    JSON {"format": "paraspec-memory", "version": 1, "window": the trie's window,
                  "vocab_size": the saving model's vocabulary (absent in older files)}
    parent, token, count    the trie's output nodes, breadth first (output_arrays)
    outputs                 int32 past outputs, each followed by SEPARATOR (output_memory.py)
    answers                 int64 rows (prompt digest, position in outputs): where the answer to
                            a prompt starts (absent in older files: no answers to replay)

An engine's memory file is LLM.save_memory / load_memory's (save_memory_file, merge_memory_file).
A trie file ("paraspec-token-trie", version 1: the same trie arrays, no outputs; save_trie_file)
reads as a memory file without past outputs, so older memory files still load, and a trie merges
the trie part of either (merge_trie_file). The same arrays carry a replica's new output counts to
the shared memory of paraspec.ray_serve (add_output_arrays adds them along their paths). Every
way a file can be unreadable is one MemoryFileError line that names the file and says how to fix
it, and so is a file from a model with another vocabulary (check_vocabulary: its ids would mean
other tokens here, and an id past this model's vocabulary cannot be verified).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ...errors import ParaspecError
from .output_memory import SEPARATOR, OutputMemory
from .trie import TokenTrie
from .trie_nodes import SUPER_ROOT

MEMORY_FORMAT, MEMORY_VERSION = "paraspec-memory", 1
TRIE_FORMAT, TRIE_VERSION = "paraspec-token-trie", 1  # save_trie_file's (trie only)

TrieArrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # (parent index, token, count)


class MemoryFileError(ParaspecError):
    """A saved memory (or trie) file is missing, corrupt or from an incompatible version."""


@dataclass
class MemoryContents:
    parent: np.ndarray  # the trie's output nodes (output_arrays)
    token: np.ndarray
    count: np.ndarray
    window: int
    outputs: np.ndarray  # past outputs (empty for a trie-only file)
    vocab_size: int | None = None  # the saving model's vocabulary, where the file says
    answers: np.ndarray | None = None  # (prompt digest, position in outputs) rows, where saved


# ---------------------------------------------------------------- the trie's arrays
def output_arrays(trie: TokenTrie) -> TrieArrays:
    """Nodes with output counts, breadth first: (parent index, token, count), where index 0
    is the super-root and node i of the arrays is index i + 1."""
    nodes = trie.nodes
    parents, toks, counts = [], [], []
    frontier = [(SUPER_ROOT, 0)]
    while frontier:
        nxt = []
        for node, idx in frontier:
            for t, c in nodes.items(node):
                if nodes.out[c] > 0:
                    parents.append(idx)
                    toks.append(t)
                    counts.append(nodes.out[c])
                    nxt.append((c, len(toks)))
        frontier = nxt
    return (
        np.asarray(parents, dtype=np.int32),
        np.asarray(toks, dtype=np.int32),
        np.asarray(counts, dtype=np.int64),
    )


def add_output_arrays(
    trie: TokenTrie, parent: np.ndarray, token: np.ndarray, count: np.ndarray
) -> None:
    """Add counts along the given paths (a merge keeps counts non-increasing down a path).
    Paths deeper than the trie's window are cut."""
    nodes = trie.nodes
    nodes.make_room(min(len(token), nodes.max_nodes))
    ids = [SUPER_ROOT] * (len(token) + 1)
    out, depth = nodes.out, nodes.depth
    for i, (p, t, c) in enumerate(zip(parent.tolist(), token.tolist(), count.tolist()), 1):
        at = ids[p]
        if at < 0 or depth[at] >= nodes.window:
            ids[i] = -1  # beyond the window or the budget: the subtree too
            continue
        node = nodes.child(at, t)
        if node < 0:
            node = nodes.alloc(at, t)
        ids[i] = node
        if node >= 0:
            out[node] += c


# ---------------------------------------------------------------- writing and merging
def save_trie_file(path: str | os.PathLike, trie: TokenTrie) -> None:
    """Write a trie's output memory alone (a trie file)."""
    meta = {"format": TRIE_FORMAT, "version": TRIE_VERSION, "window": trie.window}
    _write(path, meta, *output_arrays(trie))


def load_trie_file(path: str | os.PathLike, max_nodes: int | None = None) -> TokenTrie:
    """A trie of the memory saved in a file. max_nodes defaults to max(2**20, the file's nodes)."""
    c = read_memory_file(path)
    trie = TokenTrie(max_nodes or max(1 << 20, len(c.token)), c.window)
    add_output_arrays(trie, c.parent, c.token, c.count)
    return trie


def merge_trie_file(path: str | os.PathLike, trie: TokenTrie) -> None:
    """Add the trie part of a saved memory to `trie`, in place (a trie shared by drafters keeps
    its identity). Paths deeper than the trie's window are cut."""
    c = read_memory_file(path)
    add_output_arrays(trie, c.parent, c.token, c.count)


def save_memory_file(
    path: str | os.PathLike,
    trie: TokenTrie,
    output_memory: OutputMemory | None,
    vocab_size: int | None = None,
) -> None:
    """Write the trie's output counts and the past outputs, with the model's vocabulary size
    where given (a model with another one refuses the file)."""
    outputs = output_memory.tokens() if output_memory is not None else np.zeros(0, np.int32)
    answers = (
        output_memory.answer_array() if output_memory is not None else np.zeros((0, 2), np.int64)
    )
    meta = {"format": MEMORY_FORMAT, "version": MEMORY_VERSION, "window": trie.window}
    _write(
        path,
        meta if vocab_size is None else {**meta, "vocab_size": vocab_size},
        *output_arrays(trie),
        outputs=outputs,
        answers=answers,
    )


def merge_memory_file(
    path: str | os.PathLike,
    trie: TokenTrie | None,
    output_memory: OutputMemory | None,
    vocab_size: int | None = None,
) -> MemoryContents:
    """Add a saved memory to `trie` and `output_memory` in place (either may be None: not kept).
    The whole file is read and checked (against the model's vocabulary, where given) before
    either is touched."""
    contents = read_memory_file(path)
    if vocab_size is not None:
        check_vocabulary(contents, vocab_size, path)
    if trie is not None:
        add_output_arrays(trie, contents.parent, contents.token, contents.count)
    if output_memory is not None and len(contents.outputs):
        output_memory.merge_tokens(contents.outputs, contents.answers)
    return contents


def _write(
    path: str | os.PathLike,
    meta: dict,
    parent: np.ndarray,
    token: np.ndarray,
    count: np.ndarray,
    **more: np.ndarray,
) -> None:
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        np.savez_compressed(
            f, meta=np.array(json.dumps(meta)), parent=parent, token=token, count=count, **more
        )
    os.replace(tmp, path)


# ---------------------------------------------------------------- reading and checking
def _fail(path: str | os.PathLike, why: str) -> MemoryFileError:
    return MemoryFileError(
        f"memory file {os.fspath(path)!r} {why}; delete it, or save the "
        "memory again, to start from a valid file"
    )


def read_memory_file(path: str | os.PathLike) -> MemoryContents:
    def fail(why: str) -> MemoryFileError:
        return _fail(path, why)

    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            parent, token, count = z["parent"], z["token"], z["count"]
            outputs = z["outputs"] if "outputs" in z.files else None
            answers = z["answers"] if "answers" in z.files else None
    except FileNotFoundError:
        raise MemoryFileError(
            f"memory file {os.fspath(path)!r} does not exist; check the path, "
            "or save the memory there first"
        ) from None
    except Exception as e:  # zip, npz, key and json errors all mean the same to the user
        raise fail(f"cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") not in (MEMORY_FORMAT, TRIE_FORMAT):
        raise fail("is not a paraspec memory or token trie file")
    expected = MEMORY_VERSION if meta["format"] == MEMORY_FORMAT else TRIE_VERSION
    if meta.get("version") != expected:
        raise fail(
            f"has {meta['format']} version {meta.get('version')!r}, this paraspec reads version {expected}"
        )
    window = meta.get("window")
    if not isinstance(window, int) or not 2 <= window <= 255:
        raise fail(f"has an invalid window {window!r}")
    vocab_size = meta.get("vocab_size")
    if vocab_size is not None and (type(vocab_size) is not int or vocab_size < 1):
        raise fail(f"has an invalid vocab_size {vocab_size!r}")
    _check_trie_arrays(parent, token, count, fail)
    if meta["format"] == TRIE_FORMAT:
        outputs = np.zeros(0, np.int32)
    elif outputs is None:
        raise fail("has no outputs array")
    elif outputs.ndim != 1 or not np.issubdtype(outputs.dtype, np.integer):
        raise fail("has an outputs array that is not one row of integers")
    elif len(outputs) and (np.any(outputs < SEPARATOR) or outputs[-1] != SEPARATOR):
        raise fail("has outputs with negative tokens or without their final separator")
    if answers is not None:
        _check_answers(answers, outputs, fail)
    return MemoryContents(parent, token, count, window, outputs, vocab_size, answers)


def _check_answers(answers: np.ndarray, outputs: np.ndarray, fail) -> None:
    """Each answer starts an output: position 0 or just after a separator, inside `outputs`."""
    if answers.ndim != 2 or answers.shape[1] != 2 or not np.issubdtype(answers.dtype, np.integer):
        raise fail("has an answers array that is not rows of (prompt digest, position)")
    at = answers[:, 1]
    if len(at) and (np.any(at < 0) or np.any(at >= len(outputs))):
        raise fail("has answers outside its outputs")
    starts = at[at > 0]
    if len(starts) and np.any(outputs[starts - 1] != SEPARATOR):
        raise fail("has answers that do not start an output")


def check_vocabulary(contents: MemoryContents, vocab_size: int, path: str | os.PathLike) -> None:
    """Refuse a memory saved by a model with another vocabulary: by the size the file records,
    or (an older file) by a token id this model does not have. Refused, not filtered: the ids
    that do fit would mean other tokens here, drafts that are never accepted."""
    where = f"memory file {os.fspath(path)!r}"
    fix = "load a memory saved by this model, or delete the file to start an empty one"
    if contents.vocab_size is not None and contents.vocab_size != vocab_size:
        raise MemoryFileError(
            f"{where} was saved by a model with a vocabulary of {contents.vocab_size} "
            f"tokens, this model has {vocab_size}; {fix}"
        )
    top = max((int(a.max()) for a in (contents.token, contents.outputs) if len(a)), default=-1)
    if top >= vocab_size:
        raise MemoryFileError(
            f"{where} holds token id {top}, outside this model's vocabulary of "
            f"{vocab_size} tokens (it was saved by a model with another vocabulary); {fix}"
        )


def _check_trie_arrays(parent: np.ndarray, token: np.ndarray, count: np.ndarray, fail) -> None:
    n = len(token) if token.ndim == 1 else -1
    if n < 0 or parent.shape != (n,) or count.shape != (n,):
        raise fail("has arrays of mismatched shapes")
    if not (
        np.issubdtype(parent.dtype, np.integer)
        and np.issubdtype(token.dtype, np.integer)
        and np.issubdtype(count.dtype, np.integer)
    ):
        raise fail("has non-integer arrays")
    if n and (
        np.any(parent < 0)
        or np.any(parent > np.arange(n))
        or np.any(token < 0)
        or np.any(count <= 0)
    ):
        raise fail("has out-of-order parents, negative tokens or non-positive counts")
