"""Where a verify forward's time goes as its row count k grows: one forward over k new rows (a
causal draft, logits for all k rows, as a verify step asks) on a 500-token cache, split into
its pieces, per k = 1, 4, 8, 16:

    python benchmarks/verify_breakdown.py [--model default] [--kernels avx512:amx] [--threads 1] [--reps 15]
                                          [--engine 3]

Pieces: the embedding lookup; each GGUF / csrc linear by its weight (wqkv, wo, w_gate_up, w_down,
lm_head; each call includes its activation quantisation and fused RMSNorm); rope_attention
(csrc: RoPE, the cache write, attention); SwiGLU's torch ops (silu, mul); "glue", the rest of
the forward (torch views, chunk, residual adds, the rotary-table lookup, Python). Each piece is
timed around its call, so the timers' own cost lands in the pieces. On one thread (the default)
the clock is the thread's CPU time, which other processes on a shared machine do not stretch;
with --threads 2 it is the wall clock. Cells are medians over --reps forwards. The pieces are
timed around the Python layer loop's calls; the engine's forward runs a GGUF model's layers in
one csrc call instead (gguf_decoder.py), timed first, untouched, on the last line: what it saves
is most of "glue".

--engine N: also decode N grounded bench tasks with the hybrid drafter (greedy) and print the
share of the run spent outside the model's forward (tree and mask building, acceptance, argmax,
drafting, bookkeeping).

--steps SETS (was engine_steps.py): what a decode step's forward costs inside real engine runs, by
its row count, against the curve the engine measured at start-up (ModelRunner.forward_cost) and
drafters size drafts by. Each of --n tasks per set runs twice on one LLM, plain decoding (AR) and
with --plugin (default hybrid), back to back in alternating order, greedy; every runner.verify
call is timed (wall clock). Per row count: steps, median ms, that over AR's median one-row step
(the real t(k)/t(1)) and the curve's t(k) (where the two part, drafts are priced wrong); tokens a
step, and tokens per AR one-row step's time (below 1 the steps of that row count lost time). Also each
run's decode time and the time outside the forward. Quote ratios: the machine's speed drifts.

--probes N (was cost_probe.py): how steady that start-up probe is: run N times in this process,
t(4) / t(8) / t(16) each time (--probe-rounds rounds each). The first probe of a process is the
one an engine uses: run it in several fresh processes too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import types
from collections import defaultdict

import torch

import paraspec.engine as engine_module
from paraspec import LLM, SamplingParams
from paraspec.model import transformer
from paraspec.model.transformer import SeqInput

KS = (1, 4, 8, 16)
CACHED = 500
LINEARS = ("wqkv", "wo", "w_gate_up", "w_down")
HYBRID = {"plugin_type": "hybrid"}


class Timed:
    """A linear whose calls add their time to spent[name]."""

    def __init__(self, inner, name: str, spent: dict, clock):
        self.inner, self.name, self.spent, self.clock = inner, name, spent, clock

    def _time(self, fn, *args, **kwargs):
        t = self.clock()
        y = fn(*args, **kwargs)
        self.spent[self.name] += self.clock() - t
        return y

    def __call__(self, *args, **kwargs):
        return self._time(self.inner, *args, **kwargs)

    def norm_linear(self, *args, **kwargs):
        return self._time(self.inner.norm_linear, *args, **kwargs)


def instrument(model, spent: dict, clock) -> None:
    """Wrap the model's pieces (see the module doc) so that each call adds to spent[piece]. The
    layers then run in the Python loop, whose calls the wrappers time, not in the one csrc call
    the default forward makes (gguf_decoder.py): that one has next to no glue."""
    model.decoder = None
    for layer in model.layers:
        for name in LINEARS:
            setattr(layer, name, Timed(getattr(layer, name), name, spent, clock))
    model.lm_head = Timed(model.lm_head, "lm_head", spent, clock)
    model.embed = Timed(model.embed, "embed", spent, clock)
    rope_attention = Timed(model.kernels.rope_attention, "rope_attention", spent, clock)
    real_kernels = model.kernels
    # name, label, ... as they were
    model.kernels = types.SimpleNamespace(
        **{k: getattr(real_kernels, k) for k in dir(real_kernels) if not k.startswith("__")}
    )
    model.kernels.rope_attention = rope_attention
    real_f = transformer.F
    silu = Timed(real_f.silu, "swiglu", spent, clock)
    transformer.F = types.SimpleNamespace(
        **{k: getattr(real_f, k) for k in dir(real_f) if not k.startswith("__")}
    )
    transformer.F.silu = silu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default")
    p.add_argument(
        "--kernels", default=None, help="a kernel path label, e.g. avx512:amx (default: the best)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument(
        "--activation-passes", default="auto", help="int8 activation passes: auto, 1 or 2"
    )
    p.add_argument(
        "--engine", type=int, default=0, help="grounded tasks to decode with the hybrid drafter"
    )
    p.add_argument(
        "--steps",
        default="",
        help="task sets whose engine steps are timed by row count (e.g. grounded,humaneval)",
    )
    p.add_argument("--n", type=int, default=5, help="with --steps: tasks per set")
    p.add_argument(
        "--plugin", default=json.dumps(HYBRID), help="with --steps: the drafter's plugin_params"
    )
    p.add_argument(
        "--probes", type=int, default=0, help="run the start-up cost probe this many times"
    )
    p.add_argument("--probe-rounds", type=int, default=5, help="with --probes: rounds per probe")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    # drafters: per call
    llm = LLM(a.model, kernels=a.kernels, activation_passes=a.activation_passes)
    model = llm.model
    label = model.kernels.label
    if a.engine:
        engine_share(llm, a.engine, clock)
    for i in range(a.probes):
        llm.runner._cost = None  # measure again, as a new engine would
        c = llm.runner.forward_cost(rounds=a.probe_rounds)
        print(f"probe {i}: t(4) {c[4]:.2f}  t(8) {c[8]:.2f}  t(16) {c[16]:.2f}", flush=True)
    if a.steps:
        engine_steps(llm, a.steps.split(","), a.n, json.loads(a.plugin))
    spent: dict[str, float] = defaultdict(float)
    tokens = torch.randint(
        100, 1000, (CACHED + max(KS),), generator=torch.Generator().manual_seed(0)
    )
    cache = model.new_cache(CACHED + 2 * max(KS))
    model.forward(tokens[:CACHED], torch.arange(CACHED), [SeqInput(cache, CACHED)], prompt=True)
    cache.length = CACHED
    fused = model.decoder is not None
    totals: dict[int, list[float]] = {k: [] for k in KS}
    uninstrumented: dict[int, list[float]] = {k: [] for k in KS}
    parts: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in KS}
    # a warm-up round, reps as the engine runs it, reps timed in pieces
    for rep in range(2 * a.reps + 1):
        if rep == a.reps + 1:
            instrument(model, spent, clock)
        for k in KS:  # the new rows are written past the cache's length, never committed
            spent.clear()
            t = clock()
            model.forward(
                tokens[CACHED : CACHED + k],
                torch.arange(CACHED, CACHED + k),
                [SeqInput(cache, k)],
                logits_rows=torch.arange(k),
            )
            total = clock() - t
            if 0 < rep <= a.reps:
                uninstrumented[k].append(total)
            elif rep:
                totals[k].append(total)
                for name, s in spent.items():
                    parts[k][name].append(s)
                parts[k]["glue"].append(total - sum(spent.values()))
    med = {k: statistics.median(v) * 1e3 for k, v in totals.items()}
    names = list(parts[1])
    print(
        f"{label}, {a.threads} thread(s), {'CPU' if a.threads == 1 else 'wall'} time, ms (median of {a.reps});"
        f" last column: t(k) / t(1)"
    )
    print(f"{'k':>3} " + " ".join(f"{n:>14}" for n in names) + f" {'total':>8} {'ratio':>6}")
    for k in KS:
        cells = " ".join(f"{statistics.median(parts[k][n]) * 1e3:14.2f}" for n in names)
        print(f"{k:>3} {cells} {med[k]:8.2f} {med[k] / med[1]:6.2f}")
    k = max(KS)
    grow = {
        n: (statistics.median(parts[k][n]) - statistics.median(parts[1][n])) * 1e3 for n in names
    }
    print(
        f"k={k} minus k=1 ({med[k] - med[1]:.2f} ms): "
        + ", ".join(
            f"{n} {v:+.2f} ({v / (med[k] - med[1]):.0%})"
            for n, v in sorted(grow.items(), key=lambda x: -x[1])
        )
    )
    plain = {k: statistics.median(v) * 1e3 for k, v in uninstrumented.items() if v}
    if plain:
        print(
            f"the forward as the engine runs it ({'layers in one csrc call' if fused else 'the Python loop'},"
            " no timers), ms: "
            + ", ".join(f"k={k} {v:.2f} ({v / plain[1]:.2f})" for k, v in plain.items())
        )


def engine_share(llm: LLM, n: int, clock) -> None:
    """Decode n grounded tasks (greedy, hybrid drafter) and print the time outside forward()."""
    from paraspec.bench.tasks import load_task_set

    model = llm.model
    inside = [0.0, 0]
    forward = model.forward

    def timed(*args, **kwargs):
        t = clock()
        y = forward(*args, **kwargs)
        inside[0] += clock() - t
        inside[1] += 1
        return y

    model.forward = timed
    tasks = load_task_set("grounded", n)

    def run() -> None:
        for task in tasks:
            params = SamplingParams(temperature=0.0, max_tokens=task.max_new_tokens)
            llm.chat(
                task.messages, params, plugin_params=HYBRID
            ) if task.messages else llm.generate(task.prompt, params, plugin_params=HYBRID)

    run()  # warm-up (and the drafter's statistics)
    inside[:] = [0.0, 0]
    t = clock()
    run()
    total = clock() - t
    model.forward = forward
    print(
        f"engine: {n} grounded tasks, hybrid, greedy: {total:.2f} s, {inside[1]} forwards {inside[0]:.2f} s,"
        f" outside the forward {total - inside[0]:.2f} s ({(total - inside[0]) / total:.1%})"
    )


def engine_steps(llm: LLM, sets: list[str], n: int, plugin: dict) -> None:
    """Time every runner.verify call of AR and drafted runs of the sets' tasks, by row count
    (module doc: --steps); a request's plugin_params override the LLM's drafter."""
    curve = llm.runner.forward_cost()
    log: list[tuple[int, float, int]] = []  # per step: rows, forward seconds, tokens committed
    verify, accept = llm.runner.verify, engine_module.accept_run

    def timed(caches, queries):
        t0 = time.perf_counter()
        out = verify(caches, queries)
        log.append((sum(len(q.tokens) for q in queries), time.perf_counter() - t0, 0))
        return out

    def counted(row, logits, forward_s):
        run = accept(row, logits, forward_s)
        rows, dt, tokens = log[-1]
        log[-1] = (rows, dt, tokens + len(run[0]))
        return run

    llm.runner.verify, engine_module.accept_run = timed, counted
    try:
        _steps_by_rows(llm, sets, n, plugin, curve, log)
    finally:
        llm.runner.verify, engine_module.accept_run = verify, accept


def _steps_by_rows(llm: LLM, sets: list[str], n: int, plugin: dict, curve: dict, log: list) -> None:
    from paraspec.bench.tasks import load_task_set

    for name in sets:
        runs: dict[str, tuple[list[dict], list[tuple[int, float, int]]]] = {
            "ar": ([], []),
            "drafted": ([], []),
        }
        for i, task in enumerate(load_task_set(name, n, 0)):
            # each task both ways, back to back, the order alternating: drift hits both alike
            for kind in ("ar", "drafted") if i % 2 == 0 else ("drafted", "ar"):
                log.clear()
                runs[kind][0].append(_generate(llm, task, None if kind == "ar" else plugin))
                runs[kind][1].extend(log)
        ar, spec = _totals(*runs["ar"]), _totals(*runs["drafted"])
        one_row = statistics.median(dt for k, dt, _ in runs["ar"][1] if k == 1)
        by_rows: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for k, dt, tokens in runs["drafted"][1]:
            by_rows[k].append((dt, tokens))
        print(
            f"\n{name}: AR {json.dumps(ar)}\n{' ' * len(name)}  drafted {json.dumps(spec)}"
            f"  speedup {ar['decode_s'] / spec['decode_s']:.3f}"
        )
        # tokens a step, and tokens per AR one-row step's time: above 1 a row count paid
        print(
            f"{'rows':>5} {'steps':>6} {'ms':>7} {'real t(k)':>10} {'curve t(k)':>11}"
            f" {'tokens/step':>12} {'tokens/t(1)':>12}   (AR's one-row step: {1000 * one_row:.2f} ms)"
        )
        for k in sorted(by_rows):
            v = by_rows[k]
            if len(v) >= 3:
                med = statistics.median(dt for dt, _ in v)
                tokens, spent = sum(t for _, t in v), sum(dt for dt, _ in v)
                print(
                    f"{k:>5} {len(v):>6} {1000 * med:>7.2f} {med / one_row:>10.2f}"
                    f" {curve.get(k, float('nan')):>11.2f} {tokens / len(v):>12.2f}"
                    f" {tokens * one_row / spent:>12.3f}"
                )


def _generate(llm: LLM, task, plugin: dict | None) -> dict:
    ids = task.prompt_ids(llm.tokenizer)
    params = SamplingParams(temperature=0, max_tokens=task.max_new_tokens, stop=list(task.stop))
    return llm.generate([ids], params, plugin_params=plugin)[0].stats


def _totals(stats: list[dict], log: list[tuple[int, float]]) -> dict:
    decode_s = sum(s["decode_s"] for s in stats)
    forward_s = sum(dt for _, dt, _ in log)  # decode steps only (prefill: runner.prefill)
    return {
        "decode_s": round(decode_s, 3),
        "tokens": sum(s["generated_tokens"] for s in stats),
        "steps": sum(s["decode_steps"] for s in stats),
        "draft_s": round(sum(s["draft_s"] for s in stats), 3),
        "outside_forward_s": round(decode_s - forward_s, 3),
    }


if __name__ == "__main__":
    main()
