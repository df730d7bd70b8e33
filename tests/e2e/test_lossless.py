"""Lossless, end to end on the bundled model: every drafter's greedy output is token-identical
to autoregressive greedy decoding in the same engine and dtype, for a few dozen varied prompts
(code, prose, repetitive, chat, input-grounded). The engine is built to be bit-exact in bf16 too;
should a divergence ever appear, the test still demands that it sits at a near-tie of the top
two logits of the autoregressive run (the weaker guarantee the issue allows), and reports it."""
import warnings

import pytest
import torch

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import load_task_set

pytestmark = pytest.mark.slow

MAX_TOKENS = 40
PLUGINS = {
    "memory_tree": '{"plugin_type": "memory_decoding", "decoding_length": 16}',
    "memory_chain_dynamic": {"plugin_type": "memory_decoding", "decoding_length": 8, "dynamic_algo": True,
                             "mode": "chain"},
    "lookahead": '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}',
    "hybrid": '{"plugin_type": "hybrid"}',
}
REPETITIVE = ["one two three one two three one two three one two", "a = [1, 2, 3]\nb = [1, 2, 3]\nc = [",
              "the cat sat on the mat. the cat sat on the mat. the cat"]


def _prompts(llm: LLM) -> list[list[int]]:
    tok = llm.tokenizer
    out = [tok.encode(t.prompt) for t in load_task_set("humaneval", 8, seed=1)]
    out += [tok.encode_chat(t.messages) for t in load_task_set("chat", 8, seed=1)]
    grounded = sorted(load_task_set("grounded", 40, seed=1), key=lambda t: len(t.text))[:6]
    out += [tok.encode_chat(t.messages) for t in grounded]
    out += [tok.encode(t) for t in REPETITIVE]
    return out


def _near_tie(llm: LLM, prompt: list[int], ar_tokens: list[int], at: int) -> float:
    """Gap between the top two logits of the AR run at output position `at`."""
    ids = prompt + ar_tokens[:at]
    model = llm.model
    cache = model.new_cache(len(ids) + 8)
    from paraspec.model.transformer import SeqInput
    logits = model.forward(torch.tensor(ids), torch.arange(len(ids)), [SeqInput(cache, len(ids))],
                           torch.tensor([len(ids) - 1]))[0]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def _check(llm: LLM, plugin) -> None:
    prompts = _prompts(llm)
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    ar = llm.generate(prompts, params)
    par = llm.generate(prompts, params, plugin_params=plugin)
    diverged = []
    for p, a, b in zip(prompts, ar, par):
        if a.token_ids != b.token_ids:
            at = next(i for i, (x, y) in enumerate(zip(a.token_ids + [-1], b.token_ids + [-2])) if x != y)
            gap = _near_tie(llm, p, a.token_ids, at)
            diverged.append((at, gap))
    assert all(gap < 0.07 for _, gap in diverged), f"divergences not at a near-tie: {diverged}"
    if llm.config.dtype == "float32" or llm.config.quantization:   # no near-tie excuse there
        assert not diverged, f"fp32 must be token-identical: {diverged}"
    steps = sum(b.stats["decode_steps"] for b in par)
    ar_steps = sum(a.stats["decode_steps"] for a in ar)
    assert steps < ar_steps, "parallel decoding took no fewer steps than AR"
    if diverged:  # allowed by the rule, but the engine is built so this does not happen
        warnings.warn(f"bf16 divergences, all at near-ties (output position, top-2 gap): {diverged}")


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_greedy_identical_bf16(bundled_llm_bf16, plugin):
    _check(bundled_llm_bf16, PLUGINS[plugin])


@pytest.mark.parametrize("plugin", ["memory_tree", "lookahead"])
def test_greedy_identical_fp32(bundled_llm_fp32, plugin):
    _check(bundled_llm_fp32, PLUGINS[plugin])


@pytest.fixture(scope="module")
def bundled_llm_w8a8():
    return LLM(quantization="w8a8")


@pytest.mark.parametrize("plugin", ["memory_tree", "lookahead"])
def test_greedy_identical_w8a8(bundled_llm_w8a8, plugin):
    _check(bundled_llm_w8a8, PLUGINS[plugin])


def test_long_tree_runs_with_accumulated_memory_identical(bundled_llm_bf16):
    """256-token completions with a hybrid drafter whose memory carries over between requests:
    deep trees with sibling gaps between a node's ancestors (the case that regroups attention's
    sum over keys; it once flipped a greedy token when that sum ran in fp32)."""
    from paraspec.config import build_drafter, parse_plugin_params
    llm = bundled_llm_bf16
    drafter = build_drafter(parse_plugin_params('{"plugin_type": "hybrid"}'), llm.tokenizer, llm.engine,
                            private_memory=True)
    params = SamplingParams(temperature=0, max_tokens=256)
    for task in load_task_set("humaneval", 4, seed=0):
        ids = llm.tokenizer.encode(task.prompt)
        ar = llm.generate([ids], params)[0]
        (seq,) = llm.engine.add_request(ids, params, drafter=drafter)
        llm.engine.run_until_done()
        assert seq.output == ar.token_ids, task.task_id
