"""Engine: the request lifecycle around the decode step.

    add_request -> (waiting) -> prefill, first token -> (running) -> decode steps -> finished

One decode step, for all running sequences together:
    propose (drafter: tokens in, draft tree out) -> build queries -> ONE forward (runner) ->
    accept (walk the tree with the sequence's own sampler) -> commit KV of the accepted path ->
    observe (drafter learns the committed tokens) -> emit the run of tokens, check stops.
"""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from .admission import check_prompt, new_sequences
from .decoding.contract.acceptance import walk
from .decoding.policy.cost import CostModel
from .decoding.contract.mode import ModePlugin
from .decoding.contract.proposer import Proposer, StepContext
from .decoding.drafters.registry import DrafterRegistry
from .decoding.contract.stats import GATE_CLOSED, NO_MATCH, NO_ROOM
from .decoding.contract.verify import Query, build_query, fit_proposal
from .errors import ParaspecError
from .decoding.policy.cost import ForwardCost
from .outputs import TokenLogprob, token_logprobs
from .prefix_cache import PrefixCache
from .runner import ModelRunner
from .scheduler import fair_pick, next_prefill
from .sampling.params import SamplingParams
from .sampling.sampler import first_max
from .sequence import SequenceState, SequenceUpdate

if TYPE_CHECKING:       # the engine reaches the model only through the runner
    from .model.tokenizer import Tokenizer

logger = logging.getLogger("paraspec.engine")

MAX_DRAFT_NODES = 64  # hard cap on draft nodes a drafter may add per sequence and step
MAX_QUERY_ROWS = 320  # KV slots reserved for one step's query (drafts + a lookahead window)
DRAFT_GATE_ENV = "PARASPEC_DRAFT_GATE"   # "0": the draft gate off where LLM(draft_gate=) does not say


@dataclass
class StepRow:
    """One running sequence's part of a decode step: its query rows and how they came to be."""

    seq: SequenceState
    query: Query
    by_mode: bool                  # its decode mode (decoding/contract/mode.py) built the rows and accepts them
    looked: bool                   # its drafter was asked (the draft gate may skip the look)
    no_draft: str | None           # why it sent no draft (stats.py), when it sent none
    draft_s: float = 0.0           # the propose's seconds


class Engine:
    def __init__(self, runner: ModelRunner, tokenizer: Tokenizer, max_batch_size: int = 8,
                 default_drafter: Proposer | None = None, prefix_cache: PrefixCache | None = None,
                 draft_gate: bool = True):
        self.runner = runner
        # skip a sequence's propose on steps where looking has not paid (decoding/policy/gate.py); off, the
        # drafter is asked every step (a draft tree verified on every step, the same on every run)
        self.draft_gate = draft_gate
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.default_drafter = default_drafter
        self.waiting: list[SequenceState] = []
        self.prefilling: list[SequenceState] = []        # admitted, their prompts going in chunk by chunk
        self.running: list[SequenceState] = []
        self._prefill_turn = True    # a prefill chunk and a decode step take turns while both have work
        self._ids = itertools.count()
        self._twin_logits: dict[str, torch.Tensor] = {}  # prompt logits kept for n > 1 siblings
        self.drafters = DrafterRegistry(tokenizer.eos_token_ids)   # the trie, arm stats, built drafters
        self.forward_cost = ForwardCost(runner)         # t(k)/t(1): probed, kept true by the steps
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache(0)   # 0 MB: off
        self.steps = 0               # decode steps run

    # ------------------------------------------------------------------------------ requests

    def add_request(self, prompt: list[int], params: SamplingParams, request_id: str | None = None,
                    drafter: Proposer | ModePlugin | None | str = "default",
                    group: str | None = None) -> list[SequenceState]:
        """Queue a request (n sequences). `group` names the client request it is part of (a request
        with several prompts is several engine requests): the scheduler shares the batch by group."""
        ctx, vocab = self.runner.max_seq_len, self.runner.vocab_size
        check_prompt(prompt, ctx, vocab)
        request_id = request_id or f"req-{next(self._ids)}"
        seqs = new_sequences(self.tokenizer, ctx, vocab, prompt, params, request_id,
                             self.default_drafter if drafter == "default" else drafter, group)
        self.waiting.extend(seqs)
        return seqs

    def sequences(self) -> list[SequenceState]:
        """Every unfinished sequence: waiting, prefilling and running."""
        return self.waiting + self.prefilling + self.running

    def abort(self, request_id: str) -> None:
        """Cancel a request: free its KV and drafter state now."""
        try:
            for seq in [s for s in self.sequences() if s.request_id == request_id]:
                self._finish(seq, "abort")
        finally:     # a drafter failing in end() must not keep the request's sequences
            self.drop(request_id)

    def drop(self, request_id: str) -> None:
        """Forget a request's sequences (no drafter calls)."""
        self.waiting = [s for s in self.waiting if s.request_id != request_id]
        self.running = [s for s in self.running if s.request_id != request_id]
        self.prefilling = [s for s in self.prefilling if s.request_id != request_id]
        self._twin_logits.pop(request_id, None)

    def held(self) -> dict[str, int]:
        """What the engine holds for requests (sequences queued, prefilling, running, prompt logits
        kept for n > 1 siblings): all 0 once every request has ended."""
        return {"waiting": len(self.waiting), "prefilling": len(self.prefilling), "running": len(self.running),
                "twin_logits": len(self._twin_logits)}

    @property
    def cost(self) -> CostModel:
        """t(k)/t(1), the same for every drafter of the engine: probed on the first use, then
        refreshed from the engine's own batch-1 steps at equal context (decoding/policy/cost.py)."""
        return self.forward_cost.get()

    def pin_cost(self, model: CostModel | None) -> None:
        """Use this curve from now on, never refreshed (None: probe and refresh again)."""
        self.forward_cost.pin(model)

    def cost_info(self, measure: bool = True) -> dict | None:
        """The curve, its age and evidence (ForwardCost.info: /metrics, `paraspec info`)."""
        return self.forward_cost.info(measure)

    def _context(self, batch_size: int) -> StepContext:
        return StepContext(batch_size, self.cost, self.steps)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.prefilling)

    # ---------------------------------------------------------------------------------- step

    def step(self) -> list[SequenceUpdate]:
        """One unit of work: a prefill chunk or a decode step of the running batch (scheduler.py);
        a sibling sample's prefill is a copy, done at once."""
        seq = self._admit()
        if seq is not None and (logits := self._from_twin(seq)) is not None:
            return self._started(seq, logits)
        if seq is not None:
            self.prefilling.append(seq)
        seq = next_prefill(self.prefilling, bool(self.running), self._prefill_turn)
        self._prefill_turn = seq is None          # a chunk now: a decode step next, if any runs
        if seq is not None:
            return self._prefill_chunk(seq)
        return self._decode() if self.running else []

    def _admit(self) -> SequenceState | None:
        """The next waiting sequence, if the batch has room (fair_pick); a sibling sample waits
        while its twin prefills, to copy its KV rather than prefill again."""
        if not self.waiting or len(self.running) + len(self.prefilling) >= self.max_batch_size:
            return None
        busy = {s.request_id for s in self.prefilling}
        ready = [i for i, s in enumerate(self.waiting) if s.request_id not in busy]
        if not ready:
            return None
        pick = fair_pick([self.waiting[i] for i in ready], self.running + self.prefilling)
        return self.waiting.pop(ready[pick])

    def _prefill_chunk(self, seq: SequenceState) -> list[SequenceUpdate]:
        if seq.cache is None:    # whole leading chunks prefilled before are copied (prefix_cache.py)
            seq.cache = self.runner.new_cache(len(seq.prompt) + seq.max_tokens + MAX_QUERY_ROWS)
            seq.cached_tokens = self.prefix_cache.restore(seq.prompt, seq.cache, self.runner.prefill_chunk)
        logits = self.runner.prefill_next(seq.cache, seq.prompt, self.prefix_cache)
        if logits is None:
            return []                 # more chunks to go
        self.prefilling.remove(seq)
        if seq.params.n > 1 and any(s.request_id == seq.request_id for s in self.waiting):
            self._twin_logits[seq.request_id] = logits
        return self._started(seq, logits)

    def _from_twin(self, seq: SequenceState) -> torch.Tensor | None:
        """Sibling samples (n > 1) share the prompt's KV: copy a prefilled sibling's cache."""
        logits = self._twin_logits.get(seq.request_id)
        twin = next((s for s in self.running if s.request_id == seq.request_id and s.cache is not None
                     and s.cache.length == len(seq.prompt)), None)
        if not any(s.request_id == seq.request_id for s in self.waiting):
            self._twin_logits.pop(seq.request_id, None)      # the last sibling: no one else needs them
        if logits is None or twin is None:
            return None
        seq.cache = self.runner.new_cache(len(seq.prompt) + seq.max_tokens + MAX_QUERY_ROWS)
        seq.cache.copy_from(twin.cache)
        return logits

    def _started(self, seq: SequenceState, logits: torch.Tensor) -> list[SequenceUpdate]:
        try:
            update = self._first_token(seq, logits)
        except Exception as e:   # this sequence's drafter, sampler or detokenizer: it alone fails
            return [self._fail(seq, e)]
        if not seq.finished:     # else EOS or max_tokens on the very first token
            self.running.append(seq)
        return [update]

    def _first_token(self, seq: SequenceState, logits: torch.Tensor) -> SequenceUpdate:
        if seq.drafter is not None:
            t0 = time.perf_counter()
            seq.drafting = True      # (set first: a begin that fails half way is ended too)
            seq.drafter.begin(seq.key, seq.prompt, seq.sampler.seed, self._context(len(self.running) + 1))
            seq.stats.draft_s += time.perf_counter() - t0
        token = seq.mode.draw(seq, logits, []) if seq.mode is not None else seq.sampler.draw(logits)
        seq.sampler.append(token)
        seq.first_token_time = time.perf_counter()
        lp = token_logprobs(logits.unsqueeze(0), [0], [token], seq.params.logprobs)
        return self._emit(seq, [token], lp)

    def _decode(self) -> list[SequenceUpdate]:
        """One decode step of the running batch: each sequence's rows (root, draft tree), ONE
        forward over all of them, then each sequence accepts its run on its own."""
        # batch-aware drafting: parallel decoding pays off at low concurrency (MindIE shrinks drafts)
        ctx = self._context(len(self.running)) if any(s.drafter is not None for s in self.running) else None
        self.steps += 1
        updates: list[SequenceUpdate] = []
        rows: list[StepRow] = []
        for seq in self.running:
            try:
                rows.append(self._step_row(seq, ctx))
            except Exception as e:   # its drafter failed: the sequence ends, the step goes on
                updates.append(self._fail(seq, e))

        # rows of other sequences never change a sequence's logits (row invariance), so the
        # batch without a failed sequence gives the others the bits they would have had
        t0 = time.perf_counter()
        logits_per_seq = self.runner.verify([r.seq.cache for r in rows], [r.query for r in rows]) if rows else []
        forward_s = time.perf_counter() - t0
        if len(rows) == 1 and not rows[0].by_mode:
            self.forward_cost.step(rows[0].seq.key, len(rows[0].query.tokens), rows[0].seq.cache.length, forward_s)
        units = sum(self.cost(len(r.query.tokens)) for r in rows) if ctx is not None else 1.0

        for row, logits in zip(rows, logits_per_seq):
            t0, emitted = time.perf_counter(), len(row.seq.output)
            try:     # a step the mode ran says itself what to emit
                updates.append(self._mode_accept(row, logits, forward_s) if row.by_mode
                               else self._accept(row, logits, forward_s))
            except Exception as e:   # its sampler, drafter or detokenizer failed: it alone ends
                updates.append(self._fail(row.seq, e))
                continue
            if row.seq.drafter is not None and not row.by_mode:
                rows_cost = self.cost(len(row.query.tokens))      # its share of the forward, by the cost curve
                row.seq.gate.update(row.looked, tokens=len(row.seq.output) - emitted,
                                    forward_s=forward_s * rows_cost / units, rows_cost=rows_cost,
                                    propose_s=row.draft_s, other_s=time.perf_counter() - t0)
        self.running = [s for s in self.running if not s.finished]
        return updates

    def _step_row(self, seq: SequenceState, ctx: StepContext | None) -> StepRow:
        """The sequence's rows for this step: its last token (the root) and its draft tree, cut to
        its grammar (structured/) and to what the model can verify; or the rows of its decode mode
        when the mode runs the step."""
        if seq.mode is not None and (q := seq.mode.query(seq, ctx)) is not None:
            return StepRow(seq, q, by_mode=True, looked=False, no_draft=None)
        t0 = time.perf_counter()
        cache, ctx_len = seq.cache, self.runner.max_seq_len
        budget = max(0, min(seq.max_tokens - len(seq.output) - 1, cache.capacity - cache.length - 1,
                            ctx_len - cache.length - 2, self.runner.draft_room(cache, MAX_DRAFT_NODES)))
        proposal, why = None, None
        looked = seq.drafter is not None and budget > 0 and (not self.draft_gate or seq.gate.look())
        if looked:
            proposal = seq.drafter.propose(seq.key, seq.tokens, budget, ctx)
            if len(proposal.draft) > budget:
                proposal.draft = proposal.draft.truncated(budget)
            why = None if len(proposal.draft) else (proposal.reason or NO_MATCH)
        elif seq.drafter is not None:
            why = NO_ROOM if budget <= 0 else GATE_CLOSED
        proposal = seq.sampler.constrain(proposal, budget) if seq.sampler.constrained else proposal
        if proposal is not None:      # the model's vocabulary, the cache's end and the context bound it
            fit_proposal(proposal, self.runner.vocab_size, cache.capacity - cache.length, ctx_len - cache.length)
        q = build_query(seq.tokens[-1], cache.length, proposal)
        return StepRow(seq, q, by_mode=False, looked=looked, no_draft=why, draft_s=time.perf_counter() - t0)

    def _accept(self, row: StepRow, logits: torch.Tensor, forward_s: float) -> SequenceUpdate:
        """Walk the verified tree (the longest run the sampler agrees with), commit its KV, emit."""
        seq, q = row.seq, row.query
        t1 = time.perf_counter()
        sampler, mode, is_stop = seq.sampler, seq.mode, seq.stop_ids.__contains__
        # every row's argmax at once where the walk uses it (a mode draws row by row instead)
        argmax = first_max(logits) if ((sampler.argmax_suffices and mode is None) or q.lookahead_rows) else None
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
        t2 = time.perf_counter()
        accept_s = t2 - t1
        if seq.drafter is not None:
            seq.drafter.observe(seq.key, acc.tokens, q.lookahead_argmax(argmax))
        draft_s = row.draft_s + time.perf_counter() - t2
        seq.stats.observe_step(q.n_draft, len(acc.tokens), draft_s, forward_s + accept_s, row.no_draft)
        lp = None
        if seq.params.logprobs is not None:
            lp = token_logprobs(logits, path_rows[: len(acc.tokens)], acc.tokens, seq.params.logprobs)
        return self._emit(seq, acc.tokens, lp, q.n_draft, len(acc.nodes))

    def _mode_accept(self, row: StepRow, logits: torch.Tensor, forward_s: float) -> SequenceUpdate:
        seq = row.seq
        tokens = seq.mode.accept(seq, row.query, logits, forward_s)
        if tokens and seq.drafter is not None:
            seq.drafter.observe(seq.key, tokens)
        return self._emit(seq, tokens, None)

    def _fail(self, seq: SequenceState, error: Exception) -> SequenceUpdate:
        """End one sequence on its own error: KV freed, drafter state ended where it still can."""
        if not isinstance(error, ParaspecError):
            logger.error("sequence %s failed: %s: %s", seq.key, type(error).__name__, error,
                         exc_info=(type(error), error, error.__traceback__))
        try:
            self._finish(seq, "error")
        except Exception:        # the drafter failing again in end(): drop its state with the sequence
            seq.finish_reason, seq.finish_time, seq.cache = "error", time.perf_counter(), None
        return SequenceUpdate(seq, [], "", None, True, error)

    # ------------------------------------------------------------------------------- helpers

    def _emit(self, seq: SequenceState, tokens: list[int], logprobs: list[TokenLogprob] | None,
              drafted: int = 0, accepted: int = 0) -> SequenceUpdate:
        """Append a run of tokens (SequenceState.append_run: a stop or the length may end it early),
        and free a finished sequence's KV and drafter state."""
        update = seq.append_run(tokens, logprobs, self.runner.max_seq_len, drafted, accepted)
        if seq.finished:
            self._finish(seq, seq.finish_reason)
        return update

    def _finish(self, seq: SequenceState, reason: str) -> None:
        if seq.finish_time is not None:
            return
        seq.finish_reason = reason
        seq.finish_time = time.perf_counter()
        self.forward_cost.forget(seq.key)
        if seq.drafting:
            seq.drafting = False
            t0 = time.perf_counter()
            seq.drafter.end(seq.key)
            seq.stats.draft_s += time.perf_counter() - t0
        seq.cache = None  # frees the KV

    def run_until_done(self, on_update: Callable[[SequenceUpdate], None] | None = None) -> None:
        """Step until every sequence is done; a sequence's error aborts the rest and is raised."""
        while self.has_work():
            for u in self.step():
                if u.error is not None:
                    for request_id in {s.request_id for s in self.sequences()}:
                        self.abort(request_id)
                    raise u.error
                if on_update is not None:
                    on_update(u)

