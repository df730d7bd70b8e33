"""A drafting memory saved by a model with another vocabulary (LLM.save_memory / load_memory): the
file records the saving model's vocabulary size, and a model with another size refuses it in one
line naming the file and the fix; an older file without the record is refused by a token id past
this model's vocabulary; and ids past the vocabulary that reach the memory anyway (merged around
load_memory, as a replica's trie sync merges) are cut from the drafts, so they can never fail a
verify batch: the output stays plain decoding's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paraspec import LLM, SamplingParams
from paraspec.config import parse_plugin_params
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.memory.memory_file import MemoryFileError, save_memory_file, save_trie_file
from paraspec.decoding.memory.output_memory import SEPARATOR, OutputMemory
from paraspec.decoding.memory.trie import TokenTrie

MEMORY = {"plugin_type": "memory_decoding"}
HYBRID = {"plugin_type": "hybrid"}
PROMPTS = ["abc abc abc abc", "one two one two one"]
PARAMS = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> str:
    return str(tiny_model_dir("llama", n_layers=2, hidden=64))


def _llm(path: str) -> LLM:
    llm = LLM(path, dtype="float32")
    llm.engine.pin_cost(CostModel())  # drafts sized by a fixed curve (no start-up timing probe)
    return llm


@pytest.fixture(scope="module")
def llm(model) -> LLM:
    return _llm(model)


@pytest.fixture(scope="module")
def wider(tiny_model_dir, llm) -> LLM:
    """The same architecture with 64 more token ids: another vocabulary."""
    path = tiny_model_dir("llama", n_layers=2, hidden=64, vocab_size=llm.model.args.vocab_size + 64)
    return _llm(str(path))


def _assert_refused(llm: LLM, path, *says: str) -> None:
    nodes = len(llm.engine.drafters.trie())
    with pytest.raises(MemoryFileError) as e:
        llm.load_memory(str(path))
    msg = str(e.value)
    assert (
        "\n" not in msg and repr(str(path)) in msg and "load a memory saved by this model" in msg
    ), msg
    assert all(s in msg for s in says), msg
    assert len(llm.engine.drafters.trie()) == nodes  # nothing merged


def test_a_memory_saved_by_a_model_with_another_vocabulary_is_refused(llm, wider, tmp_path):
    llm.generate(PROMPTS, PARAMS, plugin_params=MEMORY)
    path = tmp_path / "memory.npz"
    llm.save_memory(str(path))
    vocab = llm.model.args.vocab_size
    assert json.loads(str(np.load(path)["meta"]))["vocab_size"] == vocab
    _assert_refused(wider, path, f"vocabulary of {vocab} tokens", f"this model has {vocab + 64}")
    wider.generate(PROMPTS[:1], PARAMS, plugin_params=MEMORY)
    wide = tmp_path / "wide.npz"
    wider.save_memory(str(wide))
    _assert_refused(llm, wide, f"vocabulary of {vocab + 64} tokens")
    llm.load_memory(str(path))  # the same vocabulary: merged


def test_an_older_file_without_the_record_is_refused_by_an_id_past_the_vocabulary(llm, tmp_path):
    vocab = llm.model.args.vocab_size
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, vocab + 5])
    old = tmp_path / "trie.npz"
    save_trie_file(old, trie)  # the trie-only format: no vocab_size
    _assert_refused(llm, old, f"token id {vocab + 5}", f"vocabulary of {vocab} tokens")
    outputs = OutputMemory()
    outputs.add([4, 5, vocab])
    unrecorded = tmp_path / "unrecorded.npz"
    save_memory_file(unrecorded, TokenTrie(window=6), outputs)  # as LLM.save_memory wrote before
    _assert_refused(llm, unrecorded, f"token id {vocab}")
    fits = TokenTrie(window=6)
    fits.insert([1, 2, 3, vocab - 1])
    save_trie_file(old, fits)
    llm.load_memory(str(old))  # ids inside the vocabulary: merged
    assert llm.engine.drafters.trie().lookup([1, 2, 3, vocab - 1]) > 0


@pytest.mark.parametrize("plugin", [MEMORY, HYBRID], ids=["memory_decoding", "hybrid"])
def test_ids_past_the_vocabulary_in_the_memory_never_fail_a_verify_batch(
    model, plugin, monkeypatch
):
    """The memory holds every plain-decoding answer with each third token replaced by an id past the
    vocabulary: the drafts offer those ids, the engine cuts them, and the batch decodes on."""
    llm = _llm(model)
    ar = llm.generate(PROMPTS, PARAMS)
    vocab = llm.model.args.vocab_size
    bad = vocab + 7
    memory = llm.engine.drafters
    for a in ar:
        path = [
            t if i % 3 != 2 else bad for i, t in enumerate(a.prompt_token_ids[-4:] + a.token_ids)
        ]
        memory.trie().insert(path)
        memory.output_memory().merge_tokens(np.array(path + [SEPARATOR], dtype=np.int32))
    drafter = memory.drafter(parse_plugin_params(plugin))
    offered = []

    def propose(request_id, context, max_nodes, ctx):
        proposal = real(request_id, context, max_nodes, ctx)
        offered.extend(t for t in proposal.draft.tokens if t >= vocab)
        return proposal

    real = drafter.propose
    monkeypatch.setattr(drafter, "propose", propose)
    par = llm.generate(PROMPTS, PARAMS, plugin_params=plugin)
    assert [p.token_ids for p in par] == [a.token_ids for a in ar]
    assert offered and set(offered) == {bad}  # the cut was needed
    # and the ids that fit were drafted
    assert sum(p.stats["accepted_draft_tokens"] for p in par) > 0
