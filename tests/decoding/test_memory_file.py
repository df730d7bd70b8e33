"""The engine's drafting memory (memory_file.py, output_memory.py): the trie and the hybrid's past
outputs are one engine-owned memory, shared by its drafters, saved and merged together, with a
one-line error for every file that cannot be used and trie-only files still loading."""

import numpy as np
import pytest

from paraspec.config import parse_plugin_params
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.memory.memory_file import (
    MemoryFileError,
    merge_memory_file,
    merge_trie_file,
    output_arrays,
    read_memory_file,
    save_memory_file,
    save_trie_file,
)
from paraspec.decoding.memory.output_memory import SEPARATOR, OutputMemory
from paraspec.decoding.contract.proposer import StepContext
from paraspec.decoding.drafters.registry import DrafterRegistry
from paraspec.decoding.memory.trie import TokenTrie

EOS = [2]
HYBRID = parse_plugin_params({"plugin_type": "hybrid"})
HYBRID_8 = parse_plugin_params({"plugin_type": "hybrid", "decoding_length": 8})
ANSWER = [30 + i for i in range(40)]  # an output no prompt below contains
FLAT = StepContext(cost=CostModel({k: 1.0 for k in range(1, 65)}))


def finish(drafter, key, prompt, output):
    """One request through the drafter: prompt, its output committed, finished."""
    drafter.begin(key, prompt)
    drafter.observe(key, output + [2])
    drafter.end(key)


def drafts_from_past_outputs(drafter, key) -> list[int]:
    """What the drafter sends for a context that only the past ANSWER continues (the trie is
    empty, the prompt does not hold it): the suffix source's memory is the only place it can
    come from."""
    context = [7, 8] + ANSWER[:6]
    drafter.begin(key, context)
    proposal = drafter.propose(key, context, 15, FLAT)
    drafter.end(key)
    return proposal.draft.tokens


def test_two_hybrid_drafters_of_an_engine_share_one_output_memory():
    reg = DrafterRegistry(EOS)
    a, b = reg.drafter(HYBRID), reg.drafter(HYBRID_8)
    assert a is not b and a.output_memory is b.output_memory is reg.output_memory()
    finish(a, "r", [5, 6], ANSWER)
    assert reg.trie().prune(0) > 0 and len(reg.trie()) == 0  # forget the trie's part
    assert ANSWER[6] in drafts_from_past_outputs(b, "s")  # a's answer, drafted by b


def test_a_private_drafter_gets_an_empty_output_memory_of_its_own():
    reg = DrafterRegistry(EOS)
    finish(reg.drafter(HYBRID), "r", [5, 6], ANSWER)
    cold = reg.private(HYBRID)
    assert cold.output_memory is not reg.output_memory() and len(cold.output_memory) == 0
    assert cold.trie is not reg.trie()
    assert ANSWER[6] not in drafts_from_past_outputs(cold, "s")


def test_memory_survives_save_and_load_into_a_new_engine_and_is_drafted_from(tmp_path):
    reg = DrafterRegistry(EOS)
    finish(reg.drafter(HYBRID), "r", [5, 6], ANSWER)
    path = tmp_path / "memory.npz"
    save_memory_file(path, reg.trie(), reg.output_memory())
    fresh = DrafterRegistry(EOS)  # loaded before any drafter exists
    merge_memory_file(path, fresh.trie(), fresh.output_memory())
    assert fresh.output_memory().tokens().tolist() == ANSWER + [SEPARATOR]
    assert output_arrays(fresh.trie())[2].sum() == output_arrays(reg.trie())[2].sum() > 0
    drafter = fresh.drafter(HYBRID)
    fresh.trie().prune(0)  # only the past outputs left
    assert ANSWER[6] in drafts_from_past_outputs(drafter, "s")
    # merging again appends: the memory holds both copies (newest last)
    merge_memory_file(path, None, fresh.output_memory())
    assert len(fresh.output_memory()) == 2 * (len(ANSWER) + 1)


def test_a_trie_only_file_still_loads(tmp_path):
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, 4])
    old = tmp_path / "old.trie"
    save_trie_file(old, trie)  # the format LLM.save_memory wrote before
    into, memory = TokenTrie(window=6), OutputMemory()
    contents = merge_memory_file(old, into, memory)
    assert contents.window == 6 and len(memory) == 0
    assert output_arrays(into)[1].tolist() == output_arrays(trie)[1].tolist()
    # and a memory file's trie part merges into a trie as a trie file does
    both = tmp_path / "both.npz"
    save_memory_file(both, trie, memory)
    again = TokenTrie(window=6)
    merge_trie_file(both, again)
    assert output_arrays(again)[2].tolist() == output_arrays(trie)[2].tolist()


def _saved(tmp_path) -> dict:
    trie, memory = TokenTrie(window=4), OutputMemory()
    trie.insert([1, 2, 3])
    memory.add([5, 6, 7], prompt=[1, 2])
    path = tmp_path / "good.npz"
    save_memory_file(path, trie, memory)
    with np.load(path) as z:
        return dict(z)


def _write(tmp_path, name: str, arrays: dict):
    path = tmp_path / name
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.mark.parametrize(
    "change, why",
    [
        (
            lambda a: a.update(
                meta=np.array('{"format": "paraspec-memory", "version": 2, "window": 4}')
            ),
            "version 2, this paraspec reads version 1",
        ),
        (
            lambda a: a.update(meta=np.array('{"format": "something-else", "version": 1}')),
            "is not a paraspec memory",
        ),
        (lambda a: a.pop("outputs"), "has no outputs array"),
        (
            lambda a: a.update(outputs=np.array([5, 6, 7], np.int32)),
            "without their final separator",
        ),
        (lambda a: a.update(outputs=np.array([5, -3, -1], np.int32)), "negative tokens"),
        (lambda a: a.update(outputs=np.zeros((2, 2), np.int32)), "not one row of integers"),
        (lambda a: a.update(token=np.int32(3)), "mismatched shapes"),
        (lambda a: a.update(answers=np.array([1, 0])), "not rows of"),
        (lambda a: a.update(answers=np.array([[1, 4]])), "outside its outputs"),
        (lambda a: a.update(answers=np.array([[1, 1]])), "do not start an output"),
        (lambda a: a.update(parent=a["parent"][::-1].copy()), "out-of-order"),
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_the_fix_and_changes_nothing(tmp_path, change, why):
    arrays = _saved(tmp_path)
    change(arrays)
    path = _write(tmp_path, "bad.npz", arrays)
    trie, memory = TokenTrie(window=4), OutputMemory()
    memory.add([9, 9, 9])
    with pytest.raises(MemoryFileError, match=why) as e:
        merge_memory_file(path, trie, memory)
    message = str(e.value)
    assert (
        "\n" not in message
        and str(path) in message
        and "delete it, or save the memory again" in message
    )
    assert len(trie) == 0 and memory.tokens().tolist() == [9, 9, 9, SEPARATOR]


@pytest.mark.parametrize("cut", [0, 10, 100, -20])
def test_a_truncated_or_missing_file_is_one_line_too(tmp_path, cut):
    _saved(tmp_path)
    data = (tmp_path / "good.npz").read_bytes()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[:cut])
    with pytest.raises(MemoryFileError, match="cannot be read") as e:
        read_memory_file(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    with pytest.raises(MemoryFileError, match="does not exist; check the path"):
        read_memory_file(tmp_path / "missing.npz")


def test_a_full_memory_keeps_its_newest_outputs():
    memory = OutputMemory(max_tokens=20)
    for i in range(10):
        memory.add([100 + i, 200 + i, 300 + i])
    toks = memory.tokens().tolist()
    assert len(toks) <= 20 and toks[-4:] == [109, 209, 309, SEPARATOR]
    big = OutputMemory(max_tokens=1000)
    for i in range(10):
        big.add([100 + i] * 5)
    small = OutputMemory(max_tokens=13)  # a file larger than the memory: its newest outputs,
    small.merge_tokens(big.tokens())  # each from its start
    assert small.tokens().tolist() == [108] * 5 + [SEPARATOR] + [109] * 5 + [SEPARATOR]


def test_answers_are_kept_by_prompt_moved_with_their_outputs_and_saved(tmp_path):
    def answers(memory, prompt, n):
        toks = memory.tokens().tolist()
        return [toks[at : at + n] for at in memory.answer(prompt)]

    memory = OutputMemory(max_tokens=24)
    memory.add([10, 11, 12], prompt=[1, 2])
    memory.add([20, 21], prompt=[3])
    memory.add([30, 31, 32])  # no prompt: nothing to replay
    assert answers(memory, [1, 2], 3) == [[10, 11, 12]] and memory.answer([1, 2, 0]) == []
    memory.add([40, 41, 42], prompt=[1, 2])  # another answer to the same prompt: both kept
    memory.add([10, 11, 12], prompt=[1, 2])  # the same answer again: kept once, the newest
    assert answers(memory, [1, 2], 3) == [[40, 41, 42], [10, 11, 12]]
    generation = memory.generation
    for i in range(3):  # full: the older half goes, and the answers in it
        memory.add([50 + i, 60 + i, 70 + i], prompt=[9, i])
    assert memory.generation > generation and memory.answer([3]) == []
    for i in range(3):
        assert answers(memory, [9, i], 3) == [[50 + i, 60 + i, 70 + i]]
    path = tmp_path / "memory.npz"
    save_memory_file(path, TokenTrie(window=4), memory)
    into = OutputMemory()
    into.add([5, 6], prompt=[7])
    merge_memory_file(path, None, into)  # after what `into` held: positions shift
    assert answers(into, [9, 2], 3) == [[52, 62, 72]] and answers(into, [7], 2) == [[5, 6]]
    small = OutputMemory(max_tokens=8)  # a file larger than the memory: answers of the part kept
    merge_memory_file(path, None, small)
    assert small.answer([9, 0]) == [] and answers(small, [9, 2], 3) == [[52, 62, 72]]
