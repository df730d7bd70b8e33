"""An engine's drafting memory (its trie's output counts, its output memory's past outputs)
written to a memory file and merged back from one: LLM.save_memory / load_memory. The file's
format and its checks are memory_file.py's, which the trie itself reads (trie_file.py): this
module is the one above both.
"""
from __future__ import annotations

import json
import os

import numpy as np

from .memory_file import MEMORY_FORMAT, MEMORY_VERSION, MemoryContents, check_vocabulary, read_memory_file
from .output_memory import OutputMemory
from .trie import TokenTrie


def save_memory_file(path: str | os.PathLike, trie: TokenTrie, output_memory: OutputMemory | None,
                     vocab_size: int | None = None) -> None:
    """Write the trie's output counts and the past outputs (prompt counts belong to live
    requests: not saved), with the model's vocabulary size where given (a model with another
    one refuses the file). The file is replaced atomically: a crash never leaves half of it."""
    parent, token, count = trie._output_arrays()
    outputs = output_memory.tokens() if output_memory is not None else np.zeros(0, np.int32)
    meta = {"format": MEMORY_FORMAT, "version": MEMORY_VERSION, "window": trie.window}
    meta = json.dumps(meta if vocab_size is None else {**meta, "vocab_size": vocab_size})
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        np.savez_compressed(f, meta=np.array(meta), parent=parent, token=token, count=count, outputs=outputs)
    os.replace(tmp, path)


def merge_memory_file(path: str | os.PathLike, trie: TokenTrie | None,
                      output_memory: OutputMemory | None, vocab_size: int | None = None) -> MemoryContents:
    """Add a saved memory to `trie` and `output_memory` in place (either may be None: not kept).
    The whole file is read and checked (against the model's vocabulary, where given) before
    either is touched."""
    contents = read_memory_file(path)
    if vocab_size is not None:
        check_vocabulary(contents, vocab_size, path)
    if trie is not None:
        trie._add_output_arrays(contents.parent, contents.token, contents.count)
    if output_memory is not None and len(contents.outputs):
        output_memory.merge_tokens(contents.outputs)
    return contents
