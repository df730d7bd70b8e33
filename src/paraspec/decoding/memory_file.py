"""An engine's drafting memory on disk (LLM.save_memory / load_memory): the trie's output counts
and the output memory's past outputs in one versioned, compressed .npz, replaced atomically.

    meta    JSON {"format": "paraspec-memory", "version": 1, "window": the trie's window}
    parent, token, count    the trie's output nodes, breadth first (trie_file.py)
    outputs                 int32 past outputs, each followed by SEPARATOR (output_memory.py)

A file written by TokenTrie.save ("paraspec-token-trie", version 1: the same trie arrays, no
outputs) reads as a memory file without past outputs, so older memory files still load; and a
trie's merge_file reads the trie part of either. Every way a file can be unreadable is one
MemoryFileError line that names the file and says how to fix it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ParaspecError
from .output_memory import SEPARATOR

if TYPE_CHECKING:
    from .output_memory import OutputMemory
    from .trie import TokenTrie

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


def save_memory_file(path: str | os.PathLike, trie: "TokenTrie", output_memory: "OutputMemory | None") -> None:
    """Write the trie's output counts and the past outputs (prompt counts belong to live
    requests: not saved). The file is replaced atomically: a crash never leaves half of it."""
    parent, token, count = trie._output_arrays()
    outputs = output_memory.tokens() if output_memory is not None else np.zeros(0, np.int32)
    meta = json.dumps({"format": MEMORY_FORMAT, "version": MEMORY_VERSION, "window": trie.window})
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        np.savez_compressed(f, meta=np.array(meta), parent=parent, token=token, count=count, outputs=outputs)
    os.replace(tmp, path)


def merge_memory_file(path: str | os.PathLike, trie: "TokenTrie | None",
                      output_memory: "OutputMemory | None") -> MemoryContents:
    """Add a saved memory to `trie` and `output_memory` in place (either may be None: not kept).
    The whole file is read and checked before either is touched."""
    contents = read_memory_file(path)
    if trie is not None:
        trie._add_output_arrays(contents.parent, contents.token, contents.count)
    if output_memory is not None and len(contents.outputs):
        output_memory.merge_tokens(contents.outputs)
    return contents


def read_memory_file(path: str | os.PathLike) -> MemoryContents:
    def fail(why: str) -> MemoryFileError:
        return MemoryFileError(f"memory file {os.fspath(path)!r} {why}; delete it, or save the "
                               "memory again, to start from a valid file")

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
    _check_trie_arrays(parent, token, count, fail)
    if meta["format"] == TRIE_FORMAT:
        outputs = np.zeros(0, np.int32)
    elif outputs is None:
        raise fail("has no outputs array")
    elif outputs.ndim != 1 or not np.issubdtype(outputs.dtype, np.integer):
        raise fail("has an outputs array that is not one row of integers")
    elif len(outputs) and (np.any(outputs < SEPARATOR) or outputs[-1] != SEPARATOR):
        raise fail("has outputs with negative tokens or without their final separator")
    return MemoryContents(parent, token, count, window, outputs)


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
