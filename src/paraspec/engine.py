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
from typing import TYPE_CHECKING, Callable

import torch

from .admission import check_prompt, new_sequences
from .decode_step import StepRow, accept_run, step_row, wants_features
from .decoding.contract.mode import ModePlugin
from .decoding.contract.proposer import Proposer, StepContext
from .decoding.contract.stats import timed
from .decoding.drafters.registry import DrafterRegistry
from .decoding.policy.cost import CostModel, ForwardCost
from .errors import ParaspecError
from .outputs import TokenLogprob, token_logprobs
from .prefix_cache import PrefixCache
from .runner import ModelRunner
from .scheduler import fair_pick, next_prefill
from .sampling.params import SamplingParams
from .sequence import SequenceState, SequenceUpdate

if TYPE_CHECKING:  # the engine reaches the model only through the runner
    from .model.tokenizer import Tokenizer

logger = logging.getLogger("paraspec.engine")

MAX_QUERY_ROWS = 320  # KV slots reserved for one step's query (drafts + a lookahead window)
DRAFT_GATE_ENV = (
    "PARASPEC_DRAFT_GATE"  # "0": the draft gate off where LLM(draft_gate=) does not say
)


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: Tokenizer,
        max_batch_size: int = 8,
        default_drafter: Proposer | None = None,
        prefix_cache: PrefixCache | None = None,
        draft_gate: bool = True,
        model_name: str = "",
    ):
        self.runner = runner
        self.model_name = model_name  # where a draft head "auto" is looked for
        # skip a sequence's propose on steps where looking has not paid (decoding/policy/gate.py); off, the
        # drafter is asked every step (a draft tree verified on every step, the same on every run)
        self.draft_gate = draft_gate
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.default_drafter = default_drafter
        self.waiting: list[SequenceState] = []
        self.prefilling: list[SequenceState] = []  # admitted, their prompts going in chunk by chunk
        self.running: list[SequenceState] = []
        self._prefill_turn = (
            True  # a prefill chunk and a decode step take turns while both have work
        )
        self._ids = itertools.count()
        self._twin_logits: dict[str, torch.Tensor] = {}  # prompt logits kept for n > 1 siblings
        # the trie, arm stats, built drafters
        self.drafters = DrafterRegistry(tokenizer.eos_token_ids, model=self._head_model)
        self.forward_cost = ForwardCost(runner)  # t(k)/t(1): probed, kept true by the steps
        # 0 MB: off
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache(0)
        self.steps = 0  # decode steps run

    def _head_model(self):
        """The model as a draft head sees it (decoding/drafters/draft_head.py)."""
        from .draft_heads import head_model

        return head_model(self.runner.model, self.model_name)

    # ------------------------------------------------------------------------------ requests

    def add_request(
        self,
        prompt: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        drafter: Proposer | ModePlugin | None | str = "default",
        group: str | None = None,
    ) -> list[SequenceState]:
        """Queue a request (n sequences). `group` names the client request it is part of (a request
        with several prompts is several engine requests): the scheduler shares the batch by group."""
        ctx, vocab = self.runner.max_seq_len, self.runner.vocab_size
        check_prompt(prompt, ctx, vocab)
        request_id = request_id or f"req-{next(self._ids)}"
        seqs = new_sequences(
            self.tokenizer,
            ctx,
            vocab,
            prompt,
            params,
            request_id,
            self.default_drafter if drafter == "default" else drafter,
            group,
        )
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
        finally:  # a drafter failing in end() must not keep the request's sequences
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
        return {
            "waiting": len(self.waiting),
            "prefilling": len(self.prefilling),
            "running": len(self.running),
            "twin_logits": len(self._twin_logits),
        }

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
        self._prefill_turn = seq is None  # a chunk now: a decode step next, if any runs
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
        if seq.cache is None:  # whole leading chunks prefilled before are copied (prefix_cache.py)
            seq.cache = self.runner.new_cache(len(seq.prompt) + seq.max_tokens + MAX_QUERY_ROWS)
            seq.cached_tokens = self.prefix_cache.restore(
                seq.prompt, seq.cache, self.runner.prefill_chunk
            )
        # a draft head drafts the first decode step from the prompt's last row
        want = getattr(seq.drafter, "wants_features", False)
        out = self.runner.prefill_next(seq.cache, seq.prompt, self.prefix_cache, want)
        if out is None:
            return []  # more chunks to go
        logits, feature = out if want else (out, None)
        self.prefilling.remove(seq)
        if seq.params.n > 1 and any(s.request_id == seq.request_id for s in self.waiting):
            self._twin_logits[seq.request_id] = logits
        return self._started(seq, logits, feature)

    def _from_twin(self, seq: SequenceState) -> torch.Tensor | None:
        """Sibling samples (n > 1) share the prompt's KV: copy a prefilled sibling's cache."""
        logits = self._twin_logits.get(seq.request_id)
        twin = next(
            (
                s
                for s in self.running
                if s.request_id == seq.request_id
                and s.cache is not None
                and s.cache.length == len(seq.prompt)
            ),
            None,
        )
        if not any(s.request_id == seq.request_id for s in self.waiting):
            self._twin_logits.pop(seq.request_id, None)  # the last sibling: no one else needs them
        if logits is None or twin is None:
            return None
        seq.cache = self.runner.new_cache(len(seq.prompt) + seq.max_tokens + MAX_QUERY_ROWS)
        seq.cache.copy_from(twin.cache)
        return logits

    def _started(
        self, seq: SequenceState, logits: torch.Tensor, feature: torch.Tensor | None = None
    ) -> list[SequenceUpdate]:
        try:
            update = self._first_token(seq, logits, feature)
        except Exception as e:  # this sequence's drafter, sampler or detokenizer: it alone fails
            return [self._fail(seq, e)]
        if not seq.finished:  # else EOS or max_tokens on the very first token
            self.running.append(seq)
        return [update]

    def _first_token(
        self, seq: SequenceState, logits: torch.Tensor, feature: torch.Tensor | None
    ) -> SequenceUpdate:
        if seq.drafter is not None:
            seq.drafting = True  # (set first: a begin that fails half way is ended too)
            # its context built inside the timed call: the cost curve's first probe runs there
            seq.stats.timer.draft(
                lambda: seq.drafter.begin(
                    seq.key,
                    seq.prompt,
                    seq.sampler.seed,
                    self._context(len(self.running) + 1),
                    seq.answer_identity,
                )
            )
        token = seq.mode.draw(seq, logits, []) if seq.mode is not None else seq.sampler.draw(logits)
        seq.sampler.append(token)
        if feature is not None:
            seq.drafter.observe_feature(seq.key, feature, token)
        seq.stats.timer.first_token()
        lp = token_logprobs(logits.unsqueeze(0), [0], [token], seq.params.logprobs)
        return self._emit(seq, [token], lp)

    def _decode(self) -> list[SequenceUpdate]:
        """One decode step of the running batch: each sequence's rows (root, draft tree), ONE
        forward over all of them, then each sequence accepts its run on its own (decode_step.py)."""
        # batch-aware drafting: parallel decoding pays off at low concurrency (MindIE shrinks drafts)
        drafting = any(s.drafter is not None for s in self.running)
        ctx = self._context(len(self.running)) if drafting else None
        self.steps += 1
        updates: list[SequenceUpdate] = []
        rows: list[StepRow] = []
        for seq in self.running:
            try:
                rows.append(step_row(seq, ctx, self.runner, self.draft_gate))
            except Exception as e:  # its drafter failed: the sequence ends, the step goes on
                updates.append(self._fail(seq, e))
        # rows of other sequences never change a sequence's logits (row invariance), so the
        # batch without a failed sequence gives the others the bits they would have had
        caches, queries = [r.seq.cache for r in rows], [r.query for r in rows]
        features_per_seq: list = [None] * len(rows)
        if any(wants_features(r) for r in rows):  # a draft head drafts from the hidden states
            (logits_per_seq, features_per_seq), forward_s = timed(
                self.runner.verify_features, caches, queries
            )
        else:
            logits_per_seq, forward_s = (
                timed(self.runner.verify, caches, queries) if rows else ([], 0.0)
            )
        if len(rows) == 1 and not (row := rows[0]).by_mode:
            self.forward_cost.step(
                row.seq.key, len(row.query.tokens), row.seq.cache.length, forward_s
            )
        units = sum(self.cost(len(r.query.tokens)) for r in rows) if ctx is not None else 1.0
        for row, logits, features in zip(rows, logits_per_seq, features_per_seq):
            seq, timer, emitted = row.seq, row.seq.stats.timer, len(row.seq.output)
            timer.start()
            try:
                updates.append(self._emit(seq, *accept_run(row, logits, forward_s, features)))
            except Exception as e:  # its sampler, drafter or detokenizer failed: it alone ends
                updates.append(self._fail(seq, e))
                continue
            if seq.drafter is not None and not row.by_mode:
                # its share of the forward, by the curve
                rows_cost = self.cost(len(row.query.tokens))
                seq.gate.update(
                    row.looked,
                    tokens=len(seq.output) - emitted,
                    forward_s=forward_s * rows_cost / units,
                    rows_cost=rows_cost,
                    propose_s=timer.propose_s,
                    other_s=timer.elapsed(),
                )
        self.running = [s for s in self.running if not s.finished]
        return updates

    def _fail(self, seq: SequenceState, error: Exception) -> SequenceUpdate:
        """End one sequence on its own error: KV freed, drafter state ended where it still can."""
        if not isinstance(error, ParaspecError):
            logger.error(
                "sequence %s failed: %s: %s",
                seq.key,
                type(error).__name__,
                error,
                exc_info=(type(error), error, error.__traceback__),
            )
        try:
            self._finish(seq, "error")
        except Exception:  # the drafter failing again in end(): drop its state with the sequence
            seq.finish_reason, seq.cache = "error", None
            seq.stats.timer.finish()
        return SequenceUpdate(seq, [], "", None, True, error)

    # ------------------------------------------------------------------------------- helpers

    def _emit(
        self,
        seq: SequenceState,
        tokens: list[int],
        logprobs: list[TokenLogprob] | None,
        drafted: int = 0,
        accepted: int = 0,
    ) -> SequenceUpdate:
        """Append a run of tokens (SequenceState.append_run: a stop or the length may end it early),
        and free a finished sequence's KV and drafter state."""
        update = seq.append_run(tokens, logprobs, self.runner.max_seq_len, drafted, accepted)
        if seq.finished:
            self._finish(seq, seq.finish_reason)
        return update

    def _finish(self, seq: SequenceState, reason: str) -> None:
        timer = seq.stats.timer
        if timer.finish_time is not None:
            return
        seq.finish_reason = reason
        timer.finish()
        self.forward_cost.forget(seq.key)
        if seq.drafting:
            seq.drafting = False
            timer.draft(seq.drafter.end, seq.key)
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
