"""W8A8 kernel choice: ms per decoder-stack of linears (30 distinct layers of SmolLM2-135M shapes)
and per LM head, for M rows per forward, every candidate side by side.

    python benchmarks/int8_kernels.py [--reps 15] [--threads 2]
    python benchmarks/int8_kernels.py --model     # perplexity / greedy / tokens/s on the bundled model

Each candidate is timed through the object the forward would call (fp32 activations in, as
transformer.py passes them), so per-call Python/dispatch overhead is included. Candidates are
interleaved rep by rep, so a noisy neighbour on a shared machine hits all of them alike; cells
are "median/min" over reps (the min is the better estimate when other jobs share the cores; the
load average is printed). "row-inv": a row's output is bit-identical alone and among 16 rows.

Not in the table: torch.ops.onednn.qlinear_pointwise (int8 x int8, per-tensor x scale) took
~12 ms for one 960x576 call here (a reference path on this CPU), and torchao 0.18's PyPI wheel
has no CPU int8 kernels (its CPU W8A8 is torch._int_mm plus Python ops, exact only with VNNI, see quant.int_dot).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from paraspec.model import kernels
from paraspec.model.quant import Int8Linear, quantize_weight
from paraspec.model.transformer import Linear

DIM, HIDDEN, QKV, VOCAB, LAYERS = 576, 1536, 960, 49152, 30
SHAPES = [(QKV, DIM), (DIM, DIM), (2 * HIDDEN, DIM), (DIM, HIDDEN)]  # (N, K): qkv, o, gate_up, down
ROWS = [1, 2, 4, 8, 16, 32, 128]  # 128: prefill


class FbgemmRowwise:
    """fbgemm packed int8 weights with per-row activation scales: pre-divide each row by its
    scale, let fbgemm quantise with scale 1 / zero point 128, rescale the fp32 output."""

    def __init__(self, w: torch.Tensor):
        q, s = quantize_weight(w)
        qw = torch._make_per_channel_quantized_tensor(q, s.double(), torch.zeros(len(s), dtype=torch.long), 0)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        amax = x.abs().amax(1, keepdim=True)
        inv = torch.where(amax > 0, amax.reciprocal() * 127.0, 0.0)  # fbgemm rounds x * inv
        y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(x * inv, 1.0, 128, self.packed)
        return y * (amax * (1 / 127.0))


class FbgemmDynamic:
    """torch.ao dynamic quantisation (one activation scale per tensor): NOT row-invariant."""

    def __init__(self, w: torch.Tensor):
        self.packed = FbgemmRowwise(w).packed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, False)


def candidates() -> dict[str, Callable[[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]]:
    """name -> maker(fp32 weight [N, K]) -> linear(x [M, K] fp32)."""
    c = {"bf16 Linear": lambda w: Linear(w.bfloat16())}
    for k in kernels.runnable():        # every compiled W8A8 inner loop this CPU runs, then the torch path
        name = k.label if k.module is not None else "int_dot"
        c[f"w8a8 {name} +residual"] = lambda w, k=k: Int8Linear.from_float(w, kernels=k)
        c[f"w8a8 {name} 1 pass"] = lambda w, k=k: Int8Linear.from_float(w, kernels=k, residual=False)
    c["w8a8 fbgemm per-row"] = FbgemmRowwise
    c["fbgemm dynamic (per-tensor)"] = FbgemmDynamic
    return c


def row_invariant(f, k: int) -> bool:
    x = torch.randn(16, k) * torch.logspace(-2, 2, 16)[:, None]
    return all(torch.equal(f(x)[i], f(x[i:i + 1])[0]) for i in (0, 7, 15))


# ------------------------------------------------------------------ end to end (--model)

def to_w8a8(model, residual: bool = True) -> None:
    """Swap every Linear of a transformer.Transformer (built from fp32 weights) for Int8Linear."""
    for layer in model.layers:
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            lin = getattr(layer, name)
            setattr(layer, name, Int8Linear.from_float(lin.weight, lin.bias, residual=residual))
    model.lm_head = Int8Linear.from_float(model.lm_head.weight, residual=residual)


def quality_gate(models: dict, ids: torch.Tensor, forward, chunk: int = 512, n_chunks: int = 8) -> None:
    """Perplexity and teacher-forced top-1 agreement on n_chunks x chunk tokens; greedy
    64-token continuations of 16 prompts taken after them. models["bf16"] is the reference."""
    print(f"  perplexity on {n_chunks} x {chunk} tokens of pydoc topics:")
    top1, ppl = {}, {}
    for name, model in models.items():
        nll, argmax = [], []
        for c in range(n_chunks):
            seq = ids[c * chunk:(c + 1) * chunk]
            logits = forward(name, model.new_cache(chunk), seq)
            nll.append(torch.nn.functional.cross_entropy(logits[:-1], seq[1:], reduction="none"))
            argmax.append(logits[:-1].argmax(-1))
        top1[name] = torch.cat(argmax)
        ppl[name] = torch.cat(nll).mean().exp().item()
        agree = (top1["bf16"] == top1[name]).float().mean().item()
        print(f"  {name:12s} ppl {ppl[name]:.3f} ({ppl[name] / ppl['bf16'] - 1:+.2%} vs bf16), "
              f"teacher-forced top-1 agreement with bf16 {agree:.4f}")

    prompts = [ids[n_chunks * chunk + 97 * i:n_chunks * chunk + 97 * i + 32] for i in range(16)]
    outs = {name: [] for name in models}
    for name, model in models.items():
        for p in prompts:
            cache = model.new_cache(128)
            nxt, gen = forward(name, cache, p)[-1].argmax(), []
            for _ in range(64):
                gen.append(int(nxt))
                nxt = forward(name, cache, nxt.view(1))[-1].argmax()
            outs[name].append(gen)
    print("  greedy 64-token continuations of 16 prompts vs bf16 (identical; mean common prefix):")
    for name in list(models)[1:]:
        same = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), 64)
                for x, y in zip(outs["bf16"], outs[name])]
        print(f"  {name:12s} {sum(s == 64 for s in same):2d}/16; {sum(same) / len(same):4.1f} tokens {same}")


def model_gate(reps: int, quality: bool = True) -> None:
    """The issue's gates on the bundled model: perplexity (vs bf16, real text), greedy agreement
    over 64-token continuations, AR decode tokens/s and t(8)/t(1) per forward."""
    import pydoc_data.topics

    from paraspec.model.loader import load_model
    from paraspec.model.tokenizer import Tokenizer
    from paraspec.model.transformer import SeqInput, Transformer

    loaded = load_model(None, torch.float32)
    tok = Tokenizer.from_source(loaded.tokenizer_source)
    bf16 = {k: v.bfloat16() if v.dim() == 2 else v for k, v in loaded.weights.items()}
    models = {"bf16": Transformer(loaded.args, bf16, torch.bfloat16),
              "fp32": Transformer(loaded.args, loaded.weights, torch.float32)}
    # from the fp32 (dequantised GGUF) weights, as LLM(quantization="w8a8") builds it
    models["w8a8"] = Transformer(loaded.args, loaded.weights, torch.bfloat16, quantization="w8a8")
    models["w8a8 1-pass"] = Transformer(loaded.args, loaded.weights, torch.float32)
    to_w8a8(models["w8a8 1-pass"], residual=False)
    text = "\n\n".join(pydoc_data.topics.topics.values())  # Python's reference prose: real English
    ids = torch.tensor(tok.encode(text))

    def forward(name: str, cache, new: torch.Tensor, commit: bool = True) -> torch.Tensor:
        pos = torch.arange(cache.length, cache.length + len(new))
        logits = models[name].forward(new, pos, [SeqInput(cache, len(new))])
        if commit:
            cache.commit(range(len(new)))
        return logits

    print(f"\nbundled model {loaded.name}")
    if quality:
        quality_gate(models, ids, forward)
    del models["fp32"]  # 3x slower than bf16: a quality reference only

    # speed: one AR step (1 new token) and an 8-token chain at the same context, interleaved
    times = {(n, q): [] for n in models for q in (1, 8)}
    caches = {n: m.new_cache(256) for n, m in models.items()}
    for n in models:
        forward(n, caches[n], ids[:100])
    for _ in range(reps):
        for n in models:
            for q in (1, 8):
                t0 = time.perf_counter()
                forward(n, caches[n], ids[100:100 + q], commit=False)
                times[n, q].append((time.perf_counter() - t0) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"  forward ms, median/min of {reps}:")
    for n in models:
        print(f"  {n:12s} 1 row {med[n, 1]:5.2f}/{min(times[n, 1]):5.2f}, 8 rows {med[n, 8]:5.2f}/"
              f"{min(times[n, 8]):5.2f}: AR {1e3 / med[n, 1]:5.1f} tok/s = {med['bf16', 1] / med[n, 1]:.2f}x bf16; "
              f"t8/t1 {med[n, 8] / med[n, 1]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", action="store_true", help="end-to-end gates on the bundled model instead")
    ap.add_argument("--speed-only", action="store_true", help="with --model: skip perplexity / greedy")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        return model_gate(max(args.reps, 30), quality=not args.speed_only)
    warnings.filterwarnings("ignore")  # torch.ao quantized-tensor deprecation notices
    torch.manual_seed(0)
    cands = candidates()
    stacks, heads = {}, {}
    for name, make in cands.items():  # distinct weights per layer: no cache flattery
        g = torch.Generator().manual_seed(1)
        stacks[name] = [[make(torch.randn(n, k, generator=g) * 0.02) for n, k in SHAPES] for _ in range(LAYERS)]
        heads[name] = make(torch.randn(VOCAB, DIM, generator=g) * 0.02)
    xs = {m: [torch.randn(m, k) for _, k in SHAPES] for m in ROWS}
    xh = {m: torch.randn(m, DIM) for m in ROWS}

    load0 = os.getloadavg()
    t_stack = {(c, m): [] for c in cands for m in ROWS}
    t_head = {(c, m): [] for c in cands for m in ROWS}
    with torch.inference_mode():
        for m in ROWS:  # M outermost: a big-M call's allocations must not land on the next M
            for rep in range(args.reps + 1):
                for c in cands:
                    t0 = time.perf_counter()
                    for layer in stacks[c]:
                        for lin, x in zip(layer, xs[m]):
                            lin(x)
                    t1 = time.perf_counter()
                    heads[c](xh[m])
                    t2 = time.perf_counter()
                    if rep:  # rep 0 warms up
                        t_stack[c, m].append((t1 - t0) * 1e3)
                        t_head[c, m].append((t2 - t1) * 1e3)
        inv = {c: row_invariant(stacks[c][0][0], DIM) for c in cands}

    def table(title: str, t: dict) -> None:
        print(f"\n{title}: ms, median/min of {args.reps} reps, {args.threads} threads")
        print(f"{'candidate':28s}" + "".join(f"{'M=' + str(m):>12s}" for m in ROWS) + f"{'t8/t1':>7s}{'row-inv':>8s}")
        for c in cands:
            med = [statistics.median(t[c, m]) for m in ROWS]
            cells = "".join(f"{v:6.2f}/{min(t[c, m]):<5.2f}" for v, m in zip(med, ROWS))
            print(f"{c:28s}{cells}{med[3] / med[0]:7.2f}{'yes' if inv[c] else 'NO':>8s}")

    print("load average before/after:", load0, os.getloadavg())
    table(f"{LAYERS} layers x (qkv {QKV}x{DIM}, o {DIM}x{DIM}, gate_up {2 * HIDDEN}x{DIM}, down {DIM}x{HIDDEN})", t_stack)
    table(f"LM head {VOCAB}x{DIM}", t_head)


if __name__ == "__main__":
    main()
