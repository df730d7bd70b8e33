"""Branch drafts from the branch's own context (aspd/context_match.py): the longest suffix match
over the block's prefix and the branch's tokens, and the prompt's text after the branch's title."""

from paraspec.aspd.context_match import ContextIndex, anchored, anchored_drafts


def paths(tree):
    return {tuple(tree.tokens[n] for n in tree.path_to(i)) for i in range(len(tree))}


def test_the_longest_suffix_match_drafts_first():
    #          0  1  2  3  4  5  6  7  8
    prefix = [1, 2, 3, 9, 5, 2, 3, 7, 8]
    index = ContextIndex(prefix)
    draft = index.drafts([4, 1, 2, 3], 8, 3)  # "1 2 3" matches at 0..2 (length 3), "2 3" at 5..6
    assert draft.tokens[0] == 9 and draft.parents[0] == -1
    best = max(range(len(draft)), key=lambda i: (draft.probs[i], -i))
    assert draft.tokens[best] == 9 and (9, 5, 2) in paths(draft) and (7, 8) in paths(draft)
    assert draft.probs[draft.tokens.index(9)] > draft.probs[draft.tokens.index(7)]
    assert all(draft.probs[i] <= draft.probs[p] for i, p in enumerate(draft.parents) if p >= 0)


def test_a_branch_copies_its_own_earlier_tokens():
    index = ContextIndex([50, 51])
    own = [10, 11, 12, 13, 20, 10, 11]  # the branch repeats its start
    assert (12, 13, 20) in paths(index.drafts(own, 8, 3))
    assert len(index.drafts(own, 2, 3)) == 2  # at most max_nodes nodes
    assert not ContextIndex([]).drafts([5], 8, 3)  # nothing before the last token
    assert not index.drafts([99], 8, 3)  # no earlier occurrence


def test_anchored_follows_the_titles_text_in_the_prompt_past_its_delimiter():
    texts = ["Solve", ":", " A", ")", " ", "7", "6", " B", ")", " ", "2"]
    prompt = list(range(100, 100 + len(texts)))
    assert anchored(prompt, texts, "A", 4) == [[104, 105, 106, 107]]  # ")" skipped, " " kept
    assert anchored(prompt, texts, " B ", 8) == [[109, 110]]
    assert anchored(prompt, texts, "C", 4) == [] and anchored(prompt, texts, "", 4) == []
    multi = ["x", " Q", "1", ".", " hi"]  # a title of two tokens
    assert anchored(list(range(5)), multi, "Q1", 3) == [[4]]


def test_anchored_drafts_only_while_the_content_restates_the_prompt():
    anchors = [[5, 6, 7, 8]]
    assert anchored_drafts(anchors, []).tokens == [5, 6, 7, 8]
    assert anchored_drafts(anchors, [5, 6]).tokens == [7, 8]
    assert not anchored_drafts(anchors, [5, 9]) and not anchored_drafts(anchors, [5, 6, 7, 8])
    t = anchored_drafts(anchors, [])
    assert t.parents == [-1, 0, 1, 2] and t.probs == sorted(t.probs, reverse=True)
