"""tools/replay.py: per-request accounting and the oracle copy bound."""

import random

import pytest

from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.drafters.memory_decoding import MemoryDecodingParams, MemoryDrafter
from paraspec.tools.replay import Record, copy_bound, main, replay, write_records

FLAT = CostModel({1: 1.0, 64: 1.0})


def test_bound_copies_the_longest_earlier_run():
    # output: 9, then the prompt's 1..5, then 7. Prefill gives 9; one step drafts 1..4 + 5 (the
    # last token is never drafted, as in replay) and its bonus is 5 ... 7 follows as a bonus.
    rec = Record([1, 2, 3, 4, 5], [9, 1, 2, 3, 4, 5, 7])
    rep = copy_bound([rec], FLAT)
    assert (rep.steps, rep.tokens) == (1, 6)
    assert copy_bound([rec], FLAT, depth=2).steps == 2  # 1 2 | 3 ... then 4 5 7


def test_anchored_bound_copies_only_after_the_last_tokens():
    # the output's 1 2 3 follows 9 here, 0 in the prompt: from any place it is one copy; anchored
    # on the last token, no place of the prompt follows a 9: 1 comes as a bonus, then 2 3 (7)
    rec = Record([0, 1, 2, 3, 5], [9, 1, 2, 3, 7])
    assert copy_bound([rec], FLAT).steps == 1
    assert copy_bound([rec], FLAT, anchor=1).steps == 2
    rec = Record([9, 1, 2, 3, 5], [9, 1, 2, 3, 7])  # the prompt's copy follows a 9 too
    assert copy_bound([rec], FLAT, anchor=1).steps == 1
    assert copy_bound([rec], FLAT, anchor=2).steps == 2  # ... but not the prompt's 5 9


def test_bound_drafts_only_what_pays():
    rec = Record([1, 2, 3, 4, 5], [9, 1, 2, 3, 4, 5, 7])
    steep = CostModel({1: 1.0, 2: 3.0, 64: 200.0})  # any draft row costs more than it gives
    assert copy_bound([rec], steep).steps == 6  # plain decoding: a token a step


def test_bound_is_above_a_real_drafter():
    rng = random.Random(3)
    records = []
    for _ in range(6):
        prompt = [rng.randrange(3, 3000) for _ in range(200)]
        a, b = rng.randrange(0, 80), rng.randrange(100, 160)
        records.append(
            Record(
                prompt,
                prompt[a : a + 30]
                + [rng.randrange(3, 3000) for _ in range(8)]
                + prompt[b : b + 30],
            )
        )
    bound = copy_bound(records, FLAT)
    # a drafter per request: no memory of other requests, as the bound
    drafted = [
        replay(MemoryDrafter(MemoryDecodingParams(), eos_token_ids=[2]), [r], 15, FLAT)
        for r in records
    ]
    assert sum(d.tokens for d in drafted) == bound.tokens
    assert bound.steps <= sum(d.steps for d in drafted)
    assert bound.tokens == sum(len(r.output) - 1 for r in records)
    assert bound.tokens_per_step > 4


def test_median_request_speedup():
    rep = copy_bound(
        [
            Record([1, 2, 3, 4, 5], [9, 1, 2, 3, 4, 5, 7]),  # 6 tokens, 1 step
            Record([1, 2], [8, 7, 6, 5]),  # nothing to copy
            Record([1, 2], [8, 6, 5, 4]),
        ],
        FLAT,
    )
    assert rep.median_speedup() == 1.0
    assert rep.speedup() == pytest.approx(12 / 7)  # over all tokens: 12 in 7 steps


def test_bound_cli(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_records(path, [Record([1, 2, 3, 4, 5], [9, 1, 2, 3, 4, 5, 7], "g")])
    main(["bound", str(path), "--cost", '{"1": 1, "64": 1}'])
    out = capsys.readouterr().out
    assert (
        '"group": "g"' in out
        and '"tokens_per_step": 6.0' in out
        and '"median_request_speedup": 6.0' in out
    )


def test_bound_cli_rejects_a_negative_anchor(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_records(path, [Record([1, 2], [3, 4], "g")])
    with pytest.raises(SystemExit):
        main(["bound", str(path), "--anchor", "-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert "--anchor" in err[-1] and "0 or a positive whole number" in err[-1]
