"""bench/paraspec_systems: paraspec's systems by plugin_params, and the memory each keeps."""

from __future__ import annotations

import pytest

from paraspec.bench.base import BenchTask, RunParams
from paraspec.bench.paraspec_systems import PARASPEC_SYSTEMS, ParaspecSystem, sweep_plugin
from paraspec.decoding.memory.memory_file import save_trie_file


def test_sweep_names_are_plugin_params():
    assert sweep_plugin("md-tree-L4") == {
        "plugin_type": "memory_decoding",
        "decoding_length": 4,
        "dynamic_algo": False,
        "mode": "tree",
    }
    assert sweep_plugin("md-chain-L12")["mode"] == "chain"
    assert sweep_plugin("la-N4W3G5") == {
        "plugin_type": "la",
        "level": 4,
        "window": 3,
        "guess_set_size": 5,
    }
    assert sweep_plugin("md-tree") is None and sweep_plugin("la-N4W3") is None


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    from paraspec import LLM

    return LLM(str(tiny_model_dir("llama")), dtype="float32")


def test_memory_starts_empty_per_set_and_repeats_never_see_their_own_answer(llm):
    system = ParaspecSystem("md-tree", llm, PARASPEC_SYSTEMS["md-tree"])
    task = BenchTask("t", "t/0", llm.tokenizer.encode("abcabcabc def abcabc"), 24)
    system.begin_set("t")
    system.begin_task()
    first, second = (system.run(task, RunParams(repeat=r)) for r in (0, 1))
    assert first.token_ids == second.token_ids and first.forward_passes == second.forward_passes
    system.end_task()
    assert system._drafter.trie.n_nodes > 0  # the set keeps the task's output ...
    system.begin_set("u")
    assert system._drafter.trie.n_nodes == 0  # ... and the next set starts from nothing


def test_memory_file_prefills_every_set(llm, tmp_path):
    task = BenchTask("t", "t/0", llm.tokenizer.encode("one two three one two three"), 16)
    writer = ParaspecSystem("md-tree", llm, PARASPEC_SYSTEMS["md-tree"])
    writer.begin_set("t")
    writer.begin_task()
    writer.run(task, RunParams())
    writer.end_task()
    save_trie_file(str(tmp_path / "memory.trie"), writer._drafter.trie)
    reader = ParaspecSystem(
        "md-tree", llm, PARASPEC_SYSTEMS["md-tree"], memory_file=str(tmp_path / "memory.trie")
    )
    reader.begin_set("u")
    assert reader._drafter.trie.n_nodes == writer._drafter.trie.n_nodes > 0


def test_runs_report_the_engine_stats(llm):
    system = ParaspecSystem("ar", llm, None)
    system.begin_set("t")
    system.begin_task()
    m = system.run(
        BenchTask("t", "t/0", llm.tokenizer.encode("hello"), 6), RunParams(target_tokens=99)
    )
    # paraspec ignores target_tokens
    assert m.system == "ar" and m.generated_tokens == len(m.token_ids) <= 6
    assert m.forward_passes == m.generated_tokens and m.mean_accepted_tokens_per_step == 1.0
    assert m.accepted_hist == {"1": m.generated_tokens - 1}  # one token per decode step
    assert m.kv_cache_bytes > 0
