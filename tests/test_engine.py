"""The shared parallel-decoding core through the public API, on tiny random models:
verification + acceptance + KV commit give exactly autoregressive output, in every numerics
(fp32, bf16, w8a8) on every kernel path this machine can execute."""

import pytest
import torch

from drafters import OracleDrafter, RandomTreeDrafter
from kernel_paths import per_isa
from paraspec import LLM, SamplingParams

NUMERICS = {
    "float32": dict(dtype="float32"),
    "bfloat16": dict(dtype="bfloat16"),
    "w8a8": dict(quantization="w8a8"),
}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param((n, p), id=f"{n}-{p.id}", marks=p.marks) for n in NUMERICS for p in per_isa()
    ],
)
def llm(request, tiny_model_dir):
    numerics, param = request.param
    kernels = param.values[0]
    return LLM(
        str(tiny_model_dir("llama", n_layers=3, hidden=96, heads=6, kv_heads=2)),
        kernels=kernels.label,
        **NUMERICS[numerics],
    )


PROMPTS = [
    "hello world",
    "def f(x):\n    return",
    "The quick brown fox",
    "aaaa bbbb aaaa bbbb",
    "1, 2, 3, 4,",
]


def _run(llm, params, drafter=None, prompts=PROMPTS):
    llm.engine.default_drafter = drafter
    try:
        return llm.generate(prompts, params)
    finally:
        llm.engine.default_drafter = None


@pytest.mark.parametrize("nodes", [1, 5, 15])
def test_greedy_random_trees_equal_autoregressive(llm, nodes):
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    ar = _run(llm, params)
    par = _run(llm, params, RandomTreeDrafter(llm.model.args.vocab_size, nodes, seed=nodes))
    for a, b in zip(ar, par):
        assert a.token_ids == b.token_ids
        assert (
            b.stats["decode_steps"]
            == b.stats["generated_tokens"] - 1 - b.stats["accepted_draft_tokens"]
        )


def test_oracle_drafts_are_accepted_and_output_is_unchanged(llm):
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    ar = _run(llm, params, prompts=PROMPTS[:1])[0]
    ref = ar.prompt_token_ids + ar.token_ids
    par = _run(
        llm, params, OracleDrafter(ref, llm.model.args.vocab_size, depth=6), prompts=PROMPTS[:1]
    )[0]
    assert par.token_ids == ar.token_ids
    # ~6 accepted + 1 bonus per step (the budget shrinks near the end)
    assert par.stats["decode_steps"] <= 10
    assert par.stats["mean_accepted_tokens_per_step"] > 4.5
    wrong = _run(
        llm,
        params,
        OracleDrafter(ref, llm.model.args.vocab_size, depth=6, wrong_at=3),
        prompts=PROMPTS[:1],
    )[0]
    assert wrong.token_ids == ar.token_ids
    assert wrong.stats["accepted_tokens_per_step_histogram"].get("4", 0) > 0


@pytest.mark.parametrize(
    "penalties",
    [{}, {"repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.3}],
)
def test_seeded_sampling_is_identical_with_and_without_drafts(llm, penalties):
    """Counter-based randomness + row-invariant logits: a seeded request samples the very same
    tokens whether its tokens come one per step or several per verification pass."""
    params = SamplingParams(
        temperature=0.8, top_p=0.9, top_k=50, seed=11, max_tokens=40, ignore_eos=True, **penalties
    )
    ar = _run(llm, params)
    oracle = [
        OracleDrafter(a.prompt_token_ids + a.token_ids, llm.model.args.vocab_size, depth=5)
        for a in ar
    ]
    for a, prompt, d in zip(ar, PROMPTS, oracle):
        b = _run(llm, params, d, prompts=[prompt])[0]
        assert b.token_ids == a.token_ids
        assert b.stats["decode_steps"] < a.stats["decode_steps"]
    rnd = _run(llm, params, RandomTreeDrafter(llm.model.args.vocab_size, 10, seed=3))
    assert [r.token_ids for r in rnd] == [a.token_ids for a in ar]


# 13 prompts: repetitive ones a tiny model's greedy loops copy from, code, prose, numbers
REAL_DRAFTER_PROMPTS = PROMPTS + [
    "for i in range(10): print(i)",
    "one two three one two three one",
    "Once upon a time there was",
    "x = [1, 2, 3]\ny = [1, 2,",
    "SELECT * FROM users WHERE",
    "the cat sat on the mat, the cat",
    "import numpy as np\nimport",
    "Dear team,",
]
REAL_DRAFTERS = {
    "lookahead": '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}',
    "hybrid": '{"plugin_type": "hybrid"}',
}


@pytest.mark.parametrize("plugin", list(REAL_DRAFTERS))
def test_real_drafters_equal_ar_greedy_and_seeded_sampling(llm, plugin):
    """lookahead and hybrid (trie, context, n-gram pool), 13 prompts x 40 tokens greedy and 13
    seeded-sampled (one with penalties), in this numerics on this kernel path: every output is
    AR's, and their drafts are accepted (fewer forwards than AR)."""
    from paraspec.decoding.policy.cost import CostModel

    llm.engine.pin_cost(CostModel())  # drafts sized by a fixed curve, not by this machine's timings
    n = len(REAL_DRAFTER_PROMPTS)
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)] * n + [
        SamplingParams(
            temperature=0.7,
            top_p=0.95,
            seed=200 + i,
            max_tokens=40,
            ignore_eos=True,
            repetition_penalty=1.2 if i == 0 else 1.0,
        )
        for i in range(n)
    ]
    prompts = REAL_DRAFTER_PROMPTS + REAL_DRAFTER_PROMPTS
    ar = llm.generate(prompts, params)
    par = llm.generate(prompts, params, plugin_params=REAL_DRAFTERS[plugin])
    for i, (a, b) in enumerate(zip(ar, par)):
        mode = "greedy" if i < n else f"seeded sampling (seed {params[i].seed})"
        assert a.token_ids == b.token_ids, f"prompt {i % n}, {mode}: {plugin} differs from AR"
    for mode, part in (("greedy", slice(0, n)), ("sampled", slice(n, 2 * n))):
        steps = sum(b.stats["decode_steps"] for b in par[part])
        assert steps < sum(a.stats["decode_steps"] for a in ar[part]), (
            f"{plugin}: no fewer {mode} steps than AR"
        )


def test_greedy_penalties_identical(llm):
    params = SamplingParams(
        temperature=0, repetition_penalty=1.5, frequency_penalty=0.4, max_tokens=40, ignore_eos=True
    )
    ar = _run(llm, params)
    par = _run(llm, params, RandomTreeDrafter(llm.model.args.vocab_size, 12, seed=5))
    assert [a.token_ids for a in ar] == [b.token_ids for b in par]


def test_stops_inside_an_accepted_run(llm):
    greedy = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    ar = _run(llm, greedy, prompts=PROMPTS[:1])[0]
    ref = ar.prompt_token_ids + ar.token_ids
    # max_tokens reached mid-draft
    p = SamplingParams(temperature=0, max_tokens=9, ignore_eos=True)
    out = _run(llm, p, OracleDrafter(ref, llm.model.args.vocab_size, depth=6), prompts=PROMPTS[:1])[
        0
    ]
    assert out.token_ids == ar.token_ids[:9] and out.finish_reason == "length"
    # a stop token inside the run
    stop_tok = ar.token_ids[7]
    p = SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[stop_tok], ignore_eos=True)
    first = ar.token_ids.index(stop_tok)
    out = _run(llm, p, OracleDrafter(ref, llm.model.args.vocab_size, depth=6), prompts=PROMPTS[:1])[
        0
    ]
    assert out.token_ids == ar.token_ids[: first + 1] and out.finish_reason == "stop"
    # a stop string inside the run: same text and tokens as autoregressive decoding
    stop_str = ar.text[12:15]
    p = SamplingParams(temperature=0, max_tokens=40, stop=[stop_str], ignore_eos=True)
    a = _run(llm, p, prompts=PROMPTS[:1])[0]
    b = _run(llm, p, OracleDrafter(ref, llm.model.args.vocab_size, depth=6), prompts=PROMPTS[:1])[0]
    assert a.text == b.text == ar.text[: ar.text.index(stop_str)]
    assert a.token_ids == b.token_ids and b.finish_reason == "stop"


def test_logprobs_from_verification_equal_autoregressive(llm):
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, logprobs=3)
    ar = _run(llm, params, prompts=PROMPTS[:1])[0]
    par = _run(
        llm,
        params,
        OracleDrafter(ar.prompt_token_ids + ar.token_ids, llm.model.args.vocab_size),
        prompts=PROMPTS[:1],
    )[0]
    la, lb = ar.outputs[0].logprobs, par.outputs[0].logprobs
    assert len(la) == len(lb) == 20
    for x, y in zip(la, lb):
        assert x.token_id == y.token_id and x.logprob == y.logprob and x.top == y.top
        assert x.top[0][0] == x.token_id  # greedy picks the most likely token


def test_n_samples_and_batching(llm):
    params = SamplingParams(temperature=1.0, n=3, seed=5, max_tokens=16, ignore_eos=True)
    out = _run(llm, params, prompts=PROMPTS[:2])
    assert [len(o.outputs) for o in out] == [3, 3]
    assert len({tuple(c.token_ids) for c in out[0].outputs}) > 1
    again = _run(llm, params, prompts=PROMPTS[:2])
    assert [[c.token_ids for c in o.outputs] for o in out] == [
        [c.token_ids for c in o.outputs] for o in again
    ]
    # batched greedy == one at a time
    g = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    together = _run(llm, g, RandomTreeDrafter(llm.model.args.vocab_size, 6))
    for prompt, t in zip(PROMPTS, together):
        assert _run(llm, g, prompts=[prompt])[0].token_ids == t.token_ids


def test_chat_and_stats(llm):
    out = llm.chat(
        [{"role": "user", "content": "hi"}], SamplingParams(temperature=0, max_tokens=8)
    )[0]
    s = out.stats
    assert s["prompt_tokens"] == len(out.prompt_token_ids) > 5
    assert s["generated_tokens"] == len(out.token_ids) <= 8
    for key in (
        "decode_steps",
        "ttft_s",
        "decode_s",
        "tokens_per_s",
        "mean_accepted_tokens_per_step",
        "acceptance_rate",
        "accepted_tokens_per_step_histogram",
        "draft_s",
        "model_s",
    ):
        assert key in s


def test_forward_cost_is_a_staircase_over_padded_rows(llm):
    """The forward pads its rows to a multiple of ROW_MULTIPLE, so k rows cost what the padded
    count costs: drafters must see a 4th draft node (5 rows) priced like 8 rows, not a line."""
    from paraspec.model.linear import ROW_MULTIPLE

    cost = llm.engine.runner.forward_cost()
    assert sorted(cost) == list(range(1, max(cost) + 1))
    assert cost[1] == 1.0
    assert all(cost[k] <= cost[k + 1] for k in range(1, max(cost)))
    for k in range(2, max(cost) + 1):
        padded = -(-k // ROW_MULTIPLE) * ROW_MULTIPLE
        assert cost[k] == cost[padded]


# ------------------------------------------------------------------------------ dear rows, long copies
# a real Zen 1's probe (issue 37)
ZEN1 = {
    1: 1.0,
    2: 2.08,
    4: 3.04,
    8: 6.08,
    12: 7.95,
    16: 11.16,
    32: 20.26,
}
DISTURBED = '{"1": 1, "4": 2.22, "8": 5.20, "16": 14.8}'  # a probe read while a compiler ran on the other core
MEMORY = {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": True}


def make_copy_model(path, period: int = 200, seed: int = 0):
    """A model whose greedy next token is a fixed function of the last one: `period` byte tokens
    in one cycle (attention and MLP write nothing; lm_head row f(t) is t's embedding). A prompt
    holding the cycle once and its start again is continued by copying the prompt, as long as
    asked. Returns the folder and the cycle."""
    from safetensors.torch import load_file, save_file
    from tiny_models import make_tiny_model

    make_tiny_model(path, "llama", seed=seed, tie_word_embeddings=False)
    w = load_file(str(path / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(w["model.embed_tokens.weight"].shape, generator=g)
    emb /= emb.norm(dim=1, keepdim=True)
    cycle = torch.randperm(256, generator=g)[:period].tolist()
    head = torch.zeros_like(emb)
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        head[b] = 20.0 * emb[a]
    for k in w:
        if k.endswith(("o_proj.weight", "down_proj.weight")) or "norm" in k:
            w[k] = torch.zeros_like(w[k]) if "proj" in k else torch.ones_like(w[k])
    w["model.embed_tokens.weight"], w["lm_head.weight"] = emb, head
    save_file(w, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path, cycle


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory):
    return make_copy_model(tmp_path_factory.mktemp("copy-model"))


@pytest.mark.parametrize("curve", ["zen1", "disturbed-probe"])
def test_memory_decoding_drafts_a_long_copy_where_rows_are_dear(copy_model, curve, monkeypatch):
    """A row costing ~0.7 of a step (a real Zen 1), or a probe that read rows dearer than they
    are: the policy still verifies the copy once the text shows it copies, and the output is
    plain decoding's, token for token."""
    from paraspec.decoding.policy.cost import CostModel

    path, cycle = copy_model
    if curve == "disturbed-probe":  # pinned as the probe's reading: shaped, not refreshed
        monkeypatch.setenv("PARASPEC_FORWARD_COST", DISTURBED)
    llm = LLM(str(path), dtype="float32", plugin_params=MEMORY)
    if curve == "zen1":
        llm.engine.pin_cost(CostModel(ZEN1))  # as it is: the shape checks are the probe's
    prompt = cycle + cycle[:60]  # the cycle once, then its start again
    params = SamplingParams(temperature=0, max_tokens=160, ignore_eos=True)
    out = llm.generate([prompt], params)[0]
    llm.engine.default_drafter = None
    ar = llm.generate([prompt], params)[0]
    # the output copies 160 tokens
    assert ar.token_ids == [cycle[(60 + i) % len(cycle)] for i in range(160)]
    assert out.token_ids == ar.token_ids
    s = out.stats
    assert s["decode_steps"] <= 159 // 3 and s["accepted_draft_tokens"] >= 100, s
    assert ar.stats["decode_steps"] == 159
