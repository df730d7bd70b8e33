"""What model-free drafts can find in open chat: the model's own greedy answers to MT-Bench or
ShareGPT prompts (or another bench set's), replayed through candidate draft sources, each scored
by accepted tokens per step (MAT) and by tokens per unit of forward cost on a t(k)/t(1) curve.

    python benchmarks/open_chat_drafts.py --model qwen2.5-coder-1.5b --set mtbench --n 40 \
        --record /tmp/mt.json [--corpus 130000,1000000] [--cost '{"1": 1, "4": 1.21, "8": 1.86}']

First the model answers --n of the set's first turns greedily (MT-Bench and ShareGPT: one task
in every len/n; other sets: the bench's own pick), and
every decode step's top-8 tokens are recorded with the token that step read (--record: written,
or read back if it exists: the answers take minutes, the scoring seconds). Greedy decoding
accepts a draft token exactly when it is the recorded next token, so each source below replays
the answers without the model, requests in order, its memory carried from one to the next:

- recycled: Token Recycling (arXiv 2408.08696): a table of each token's top-8 next tokens as the
  model last predicted them after it (every accepted row's logits are at hand in a verify step),
  drafted as a best-first tree of B nodes, each node weighted by its rank's measured hit rate;
- history: the request's prompt and the answers so far as n-grams, a chain of B tokens, each next
  token the last one that followed the context's last two tokens (else its last one);
- hybrid: paraspec's hybrid drafter (tools/replay.py: its own policy sizes every draft on the
  curve), cold; with one history token drafted on the steps it leaves empty; and with its
  past-output memory first filled with K tokens of ShareGPT answers from the "warm" split
  (--corpus K,...; REST's retrieval datastore, arXiv 2311.08252). And the answers asked
  again: the hybrid's decode steps against the fewest its row budget allows.

The modelled figure is tokens / sum of t(1 + draft rows): the drafts' Python time and the
engine's own work are left out, so it is an upper bound on the wall clock (`paraspec bench`
measures that). --cost defaults to the curve this machine's engine probes at start-up.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics

import torch

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import ALL_TASK_SETS, load_task_set
from paraspec.bench.workload_tasks import mtbench, sharegpt
from paraspec.datasets import sharegpt_split
from paraspec.decoding.drafters.hybrid import HybridDrafter
from paraspec.decoding.memory.output_memory import OutputMemory
from paraspec.decoding.contract.tree import DraftTree
from paraspec.decoding.policy.cost import CostModel
from paraspec.tools.records import Record
from paraspec.tools.replay import replay

TOP = 8  # next tokens recorded per step (Token Recycling's table width)
BUDGETS = (1, 2, 3, 4, 8, 16)


def record(llm: LLM, task_set: str, n: int) -> list[dict]:
    """Each task's prompt ids and, per decode step, [the token it read, its top-8 next tokens]."""
    if task_set in ("mtbench", "sharegpt"):  # one task in every len/n, first turns
        tasks = {"mtbench": mtbench, "sharegpt": sharegpt}[task_set]()
        tasks = tasks[:: max(1, len(tasks) // n)][:n]
    else:  # another bench set: its round-robin pick
        tasks = load_task_set(task_set, n, 0)
    steps: list = []
    verify = llm.runner.verify

    def recorded(caches, queries):
        out = verify(caches, queries)
        for q, logits in zip(queries, out):
            steps.append([q.tokens[0], torch.topk(logits[0].float(), TOP).indices.tolist()])
        return out

    llm.runner.verify = recorded
    answers = []
    for t in tasks:
        ids = t.prompt_ids(llm.tokenizer)
        steps.clear()
        llm.generate(
            ids, SamplingParams(temperature=0, max_tokens=t.max_new_tokens, stop=list(t.stop))
        )
        answers.append({"task": t.task_id, "prompt": ids, "steps": list(steps)})
        print(f"  {t.task_id}: {len(steps)} steps", flush=True)
    llm.runner.verify = verify
    return answers


def output_of(answer: dict) -> list[int]:
    """The greedy answer: the prefill's token, then each step's top-1."""
    return [answer["steps"][0][0]] + [top[0] for _, top in answer["steps"]]


def recycled(
    answers: list[dict], budget: int, rank_hits: list[float], cost: CostModel
) -> tuple[int, int, float]:
    """Token Recycling's tree of `budget` nodes: (tokens, steps, forward cost)."""
    table: dict[int, list[int]] = {}
    tokens = steps = 0
    spent = 0.0
    for a in answers:
        y, n = output_of(a), len(a["steps"])
        j = 0
        while j < n:
            nodes: dict[tuple, int] = {}
            heap: list = []

            def grow(path: tuple, token: int, score: float) -> None:
                for r, nxt in enumerate(table.get(token, ())):
                    heapq.heappush(heap, (-score * rank_hits[r], path + (r,), nxt))

            grow((), y[j], 1.0)
            while heap and len(nodes) < budget:
                score, path, token = heapq.heappop(heap)
                nodes[path] = token
                grow(path, token, -score)
            accepted, path = 0, ()
            while j + accepted + 1 < len(y) and j + accepted < n - 1:
                nxt = next(
                    (
                        path + (r,)
                        for r in range(TOP)
                        if nodes.get(path + (r,)) == y[j + accepted + 1]
                    ),
                    None,
                )
                if nxt is None:
                    break
                path, accepted = nxt, accepted + 1
            for i in range(j, min(j + accepted + 1, n)):  # the verified rows' logits
                table[a["steps"][i][0]] = a["steps"][i][1]
            tokens, steps, spent = tokens + accepted + 1, steps + 1, spent + cost(1 + len(nodes))
            j += accepted + 1
    return tokens, steps, spent


def rank_hit_rates(answers: list[dict]) -> list[float]:
    """How often the table's r-th token after the last one was the next token (r = 0..7)."""
    table: dict[int, list[int]] = {}
    hits, tries = [0] * TOP, [0] * TOP
    for a in answers:
        y = output_of(a)
        for i, (token, top) in enumerate(a["steps"]):
            for r, nxt in enumerate(table.get(token, ())):
                tries[r] += 1
                hits[r] += i + 1 < len(y) and nxt == y[i + 1]
            table[token] = top
    return [max(h / t, 1e-3) if t else 1e-3 for h, t in zip(hits, tries)]


class NGrams:
    """What followed each token and each pair of tokens last, in the text seen so far."""

    def __init__(self) -> None:
        self.follows: dict[tuple, int] = {}

    def learn(self, seq: list[int], start: int) -> None:
        """seq[start:] is new (its n-grams reach back into what came before)."""
        for i in range(max(start, 1), len(seq)):
            self.follows[(seq[i - 1],)] = seq[i]
            if i >= 2:
                self.follows[(seq[i - 2], seq[i - 1])] = seq[i]

    def next(self, before: int, last: int) -> int | None:
        """The pair's last follower, else the last token's."""
        return self.follows.get((before, last), self.follows.get((last,)))


def history(answers: list[dict], budget: int, cost: CostModel) -> tuple[int, int, float]:
    """A chain of `budget` tokens from the n-grams of the prompt and the answers so far:
    (tokens, steps, forward cost); history.first_hits: the share of drafted steps whose first
    token was accepted."""
    grams = NGrams()
    learn = grams.learn

    tokens = steps = drafted = hits = 0
    spent = 0.0
    for a in answers:
        y, prompt = output_of(a), a["prompt"]
        learn(prompt, 1)
        ctx = prompt + y[:1]
        learn(ctx, len(ctx) - 1)
        j, n = 0, len(a["steps"])
        while j < n:
            chain, c = [], list(ctx[-2:])
            for _ in range(budget):
                nxt = grams.next(c[-2], c[-1])
                if nxt is None:
                    break
                chain.append(nxt)
                c.append(nxt)
            accepted = 0
            while (
                accepted < len(chain)
                and j + accepted + 1 < len(y)
                and chain[accepted] == y[j + accepted + 1]
            ):
                accepted += 1
            drafted, hits = drafted + bool(chain), hits + (accepted > 0)
            committed = y[j + 1 : j + accepted + 2]
            ctx += committed
            learn(ctx, len(ctx) - len(committed))
            tokens, steps, spent = tokens + len(committed), steps + 1, spent + cost(1 + len(chain))
            j += accepted + 1
    history.first_hits = hits / max(drafted, 1)
    return tokens, steps, spent


class HistoryWhereEmpty:
    """The hybrid; on a step it drafts nothing, one token from the history n-grams (as history())."""

    name, trie = "hybrid+history", None

    def __init__(self, inner: HybridDrafter):
        self.inner = inner
        self.grams = NGrams()
        self.ctx: list[int] = []
        self.used = self.hits = 0
        self.offered: int | None = None

    def begin(self, request_id, prompt, seed=None, ctx=None, identity=b""):
        self.ctx = list(prompt)
        self.grams.learn(self.ctx, 1)
        self.inner.begin(request_id, prompt, seed, ctx, identity)

    def propose(self, request_id, context, max_nodes, ctx):
        if len(context) > len(self.ctx):
            start = len(self.ctx)
            self.ctx += context[start:]
            self.grams.learn(self.ctx, start)
        proposal = self.inner.propose(request_id, context, max_nodes, ctx)
        self.offered = None
        if not len(proposal.draft):
            nxt = self.grams.next(context[-2], context[-1])
            if nxt is not None:
                proposal.draft = DraftTree()
                proposal.draft.add(nxt)
                self.used, self.offered = self.used + 1, nxt
        return proposal

    def observe(self, request_id, committed, lookahead_argmax=None):
        self.hits += self.offered is not None and committed[0] == self.offered
        self.inner.observe(request_id, committed, lookahead_argmax)

    def end(self, request_id):
        self.inner.end(request_id)


def corpus_answers(llm: LLM, tokens: int) -> list[list[int]]:
    """ShareGPT assistant answers of the "warm" split (never the eval's), tokenized, up to
    `tokens` tokens."""
    out, total = [], 0
    for c in sharegpt_split("warm"):
        for m in c.messages:
            if m["role"] == "assistant" and len(m["content"]) >= 200:
                out.append(llm.tokenizer.encode(m["content"]))
                total += len(out[-1])
        if total >= tokens:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--set", default="mtbench", choices=ALL_TASK_SETS)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--record", required=True, help="JSON of the recorded answers (made if absent)")
    ap.add_argument(
        "--corpus", default="130000,1000000", help="ShareGPT tokens in the hybrid's memory"
    )
    ap.add_argument("--cost", default=None, help="t(k)/t(1) as JSON; default: this engine's probe")
    a = ap.parse_args()
    llm = LLM(a.model)
    if os.path.exists(a.record):
        answers = json.load(open(a.record))
    else:
        answers = record(llm, a.set, a.n)
        json.dump(answers, open(a.record, "w"))
    curve = json.loads(a.cost) if a.cost else llm.runner.forward_cost()
    cost = CostModel({int(k): float(v) for k, v in curve.items()})
    print(
        f"{len(answers)} answers, {sum(len(x['steps']) for x in answers)} decode steps; "
        f"t(k)/t(1): {', '.join(f'{k}:{cost(k):.2f}' for k in (2, 4, 8, 16))}"
    )
    hits = rank_hit_rates(answers)
    print(f"recycled table, hit rate by rank: {' '.join(f'{h:.3f}' for h in hits)}")
    print("source      nodes   MAT    tokens/cost")
    for name, run in (
        ("recycled", lambda b: recycled(answers, b, hits, cost)),
        ("history", lambda b: history(answers, b, cost)),
    ):
        for b in BUDGETS:  # a step whose chain or tree is shorter costs its own rows
            tokens, steps, spent = run(b)
            print(f"{name:10s} {b:4d}   {tokens / steps:.3f}  {tokens / spent:.3f}")
    history(answers, 1, cost)
    print(f"history's first draft token accepted on {history.first_hits:.3f} of its drafted steps")
    eos = sorted(llm.tokenizer.eos_token_ids)
    records = [Record(prompt=x["prompt"], output=output_of(x)) for x in answers]
    sizes = [0] + [int(s) for s in a.corpus.split(",") if s]
    corpus = corpus_answers(llm, max(sizes)) if max(sizes) else []
    both = HistoryWhereEmpty(HybridDrafter(eos_token_ids=eos))
    rep = replay(both, records, 47, cost)
    print(
        f"hybrid, and one history token where it drafts nothing: MAT {rep.tokens / rep.steps:.3f}, "
        f"tokens/cost {rep.tokens / rep.cost:.3f}; that token offered on {both.used} of "
        f"{rep.steps} steps, accepted on {both.hits / max(both.used, 1):.3f} of them"
    )
    # the same answers asked again (greedy: the hybrid replays each from its first step), against
    # the fewest steps its row budget allows (decoding_length 16 + copy_length 32 = 48 rows)
    drafter = HybridDrafter(eos_token_ids=eos)
    replay(drafter, records, 47, cost)
    again = replay(drafter, records, 47, cost)
    fewest = sum(-(-(len(r.output) - 1) // 48) for r in records)
    print(
        f"hybrid, the answers asked again: {again.steps} decode steps (the fewest: {fewest}), "
        f"tokens/cost {again.tokens / again.cost:.3f}"
    )
    for size in sizes:
        memory = OutputMemory(max_tokens=max(2 * size, 1 << 17))
        filled = 0
        for ids in corpus:
            if filled >= size:
                break
            memory.add(ids)
            filled += len(ids)
        rep = replay(HybridDrafter(eos_token_ids=eos, output_memory=memory), records, 47, cost)
        per = statistics.median(t / c for t, c, _ in rep.per_request)
        print(
            f"hybrid, memory of {filled:8d} ShareGPT tokens: MAT {rep.tokens / rep.steps:.3f}, "
            f"draft rows a step {rep.drafted / rep.steps:.2f}, tokens/cost {rep.tokens / rep.cost:.3f} "
            f"(median request {per:.3f})"
        )


if __name__ == "__main__":
    main()
