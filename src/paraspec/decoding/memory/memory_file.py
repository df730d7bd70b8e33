"""An engine's drafting memory on disk (LLM.save_memory / load_memory): the trie's output counts
and the output memory's past outputs in one versioned, compressed .npz, replaced atomically.

    meta    JSON {"format": "paraspec-memory", "version": 1, "window": the trie's window,
                  "vocab_size": the saving model's vocabulary (absent in older files)}
    parent, token, count    the trie's output nodes, breadth first (trie_file.py)
    outputs                 int32 past outputs, each followed by SEPARATOR (output_memory.py)

A file written by TokenTrie.save ("paraspec-token-trie", version 1: the same trie arrays, no
outputs) reads as a memory file without past outputs, so older memory files still load; and a
trie's merge_file reads the trie part of either. Every way a file can be unreadable is one
MemoryFileError line that names the file and says how to fix it, and so is a file from a model
with another vocabulary (check_vocabulary: its ids would mean other tokens here, and an id past
this model's vocabulary cannot be verified). Writing one from an engine's memory, and merging one
into it, is memory_save.py's (this module is below the trie).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ...errors import ParaspecError
from .output_memory import SEPARATOR

MEMORY_FORMAT, MEMORY_VERSION = "paraspec-memory", 1
TRIE_FORMAT, TRIE_VERSION = "paraspec-token-trie", 1     # TokenTrie.save's (trie only)


class MemoryFileError(ParaspecError):
    """A saved memory (or trie) file is missing, corrupt or from an incompatible version."""


@dataclass
class MemoryContents:
    parent: np.ndarray     # the trie's output nodes (TrieFile._output_arrays)
    token: np.ndarray
    count: np.ndarray
    window: int
    outputs: np.ndarray    # past outputs (empty for a trie-only file)
    vocab_size: int | None = None      # the saving model's vocabulary, where the file says


def _fail(path: str | os.PathLike, why: str) -> MemoryFileError:
    return MemoryFileError(f"memory file {os.fspath(path)!r} {why}; delete it, or save the "
                           "memory again, to start from a valid file")


def read_memory_file(path: str | os.PathLike) -> MemoryContents:
    def fail(why: str) -> MemoryFileError:
        return _fail(path, why)

    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            parent, token, count = z["parent"], z["token"], z["count"]
            outputs = z["outputs"] if "outputs" in z.files else None
    except FileNotFoundError:
        raise MemoryFileError(f"memory file {os.fspath(path)!r} does not exist; check the path, "
                              "or save the memory there first") from None
    except Exception as e:  # zip, npz, key and json errors all mean the same to the user
        raise fail(f"cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") not in (MEMORY_FORMAT, TRIE_FORMAT):
        raise fail("is not a paraspec memory or token trie file")
    expected = MEMORY_VERSION if meta["format"] == MEMORY_FORMAT else TRIE_VERSION
    if meta.get("version") != expected:
        raise fail(f"has {meta['format']} version {meta.get('version')!r}, this paraspec reads version {expected}")
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
    return MemoryContents(parent, token, count, window, outputs, vocab_size)


def check_vocabulary(contents: MemoryContents, vocab_size: int, path: str | os.PathLike) -> None:
    """Refuse a memory saved by a model with another vocabulary: by the size the file records,
    or (an older file) by a token id this model does not have. Refused, not filtered: the ids
    that do fit would mean other tokens here, drafts that are never accepted."""
    where = f"memory file {os.fspath(path)!r}"
    fix = "load a memory saved by this model, or delete the file to start an empty one"
    if contents.vocab_size is not None and contents.vocab_size != vocab_size:
        raise MemoryFileError(f"{where} was saved by a model with a vocabulary of {contents.vocab_size} "
                              f"tokens, this model has {vocab_size}; {fix}")
    top = max((int(a.max()) for a in (contents.token, contents.outputs) if len(a)), default=-1)
    if top >= vocab_size:
        raise MemoryFileError(f"{where} holds token id {top}, outside this model's vocabulary of "
                              f"{vocab_size} tokens (it was saved by a model with another vocabulary); {fix}")


def _check_trie_arrays(parent: np.ndarray, token: np.ndarray, count: np.ndarray, fail) -> None:
    n = len(token) if token.ndim == 1 else -1
    if n < 0 or parent.shape != (n,) or count.shape != (n,):
        raise fail("has arrays of mismatched shapes")
    if not (np.issubdtype(parent.dtype, np.integer) and np.issubdtype(token.dtype, np.integer)
            and np.issubdtype(count.dtype, np.integer)):
        raise fail("has non-integer arrays")
    if n and (np.any(parent < 0) or np.any(parent > np.arange(n)) or np.any(token < 0)
              or np.any(count <= 0)):
        raise fail("has out-of-order parents, negative tokens or non-positive counts")
