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
"""
from __future__ import annotations

import argparse
import statistics
import time
import types
from collections import defaultdict

import torch

from paraspec import LLM, SamplingParams
from paraspec.model import transformer
from paraspec.model.transformer import SeqInput

KS = (1, 4, 8, 16)
CACHED = 500
LINEARS = ("wqkv", "wo", "w_gate_up", "w_down")


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
    model.kernels = types.SimpleNamespace(rope_attention=rope_attention)   # all forward() reads of it
    real_f = transformer.F
    silu = Timed(real_f.silu, "swiglu", spent, clock)
    transformer.F = types.SimpleNamespace(**{k: getattr(real_f, k) for k in dir(real_f) if not k.startswith("__")})
    transformer.F.silu = silu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--kernels", default=None, help="a kernel path label, e.g. avx512:amx (default: the best)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--activation-passes", default="auto", help="int8 activation passes: auto, 1 or 2")
    p.add_argument("--engine", type=int, default=0, help="grounded tasks to decode with the hybrid drafter")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    llm = LLM(a.model, kernels=a.kernels, plugin_params={"plugin_type": "hybrid"} if a.engine else None,
              activation_passes=a.activation_passes)
    model = llm.model
    label = model.kernels.label
    if a.engine:
        engine_share(llm, a.engine, clock)
    spent: dict[str, float] = defaultdict(float)
    tokens = torch.randint(100, 1000, (CACHED + max(KS),), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(CACHED + 2 * max(KS))
    model.forward(tokens[:CACHED], torch.arange(CACHED), [SeqInput(cache, CACHED)], prompt=True)
    cache.length = CACHED
    fused = model.decoder is not None
    totals: dict[int, list[float]] = {k: [] for k in KS}
    uninstrumented: dict[int, list[float]] = {k: [] for k in KS}
    parts: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in KS}
    for rep in range(2 * a.reps + 1):   # a warm-up round, reps as the engine runs it, reps timed in pieces
        if rep == a.reps + 1:
            instrument(model, spent, clock)
        for k in KS:   # the new rows are written past the cache's length, never committed
            spent.clear()
            t = clock()
            model.forward(tokens[CACHED:CACHED + k], torch.arange(CACHED, CACHED + k), [SeqInput(cache, k)],
                          logits_rows=torch.arange(k))
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
    print(f"{label}, {a.threads} thread(s), {'CPU' if a.threads == 1 else 'wall'} time, ms (median of {a.reps});"
          f" last column: t(k) / t(1)")
    print(f"{'k':>3} " + " ".join(f"{n:>14}" for n in names) + f" {'total':>8} {'ratio':>6}")
    for k in KS:
        cells = " ".join(f"{statistics.median(parts[k][n]) * 1e3:14.2f}" for n in names)
        print(f"{k:>3} {cells} {med[k]:8.2f} {med[k] / med[1]:6.2f}")
    k = max(KS)
    grow = {n: (statistics.median(parts[k][n]) - statistics.median(parts[1][n])) * 1e3 for n in names}
    print(f"k={k} minus k=1 ({med[k] - med[1]:.2f} ms): " +
          ", ".join(f"{n} {v:+.2f} ({v / (med[k] - med[1]):.0%})" for n, v in sorted(grow.items(), key=lambda x: -x[1])))
    plain = {k: statistics.median(v) * 1e3 for k, v in uninstrumented.items() if v}
    if plain:
        print(f"the forward as the engine runs it ({'layers in one csrc call' if fused else 'the Python loop'},"
              " no timers), ms: " + ", ".join(f"k={k} {v:.2f} ({v / plain[1]:.2f})" for k, v in plain.items()))


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
            llm.chat(task.messages, params) if task.messages else llm.generate(task.prompt, params)
    run()   # warm-up (and the drafter's statistics)
    inside[:] = [0.0, 0]
    t = clock()
    run()
    total = clock() - t
    model.forward = forward
    print(f"engine: {n} grounded tasks, hybrid, greedy: {total:.2f} s, {inside[1]} forwards {inside[0]:.2f} s,"
          f" outside the forward {total - inside[0]:.2f} s ({(total - inside[0]) / total:.1%})")


if __name__ == "__main__":
    main()
