"""ASPD layout: Same-Seq positions and the branch-isolation mask of a flattened sequence."""

import pytest
import torch

from paraspec.aspd.layout import layout
from paraspec.aspd.markup import MarkupIds

IDS = MarkupIds(
    title=101, end_title=102, para=103, branch=104, end_branch=105, end_para=106, colon_space=[7]
)
T, ET, P, B, EB, EP = IDS.all


def test_positions_and_mask_of_the_research_note_toy():
    # p p <t> A </t> <t> B </t> <p> <b> A : _ x y </b> <b> B : _ z </b> </p> w w   (aspd.md §2.2)
    seq = [1, 1, T, 2, ET, T, 3, ET, P, B, 2, 7, 8, 9, EB, B, 3, 7, 10, EB, EP, 4, 4]
    pos, vis = layout(seq, IDS)
    assert pos[8] == 8 and pos[9] == pos[15] == 9  # both <b> at p + 1
    assert pos[14] == 14 and pos[19] == 13  # each branch counts its own tokens
    assert pos[20] == 20 and pos[22] == 22  # </p> at its flattened index
    for i in range(15, 20):  # branch 2 rows
        assert (
            vis[i, :9].all()
            and not vis[i, 9:15].any()
            and vis[i, 15 : i + 1].all()
            and not vis[i, i + 1 :].any()
        )
    for i in range(9, 15):
        assert vis[i, : i + 1].all() and not vis[i, i + 1 :].any()
    assert vis[20, :21].all() and vis[22].all()  # serial rows see everything earlier
    pos2, _ = layout(seq, IDS, start=5)
    assert torch.equal(pos2, pos + 5)


def test_second_block_sees_the_first():
    seq = [1, P, B, 2, EB, B, 3, EB, EP, 4, P, B, 5, EB, B, 6, EB, EP]
    pos, vis = layout(seq, IDS)
    assert pos[11] == pos[14] == 11 and pos[17] == 17
    assert vis[14, :11].all() and not vis[14, 11:14].any()


def test_truncated_block_and_bad_block():
    pos, vis = layout([1, P, B, 2, EB, B, 3], IDS)
    assert pos.tolist() == [0, 1, 2, 3, 4, 2, 3] and not vis[6, 2:5].any()
    with pytest.raises(ValueError, match="in no branch"):
        layout([1, P, 5], IDS)
