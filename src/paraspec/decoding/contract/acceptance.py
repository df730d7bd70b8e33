"""Acceptance: walk the draft tree with the target model's choices. Pure: no model, no KV.

Rule (lossless, "sample-and-match"; SpecInfer with one-hot drafts reduces to it): start at the
root's query row; draw the next token from that row's distribution given the sequence's exact
context (committed tokens + the path so far); if a child of the current node carries that
token, move to it (an accepted draft token) and draw again from its row; otherwise stop. The
last draw is the bonus token: it has no KV yet and becomes the next root. Every emitted token
is one draw from the model's conditional, so greedy output equals autoregressive greedy and
sampled output keeps the model's distribution. Never draw once per candidate row and keep the
longest match: that gives a candidate several tries and biases the output.

A step emits accepted + 1 tokens ("mean accepted tokens per step" counts the bonus token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Acceptance:
    tokens: list[int]  # emitted this step: accepted draft tokens, then the bonus token
    nodes: list[int]  # draft node index of each accepted draft token
    stopped: bool  # a stop token ended the walk (or the token budget ran out)


def walk(
    children: list[dict[int, int]],
    draw: Callable[[int], int],
    max_tokens: int,
    is_stop: Callable[[int], bool],
) -> Acceptance:
    """children[r]: token -> node for query row r (row 0 = root, row i + 1 = node i);
    draw(r): the model's next token from query row r, called once per visited row, in order."""
    tokens: list[int] = []
    nodes: list[int] = []
    row = 0
    while True:
        t = draw(row)
        tokens.append(t)
        if len(tokens) >= max_tokens or is_stop(t):
            return Acceptance(tokens, nodes, True)
        child = children[row].get(t)
        if child is None:
            return Acceptance(tokens, nodes, False)
        nodes.append(child)
        row = child + 1
