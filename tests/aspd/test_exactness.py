"""ASPD exactness (no training needed), greedy, on the real engine path with the markup forced:

1. each branch's tokens (and KV) equal decoding that branch alone after the prefix, with the same
   positions (prompt + answer + `<|para|>` + the branch, contiguous) — one branch included, which
   is plain decoding apart from the markup;
2. the KV cache after the block equals a recomputation: a fresh cache, the same prompt prefill,
   then ONE forward over the flattened answer with layout()'s positions and mask as a tree mask;
   the serial tokens after the block equal decoding on from that recomputed cache;
3. a serial drafter (memory_decoding) changes nothing but the forward count (lossless).
Bit for bit on the compiled kernels (row invariance), to fp32 rounding on the torch path.
"""

import pytest
import torch

from aspd_engines import Script, aspd_engine, plugin
from kernel_paths import per_isa
from paraspec.aspd.decode import AspdDecoder
from paraspec.aspd.grammar import SerialGrammar, branch_logits, branch_token
from paraspec.aspd.layout import layout
from paraspec.aspd.params import AspdParams
from paraspec.decoding.drafters.registry import DrafterRegistry
from paraspec.config import parse_plugin_params
from paraspec.model.transformer import SeqInput
from paraspec.sampling.params import SamplingParams

TITLES = ["red", "blue sky", "g"]


def _run(engine, ids, prompt, titles, lengths, max_tokens=80, drafter=None):
    dec = plugin(ids, Script(ids, len(prompt), titles, lengths))
    dec.drafter = drafter
    seq = engine.add_request(
        prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), drafter=dec
    )[0]
    caches = []
    while engine.has_work():
        engine.step()
        if seq.cache is not None and (not caches or caches[-1] is not seq.cache):
            caches.append(seq.cache)
    return seq, caches[-1]


def _feed(model, cache, tokens, positions, mask=None):
    logits = model.forward(
        torch.tensor(tokens), torch.tensor(positions), [SeqInput(cache, len(tokens), mask)]
    )
    cache.commit(range(len(tokens)))
    return logits


def _check(engine, ids, prompt, titles, lengths, exact, drafter=None):
    same = torch.equal if exact else (lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-4))
    seq, cache = _run(engine, ids, prompt, titles, lengths, drafter=drafter)
    out, model, P = seq.output, engine.runner.model, len(prompt)
    para, end = out.index(ids.para), out.index(ids.end_para)
    slots = seq.mode.last_slots
    assert len(slots) == end - para and cache.length > P + end
    # 1. each branch alone: prompt prefill, then the answer up to <|para|> and the branch, one token a step
    flat = out[para + 1 : end]
    starts = [i for i, t in enumerate(flat) if t == ids.branch]
    assert len(starts) == len(titles)
    for k, s0 in enumerate(starts):
        branch = flat[s0 : flat.index(ids.end_branch, s0) + 1]
        assert branch[1 : 1 + len(titles[k])] == titles[k] and branch.count(ids.end_branch) == 1
        ref = engine.runner.new_cache(P + len(out) + 8)
        engine.runner.prefill(ref, prompt)
        feed = out[: para + 1] + branch[: len(titles[k]) + 2]
        for t in feed:
            logits = _feed(model, ref, [t], [ref.length])
        got = list(branch[: len(titles[k]) + 2])
        while got[-1] != ids.end_branch:
            t = branch_token(
                int(branch_logits(logits[0], ids).argmax()), ids, engine.tokenizer.eos_token_ids
            )
            content = len(got) - len(titles[k]) - 2
            got.append(ids.end_branch if content >= lengths[k] else t)
            logits = _feed(model, ref, [got[-1]], [ref.length])
        assert got == branch, f"branch {k} differs from decoding it alone"
        for j in range(len(branch)):  # and its KV, slot for slot
            a, b = cache.k[:, :, slots[s0 + j]], ref.k[:, :, P + para + 1 + j]
            assert same(a, b) and same(cache.v[:, :, slots[s0 + j]], ref.v[:, :, P + para + 1 + j])
    # 2. one forward over the flattened answer with layout()'s positions and mask
    ref = engine.runner.new_cache(P + len(out) + 8)
    engine.runner.prefill(ref, prompt)
    ans = out[: end + 1]
    pos, vis = layout(prompt + ans, ids)
    logits = _feed(model, ref, ans, pos[P:].tolist(), vis[P:, P:].contiguous())
    order = list(range(P + para + 1)) + slots
    assert same(cache.k[:, :, order], ref.k[:, :, : P + end + 1])
    assert same(cache.v[:, :, order], ref.v[:, :, : P + end + 1])
    # the serial tokens after the block: decoding on from the recomputed cache, grammar included
    g = SerialGrammar(ids, engine.tokenizer.eos_token_ids)
    g.block_done()
    tail = []
    for _ in range(len(out) - end - 1):
        t = int(g.apply(logits[-1]).argmax())
        g.advance(t)
        tail.append(t)
        logits = _feed(model, ref, [t], [ref.length])
    assert tail == out[end + 1 :]
    return seq


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("titles,lengths", [(TITLES, [3, 7, 1]), (TITLES[1:2], [6])])
def test_tiny_model(tiny_model_dir, kernels, titles, lengths):
    engine, ids = aspd_engine(tiny_model_dir("llama"), kernels=kernels)
    enc = [engine.tokenizer.encode(t) for t in titles]
    seq = _check(
        engine,
        ids,
        engine.tokenizer.encode("Colours: "),
        enc,
        lengths,
        exact=kernels.module is not None,
    )
    assert seq.mode.blocks == 1 and seq.stats.decode_steps < len(seq.output)


@pytest.mark.slow
def test_bundled_model():
    engine, ids = aspd_engine("default", torch.float32)
    prompt = engine.tokenizer.encode(
        "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n"
    )
    enc = [engine.tokenizer.encode(t) for t in ("Red", "Blue", "Green")]
    _check(
        engine, ids, prompt, enc, [6, 4, 9], exact=engine.runner.model.kernels.module is not None
    )


def test_serial_drafter_is_lossless(tiny_model_dir):
    engine, ids = aspd_engine(tiny_model_dir("llama"))
    prompt = engine.tokenizer.encode("Colours: ")
    enc = [engine.tokenizer.encode(t) for t in TITLES]
    plain, _ = _run(engine, ids, prompt, enc, [3, 7, 1], max_tokens=90)
    reg = DrafterRegistry(engine.tokenizer.eos_token_ids)
    cfg = parse_plugin_params(
        {"plugin_type": "aspd", "drafter": {"plugin_type": "memory_decoding"}}
    )
    dec = reg.drafter(cfg)
    assert isinstance(dec, AspdDecoder) and dec.drafter is not None
    runs = [
        _run(engine, ids, prompt, enc, [3, 7, 1], max_tokens=90, drafter=dec.drafter)[0]
        for _ in range(2)
    ]
    for r in runs:
        assert r.output == plain.output
    # the second run drafts its serial segments from the first one's memory
    assert (
        runs[1].stats.decode_steps < plain.stats.decode_steps
        and runs[1].stats.accepted_draft_tokens > 0
    )


def test_batch_with_plain_sequences_and_sampling(tiny_model_dir):
    engine, ids = aspd_engine(tiny_model_dir("llama"))
    prompt = engine.tokenizer.encode("Colours: ")
    enc = [engine.tokenizer.encode(t) for t in TITLES]
    other = engine.tokenizer.encode("Another prompt")
    alone_plain = engine.add_request(
        other, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    )[0]
    engine.run_until_done()
    alone_aspd, _ = _run(engine, ids, prompt, enc, [3, 7, 1])
    mixed_plain = engine.add_request(
        other, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    )[0]
    mixed_aspd, _ = _run(engine, ids, prompt, enc, [3, 7, 1])
    assert mixed_plain.output == alone_plain.output and mixed_aspd.output == alone_aspd.output
    sampled = []
    for _ in range(2):
        dec = plugin(ids, Script(ids, len(prompt), enc, [3, 7, 1]))
        sampled.append(
            engine.add_request(
                prompt,
                SamplingParams(temperature=0.9, top_p=0.9, seed=5, max_tokens=60, ignore_eos=True),
                drafter=dec,
            )[0]
        )
    engine.run_until_done()
    assert sampled[0].output == sampled[1].output and sampled[0].mode.blocks == 1
    assert AspdParams().max_branches == 8
