"""Model-free replay: score a drafter on recorded token streams (llama.cpp `lookup-stats`).

Under greedy decoding a draft token is accepted exactly when it equals the next recorded token,
so a recorded output replays a whole generation without the model: each step the drafter
proposes, the longest matching draft path plus one bonus token is committed, and the drafter
observes it. The prefill's token is committed before the first step without an `observe` call
(the drafter must pick it up from the context).

Records are JSON lines {"prompt": [ids], "output": [ids], "group": name?}, replayed in order; each
group (a bench task set) through ONE new drafter, so the shared output memory carries over between
the group's requests as it would in a server, and starts empty for the next group as in the bench.
`record` writes the greedy outputs of the bench's task sets with the bundled model: what parallel
decoding reproduces token for token, so drafting can be tuned offline against them.

Drafting time is the CPU time of this thread (the drafter is single-threaded Python, so on a
quiet machine it equals wall time). Modelled speedup = plain time / (sum of forward costs +
drafting time), with the forward cost of k query tokens from a cost curve: policy's default,
or the one `paraspec info` measured on a machine (`--cost '{"1": 1, "8": 1.2, "16": 1.5}'`),
and a one-row step of `--step-ms` (drafting time is weighed against it). Over all of a group's
tokens, and as the median of its requests' speedups (what `paraspec bench` reports per set).
It is an estimate; wall-clock numbers come from `paraspec bench`.

`bound` replays an oracle instead of a drafter: each step it drafts the longest run of the
recorded future that occurs earlier in the request's prompt + output (a copy from the best
place, up to --depth tokens, as a chain of the length that pays most under the cost curve). No
drafter that copies from the request's own context can accept more; what it leaves is text that
occurs nowhere before it in the request (a memory of other requests' outputs can still hold it:
the bench's `repeated` set). That oracle also knows the next token, which picks its place; a
drafter finds places by matching the context's last tokens. `--anchor N` bounds such drafters:
copies only from places whose N tokens before equal the context's last N (the oracle still picks
the best place and length), a bound a trie or suffix drafter can approach.

    python -m paraspec.tools.replay make copy out.jsonl --n 40      # needs the bundled tokenizer
    python -m paraspec.tools.replay record bench.jsonl --n 10      # bench tasks, greedy, bundled model
    python -m paraspec.tools.replay run bench.jsonl --plugin '{"plugin_type": "hybrid"}'
    python -m paraspec.tools.replay bound bench.jsonl --cost '{"1": 1, "4": 1.4, "16": 2.9}' [--anchor 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from ..decoding.policy.cost import CostModel
from ..decoding.contract.proposer import Proposer, StepContext
from .records import (
    WORKLOADS,
    Record,
    bundled_tokenizer,
    make_workload,
    read_records,
    record_bench,
    write_records,
)


# A one-row decode step of the bundled SmolLM2-135M Q4_1 on the 2-core CPU (docs/bench): the
# unit drafting's CPU time is weighed against.
STEP_S = 0.007


@dataclass
class ReplayReport:
    requests: int = 0
    steps: int = 0  # decode forwards (the prefill is not a step)
    tokens: int = 0  # tokens committed by decode steps: accepted drafts + bonus
    drafted: int = 0  # draft nodes sent to verification
    accepted: int = 0  # draft nodes accepted
    draft_s: float = 0.0  # CPU time inside propose + observe
    prompt_tokens: int = 0
    begin_s: float = 0.0  # CPU time inside begin (prompt insertion)
    cost: float = 0.0  # sum of forward costs, in units of t(1)
    # (tokens, cost, draft_s)
    per_request: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens committed per step, the bonus token included (1.0 = plain decoding)."""
        return self.tokens / max(self.steps, 1)

    @property
    def draft_us_per_step(self) -> float:
        return 1e6 * self.draft_s / max(self.steps, 1)

    @property
    def begin_ms_per_2k(self) -> float:
        return 1e3 * self.begin_s * 2048 / max(self.prompt_tokens, 1)

    def speedup(self, t1_s: float = STEP_S) -> float:
        """Plain decoding time / modelled time of this run."""
        return self.tokens * t1_s / (self.cost * t1_s + self.draft_s)

    def median_speedup(self, t1_s: float = STEP_S) -> float:
        """The median over requests of their modelled speedups (the bench's per-set figure)."""
        return (
            statistics.median(n * t1_s / (c * t1_s + d) for n, c, d in self.per_request if c)
            if self.per_request
            else 1.0
        )

    def summary(self, t1_s: float = STEP_S) -> dict[str, float]:
        d = {
            k: round(v, 4) if isinstance(v, float) else v
            for k, v in asdict(self).items()
            if k != "per_request"
        }
        d.update(
            tokens_per_step=round(self.tokens_per_step, 3),
            draft_us_per_step=round(self.draft_us_per_step, 1),
            begin_ms_per_2k_tokens=round(self.begin_ms_per_2k, 2),
            modelled_speedup=round(self.speedup(t1_s), 3),
            median_request_speedup=round(self.median_speedup(t1_s), 3),
        )
        return d


def replay(
    drafter: Proposer, records: Iterable[Record], max_nodes: int = 15, cost: CostModel | None = None
) -> ReplayReport:
    """Replay the records through `drafter` (one request each, in order), its drafts priced and
    its steps costed by `cost` (default: policy's default curve)."""
    rep = ReplayReport()
    ctx = StepContext(cost=cost or CostModel())
    clock = time.thread_time  # CPU time: other load on the machine does not inflate it
    for i, rec in enumerate(records):
        if not rec.output:
            continue
        rid = f"replay-{i}"
        t = clock()
        drafter.begin(rid, rec.prompt, None, ctx)
        rep.begin_s += clock() - t
        rep.prompt_tokens += len(rec.prompt)
        rep.requests += 1
        out = rec.output
        context = list(rec.prompt) + out[:1]  # the prefill's token
        pos = 1
        before = (rep.tokens, rep.cost, rep.draft_s)
        while pos < len(out):
            t = clock()
            draft = drafter.propose(rid, context, max_nodes, ctx).draft
            rep.draft_s += clock() - t
            n_acc = draft.follow(out[pos:-1])  # greedy: a draft token is accepted iff it is next
            committed = out[pos : pos + n_acc + 1]
            t = clock()
            drafter.observe(rid, committed)
            rep.draft_s += clock() - t
            context += committed
            pos += len(committed)
            rep.steps += 1
            rep.tokens += len(committed)
            rep.drafted += len(draft)
            rep.accepted += n_acc
            rep.cost += ctx.cost(1 + len(draft))
        drafter.end(rid)
        rep.per_request.append(
            (rep.tokens - before[0], rep.cost - before[1], rep.draft_s - before[2])
        )
    return rep


def copy_bound(
    records: Iterable[Record], cost: CostModel | None = None, depth: int = 16, anchor: int = 0
) -> ReplayReport:
    """replay() with an oracle for a drafter (see the module's docstring): the most any drafter
    that copies from the request's prompt and output could accept, and its modelled speedup.
    anchor > 0: only from places whose `anchor` tokens before equal the context's last ones (a
    drafter finds places by matching its context; the oracle still picks the best of them)."""
    cost = cost or CostModel()
    rep = ReplayReport()
    for rec in records:
        if not rec.output:
            continue
        text = list(rec.prompt) + list(rec.output)
        end = len(text) - 1  # the last token is never drafted (replay())
        places: dict[int, list[int]] = {}  # token -> its earlier positions
        for j, t in enumerate(text[: len(rec.prompt) + 1]):
            places.setdefault(t, []).append(j)
        cur, tokens, spent, steps = len(rec.prompt) + 1, 0, 0.0, 0
        while cur < len(text):
            run = 0  # the longest earlier copy of text[cur:]
            last = text[cur - anchor : cur]  # what a copy's place must follow (anchor > 0)
            for j in places.get(text[cur], ()):
                if anchor and (j < anchor or text[j - anchor : j] != last):
                    continue
                n = 0
                while n < depth and cur + n < end and text[j + n] == text[cur + n]:
                    n += 1
                run = max(run, n)
            d = max(range(run + 1), key=lambda k: (k + 1) / cost(k + 1))  # the chain that pays most
            for q in range(cur, min(cur + d + 1, len(text))):
                places.setdefault(text[q], []).append(q)
            tokens, spent, steps = (
                tokens + min(d + 1, len(text) - cur),
                spent + cost(d + 1),
                steps + 1,
            )
            cur += d + 1
        rep.requests += 1
        rep.prompt_tokens += len(rec.prompt)
        rep.steps += steps
        rep.tokens += tokens
        rep.cost += spent
        rep.per_request.append((tokens, spent, 0.0))
    return rep


def replay_groups(
    plugin: dict | str,
    records: Sequence[Record],
    eos: Sequence[int],
    cost: CostModel | None = None,
    max_nodes: int = 64,
) -> dict[str, ReplayReport]:
    """replay() per group, each through a new drafter (empty memory) for `plugin` (plugin_params)."""
    from ..config import parse_plugin_params
    from ..decoding.drafters.registry import DrafterRegistry

    plugin_config = parse_plugin_params(plugin)
    out = {}
    for group in dict.fromkeys(r.group for r in records):
        drafter = DrafterRegistry(eos).private(plugin_config)
        out[group] = replay(drafter, [r for r in records if r.group == group], max_nodes, cost)
    return out


def _tokens(value: str) -> int:
    """A token count (0 or more), for argparse: its one-line error otherwise."""
    if not value.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a token count; give 0 or a positive whole number"
        )
    return int(value)


def main(argv: Sequence[str] | None = None) -> None:
    from ..decoding.drafters.memory_decoding import MemoryDecodingParams, MemoryDrafter

    ap = argparse.ArgumentParser(
        prog="python -m paraspec.tools.replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make", help="write a synthetic workload from stdlib sources")
    mk.add_argument("kind", choices=WORKLOADS)
    mk.add_argument("out")
    mk.add_argument("--n", type=int, default=40)
    mk.add_argument("--seed", type=int, default=0)
    rec = sub.add_parser("record", help="write the bench tasks' greedy outputs (bundled model)")
    rec.add_argument("out")
    rec.add_argument("--tasks", default="humaneval,grounded,chat,repeated")
    rec.add_argument("--n", type=int, default=10)
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--max-new-tokens", type=int, default=None)
    run = sub.add_parser("run", help="replay records through memory_decoding (or --plugin)")
    run.add_argument("records", nargs="+")
    run.add_argument(
        "--plugin", default=None, help="plugin_params JSON: replay this drafter per group"
    )
    run.add_argument("--mode", choices=["tree", "chain"], default="tree")
    run.add_argument("--decoding-length", type=int, default=16)
    run.add_argument("--dynamic", action="store_true")
    run.add_argument(
        "--budget",
        type=int,
        default=None,
        help="max draft nodes a step (default decoding_length - 1)",
    )
    run.add_argument(
        "--eos", type=int, nargs="*", default=[0, 2], help="stop token ids (default: SmolLM2's)"
    )
    bound = sub.add_parser(
        "bound", help="the oracle copy drafter's acceptance and speedup per group"
    )
    bound.add_argument("records", nargs="+")
    bound.add_argument(
        "--depth", type=int, default=16, help="most tokens copied a step (default 16)"
    )
    bound.add_argument(
        "--anchor",
        type=_tokens,
        default=0,
        help="copy only from places whose N tokens before "
        "equal the context's last N (default 0: from any place)",
    )
    for p in (run, bound):
        p.add_argument(
            "--cost",
            default=None,
            help="forward cost curve t(k)/t(1) as JSON {k: cost} "
            "(default: policy's), told to the drafter and used for the speedup",
        )
        p.add_argument(
            "--step-ms",
            type=float,
            default=1e3 * STEP_S,
            help=f"a one-row step's time, drafting is weighed against it (default {1e3 * STEP_S:g})",
        )
    args = ap.parse_args(argv)
    if args.cmd == "make":
        encode, eos = bundled_tokenizer()
        write_records(args.out, make_workload(args.kind, args.n, encode, args.seed, eos))
        return
    if args.cmd == "record":
        write_records(
            args.out, record_bench(args.tasks.split(","), args.n, args.seed, args.max_new_tokens)
        )
        return
    cost = (
        CostModel({int(k): float(v) for k, v in json.loads(args.cost).items()})
        if args.cost
        else None
    )
    t1_s = args.step_ms / 1e3
    if args.cmd == "bound":
        for path in args.records:
            records = read_records(path)
            for group in dict.fromkeys(r.group for r in records):
                rep = copy_bound(
                    [r for r in records if r.group == group], cost, args.depth, args.anchor
                )
                print(
                    json.dumps(
                        {
                            "records": path,
                            "group": group,
                            "depth": args.depth,
                            "anchor": args.anchor,
                            **rep.summary(t1_s),
                        }
                    )
                )
        return
    if args.plugin:
        for path in args.records:
            for group, rep in replay_groups(
                args.plugin, read_records(path), args.eos, cost
            ).items():
                print(json.dumps({"records": path, "group": group, **rep.summary(t1_s)}))
        return
    params = MemoryDecodingParams(
        decoding_length=args.decoding_length, dynamic_algo=args.dynamic, mode=args.mode
    )
    for path in args.records:
        drafter = MemoryDrafter(params, eos_token_ids=args.eos)
        rep = replay(drafter, read_records(path), args.budget or params.max_draft, cost)
        print(json.dumps({"records": path, "mode": args.mode, **rep.summary(t1_s)}))


if __name__ == "__main__":
    main()
