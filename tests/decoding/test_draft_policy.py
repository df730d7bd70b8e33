"""The draft policy: calibration from counterfactual evidence, the merge of sources into one
best-first tree, and the draft size priced by the cost curve."""

import pytest

from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.policy.calibration import streak_state
from paraspec.decoding.policy.draft_policy import DraftPolicy
from paraspec.decoding.contract.tree import DraftTree

FLAT = CostModel({1: 1.0, 64: 1.0})  # rows are free
STEEP = CostModel({1: 1.0, 2: 1.3, 4: 1.6, 8: 2.2, 16: 3.4})  # every row costs


def tree(paths: list[list[int]], p: float) -> DraftTree:
    """A tree of the given root-to-leaf paths whose every node the source estimates at p."""
    t = DraftTree()
    index = {}
    for path in paths:
        parent = -1
        for tok in path:
            node = index.get((parent, tok))
            if node is None:
                node = index[(parent, tok)] = t.add(tok, parent, p)
            parent = node
    return t


def test_merge_keeps_one_node_per_path_best_first_with_its_sources():
    pol = DraftPolicy(2)
    pol.begin("r")
    a = tree([[1, 2, 3]], 0.9)
    b = tree([[1, 2, 7], [5]], 0.5)
    draft, _ = pol.select("r", [0], [a, b], 64, FLAT)
    paths = {tuple(draft.tokens[n] for n in draft.path_to(i)) for i in range(len(draft))}
    assert paths == {(1,), (1, 2), (1, 2, 3), (1, 2, 7), (5,)}
    assert all(p < i for i, p in enumerate(draft.parents))  # parents first
    assert all(draft.probs[i] <= draft.probs[p] for i, p in enumerate(draft.parents) if p >= 0)
    assert draft.probs == sorted(draft.probs, reverse=True)  # best first
    owners = pol._requests["r"].owners
    assert owners[draft.tokens.index(1)] == 0b11 and owners[draft.tokens.index(5)] == 0b10


def test_calibration_learns_from_nodes_that_were_not_sent():
    """Source 0 claims 0.9 and is always wrong; source 1 claims 0.2 and is always right. Both
    are scored every step, whatever was verified, and the draft follows the evidence."""
    pol = DraftPolicy(2)
    pol.begin("r")
    ctx = [0]
    for i in range(30):
        right = 100 + i
        liar, honest = tree([[9, 9]], 0.9), tree([[right]], 0.2)
        pol.select("r", ctx, [liar, honest], 64, STEEP)
        pol.observe("r", [right, 1])
        ctx += [right, 1]
    assert pol.calibrated("r", 0, 1, 0.9) < 0.1
    assert pol.calibrated("r", 1, 1, 0.2) > 0.7
    draft, expected = pol.select("r", ctx, [tree([[9, 9]], 0.9), tree([[555]], 0.2)], 64, STEEP)
    assert draft.tokens[0] == 555 and expected > 0.7


def test_the_draft_size_follows_the_cost_curve():
    pol = DraftPolicy(1)
    pol.begin("r")
    t = tree([[1, 2, 3, 4, 5, 6, 7, 8]], 0.3)  # a chain the source is unsure of
    assert len(pol.select("r", [0], [t], 64, FLAT, score=False)[0]) == 8  # free rows: all
    assert len(pol.select("r", [0], [t], 64, STEEP, score=False)[0]) == 0  # dear rows: none
    assert len(pol.select("r", [0], [t], 3, FLAT, score=False)[0]) == 3  # the budget caps
    # MindIE's static length: the whole tree when it is worth anything at all
    sure = tree([[1, 2, 3, 4, 5, 6, 7, 8]], 0.99)
    assert len(pol.select("r", [0], [sure], 64, STEEP, send_all=8, score=False)[0]) == 8


def test_streak_state_marks_copying_and_sources_gains():
    assert [streak_state(a) for a in (0, 1, 3, 4, 15)] == [0, 1, 1, 2, 2]
    pol = DraftPolicy(2)
    pol.begin("r")
    a = tree([[1, 2, 3, 4, 5]], 0.99)
    draft, _ = pol.select("r", [0], [a, None], 64, FLAT)
    assert pol.observe("r", [1, 2, 3, 4, 5, 6], sources=(0,)) == 5
    assert pol.state("r") == 2
    assert pol.stats.gain[0] > 0.1 and pol.stats.gain[1] == pytest.approx(0.1)  # only 0 ran


def test_each_request_keeps_its_own_sources_gains():
    """Source 1's nodes give tokens alone in request "new" and only beside source 0's in request
    "copy": its gain falls in "copy" alone, and a request begun later starts from the
    drafter-wide figure."""
    pol = DraftPolicy(2)
    for key in ("new", "copy"):
        pol.begin(key)
    for i in range(20):
        t = 10 + i
        pol.select("new", [0], [None, tree([[t]], 0.9)], 64, FLAT)
        pol.observe("new", [t, 1])
        pol.select("copy", [0], [tree([[t]], 0.9), tree([[t]], 0.9)], 64, FLAT)
        pol.observe("copy", [t, 1])
    assert pol.gain("new", 1) > 0.8 and pol.gain("copy", 1) < 0.02
    pol.begin("later")
    assert pol.gain("later", 1) == pytest.approx(pol.stats.gain[1])


def test_merged_then_sent_is_select_for_a_caller_that_sizes_drafts_itself():
    """ASPD's branches size their drafts together: merged() + sent() must leave the policy where
    select() would (same tree, same owners, same streak and calibration after observe)."""
    pols = [DraftPolicy(2), DraftPolicy(2)]
    for pol in pols:
        pol.begin("r")
    ctx = [0]
    for i in range(12):
        cands = [tree([[1, 2, 3], [4]], 0.6), tree([[1, 2, 9]], 0.3)]
        draft, _ = pols[0].select("r", ctx, cands, 3, FLAT)
        full, owners = pols[1].merged("r", ctx, cands)
        pols[1].sent("r", full.truncated(3), owners[:3], FLAT(4))
        assert draft == full.truncated(3) and pols[0]._requests["r"].owners == owners[:3]
        committed = [1, 2, 3, 5] if i % 2 else [4, 7]
        assert pols[0].observe("r", committed) == pols[1].observe("r", committed)
        ctx += committed
    assert pols[0].calibrated("r", 0, 2, 0.6) == pols[1].calibrated("r", 0, 2, 0.6)
    assert pols[0].state("r") == pols[1].state("r")


# a row ~0.7 of a step
ZEN1 = CostModel({1: 1.0, 2: 2.08, 4: 3.04, 8: 6.08, 12: 7.95, 16: 11.16, 32: 20.26})


def test_an_unsent_copy_is_learnt_and_then_verified_where_rows_are_dear():
    """A copy the policy first prices too dear to verify: the text follows the candidates a token
    a step, which makes it a copying request after 4 tokens, and the deep candidate sets that
    newer ones evict are scored on the truth so far; so drafts go out before the copy ends."""
    pol = DraftPolicy(1)
    pol.begin("r")
    text = list(range(100, 300))  # the text the trie would offer, and the text that comes
    ctx, sizes, why = [0], [], []
    while len(ctx) < 120:
        at = len(ctx) - 1
        chain = tree([text[at : at + 24]], 0.4)  # the source unsure: 0.4 for each node
        draft, _ = pol.select("r", ctx, [chain], 24, ZEN1)
        sizes.append(len(draft))
        why.append(pol.reason("r"))
        n = draft.follow(text[at : at + 24])
        committed = text[at : at + n + 1]
        pol.observe("r", committed)
        ctx += committed
    assert sizes[0] == 0 and why[0] == "rows_too_dear"
    assert pol.state("r") == 2
    first = next(i for i, n in enumerate(sizes) if n)
    # verified, and it pays
    assert first <= 16 and sum(sizes[first:]) >= 60 and len(sizes) < 119 // 3
    # a first node like these is now known to be accepted
    assert pol.calibrated("r", 0, 1, 0.4) > 0.8
