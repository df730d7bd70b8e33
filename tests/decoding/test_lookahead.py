import itertools
import re

import numpy as np
import pytest

from paraspec.decoding.drafters import lookahead as la
from paraspec.decoding.drafters import unknown_keys
from paraspec.decoding.drafters.lookahead import LookaheadDrafter, LookaheadParams, window_layout
from paraspec.decoding.drafters.lookahead_source import PRIOR_FIRST
from drafters import WithContext
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.contract.proposer import Proposal, Proposer, StepContext
from paraspec.errors import ConfigError


# ------------------------------------------------------------------------------- helpers


def full_query(p: Proposal) -> tuple[np.ndarray, np.ndarray, int]:
    """Root-relative positions and [q, q] mask of the query the verifier builds:
    [root] + draft tree (depth positions, ancestor mask) + lookahead branch (offsets, its mask
    plus the root column); draft and branch do not see each other."""
    tree, br = p.draft, p.lookahead
    n, m = len(tree), (len(br.tokens) if br else 0)
    pos = np.array([0] + tree.depths() + (list(br.offsets) if br else []))
    mask = np.zeros((1 + n + m, 1 + n + m), dtype=bool)
    mask[: n + 1, : n + 1] = tree.ancestor_mask()
    if br:
        mask[n + 1 :, 0] = True
        mask[n + 1 :, n + 1 :] = br.mask
    return pos, mask, n


def assert_valid_causal_contexts(p: Proposal) -> int:
    """Every row sees exactly one token at each position 0..pos(row); returns the query size."""
    pos, mask, n = full_query(p)
    onehot = pos[:, None] == np.arange(pos.max() + 1)[None, :]  # [q, max_pos + 1]
    seen = mask.astype(np.int64) @ onehot.astype(np.int64)  # tokens seen per position
    expected = np.arange(pos.max() + 1)[None, :] <= pos[:, None]
    bad = np.flatnonzero((seen != expected).any(axis=1))
    assert bad.size == 0, f"rows {bad.tolist()} do not see positions 0..pos exactly once"
    assert not mask[1 : n + 1, n + 1 :].any() and not mask[n + 1 :, 1 : n + 1].any()
    if p.lookahead is not None:
        assert all(0 <= r < len(p.lookahead.tokens) for r in p.lookahead.output_rows)
    return len(pos)


def prompt_with_candidates(root: int, n: int, g: int) -> list[int]:
    """A prompt whose n-grams give `root` exactly g distinct candidates of n-1 tokens."""
    out = []
    for i in range(g):
        out += [root] + [1000 + i * n + j for j in range(n - 1)]
    return out


def verify_greedy(model, context: list[int], p: Proposal) -> tuple[list[int], list[int] | None]:
    """A model-free verifier: `model(seq)` is the greedy next token after seq. Walks the draft
    tree (longest match + bonus) and returns the argmax of each lookahead output row, reading
    each row's virtual sequence off the branch mask."""
    children = p.draft.children()
    out, row, seq = [], 0, list(context)
    while True:
        t = model(seq)
        out.append(t)
        nxt = children[row].get(t)
        if nxt is None:
            break
        seq.append(t)
        row = nxt + 1
    br = p.lookahead
    if br is None:
        return out, None
    argmax = []
    for r in br.output_rows:
        cols = sorted(np.flatnonzero(br.mask[r]), key=lambda c: br.offsets[c])
        argmax.append(model(list(context) + [br.tokens[c] for c in cols]))
    return out, argmax


FREE = {1: 1.0, 4096: 1.0}  # verification rows cost nothing (an accelerator's regime)


def free_rows(d: LookaheadDrafter) -> WithContext:
    """With free rows the draft sizer always verifies every candidate in full."""
    return WithContext(d, FREE)


def run(drafter, model, prompt, steps, seed=0, proposals=None):
    """Greedy generation through the drafter; returns the output and tokens committed per step
    (and appends every step's draft and window tokens to `proposals` when given)."""
    drafter.begin("r", prompt, seed)
    context = list(prompt) + [model(list(prompt))]  # the prefill's token is the first root
    per_step = []
    for _ in range(steps):
        p = drafter.propose("r", context, 64)
        if proposals is not None:
            proposals.append((p.draft.tokens, p.lookahead.tokens if p.lookahead else []))
        committed, argmax = verify_greedy(model, context, p)
        drafter.observe("r", committed, argmax)
        context += committed
        per_step.append(len(committed))
    drafter.end("r")
    return context[len(prompt) :], np.array(per_step)


def periodic(seq: list[int]):
    """A 'model' that continues a fixed sequence by position: the true continuation is known."""
    return lambda s: seq[len(s) % len(seq)]


# ------------------------------------------------------------------------------- params


def test_params_defaults_and_budget():
    p = LookaheadParams()
    assert (p.level, p.window, p.guess_set_size) == (4, 5, 5)
    assert p.query_tokens == 30
    assert p.validate(30) is p and p.validate(None) is p


@pytest.mark.parametrize(
    "field,value",
    [
        ("level", 2),
        ("level", 17),
        ("window", 0),
        ("window", 17),
        ("guess_set_size", 0),
        ("guess_set_size", 17),
        ("window", 5.0),
        ("level", True),
    ],
)
def test_params_out_of_range_name_field_and_range(field, value):
    with pytest.raises(ConfigError) as e:
        LookaheadParams(**{field: value}).validate()
    msg = str(e.value)
    assert f"lookahead.{field}" in msg and "[" in msg and "\n" not in msg


def test_speculation_gamma_must_cover_the_query():
    with pytest.raises(
        ConfigError,
        match=r"speculation_gamma must be >= .* = 30.*got 29; raise "
        r"speculation_gamma to 30",
    ):
        LookaheadParams().validate(29)
    LookaheadParams(level=3, window=1, guess_set_size=1).validate(4)


def test_from_dict_warns_on_unknown_keys_and_rejects_wrong_types():
    unknown_keys.forget()
    with pytest.warns(UserWarning, match="unknown key.*windw"):
        p = LookaheadParams.from_dict({"level": 5, "windw": 3})
    assert p == LookaheadParams(level=5)
    with pytest.raises(ConfigError, match="lookahead.window must be an integer.*'7'"):
        LookaheadParams.from_dict({"window": "7"})
    assert LookaheadParams.from_dict({}) == LookaheadParams()


def test_drafter_is_a_proposer():
    d: Proposer = free_rows(LookaheadDrafter())
    assert d.name == "lookahead"


# ------------------------------------------------------------------------------- layout


def test_layout_matches_the_diagram_in_the_module_docstring():
    # the 14x14 mask drawn in lookahead.py's docstring (W=5, N=4) is the one the code builds
    rows = re.findall(r"^\s+[abc]\d((?:\s+[x.])+)\s*$", la.__doc__, re.M)
    drawn = np.array([[c == "x" for c in r.split()] for r in rows])
    layout = window_layout(4, 2)
    assert drawn.shape == (14, 14)
    assert np.array_equal(layout.mask, drawn)
    assert layout.offsets == (1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6)
    assert layout.output_rows == (9, 10, 11, 12, 13)
    assert not layout.mask.flags.writeable


@pytest.mark.parametrize(
    "n,w,g", list(itertools.product([3, 4, 5, 7, 16], [1, 2, 5, 16], [1, 2, 5, 16]))
)
def test_every_query_row_is_a_valid_causal_context(n, w, g):
    params = LookaheadParams(level=n, window=w, guess_set_size=g)
    d = free_rows(LookaheadDrafter(params))
    root = 7
    d.begin("r", prompt_with_candidates(root, n, g), seed=1)
    context = prompt_with_candidates(root, n, g) + [50]
    for step in range(n - 2):  # warm-up: the window only; its last step commits the root
        p = d.propose("r", context, 10_000)
        assert len(p.draft) == 0
        assert_valid_causal_contexts(p)
        committed = root if step == n - 3 else 60 + step
        d.observe("r", [committed], list(range(2000, 2000 + len(p.lookahead.output_rows))))
        context.append(committed)
    p = d.propose("r", context, 10_000)
    assert len(p.draft) == g * (n - 1)
    assert assert_valid_causal_contexts(p) == (n - 1) * (w + g)
    assert p.lookahead.output_rows == list(range((n - 1) * w - 1 - w, (n - 1) * w - 1))
    # a tighter draft budget and a narrower window are still valid contexts
    small = d.propose("r", context, max(1, n - 2))
    assert 1 <= len(small.draft) <= max(1, n - 2)
    assert_valid_causal_contexts(small)
    for width in range(1, w):  # narrower windows (hybrid runs them), from the source
        tree, branch = d.source.step("r", context, width)
        p = Proposal(tree, branch)
        assert len(p.lookahead.tokens) == (n - 1) * width - 1
        assert len(p.lookahead.output_rows) == width
        assert assert_valid_causal_contexts(p) == (n - 1) * (width + g)
    d.propose("r", context, 10_000)
    d.observe("r", [root])  # a step whose window argmax never came back keeps the shapes
    p = d.propose("r", context + [root], 10_000)
    assert_valid_causal_contexts(p)
    assert len(p.lookahead.tokens) == (n - 1) * w - 1


# ------------------------------------------------------------------------------- warm-up, harvest, shift


def test_warm_up_builds_one_level_per_step_and_drafts_from_the_prompt_meanwhile():
    n, w = 5, 3
    d = free_rows(LookaheadDrafter(LookaheadParams(level=n, window=w, guess_set_size=2)))
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 4]  # pool[5] has (6, 7, 8, 9) and (6, 7, 8, 4)
    d.begin("r", prompt, seed=3)
    ctx = prompt + [5]

    p1 = d.propose("r", ctx, 64)
    level0 = p1.lookahead.tokens
    assert len(level0) == w + n - 3 and set(level0) <= set(prompt)
    assert p1.draft.tokens == [6, 7, 8, 4, 9]  # the prompt's n-grams are drafted during warm-up
    assert p1.lookahead.offsets == [1, 2, 3, 4, 5] and p1.lookahead.output_rows == [0, 1, 2, 3, 4]
    d.observe("r", [11], [11, 12, 13, 14, 15])
    ctx.append(11)

    p2 = d.propose("r", ctx, 64)
    assert len(p2.draft) == 0  # no n-gram starts with 11
    assert p2.lookahead.tokens == level0[1:] + [11, 12, 13, 14, 15]
    assert p2.lookahead.offsets == [1, 2, 3, 4] + [1, 2, 3, 4, 5]
    assert p2.lookahead.output_rows == [5, 6, 7, 8]  # level 1 without its first column
    d.observe("r", [12], [22, 23, 24, 25])
    ctx.append(12)

    p3 = d.propose("r", ctx, 64)
    assert len(p3.draft) == 0
    assert p3.lookahead.tokens == level0[2:] + [12, 13, 14, 15] + [22, 23, 24, 25]
    assert p3.lookahead.offsets == [1, 2, 3] + [1, 2, 3, 4] + [2, 3, 4, 5]
    assert p3.lookahead.output_rows == [8, 9, 10]
    d.observe("r", [5], [33, 34, 35])
    ctx.append(5)

    p4 = d.propose("r", ctx, 64)  # warm: N-1 levels of W-1, W, W, W tokens, and a draft
    assert p4.lookahead.tokens == level0[3:] + [13, 14, 15] + [23, 24, 25] + [33, 34, 35]
    assert p4.lookahead.offsets == [1, 2] + [1, 2, 3] + [2, 3, 4] + [3, 4, 5]
    assert p4.lookahead.output_rows == [8, 9, 10]
    # pool[5] = newest (6, 7, 8, 4), then (6, 7, 8, 9): merged on their shared prefix
    assert p4.draft.tokens == [6, 7, 8, 4, 9] and p4.draft.parents == [-1, 0, 1, 2, 2]


def warm_window(d: LookaheadDrafter, rid: str = "r") -> list[int]:
    """N=4, W=3 drafter over prompt [9]: every random guess is 9, so the window is known.
    Returns the context; the window is then level0 [9, 9], level1 [12, 13, 14], level2 [21, 22, 23]."""
    d.begin(rid, [9], seed=0)
    ctx = [9, 100]
    p = d.propose(rid, ctx, 64)
    assert p.lookahead.tokens == [9, 9, 9, 9]
    d.observe(rid, [101], [11, 12, 13, 14])
    ctx.append(101)
    p = d.propose(rid, ctx, 64)
    assert p.lookahead.tokens == [9, 9, 9, 11, 12, 13, 14]
    d.observe(rid, [102], [21, 22, 23])
    ctx.append(102)
    return ctx


def test_harvest_turns_each_window_column_into_an_ngram():
    d = free_rows(LookaheadDrafter(LookaheadParams(level=4, window=3, guess_set_size=4)))
    ctx = warm_window(d)
    p = d.propose("r", ctx, 64)
    assert p.lookahead.tokens == [9, 9, 12, 13, 14, 21, 22, 23]
    assert p.lookahead.offsets == [1, 2, 1, 2, 3, 2, 3, 4]
    pool = d.pool("r")
    before = pool.candidates(9)
    d.observe("r", [103], [31, 32, 33])
    # column 0: key = root 102; column c > 0: key = level0[c - 1]
    assert pool.candidates(102) == [(12, 21, 31)]
    assert pool.candidates(9)[:2] == [(14, 23, 33), (13, 22, 32)]
    assert pool.candidates(9)[2:] == before
    # one-column shift: level0 = level1[1:], level1 = level2, level2 = new
    ctx.append(103)
    assert d.propose("r", ctx, 64).lookahead.tokens == [13, 14, 21, 22, 23, 31, 32, 33]


def test_multi_token_step_still_shifts_one_column():
    d = free_rows(LookaheadDrafter(LookaheadParams(level=4, window=3, guess_set_size=4)))
    ctx = warm_window(d)
    d.propose("r", ctx, 64)
    d.observe("r", [103, 104, 105], [31, 32, 33])  # root moved 3 positions: still one column
    ctx += [103, 104, 105]
    assert d.propose("r", ctx, 64).lookahead.tokens == [13, 14, 21, 22, 23, 31, 32, 33]
    d.observe("r", [106])  # no argmax came back: slide, refill the last column (prompt token 9)
    ctx.append(106)
    assert d.propose("r", ctx, 64).lookahead.tokens == [14, 9, 22, 23, 9, 32, 33, 9]


def test_harvest_skips_eos_and_the_newest_level_never_holds_eos():
    eos = 0
    d = free_rows(
        LookaheadDrafter(LookaheadParams(level=4, window=3, guess_set_size=4), eos_token_ids=[eos])
    )
    ctx = warm_window(d)
    d.propose("r", ctx, 64)
    d.observe("r", [103], [31, eos, 33])
    pool = d.pool("r")
    assert pool.candidates(102) == [(12, 21, 31)]
    assert (13, 22, eos) not in pool.candidates(9) and (14, 23, 33) in pool.candidates(9)
    ctx.append(103)
    assert d.propose("r", ctx, 64).lookahead.tokens == [13, 14, 21, 22, 23, 31, 9, 33]


def test_committed_ngrams_and_prompt_ngrams_feed_the_pool():
    d = free_rows(LookaheadDrafter(LookaheadParams(level=3, window=2, guess_set_size=3)))
    d.begin("r", [1, 2, 3, 4], seed=0)
    pool = d.pool("r")
    assert pool.candidates(1) == [(2, 3)] and pool.candidates(2) == [(3, 4)]
    ctx = [1, 2, 3, 4, 5]
    d.propose("r", ctx, 8)  # the prefill's token 5 completes (3; 4, 5)
    assert pool.candidates(3) == [(4, 5)]
    d.observe("r", [6, 7], [40, 41])
    d.propose("r", ctx + [6, 7], 8)
    assert pool.candidates(4) == [(5, 6)] and pool.candidates(5) == [(6, 7)]


# ------------------------------------------------------------------------------- budget and back-off


def test_draft_respects_max_nodes_and_backs_off_when_guesses_fail():
    n, g = 4, 5
    d = free_rows(
        LookaheadDrafter(
            LookaheadParams(level=n, window=2, guess_set_size=g), adaptive_window=False
        )
    )
    root = 7
    d.begin("r", prompt_with_candidates(root, n, g), seed=0)
    ctx = prompt_with_candidates(root, n, g) + [root]
    # the prompt's n-grams are drafted from the first step, during the window's warm-up too
    assert len(d.propose("r", ctx, 64).draft) == g * (n - 1)
    assert 1 <= len(d.propose("r", ctx, 5).draft) <= 5
    assert len(d.propose("r", ctx, 0).draft) == 0

    # rows that cost: 8 query rows little more than 1, then ~linear (a compute-bound CPU)
    d.ctx = StepContext(cost=CostModel({1: 1.0, 4: 1.02, 8: 1.05, 16: 1.5, 32: 2.5}))

    def step(committed):
        d.observe("r", committed, [root] * len(p.lookahead.output_rows))
        ctx.extend(committed)

    # the policy's estimate for the newest candidate's first token
    def newest_first_token() -> float:
        return d.policy.calibrated("r", 0, 1, PRIOR_FIRST)

    sizes = []
    for i in range(40):  # the text after the root never follows a candidate: no draft at last
        p = d.propose("r", ctx, 64)
        sizes.append(len(p.draft))
        step([3000 + i, root])
    assert sizes[0] > 7 and sizes[-1] == 0  # first the best guess within the cheap rows
    assert newest_first_token() < 0.1

    for _ in range(12):  # the text now follows the newest candidate: drafts come back, full depth
        cand = d.pool("r").candidates(root)[0]
        p = d.propose("r", ctx, 64)
        step(list(cand) + [root])
    assert max(p.draft.depths()) == n - 1 and newest_first_token() > 0.5


def test_window_width_zero_drops_the_branch():
    d = free_rows(LookaheadDrafter(LookaheadParams(level=4, window=3, guess_set_size=2)))
    ctx = warm_window(d)
    tree, branch = d.source.step("r", ctx, 0)
    assert branch is None
    d.source.observe("r", [103])
    with pytest.raises(ValueError):
        d.source.step("r", ctx + [103], 4)
    with pytest.raises(KeyError, match="unknown request"):
        d.propose("nope", ctx, 4)


# ------------------------------------------------------------------------------- reproducibility


def test_window_is_seeded_by_the_request_seed():
    prompt = list(range(100, 160))
    model = lambda s: 100 + (s[-1] * 7 + len(s) // 9) % 60  # noqa: E731  guesses matter here

    def proposals(seed):
        out = []
        run(
            free_rows(LookaheadDrafter(LookaheadParams(level=5, window=8, guess_set_size=3))),
            model,
            prompt,
            40,
            seed,
            out,
        )
        return out

    assert proposals(11) == proposals(11)
    assert proposals(11)[0] != proposals(12)[0]
    assert proposals(None) == proposals(None)  # no request seed: still reproducible


# ------------------------------------------------------------------------------- model-free simulation


def test_candidates_from_the_prompt_get_accepted_from_the_first_step():
    rng = np.random.default_rng(0)
    text = rng.choice(np.arange(10, 5000), size=40, replace=False).tolist()
    model = periodic(text)  # the output repeats the prompt
    params = LookaheadParams()
    out, per_step = run(free_rows(LookaheadDrafter(params)), model, text, 30)
    # greedy output unchanged
    assert out[: len(out) // 40 * 40] == (text * 10)[: len(out) // 40 * 40]
    assert (per_step[: params.level - 2] == params.level).all()  # N per step, warm-up too
    assert per_step.mean() > 3.5


def test_window_alone_learns_an_unseen_continuation():
    rng = np.random.default_rng(1)
    text = rng.choice(np.arange(10, 5000), size=80, replace=False).tolist()
    prompt = rng.integers(6000, 7000, size=30).tolist()  # shares nothing with the output
    model = periodic(text)
    params = LookaheadParams()
    _, per_step = run(free_rows(LookaheadDrafter(params)), model, prompt, 100)
    assert per_step.mean() > 1.5
    assert per_step[:20].sum() > 20 + 5  # the window drafts before any n-gram of the output repeats
