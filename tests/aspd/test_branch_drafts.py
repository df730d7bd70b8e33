"""Branch drafts (aspd/branch_drafts.py): inside a block each greedy branch carries its own trie
draft, verified in the block's one forward. Lossless: the same ids and text as ASPD without them,
the cache after the block a recomputation of the answer, every draft row's logits those of
decoding its branch alone (it never sees a sibling), and fewer forwards where branches repeat."""

import pytest
import torch

from aspd_engines import Script, aspd_engine, plugin
from kernel_paths import per_isa
from paraspec.aspd import decode
from paraspec.aspd.branch_drafts import with_close
from paraspec.config import parse_plugin_params
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.drafters.registry import DrafterRegistry
from paraspec.decoding.contract.tree import DraftTree
from paraspec.model.transformer import SeqInput
from paraspec.sampling.params import SamplingParams
from test_exactness import TITLES, _check, _run

LENGTHS = [9, 14, 6]


def _memory(engine, branch_drafts: bool = True):
    """A fresh memory_decoding drafter (its own trie) and the aspd decoder's settings."""
    reg = DrafterRegistry(engine.tokenizer.eos_token_ids)
    cfg = parse_plugin_params(
        {
            "plugin_type": "aspd",
            "branch_drafts": branch_drafts,
            "drafter": {"plugin_type": "memory_decoding"},
        }
    )
    return reg.drafter(cfg)


def _decode(engine, ids, prompt, titles, lengths, dec, max_tokens=90):
    """One greedy request through `dec` (an AspdDecoder) with the markup forced by Script."""
    dec.force = Script(ids, len(prompt), titles, lengths)
    seq = engine.add_request(
        prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), drafter=dec
    )[0]
    engine.run_until_done()
    return seq


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    engine, ids = aspd_engine(tiny_model_dir("llama"))
    prompt = engine.tokenizer.encode("Colours: ")
    return engine, ids, prompt, [engine.tokenizer.encode(t) for t in TITLES]


def test_same_tokens_and_text_fewer_forwards(tiny):
    engine, ids, prompt, titles = tiny
    plain = _decode(engine, ids, prompt, titles, LENGTHS, plugin(ids, None))  # no drafter at all
    runs = {}
    for branch_drafts in (False, True):
        dec = _memory(engine, branch_drafts)
        # the second request repeats the first: its branches are in the memory (repetitive branches)
        runs[branch_drafts] = [_decode(engine, ids, prompt, titles, LENGTHS, dec) for _ in range(2)]
    for seq in runs[False] + runs[True]:
        assert seq.output == plain.output and seq.text == plain.text
    without, with_ = runs[False][1], runs[True][1]
    assert with_.mode.branch_accepted > 0 and without.mode.branch_draft_tokens == 0
    assert with_.mode.parallel_steps < without.mode.parallel_steps
    assert with_.stats.decode_steps < without.stats.decode_steps


@pytest.mark.parametrize("max_tokens", [17, 19, 21, 24, 27, 30, 33, 36, 40, 44])
def test_a_budget_ending_inside_the_block_cuts_where_draft_free_decoding_does(tiny, max_tokens):
    """Drafting branches run ahead of each other; the answer must still stop exactly where the
    block without drafts stops (decode._budget_cut)."""
    engine, ids, prompt, titles = tiny
    ref = _decode(engine, ids, prompt, titles, LENGTHS, plugin(ids, None), max_tokens)
    dec = _memory(engine)
    _decode(engine, ids, prompt, titles, LENGTHS, dec)  # the memory
    seq = _decode(engine, ids, prompt, titles, LENGTHS, dec, max_tokens)
    assert seq.output == ref.output and seq.text == ref.text and len(seq.output) == max_tokens


@pytest.mark.parametrize("kernels", per_isa())
def test_cache_after_the_block_equals_a_recomputation(tiny_model_dir, kernels):
    """test_exactness's checks (each branch alone, its KV slot for slot, one forward over the
    flattened answer, the serial tail) on a request whose branches accepted drafts."""
    engine, ids = aspd_engine(tiny_model_dir("llama"), kernels=kernels)
    prompt = engine.tokenizer.encode("Colours: ")
    titles = [engine.tokenizer.encode(t) for t in TITLES]
    dec = _memory(engine)
    _run(engine, ids, prompt, titles, LENGTHS, drafter=dec.drafter)  # the memory
    seq = _check(
        engine, ids, prompt, titles, LENGTHS, exact=kernels.module is not None, drafter=dec.drafter
    )
    assert seq.mode.branch_accepted > 0 and seq.mode.branch_draft_tokens > seq.mode.branch_accepted


@pytest.mark.parametrize("kernels", per_isa())
def test_every_draft_row_sees_only_its_own_branch(tiny_model_dir, kernels, monkeypatch):
    """The logits of every draft row (accepted or not) equal decoding its branch alone after the
    prefix with its draft path appended: no row sees a sibling's tokens or another path."""
    engine, ids = aspd_engine(tiny_model_dir("llama"), kernels=kernels)
    prompt = engine.tokenizer.encode("Colours: ")
    titles = [engine.tokenizer.encode(t) for t in TITLES]
    dec = _memory(engine)
    _decode(engine, ids, prompt, titles, LENGTHS, dec)
    seen = []
    accept = decode.AspdState.accept

    def spy(self, seq, q, logits, forward_s):
        b = self.block
        for s in b.spans:
            br = b.branches[s.k]
            for i, t in enumerate(s.tree.tokens):
                if t != ids.end_para:
                    path = [s.tree.tokens[j] for j in s.tree.path_to(i)]
                    seen.append(
                        (
                            list(seq.tokens) + br.fed + br.pending + path[:-1],
                            path[-1],
                            logits[q.rows.index(s.d0 + i)].clone(),
                        )
                    )
        return accept(self, seq, q, logits, forward_s)

    monkeypatch.setattr(decode.AspdState, "accept", spy)
    _decode(engine, ids, prompt, titles, LENGTHS, dec)
    assert len(seen) >= 8
    model, same = (
        engine.runner.model,
        torch.equal
        if kernels.module is not None
        else (lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-4)),
    )
    for context, token, got in seen:
        cache = engine.runner.new_cache(len(context) + 8)
        engine.runner.prefill(cache, prompt)
        for t in context[len(prompt) :] + [token]:
            logits = model.forward(
                torch.tensor([t]), torch.tensor([cache.length]), [SeqInput(cache, 1)]
            )
            cache.commit([0])
        assert same(logits[0], got)


def test_sampled_branches_draft_nothing(tiny):
    engine, ids, prompt, titles = tiny
    dec = _memory(engine)
    _decode(engine, ids, prompt, titles, LENGTHS, dec)
    dec.force = Script(ids, len(prompt), titles, LENGTHS)
    seq = engine.add_request(
        prompt, SamplingParams(temperature=0.8, seed=3, max_tokens=60, ignore_eos=True), drafter=dec
    )[0]
    engine.run_until_done()
    assert seq.mode.blocks == 1 and seq.mode.branch_draft_tokens == 0


def test_with_close_drafts_the_blocks_end_below_each_branch_end():
    tree = DraftTree([5, 9, 7, 9], [-1, 0, -1, 2], [0.9, 0.8, 0.5, 0.4])
    out = with_close(tree, 9, 11, 6)
    assert out.tokens == [5, 9, 7, 9, 11, 11] and out.parents == [-1, 0, -1, 2, 1, 3]
    assert out.probs[4:] == [0.8, 0.4] and len(with_close(tree, 9, 11, 5)) == 5


@pytest.mark.slow
def test_trained_adapter_same_answers_fewer_forwards():
    """The committed LoRA adapter (merged, as `paraspec aspd eval` runs it) on held-out tasks: with
    branch drafts every answer has the same ids and text as ASPD without drafts and as without
    branch drafts, in fewer forwards. Each variant has its own engine (its own trie). Three tasks,
    128 tokens: three runs of each are the suite's longest decode (the tiny-model tests above run
    the branch drafts' every case; this one, the trained model's real blocks)."""
    from paraspec import LLM
    from paraspec.aspd.paths import ADAPTER_DIR, EXPORT_DIR
    from paraspec.aspd.evaluate import ASPD, ASPD_DRAFTS, heldout, model_folder

    folder = str(model_folder("aspd", ADAPTER_DIR, EXPORT_DIR))
    params = SamplingParams(temperature=0, max_tokens=128)
    chats = [[{"role": "user", "content": e.prompt}] for e in heldout()[:3]]
    first, second = LLM(folder, plugin_params=ASPD), LLM(folder, plugin_params=ASPD)
    for llm in (first, second):  # drafts sized by a fixed curve, not by this machine's timings
        llm.engine.pin_cost(CostModel())
    plain = [first.chat(c, params)[0] for c in chats]
    without = [first.chat(c, params, {**ASPD_DRAFTS, "branch_drafts": False})[0] for c in chats]
    with_ = [second.chat(c, params, ASPD_DRAFTS)[0] for c in chats]
    for a, b, c in zip(plain, without, with_):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids == c.outputs[0].token_ids
        assert a.outputs[0].text == b.outputs[0].text == c.outputs[0].text
    assert sum(o.stats["aspd_blocks"] for o in plain) >= 3, [o.stats["aspd_blocks"] for o in plain]
    assert sum(o.stats["aspd_branch_accepted_tokens"] for o in with_) > 0
    assert sum(o.stats["forward_passes"] for o in with_) < sum(
        o.stats["forward_passes"] for o in without
    )


def test_budget_cut_is_the_draft_free_step():
    from paraspec.aspd.branch_drafts import budget_cut

    tokens = [[1] * 5, [2] * 9]  # branch 1 ended (prefix 2), branch 2 ran ahead with drafts
    assert budget_cut(tokens, [2, 2], [True, False], 8, 0) == ([1, 1, 1, 1, 2, 2, 2, 2], 7)
    assert budget_cut(tokens, [2, 2], [True, False], 20, 3) == (None, 7)
    assert budget_cut([[1] * 4, [2] * 3], [2, 2], [False, False], 5, 0) == ([1, 1, 1, 2, 2, 2], 1)


@pytest.mark.parametrize(
    "inner,drafts", [("memory_decoding", True), ("hybrid", True), ("lookahead", False)]
)
def test_branch_drafts_come_from_the_serial_drafters_trie(inner, drafts):
    reg = DrafterRegistry([2])
    dec = reg.drafter(
        parse_plugin_params({"plugin_type": "aspd", "drafter": {"plugin_type": inner}})
    )
    assert (dec.branch_drafter is not None) == drafts  # lookahead keeps no trie: none
    if drafts:
        assert dec.branch_drafter.trie is dec.drafter.trie
    off = reg.drafter(
        parse_plugin_params(
            {"plugin_type": "aspd", "branch_drafts": False, "drafter": {"plugin_type": inner}}
        )
    )
    assert off.branch_drafter is None


def _two_batched_requests(tiny):
    """Two requests decoded together with branch drafts; asserts each equals its decode alone.
    Returns the drafter."""
    engine, ids, prompt, titles = tiny
    other = engine.tokenizer.encode("Shapes and colours: ")
    alone = [
        _decode(engine, ids, p, titles, LENGTHS, plugin(ids, None)).output for p in (prompt, other)
    ]
    dec = _memory(engine)
    for p in (prompt, other):
        _decode(engine, ids, p, titles, LENGTHS, dec)  # the memory
    scripts = [(p, Script(ids, len(p), titles, LENGTHS)) for p in (prompt, other)]
    # one hook for both requests: each context starts with its own prompt
    dec.force = lambda context: next(s for p, s in scripts if list(context[: len(p)]) == p)(context)
    seqs = [
        engine.add_request(
            p, SamplingParams(temperature=0, max_tokens=90, ignore_eos=True), drafter=dec
        )[0]
        for p in (prompt, other)
    ]
    engine.run_until_done()
    assert [s.output for s in seqs] == alone and all(s.mode.branch_accepted > 0 for s in seqs)
    return dec


def test_batched_drafting_sequences_equal_each_alone(tiny):
    _two_batched_requests(tiny)


def test_a_drafted_block_end_gives_the_closing_steps_cache_and_token(tiny, monkeypatch):
    """Branch contents teacher-forced (distinct tokens, so the memory drafts them to their
    `<|/branch|>`) and rows free (a flat cost curve: every candidate is verified): the last open
    branch's drafted `<|/para|>` is accepted, and the cache (prefix, block, `<|/para|>`) and the
    serial tokens after it equal the run without branch drafts."""
    engine, ids, prompt, titles = tiny
    monkeypatch.setattr(engine.forward_cost, "model", CostModel({1: 1.0, 64: 1.0}))
    contents = [list(range(100 + 20 * k, 100 + 20 * k + n)) for k, n in enumerate([2, 20, 3])]
    runs = []
    for branch_drafts in (False, True):
        dec = _memory(engine, branch_drafts)
        for _ in range(2):  # the first request is the memory
            dec.force = Script(ids, len(prompt), titles, [2, 20, 3], contents=contents)
            seq = engine.add_request(
                prompt, SamplingParams(temperature=0, max_tokens=90, ignore_eos=True), drafter=dec
            )[0]
            cache = None
            while engine.has_work():
                engine.step()
                cache = seq.cache if seq.cache is not None else cache
        runs.append((seq, cache))
    (a, ca), (b, cb) = runs
    assert a.output == b.output and b.mode.drafted_closes == 1 and a.mode.drafted_closes == 0
    assert b.mode.parallel_steps < a.mode.parallel_steps
    para = len(prompt) + a.output.index(ids.para) + 1
    oa, ob = (list(range(para)) + s.mode.last_slots for s in (a, b))
    oa += range(max(oa) + 1, ca.length)  # the serial tail
    ob += range(max(ob) + 1, cb.length)
    assert len(oa) == len(ob) == ca.length == cb.length
    assert torch.equal(ca.k[:, :, oa], cb.k[:, :, ob]) and torch.equal(
        ca.v[:, :, oa], cb.v[:, :, ob]
    )


def test_branch_drafts_param_is_a_boolean():
    from paraspec.errors import ConfigError

    assert parse_plugin_params({"plugin_type": "aspd"}).params.branch_drafts is True
    with pytest.raises(ConfigError, match="branch_drafts"):
        parse_plugin_params({"plugin_type": "aspd", "branch_drafts": 1})


def test_a_branch_repeating_itself_drafts_from_its_own_context_at_once(tiny, monkeypatch):
    """A fresh memory holds none of the branches' tokens (a block enters the trie when it
    closes): a branch that repeats its own earlier tokens is drafted from its context in the
    very first request (context_match), with the same ids as without drafts, in fewer steps; the
    draft policy's branch streams end with the block."""
    engine, ids, prompt, titles = tiny
    monkeypatch.setattr(engine.forward_cost, "model", CostModel({1: 1.0, 64: 1.0}))
    motif = [[100, 101, 102, 103], [120, 121, 122], [140, 141, 142, 143, 144]]
    contents = [(m * 6)[:n] for m, n in zip(motif, [16, 14, 18])]
    runs = []
    for branch_drafts in (False, True):
        dec = _memory(engine, branch_drafts)
        dec.force = Script(ids, len(prompt), titles, [16, 14, 18], contents=contents)
        seq = engine.add_request(
            prompt, SamplingParams(temperature=0, max_tokens=90, ignore_eos=True), drafter=dec
        )[0]
        engine.run_until_done()
        runs.append((seq, dec))
    (a, _), (b, dec) = runs
    assert a.output == b.output and a.text == b.text
    assert b.mode.branch_accepted >= 20 and b.mode.parallel_steps < a.mode.parallel_steps - 5
    assert dec.branch_drafter.policy._requests == {} and dec.branch_drafter._blocks == {}


def test_more_open_blocks_than_live_streams_still_decode_alike(tiny, monkeypatch):
    """Past LIVE_BLOCKS the oldest block's policy streams end (an aborted request's would stay
    forever); a block still decoding gets fresh ones and nothing else changes."""
    from paraspec.aspd import branch_drafts

    monkeypatch.setattr(branch_drafts, "LIVE_BLOCKS", 1)
    dec = _two_batched_requests(tiny)
    assert len(dec.branch_drafter._blocks) <= 1 and len(dec.branch_drafter.policy._requests) <= 3
