"""Synthetic ASPD tasks: deterministic by seed, held-out disjoint, plain == to_plain(markup), exact checkers."""

import re

import pytest

from paraspec.aspd import synth
from paraspec.aspd.data import Block
from paraspec.aspd.markup import parse, to_plain


def test_generation_is_deterministic_and_heldout_is_disjoint():
    a, b = synth.generate(60, 0), synth.generate(60, 0)
    assert [e.aspd for e in a] == [e.aspd for e in b]
    held = synth.generate(40, 1000, exclude={e.prompt for e in a})
    assert not {e.prompt for e in held} & {e.prompt for e in a}
    assert len({e.prompt for e in a}) == 60
    assert {e.family for e in a} == set(synth.FAMILIES)


def test_heldout_split_shares_no_table_row_or_part_with_training():
    train = synth.generate(1200, 0)
    held = synth.generate(120, 1000, exclude={e.prompt for e in train}, split="heldout")
    assert {e.family for e in held} == set(synth.FAMILIES)
    contents = lambda xs: {b.content for e in xs for blk in e.blocks for b in blk.branches}  # noqa: E731
    assert len(contents(held)) > 100 and not contents(held) & contents(train)
    exprs = lambda xs: {c["expr"] for e in xs for c in e.checks if "expr" in c}  # noqa: E731
    assert exprs(held) and not exprs(held) & exprs(train)
    assert all(
        any(c in e.prompt for c in synth.HELDOUT_COUNTRIES) for e in held if e.family == "facts"
    )
    assert not any(
        c in e.prompt for c in synth.HELDOUT_COUNTRIES for e in train if e.family == "facts"
    )


def test_plain_is_the_markups_plain_text_and_titles_are_unique():
    for ex in synth.generate(90, 5):
        assert to_plain(ex.aspd) == ex.plain
        blocks = [s for s in parse(ex.aspd) if s.parallel]
        assert len(blocks) == 1 and 2 <= len(blocks[0].branches) <= 4
        assert len(set(blocks[0].titles)) == len(blocks[0].titles)
        assert [b.title for b in blocks[0].branches] == list(blocks[0].titles)


def test_checker_accepts_the_answer_and_rejects_a_wrong_one():
    for ex in synth.generate(60, 7):
        # the control writes labels
        assert synth.check(ex, ex.plain) and synth.check(ex, ex.labelled)
        lines = ex.plain.splitlines()
        if ex.family == "arith":  # change the last part's result
            lines[-1] = re.sub(r"(\d+)\.$", lambda m: f"{int(m.group(1)) + 1}.", lines[-1])
        else:
            lines[-1] = "I do not know."
        assert not synth.check(ex, "\n".join(lines))
        assert not synth.check(ex, "\n".join(ex.plain.splitlines()[:-1]))  # a part missing


def test_arith_branches_are_independent_by_construction():
    for ex in [e for e in synth.generate(80, 3) if e.family == "arith"]:
        block = next(s for s in ex.segments if isinstance(s, Block))
        for branch, c in zip(block.branches, ex.checks):
            assert branch.content.startswith(c["expr"] + " = ")
            assert branch.content.endswith(f"= {c['value']}.")
            a, b = map(int, re.split(r"[*+-]", c["expr"]))
            assert eval(branch.content.split(" = ")[-1].rstrip(".")) == c["value"]  # noqa: S307 (digits only)
            assert {a, b} <= {int(x) for x in re.findall(r"\d+", branch.content)}


def test_an_example_without_checks_is_not_scored_as_correct():
    ex = synth.generate(1, 3)[0]
    ex.checks = []
    with pytest.raises(ValueError, match="no checks"):
        synth.check(ex, "any non-empty answer")
