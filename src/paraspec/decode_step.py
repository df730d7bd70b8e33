"""One sequence's part of a decode step, on either side of the batch's one forward (engine.py).

Before it, `step_row`: the sequence's query rows, its last token (the root) and the draft tree its
drafter proposes, cut to its grammar (structured/) and to what the model can verify; or the rows
of its decode mode (decoding/contract/mode.py) when the mode runs the step. After it,
`accept_run`: the longest run its own sampler agrees with along the verified tree, the KV of that
path committed and the drafter told; the engine emits the run. Both reach the model only through
the runner, and time their phases through the sequence's PhaseTimer (decoding/contract/stats.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .decoding.contract.acceptance import walk
from .decoding.contract.proposer import StepContext
from .decoding.contract.stats import GATE_CLOSED, NO_MATCH, NO_ROOM
from .decoding.contract.verify import Query, build_query, fit_proposal
from .outputs import TokenLogprob, token_logprobs
from .sampling.sampler import first_max
from .sequence import SequenceState

if TYPE_CHECKING:
    from .runner import ModelRunner

MAX_DRAFT_NODES = 64  # hard cap on draft nodes a drafter may add per sequence and step

# what a step hands the engine to emit: tokens, their logprobs, the draft's nodes and those accepted
Run = tuple[list[int], list[TokenLogprob] | None, int, int]


@dataclass
class StepRow:
    """One running sequence's part of a decode step: its query rows and how they came to be."""

    seq: SequenceState
    query: Query
    by_mode: bool  # its decode mode (decoding/contract/mode.py) built the rows and accepts them
    looked: bool  # its drafter was asked (the draft gate may skip the look)
    no_draft: str | None  # why it sent no draft (stats.py), when it sent none


def step_row(
    seq: SequenceState, ctx: StepContext | None, runner: ModelRunner, draft_gate: bool
) -> StepRow:
    """The sequence's rows for this step (propose -> build the query); draft_gate: ask the
    drafter only where the sequence's gate says a look pays (decoding/policy/gate.py)."""
    if seq.mode is not None and (q := seq.mode.query(seq, ctx)) is not None:
        return StepRow(seq, q, by_mode=True, looked=False, no_draft=None)
    seq.stats.timer.start()
    cache, ctx_len = seq.cache, runner.max_seq_len
    budget = max(
        0,
        min(
            seq.max_tokens - len(seq.output) - 1,
            cache.capacity - cache.length - 1,
            ctx_len - cache.length - 2,
            runner.draft_room(cache, MAX_DRAFT_NODES),
        ),
    )
    proposal, why = None, None
    looked = seq.drafter is not None and budget > 0 and (not draft_gate or seq.gate.look())
    if looked:
        proposal = seq.drafter.propose(seq.key, seq.tokens, budget, ctx)
        if len(proposal.draft) > budget:
            proposal.draft = proposal.draft.truncated(budget)
        why = None if len(proposal.draft) else (proposal.reason or NO_MATCH)
    elif seq.drafter is not None:
        why = NO_ROOM if budget <= 0 else GATE_CLOSED
    proposal = seq.sampler.constrain(proposal, budget) if seq.sampler.constrained else proposal
    if proposal is not None:  # the model's vocabulary, the cache's end and the context bound it
        fit_proposal(
            proposal, runner.vocab_size, cache.capacity - cache.length, ctx_len - cache.length
        )
    q = build_query(seq.tokens[-1], cache.length, proposal)
    seq.stats.timer.proposed()
    return StepRow(seq, q, by_mode=False, looked=looked, no_draft=why)


def wants_features(row: StepRow) -> bool:
    """Whether the sequence's drafter drafts from the model's hidden states (a draft head)."""
    return not row.by_mode and getattr(row.seq.drafter, "wants_features", False)


def accept_run(
    row: StepRow, logits: torch.Tensor, forward_s: float, features: torch.Tensor | None = None
) -> Run:
    """Walk the verified tree (the longest run the sampler agrees with), commit its KV, let the
    drafter observe the run (and, given the rows' `features`, the hidden state of the row whose
    logits chose the run's last token); a step the mode ran says itself what to emit."""
    seq, q = row.seq, row.query
    sampler, mode, is_stop = seq.sampler, seq.mode, seq.stop_ids.__contains__
    if row.by_mode:
        tokens = mode.accept(seq, q, logits, forward_s)
        if tokens and seq.drafter is not None:
            seq.drafter.observe(seq.key, tokens)
        return tokens, None, 0, 0
    # every row's argmax at once where the walk uses it (a mode draws row by row instead)
    argmax = (
        first_max(logits)
        if ((sampler.argmax_suffices and mode is None) or q.lookahead_rows)
        else None
    )
    if sampler.argmax_suffices and mode is None:
        acc = walk(q.children, argmax.__getitem__, seq.max_tokens - len(seq.output), is_stop)
        for t in acc.tokens:
            sampler.append(t)
    else:
        path: list[int] = []

        def draw(row: int) -> int:
            # one draw per visited node, with the node's own context (penalties, the mode's state)
            t = mode.draw(seq, logits[row], path) if mode is not None else sampler.draw(logits[row])
            sampler.append(t)
            path.append(t)
            return t

        ends = is_stop if mode is None else (lambda t: is_stop(t) or mode.ends_run(t))
        acc = walk(q.children, draw, seq.max_tokens - len(seq.output), ends)
    path_rows = q.path_rows(acc.nodes)
    seq.cache.commit(path_rows)
    seq.stats.timer.committed()
    if seq.drafter is not None:
        seq.drafter.observe(seq.key, acc.tokens, q.lookahead_argmax(argmax))
        if features is not None and acc.tokens and wants_features(row):
            chose = path_rows[len(acc.tokens) - 1]  # the row whose logits chose the bonus token
            seq.drafter.observe_feature(seq.key, features[chose], acc.tokens[-1])
    seq.stats.timer.observed(q.n_draft, len(acc.tokens), forward_s, row.no_draft)
    lp = None
    if seq.params.logprobs is not None:
        lp = token_logprobs(logits, path_rows[: len(acc.tokens)], acc.tokens, seq.params.logprobs)
    return acc.tokens, lp, q.n_draft, len(acc.nodes)
