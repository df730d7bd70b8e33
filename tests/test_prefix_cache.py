"""Prefix KV reuse (prefix_cache.py) is exact: a prompt that starts with whole chunks prefilled
before gets the same KV bits, the same logits and the same tokens as without the cache, on every
kernel path and numerics (the prompt roads that are not row-invariant included), alone, across
the turns of a conversation, beside running requests, under drafts and under eviction."""

from __future__ import annotations

import pytest
import torch

from drafters import RandomTreeDrafter
from kernel_paths import per_isa
from paraspec import LLM, SamplingParams
from paraspec.errors import ConfigError
from paraspec.model import ggml
from paraspec.prefix_cache import MB, PrefixCache
from tiny_models import write_gguf

CHUNK = 48  # tall enough for the GGUF dense road below; several chunks per prompt
NUMERICS = {
    "float32": dict(dtype="float32", quantization="none"),
    "bfloat16": dict(dtype="bfloat16", quantization="none"),
    "w8a8": dict(quantization="w8a8"),
    "gguf-q8_0": dict(quantization="gguf"),
    "gguf-q4_1": dict(quantization="gguf"),
}


@pytest.fixture(scope="module")
def hf_dir(tiny_model_dir):
    return tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2)


def _llm(hf_dir, tmp_path_factory, numerics: str, kernels: str, **kw) -> LLM:
    path = hf_dir
    if numerics.startswith("gguf"):
        quant = numerics.split("-")[1].upper()
        path = write_gguf(hf_dir, tmp_path_factory.mktemp("gguf") / f"{quant}.gguf", quant)
    return LLM(str(path), kernels=kernels, prefill_chunk=CHUNK, **NUMERICS[numerics], **kw)


@pytest.fixture(
    params=[
        pytest.param((n, p), id=f"{n}-{p.id}", marks=p.marks) for n in NUMERICS for p in per_isa()
    ]
)
def llm(request, hf_dir, tmp_path_factory, monkeypatch):
    numerics, param = request.param
    if numerics.startswith("gguf") and param.id == "torch":
        pytest.skip(
            "GGUF blocks run on the compiled kernels only (the torch path dequantises them)"
        )
    for variant in ggml.PROMPT_ROWS:  # GGUF prompt chunks take the dense road (torch's matmul)
        monkeypatch.setitem(ggml.PROMPT_ROWS, variant, 32)
    return _llm(hf_dir, tmp_path_factory, numerics, param.values[0].label)


def _prompt(seed: int, n: int, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab - 1, (n,), generator=g).tolist()


def _prefill(llm, prompt, keep=None):
    """The cache and last-token logits after prefilling `prompt` from `keep`'s blocks, or from nothing."""
    runner = llm.runner
    cache = runner.new_cache(len(prompt) + 8)
    restored = keep.restore(prompt, cache, runner.prefill_chunk) if keep is not None else 0
    while (logits := runner.prefill_next(cache, prompt, keep)) is None:
        pass
    return cache, logits, restored


def test_reused_kv_and_logits_are_the_bits_of_a_fresh_prefill(llm):
    V = llm.model.args.vocab_size
    first = _prompt(1, 3 * CHUNK + 20, V)
    second = first[: 2 * CHUNK + 7] + _prompt(2, 2 * CHUNK, V)  # shares two whole chunks and a bit
    keep = PrefixCache(64)
    _prefill(llm, first, keep)
    assert len(keep) == 3  # whole chunks only
    got, got_logits, restored = _prefill(llm, second, keep)
    assert restored == 2 * CHUNK  # never the partly shared chunk
    want, want_logits, _ = _prefill(llm, second)
    L = len(second)
    assert got.length == want.length == L
    assert torch.equal(got.k[:, :, :L], want.k[:, :, :L]) and torch.equal(
        got.v[:, :, :L], want.v[:, :, :L]
    )
    assert torch.equal(got_logits, want_logits)
    # a prompt equal to a cached one still runs its last chunk (its logits give the first token)
    again, again_logits, restored = _prefill(llm, first[: 3 * CHUNK], keep)
    assert restored == 2 * CHUNK
    assert torch.equal(again_logits, _prefill(llm, first[: 3 * CHUNK])[1])


def _chat_turns(llm, params, turns: int, drafter=None) -> list[tuple[list[int], int]]:
    """A conversation: each turn's prompt holds the earlier turns and the model's answers."""
    llm.engine.default_drafter = drafter
    messages, out = [{"role": "system", "content": "You are a terse assistant. " * 6}], []
    try:
        for t in range(turns):
            messages.append(
                {"role": "user", "content": f"Question {t}: what is {t} plus {t}? " * 3}
            )
            r = llm.chat(messages, params)[0]
            out.append((r.token_ids, r.stats["cached_tokens"]))
            messages.append({"role": "assistant", "content": r.text})
    finally:
        llm.engine.default_drafter = None
    return out


def _without_cache(llm, fn):
    kept, llm.engine.prefix_cache = llm.engine.prefix_cache, PrefixCache(0)
    try:
        return fn()
    finally:
        llm.engine.prefix_cache = kept


@pytest.mark.parametrize("drafted", [False, True], ids=["ar", "drafts"])
def test_multi_turn_tokens_identical_with_and_without_the_cache(llm, drafted):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    V = llm.model.args.vocab_size
    drafter = RandomTreeDrafter(V, nodes=6, seed=5) if drafted else None
    want = _without_cache(llm, lambda: _chat_turns(llm, params, 4))  # AR, nothing reused
    got = _chat_turns(llm, params, 4, drafter)
    assert [t for t, _ in got] == [t for t, _ in want]
    # later turns reused
    assert got[0][1] == 0 and all(c >= CHUNK and c % CHUNK == 0 for _, c in got[1:])
    assert all(c == 0 for _, c in want)
    info = llm.engine.prefix_cache.info()
    assert info["hits"] >= 3 and info["reused_tokens"] == sum(c for _, c in got)


def test_sampled_siblings_identical_with_and_without_the_cache(llm):
    params = SamplingParams(temperature=0.9, seed=11, n=3, max_tokens=16, ignore_eos=True)
    prompt = _prompt(3, 2 * CHUNK + 5, llm.model.args.vocab_size)
    want = _without_cache(llm, lambda: llm.generate([prompt], params)[0])
    # stores 2 chunks
    llm.generate([prompt[: 2 * CHUNK] + [7]], SamplingParams(temperature=0, max_tokens=2))
    got = llm.generate([prompt], params)[0]
    assert [o.token_ids for o in got.outputs] == [o.token_ids for o in want.outputs]
    assert got.outputs[0].stats["cached_tokens"] == 2 * CHUNK


@pytest.fixture(scope="module")
def fp32(hf_dir, tmp_path_factory):
    return _llm(hf_dir, tmp_path_factory, "float32", "auto", max_batch_size=4)


def test_reuse_beside_running_requests(fp32):
    """A request reusing a prefix while others decode (one with drafts) and prefill: every
    sequence's tokens are those it gets alone without the cache."""
    V, engine = fp32.model.args.vocab_size, fp32.engine
    system = _prompt(4, 2 * CHUNK, V)
    prompts = {
        "a": system + _prompt(5, 30, V),
        "b": system + _prompt(6, 60, V),
        "c": _prompt(7, 70, V),
    }
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    drafter = RandomTreeDrafter(V, nodes=4, seed=2)
    want = _without_cache(
        fp32, lambda: {k: fp32.generate([p], params)[0].token_ids for k, p in prompts.items()}
    )
    engine.add_request(prompts["a"], params, "a", drafter)
    tokens: dict[str, list[int]] = {}
    for _ in range(6):  # a: prefilled (its chunks stored), decoding
        for u in engine.step():
            tokens.setdefault(u.seq.key, []).extend(u.new_token_ids)
    b = engine.add_request(prompts["b"], params, "b")[0]
    engine.add_request(prompts["c"], params, "c", drafter)
    while engine.has_work():
        for u in engine.step():
            assert u.error is None
            tokens.setdefault(u.seq.key, []).extend(u.new_token_ids)
    assert tokens == want
    assert b.cached_tokens == 2 * CHUNK


def test_eviction_keeps_the_budget_and_the_tokens(fp32):
    V = fp32.model.args.vocab_size
    args = fp32.model.args
    # one chunk's fp32 K and V
    block = 2 * args.n_layers * args.n_kv_heads * CHUNK * args.head_dim * 4
    keep = PrefixCache(2.5 * block / MB)  # room for two blocks
    a, b = _prompt(8, 2 * CHUNK + 1, V), _prompt(9, 2 * CHUNK + 1, V)
    _prefill(fp32, a, keep)
    assert len(keep) == 2 and keep.nbytes == 2 * block
    _prefill(fp32, b[: CHUNK + 1], keep)  # b's first chunk: a's leaf goes, its root stays
    assert len(keep) == 2 and keep.nbytes <= keep.budget_bytes and keep.stats.evicted_blocks == 1
    _, logits, restored = _prefill(fp32, b, keep)  # b's root reused; its leaf stored, a's root out
    assert restored == CHUNK and torch.equal(logits, _prefill(fp32, b)[1])
    assert len(keep) == 2 and keep.stats.evicted_blocks == 2
    assert _prefill(fp32, a, keep)[2] == 0  # nothing of a is left
    # a parent evicted takes the blocks below it (unreachable without it)
    root = next(k for k, blk in keep._blocks.items() if blk.children)
    keep._evict(root)
    assert not keep._blocks and not keep._by_id
    assert keep.nbytes == sum(blk.nbytes for blk in keep._blocks.values()) <= keep.budget_bytes


def test_a_new_chunk_size_starts_afresh(fp32):
    V = fp32.model.args.vocab_size
    keep = PrefixCache(64)
    p = _prompt(10, 3 * CHUNK, V)
    _prefill(fp32, p, keep)
    fp32.runner.prefill_chunk = 32
    try:
        # 48-token blocks never fit 32-token chunks
        cache, logits, restored = _prefill(fp32, p, keep)
        assert restored == 0 and keep.block_tokens == 32
        assert torch.equal(logits, _prefill(fp32, p)[1])
    finally:
        fp32.runner.prefill_chunk = CHUNK


def test_off_and_bad_budgets():
    off = PrefixCache(0)
    assert not off.enabled and off.info()["lookups"] == 0
    for bad in (-1, "256", True, float("nan")):
        with pytest.raises(ConfigError, match="prefix_cache_mb"):
            PrefixCache(bad)
