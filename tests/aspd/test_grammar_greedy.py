"""The greedy fast paths of the markup grammar pick exactly the token of argmax over the masked
row (SerialGrammar.apply, branch_logits), in every grammar state, when the plain argmax is a
banned id, and on ties (argmax takes the first maximum)."""

import torch

from paraspec.aspd.grammar import SerialGrammar, branch_greedy, branch_logits
from paraspec.sampling.sampler import first_max
from paraspec.aspd.markup import MarkupIds

V = 64
IDS = MarkupIds(
    title=50, end_title=51, para=52, branch=53, end_branch=54, end_para=55, colon_space=[7, 8]
)
EOS = frozenset({2})


def _grammars() -> list[SerialGrammar]:
    """One grammar in each state: text, open, title, title at its cap, closed (with room, at
    the cap on titles, after a repeated title), after_block."""
    out = [SerialGrammar(IDS, EOS, max_titles=2, max_title_tokens=2)]
    for tokens in ([50], [50, 9], [50, 9, 10], [50, 9, 51], [50, 9, 51, 50, 10, 51]):
        g = SerialGrammar(IDS, EOS, max_titles=2, max_title_tokens=2)
        for t in tokens:
            g.advance(t)
        out.append(g)
    g = SerialGrammar(IDS, EOS)
    for t in [50, 9, 51, 50, 9, 51]:
        g.advance(t)
    out.append(g)
    g = SerialGrammar(IDS, EOS)
    g.block_done()
    out.append(g)
    assert len(
        {
            (g.state, g.titles >= g.max_titles, g.title_tokens >= g.max_title_tokens, g.repeated)
            for g in out
        }
    ) == len(out)
    return out


def _rows() -> list[torch.Tensor]:
    """Random rows, rows whose maximum sits on each markup id, EOS, and tied maxima around them."""
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(V, generator=gen) for _ in range(20)]
    for hot in (*IDS.all, 2, 9):
        r = torch.randn(V, generator=gen)
        r[hot] = 10.0
        rows.append(r)
        for tie in (hot - 1, hot + 1, 0, V - 1):  # a tie before and after the hot id
            t = r.clone()
            t[tie] = 10.0
            rows.append(t)
    r = torch.randn(V, generator=gen)
    r[list(IDS.all)] = 10.0  # every markup id at the maximum
    rows.append(r)
    return rows


def test_serial_greedy_equals_argmax_of_the_masked_row():
    for g in _grammars():
        for row in _rows():
            assert g.greedy(row) == int(g.apply(row).argmax()), (g.state, row.argmax())


def test_branch_greedy_equals_argmax_of_each_masked_row():
    rows = torch.stack(_rows())
    assert branch_greedy(rows, IDS) == [int(branch_logits(r, IDS).argmax()) for r in rows]
    assert any(int(r.argmax()) in IDS.all for r in rows)  # the banned-argmax path runs
    assert branch_greedy(rows[:0], IDS) == []


def test_first_max_is_torch_argmax_ties_and_infinities_included():
    rows = torch.stack(_rows())
    rows[3, :] = float("-inf")  # a row with no finite logit: index 0
    rows[4, [5, 9]] = float("inf")
    assert first_max(rows) == rows.argmax(-1).tolist()
    assert [first_max(r) for r in rows] == rows.argmax(-1).tolist()
    assert first_max(rows.double()) == rows.argmax(-1).tolist()  # the torch fallback


def test_open_threshold_opens_a_block_only_where_the_model_is_sure():
    """The list-opening <|title|> is kept where its probability reaches the threshold, banned
    below it (greedy and apply alike); later titles of a list and other states are untouched."""
    import pytest

    from paraspec.aspd.params import AspdParams
    from paraspec.errors import ConfigError

    unsure, sure = torch.zeros(V), torch.zeros(V)
    unsure[IDS.title], unsure[9] = 3.0, 2.5  # title the argmax at p ~ 0.29
    sure[IDS.title] = 8.0  # p ~ 0.98
    g = SerialGrammar(IDS, EOS, open_threshold=0.5)
    assert g.greedy(unsure) == 9 == int(g.apply(unsure).argmax()) and g.apply(unsure)[
        IDS.title
    ] == float("-inf")
    assert g.greedy(sure) == IDS.title == int(g.apply(sure).argmax())
    assert SerialGrammar(IDS, EOS).greedy(unsure) == IDS.title  # no threshold: the model's draw
    for t in (IDS.title, 9, IDS.end_title):  # closed: the next title stays open
        g.advance(t)
    assert g.state == "closed" and g.greedy(unsure) == IDS.title and g.copy().open_threshold == 0.5
    for state in _grammars():
        state.open_threshold = 0.5
        for row in _rows():
            assert state.greedy(row) == int(state.apply(row).argmax())
    assert AspdParams.from_dict({"open_threshold": 0.4}).open_threshold == 0.4
    for bad in (1, 1.5, -0.1, "0.5", True):
        with pytest.raises(ConfigError, match="plugin_params.open_threshold"):
            AspdParams.from_dict({"open_threshold": bad})


def test_a_list_that_repeats_a_title_ends_there():
    """After a title the list already holds only `<|para|>` may follow (the block would drop the
    repeat: each further title would cost serial steps for nothing); titles that only share a
    prefix are distinct, and the next list starts afresh."""
    g = SerialGrammar(IDS, EOS)

    def write(*titles):
        for title in titles:
            for t in (IDS.title, *title, IDS.end_title):
                g.advance(t)

    write([9, 10], [9])  # [9] is a prefix of [9, 10], not a repeat
    assert g.rule() == (True, [IDS.para, IDS.title]) and not g.repeated
    write([9, 10])
    assert g.rule() == (True, [IDS.para]) and g.repeated and g.copy().rule() == (True, [IDS.para])
    row = torch.zeros(V)
    row[IDS.title] = 9.0  # the model would write yet another title
    assert g.greedy(row) == IDS.para == int(g.apply(row).argmax())
    g.advance(IDS.para)
    assert g.state == "text" and not g.repeated
    write([9, 10])  # a new list: its titles are its own
    assert g.rule() == (True, [IDS.para, IDS.title])
    g.block_done()
    assert not g.repeated and g.state == "after_block"
