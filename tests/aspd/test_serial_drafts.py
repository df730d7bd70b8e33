"""The serial drafter inside ASPD (aspd/serial_drafts.py): its drafts lose the nodes serial mode
can never accept (below `<|para|>`, markup the serial grammar bans), nothing else."""

from paraspec.aspd.markup import MarkupIds
from paraspec.aspd.serial_drafts import SerialDrafts
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.drafters.memory_decoding import MemoryDrafter
from paraspec.decoding.contract.proposer import StepContext

IDS = MarkupIds(
    title=90, end_title=91, para=92, branch=93, end_branch=94, end_para=95, colon_space=[7, 8]
)
FLAT = StepContext(1, CostModel({1: 1.0, 64: 1.0}))


def _paths(tree):
    return {tuple(tree.tokens[n] for n in tree.path_to(i)) for i in range(len(tree))}


def test_nothing_below_para_and_no_banned_markup():
    inner = MemoryDrafter()
    # the memory: a lead-in, a title list, <|para|> and the block that followed it last time
    inner.begin("old", [1, 2, 90, 5, 91, 92, 93, 5, 7, 6, 94, 95, 3])
    wrapped = SerialDrafts(inner)
    wrapped.ids = IDS
    wrapped.begin("r", [1, 2], None, FLAT)
    raw = inner.propose("old", [1, 2], 15, FLAT).draft
    assert (90, 5, 91, 92, 93) in _paths(raw)  # the inner drafter runs past <|para|>
    draft = wrapped.propose("old", [1, 2], 15, FLAT).draft
    assert (90, 5, 91, 92) in _paths(draft)
    assert not {93, 94, 95} & set(draft.tokens) and len(draft) == 4
    inner.begin("old2", [4, 95, 6, 4, 93, 6])  # banned markup right below the root
    assert 95 in inner.propose("old2", [6, 4], 15, FLAT).draft.tokens
    assert not {93, 94, 95} & set(wrapped.propose("old2", [6, 4], 15, FLAT).draft.tokens)
    assert wrapped.trie is inner.trie and wrapped.name == inner.name
