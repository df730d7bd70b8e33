"""bench/peers: transformers generate on the tiny model; llama.cpp's skip paths."""

from __future__ import annotations

import sys

import pytest

from paraspec.bench.base import GREEDY, SAMPLED, BenchTask, RunParams, SkipSystem
from paraspec.bench.peers import HFModelCache, LlamaCppSystem, TransformersSystem


@pytest.fixture(scope="module")
def hf_models(tiny_model_dir):
    return HFModelCache(str(tiny_model_dir("llama")), "float32")


@pytest.mark.parametrize("prompt_lookup", [None, 4])
def test_transformers_generates_ar_token_count_and_counts_its_forwards(hf_models, prompt_lookup):
    # no EOS
    peer = TransformersSystem("hf", hf_models, eos_token_ids={10_000}, prompt_lookup=prompt_lookup)
    peer.prepare()
    task = BenchTask("t", "t/0", [5, 6, 7, 5, 6, 7, 5, 6], max_new_tokens=32)
    m = peer.run(task, RunParams(GREEDY, target_tokens=12))
    assert m.generated_tokens == len(m.token_ids) == 12  # paraspec AR's count, not max_new_tokens
    assert m.prompt_tokens == 8 and m.system == "hf" and m.mode == GREEDY
    assert m.ttft_s > 0 and m.decode_tokens_per_s > 0
    # prompt lookup verifies several tokens in one forward; plain generate runs one per token
    assert (1 <= m.forward_passes <= 12) if prompt_lookup else (m.forward_passes == 12)
    assert peer.run(task, RunParams(GREEDY, target_tokens=12)).token_ids == m.token_ids
    assert peer.run(task, RunParams(SAMPLED, seed=1, target_tokens=4)).generated_tokens == 4


def test_llamacpp_not_installed_is_a_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(
        SkipSystem, match=r"llama-cpp-python is not installed \(`make peers` installs it\)"
    ):
        LlamaCppSystem("llamacpp", "default", 1, None)


def test_llamacpp_needs_a_gguf(tiny_model_dir):
    pytest.importorskip("llama_cpp")
    with pytest.raises(SkipSystem, match="llama.cpp needs a .gguf model"):
        LlamaCppSystem("llamacpp", str(tiny_model_dir("llama")), 1, None)


def test_llamacpp_built_for_another_cpu_is_a_skip_not_a_crash(monkeypatch):
    """A llama-cpp-python compiled with another CPU's instructions dies with SIGILL at its first
    forward (seen when a .venv moved between machines): the probe child dies, the bench skips."""
    from paraspec.bench import peers

    monkeypatch.setattr(
        peers, "LLAMACPP_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"
    )
    reason = peers.llamacpp_probe("model.gguf")
    assert "died on this CPU (SIGILL)" in reason and "make peers" in reason
    monkeypatch.setattr(peers, "LLAMACPP_PROBE", "raise SystemExit('cannot read model.gguf')")
    assert (
        peers.llamacpp_probe("model.gguf")
        == "llama-cpp-python cannot run the model: cannot read model.gguf"
    )
