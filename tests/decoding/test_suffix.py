"""The suffix-match source (decoding/drafters/suffix.py, suffix_match.py): where the context's longest
suffix occurred before and what followed it there, as the hybrid's third source; and the policy
sizing drafts on a staircase cost curve."""

import random

import pytest

from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.policy.draft_policy import DraftPolicy
from paraspec.decoding.drafters.hybrid import SUFFIX, HybridDrafter
from paraspec.decoding.memory.output_memory import OutputMemory
from paraspec.decoding.drafters.suffix import REPLAY_PRIOR, SuffixSource, match_prior
from paraspec.decoding.drafters.suffix_match import continuations, suffix_matches
from paraspec.decoding.contract.tree import DraftTree
from paraspec.decoding.contract.proposer import StepContext
from paraspec.tools.records import Record
from paraspec.tools.replay import replay

STAIRS = CostModel({k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})  # stairs of 4 rows


def paths(tree: DraftTree) -> set[tuple[int, ...]]:
    return {tuple(tree.tokens[n] for n in tree.path_to(i)) for i in range(len(tree))}


def best_path(tree: DraftTree) -> list[int]:
    """The chain of the most probable child at each level."""
    out, row = [], -1
    while True:
        kids = [i for i, p in enumerate(tree.parents) if p == row]
        if not kids:
            return out
        row = max(kids, key=lambda i: tree.probs[i])
        out.append(tree.tokens[row])


def test_suffix_matches_rank_the_longest_match_then_the_most_recent():
    #      0  1  2  3  4  5  6  7  8  9
    seq = [1, 2, 3, 9, 2, 3, 8, 5, 2, 3]
    assert suffix_matches(seq, len(seq), range(len(seq)), 8) == [(2, 5), (2, 2)]
    seq = [1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3]
    assert suffix_matches(seq, len(seq), range(len(seq)), 8) == [(3, 2), (2, 6)]  # older but longer
    # capped: recent first
    assert suffix_matches(seq, len(seq), range(len(seq)), 2) == [
        (2, 6),
        (2, 2),
    ]


def test_a_copy_that_runs_into_the_end_goes_on_periodically():
    seq = [5, 1, 2, 3, 1, 2, 3, 1, 2]
    scored = suffix_matches(seq, len(seq), range(len(seq)), 8)
    c = continuations(seq, len(seq), scored, 1, 7, lambda m: 1.0, periodic=True)
    assert c.tree.tokens == [3, 1, 2, 3, 1, 2, 3] and c.tree.is_chain()
    flat = continuations(seq, len(seq), scored, 1, 7, lambda m: 1.0)
    assert flat.tree.tokens == [3, 1, 2]  # without it the copy stops at the end
    src = SuffixSource()  # a request's loop: drafted past the end
    src.begin("r", seq)
    assert best_path(src.candidates("r", seq, 7)) == [3, 1, 2, 3, 1, 2, 3]


def test_the_longest_suffix_match_decides_where_the_copy_comes_from():
    src = SuffixSource()
    # "4 5" occurs twice in the prompt: after "1 2 3" it goes on with 6 7, after "8 9" with 0 0
    prompt = [1, 2, 3, 4, 5, 6, 7, 40, 8, 9, 4, 5, 0, 0, 41, 42]
    src.begin("r", prompt)
    draft = src.candidates("r", prompt + [2, 3, 4, 5], 8)
    assert best_path(draft)[:2] == [6, 7]
    assert (0, 0) in paths(draft)  # the weaker occurrence is a branch
    assert all(draft.probs[i] <= draft.probs[p] for i, p in enumerate(draft.parents) if p >= 0)
    draft = src.candidates("r", prompt + [2, 3, 4, 5, 30, 8, 9, 4, 5], 8)
    assert best_path(draft)[:2] == [0, 0]  # the context grew: it is indexed too


def test_estimates_grow_with_the_match_and_stop_tokens_are_never_drafted():
    assert match_prior(1) < match_prior(2) < match_prior(4) < match_prior(8) < match_prior(20)
    src = SuffixSource(eos_token_ids=[2])
    prompt = [10, 11, 12, 13, 2, 14, 11, 12, 13]
    src.begin("r", prompt)
    draft = src.candidates("r", prompt, 8)
    assert draft.tokens == [] or 2 not in draft.tokens
    assert not src.candidates("r", prompt + [2], 8)  # nothing after a stop token
    assert not src.candidates("r", prompt + [99], 8)  # no earlier occurrence
    depth = max(draft.depths(), default=0)
    assert depth <= 8


def test_hybrid_drafts_the_long_match_continuation_the_trie_cannot_tell_apart():
    """The trie sees only the last 2 tokens ("4 5" is followed by 6 and by 0 equally often); the
    suffix source knows which occurrence the text is copying and drafts it deep."""
    d = HybridDrafter(eos_token_ids=[0])
    body = [21, 22, 23, 24, 4, 5, 6, 7, 8, 9, 10, 11]
    other = [31, 32, 33, 34, 4, 5, 60, 70, 80, 90, 100, 110]
    prompt = body + other + other[:4] + body + [50, 51]
    d.begin("r", prompt)
    ctx = prompt + body[:6]  # copying `body` again
    draft = d.propose("r", ctx, 64).draft
    assert draft.follow(body[6:]) >= 4
    owners = d.policy._requests["r"].owners
    assert owners and owners[0] & (1 << SUFFIX)


def test_a_second_scored_look_at_a_step_replaces_the_first():
    once, twice = DraftPolicy(1), DraftPolicy(1)
    for pol in (once, twice):
        pol.begin("r")
    ctx = [0]
    for i in range(10):
        cand = [DraftTree([1, 2, 3], [-1, 0, 1], [0.9, 0.8, 0.7])]
        once.select("r", ctx, cand, 8, STAIRS)
        twice.select("r", ctx, cand, 8, STAIRS)
        twice.select("r", ctx, cand, 8, STAIRS)  # e.g. the hybrid's look with the pool
        committed = [1, 2, 7] if i % 2 else [5]
        once.observe("r", committed)
        twice.observe("r", committed)
        ctx += committed
    assert once.calibrated("r", 0, 1, 0.9) == twice.calibrated("r", 0, 1, 0.9)
    assert len(twice._requests["r"].calibration.pending) == len(
        once._requests["r"].calibration.pending
    )


def test_drafts_end_at_the_top_of_a_stair_of_the_cost_curve():
    """Rows up to the top of their stair are free, the first row of the next stair costs a step:
    a long likely chain goes out in whole stairs (root + n a multiple of 4), a row more only when
    the stair it opens pays for itself."""
    pol = DraftPolicy(1)
    pol.begin("r")
    chain = [100 + i for i in range(40)]
    for p_each in (0.97, 0.9, 0.8):
        probs = [p_each ** (i + 1) for i in range(40)]
        tree = DraftTree(chain, list(range(-1, 39)), probs)
        draft, _ = pol.select("r", [0], [tree], 40, STAIRS, score=False)
        assert draft.tokens == chain[: len(draft)] and len(draft) >= 3 and (1 + len(draft)) % 4 == 0
    # 16 nodes of 0.95 and then weak ones: never a 17th node for a stair it cannot fill
    probs = [0.95] * 15 + [0.05] * 25
    draft, _ = pol.select(
        "r", [0], [DraftTree(chain, list(range(-1, 39)), probs)], 40, STAIRS, score=False
    )
    assert len(draft) == 15


def test_finished_outputs_are_matched_on_their_longest_suffix_in_later_requests():
    src = SuffixSource(eos_token_ids=[2], output_memory=OutputMemory(max_tokens=64))
    first = [10, 11, 12, 13, 14, 15, 16, 17]
    src.begin("a", [1, 1])
    src.candidates("a", [1, 1] + first + [2, 99, 98], 4)  # the output, its stop token and after
    assert not src.memory("a", 4)  # nothing finished yet
    src.end("a")
    src.begin("b", [5, 5])
    ctx = [5, 5, 3, 12, 13, 14]
    src.candidates("b", ctx, 6)  # its own context has no match ...
    draft = src.memory("b", 6)  # ... the past output has
    assert best_path(draft) == [15, 16, 17]  # stopped at the stop token
    assert 99 not in draft.tokens and 98 not in draft.tokens
    src.end("b")
    src.begin("x", [])
    src.candidates("x", [60, 61], 4)
    src.observe("x", [62, 63])  # its last step: no propose after it
    src.end("x")
    src.begin("y", [])
    src.candidates("y", [61, 62], 4)
    assert best_path(src.memory("y", 4)) == [63]
    src.end("y")
    for i in range(30):  # the memory keeps its newest tokens
        src.begin(i, [200 + i])  # prompts of their own: no answer is replayed below
        src.candidates(i, [200 + i, 40 + i, 41 + i, 42 + i], 4)
        src.end(i)
    assert len(src.output_memory) <= 64
    src.begin("c", [300])
    src.candidates("c", [300, 69, 70], 4)
    assert best_path(src.memory("c", 4)) == [71]  # a recent output, within its separator


def test_chunked_suffix_comparison_equals_the_token_by_token_one():
    import random
    from paraspec.decoding.drafters.suffix_match import _common_suffix

    rnd = random.Random(0)
    for _ in range(3000):
        a = [rnd.randrange(rnd.choice([2, 3, 50])) for _ in range(rnd.randint(1, 70))]
        b = a[:] if rnd.random() < 0.5 else [rnd.randrange(3) for _ in range(rnd.randint(1, 70))]
        i, k = rnd.randrange(len(a)), rnd.randrange(len(b))
        if a[i] != b[k]:
            continue
        cap = min(rnd.randint(1, 40), i + 1, k + 1)
        m = 1
        while m < cap and a[i - m] == b[k - m]:
            m += 1
        assert _common_suffix(a, i, b, k, cap) == m


def test_past_outputs_are_not_looked_up_while_the_context_copies_itself_at_length():
    from paraspec.decoding.drafters.suffix import SETTLED_MATCH

    src = SuffixSource(eos_token_ids=[2])
    past = list(range(100, 140))
    src.begin("a", [])
    src.candidates("a", past, 4)
    src.end("a")
    src.begin("b", [5])
    short = [5] + past[:8]  # own context: no match; the past has one
    src.candidates("b", short, 6)
    assert best_path(src.memory("b", 6))[:2] == past[8:10]
    text = past[: SETTLED_MATCH + 2]  # own context repeats itself at length
    long = [5] + text + text
    assert src.candidates("b", long, 6)
    assert not src.memory("b", 6)  # ... so the past is not searched


def test_an_answered_prompt_replays_its_answers_from_the_first_step_while_the_output_follows():
    src = SuffixSource(eos_token_ids=[2])
    prompt, answer = [5, 6, 7], list(range(100, 140))
    for key, out in (("b", answer[:10] + [77, 78]), ("a", answer)):  # two answers, 10 alike
        src.begin(key, prompt)
        src.candidates(key, prompt + out + [2], 4)
        src.end(key)
    src.begin("c", prompt)
    assert src.replaying("c")
    ctx = prompt + [100]  # the prefill's token
    src.candidates("c", ctx, 30)
    tree = src.replay("c", 30)
    assert best_path(tree) == answer[1:31]  # from the first decode step, a copy's depth
    fork = tree.tokens.index(109)
    assert sorted(t for t, par in zip(tree.tokens, tree.parents) if par == fork) == [77, 110]
    assert tree.probs[0] == pytest.approx(REPLAY_PRIOR) and not src.memory(
        "c", 30
    )  # past not searched
    src.observe("c", answer[1:12])  # past the fork: the second answer is left behind
    src.candidates("c", ctx + answer[1:12], 8)
    assert src.replay("c", 8).tokens == answer[12:20]
    src.observe("c", [5, 5])  # the output leaves the answer: no replay any more
    src.candidates("c", ctx + answer[1:12] + [5, 5], 8)
    assert not src.replay("c", 8) and not src.replaying("c")
    src.begin("d", [5, 6, 8])  # another prompt
    assert not src.replaying("d")


def test_a_replayed_answer_cut_short_gives_way_to_the_past_outputs_at_its_end():
    src = SuffixSource(eos_token_ids=[2])
    prompt, answer = [5, 6, 7], list(range(100, 140))
    src.begin("a", [9])  # a past output that goes on where the short answer stops
    src.candidates("a", [9] + answer + [2], 4)
    src.end("a")
    src.begin("b", prompt)  # the prompt answered before, cut at 10 tokens (max_tokens)
    src.candidates("b", prompt + answer[:10], 4)
    src.end("b")
    src.begin("c", prompt)
    src.candidates("c", prompt + answer[:5], 30)
    assert src.replay("c", 30).tokens == answer[5:10] and src.replaying("c")
    src.observe("c", answer[5:10])  # the output has run to the answer's end
    src.candidates("c", prompt + answer[:10], 30)
    assert not src.replay("c", 30) and not src.replaying("c")
    assert best_path(src.memory("c", 30))[:3] == answer[10:13]  # the past outputs again


def test_a_replay_lets_go_when_the_memory_drops_its_older_half_under_it():
    src = SuffixSource(eos_token_ids=[2], output_memory=OutputMemory(max_tokens=64))
    prompt, answer = [5, 6, 7], list(range(100, 130))
    src.begin("a", prompt)
    src.candidates("a", prompt + answer, 4)
    src.end("a")
    src.begin("b", prompt)
    src.candidates("b", prompt + answer[:3], 8)
    assert src.replay("b", 8).tokens == answer[3:11]
    src.begin("c", [9])  # another request ends meanwhile: the memory is full, positions move
    src.candidates("c", [9] + list(range(300, 340)), 4)
    src.end("c")
    src.observe("b", answer[3:20])
    src.candidates("b", prompt + answer[:20], 8)
    assert not src.replay("b", 8) and not src.replaying("b")


def test_an_answer_replays_only_to_a_request_that_will_write_it_again():
    src = SuffixSource(eos_token_ids=[2])
    prompt, greedy, drawn = [5, 6, 7], list(range(100, 120)), list(range(200, 220))
    src.begin("g", prompt)  # plain greedy decoding: the empty identity
    src.candidates("g", prompt + greedy, 4)
    src.end("g")
    src.begin("s", prompt, None)  # a draw (sampling without a seed): matched, never replayed
    src.candidates("s", prompt + drawn, 4)
    src.end("s")
    assert src.output_memory.answer(prompt) == [0]  # the draw is not kept as an answer
    src.begin("g2", prompt)
    src.candidates("g2", prompt + greedy[:1], 30)
    assert src.replay("g2", 30).tokens == greedy[1:]  # the greedy answer alone, no fork
    src.begin("s2", prompt, None)  # another draw replays nothing ...
    assert not src.replaying("s2")
    src.begin("p", prompt, b"penalties")  # ... nor a request whose parameters shape other tokens
    assert not src.replaying("p")
    src.candidates("p", prompt + drawn, 4)
    src.end("p")
    src.begin("p2", prompt, b"penalties")  # ... until it answered under them itself
    src.candidates("p2", prompt + drawn[:1], 30)
    assert src.replay("p2", 30).tokens == drawn[1:]


@pytest.mark.parametrize(
    "curve",
    [
        {1: 1, 2: 1.09, 4: 1.21, 8: 1.86, 16: 3.34, 32: 6.43, 64: 12.85},
        {1: 1, 2: 1.08, 4: 1.47, 8: 2.12, 16: 3.91, 32: 7.17, 64: 13.76},
    ],
)
def test_a_drafters_first_replay_takes_the_fewest_steps_its_row_budget_allows(curve):
    # before the policy has measured a replayed node, its prior alone must win the chain its
    # deep rows over the other sources' shallow nodes (answers of prose: they share bigrams)
    rng = random.Random(5)
    words = list(range(300, 340))
    records = [
        Record(prompt=[7, i], output=[rng.choice(words) for _ in range(97 + 20 * i)])
        for i in range(4)
    ]
    drafter = HybridDrafter(eos_token_ids=[2])
    cost = CostModel(curve)
    replay(drafter, records, 47, cost)  # asked once
    again = replay(drafter, records, 47, cost)
    # 48 rows a step: decoding_length 16 + copy_length 32
    assert again.steps == sum(-(-(len(r.output) - 1) // 48) for r in records)


def test_a_replayed_answer_is_drafted_alone_without_the_forks_other_sources_offer():
    # the answer repeats a stretch and goes on otherwise the second time: the context's own
    # suffix match offers the first continuation there, the replay the one the answer wrote
    x, y, z = list(range(300, 312)), list(range(400, 406)), list(range(500, 506))
    answer, prompt = x + y + x + z + [2], [7, 8]
    hybrid = HybridDrafter(eos_token_ids=[2])
    ctx = StepContext(cost=CostModel({1: 1.0, 64: 1.0}))  # rows free: any fork would be sent
    hybrid.begin("a", prompt, ctx=ctx)
    hybrid.propose("a", prompt + answer[:1], 30, ctx)
    hybrid.observe("a", answer[1:])
    hybrid.end("a")
    hybrid.begin("b", prompt, ctx=ctx)
    at = len(x + y + x)  # the output so far: up to the second stretch's end
    context = prompt + answer[:1]
    hybrid.propose("b", context, 30, ctx)
    hybrid.observe("b", answer[1:at])
    draft = hybrid.propose("b", prompt + answer[:at], 30, ctx).draft
    assert draft.is_chain() and draft.tokens == answer[at:-1]  # z, not y beside it
    hybrid.observe("b", answer[at:])
    assert not hybrid.suffix.memory("b", 30)  # (the past outputs were not searched either)
