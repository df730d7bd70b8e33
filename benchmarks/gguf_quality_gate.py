"""Quality gate of quantization "gguf" (a GGUF file's own Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K blocks, int8 activations
per 32-block) against the fp32 dequantisation of the same file, the model the file defines:

    python benchmarks/gguf_quality_gate.py [--model default|PATH|q4_k_m|qwen2.5-coder-0.5b] [--chunks 8]
                                           [--prompts 16] [--text pydoc|sharegpt]

  --model: the bundled model, any GGUF path, the bundled model requantised by llama.cpp (q4_k_m,
  q6_k, ...) or a real model `paraspec fetch` cached (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
  --text: Python's pydoc topics (real English prose, offline; the default) or real chat answers,
  the assistant turns of ShareGPT's "eval" split in file order (`paraspec fetch sharegpt`).

  1. perplexity on chunks x 512 tokens of that text:
     gguf (two activation passes) within 1 % of fp32, and gguf with an fp16 KV cache (gguf-kv16)
     within 0.1 % of gguf; gguf-1pass (one Q8 pass per 32-block, llama.cpp's numerics, the default
     on the compiled kernels) within 1 % of fp32 and, with llama-cpp-python installed, no more than 0.5 %
     above llama.cpp's own perplexity on the same file and tokens;
  2. teacher-forced top-1 agreement with fp32 over the same tokens: >= 97 % (gguf-kv16 with gguf:
     >= 99 %); gguf-1pass: >= 95 %, and (with llama.cpp) no more than 0.5 points below llama.cpp's
     own agreement with fp32;
  3. greedy 64-token continuations of `prompts` prompts taken after them: gguf, fp32 and w8a8
     vs llama.cpp (llama-cpp-python on the same file, when installed) and vs fp32, reported
     (identical count and mean common prefix; not gated: a near-tie flips any two numerics).
Exit status 1 when gate 1 or 2 fails.
"""

from __future__ import annotations

import argparse
import sys

import torch

from paraspec.model.gguf_requant import bench_model
from paraspec.model.loader import load_model, resolve_model_path
from paraspec.model.tokenizer import Tokenizer
from paraspec.model.transformer import SeqInput, Transformer

CHUNK, GREEDY = 512, 64


def forward(model: Transformer, cache, new: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(cache.length, cache.length + len(new))
    logits = model.forward(new, pos, [SeqInput(cache, len(new))])
    cache.commit(range(len(new)))
    return logits


def greedy(model: Transformer, prompt: torch.Tensor) -> list[int]:
    cache = model.new_cache(len(prompt) + GREEDY + 8)
    nxt, out = forward(model, cache, prompt)[-1].argmax(), []
    for _ in range(GREEDY):
        out.append(int(nxt))
        nxt = forward(model, cache, nxt.view(1))[-1].argmax()
    return out


def llamacpp_logits(
    path: str, chunks: list[torch.Tensor], threads: int
) -> list[torch.Tensor] | None:
    """llama.cpp's teacher-forced logits [CHUNK, vocab] for each chunk, each from an empty context."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(
        model_path=path,
        n_ctx=CHUNK,
        n_batch=CHUNK,
        n_threads=threads,
        logits_all=True,
        verbose=False,
    )
    out = []
    for chunk in chunks:
        llm.reset()
        llm.eval(chunk.tolist())
        out.append(torch.from_numpy(llm.scores[: len(chunk)].copy()).float())
    return out


def llamacpp_greedy(path: str, prompts: list[torch.Tensor], threads: int) -> list[list[int]] | None:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=path, n_ctx=512, n_threads=threads, verbose=False)
    outs = []
    for p in prompts:
        llm.reset()
        out = []
        for tok in llm.generate(
            p.tolist(), temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True
        ):
            out.append(int(tok))
            if len(out) >= GREEDY:
                break
        outs.append(out)
    return outs


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def real_text(name: str, tok: Tokenizer, n_tokens: int) -> torch.Tensor:
    """At least n_tokens tokens of text `name` (fewer only where the source runs out)."""
    if name == "pydoc":
        import pydoc_data.topics

        return torch.tensor(tok.encode("\n\n".join(pydoc_data.topics.topics.values())))
    from paraspec.datasets import sharegpt_split

    ids: list[int] = []
    for conv in sharegpt_split("eval"):
        for m in conv.messages:
            if m["role"] == "assistant" and m["content"].strip():
                ids += tok.encode(m["content"].strip() + "\n\n")
        if len(ids) >= n_tokens:
            break
    return torch.tensor(ids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--text", choices=("pydoc", "sharegpt"), default="pydoc")
    a = ap.parse_args()
    a.model = bench_model(a.model)
    torch.set_num_threads(a.threads)
    fp = load_model(a.model, torch.float32)
    q = load_model(a.model, torch.float32, keep_quantized=True)
    tok = Tokenizer.from_source(fp.tokenizer_source)
    models = {
        "fp32": Transformer(fp.args, fp.weights, torch.float32),
        "gguf": Transformer(
            q.args, q.weights, torch.bfloat16, quantization="gguf", activation_passes=2
        ),
        "gguf-1pass": Transformer(
            q.args, q.weights, torch.bfloat16, quantization="gguf", activation_passes=1
        ),
        "gguf-kv16": Transformer(
            q.args,
            q.weights,
            torch.bfloat16,
            quantization="gguf",
            kv_dtype=torch.float16,
            activation_passes=2,
        ),
        "w8a8": Transformer(fp.args, fp.weights, torch.bfloat16, quantization="w8a8"),
    }
    kinds = sorted({w.kind for w in q.weights.values() if hasattr(w, "kind")})
    print(
        f"model {fp.path.name}: blocks run as stored: {', '.join(kinds)}; kernels {models['gguf'].kernels.label}"
    )
    ids = real_text(a.text, tok, a.chunks * CHUNK + 97 * a.prompts)
    if len(ids) < a.chunks * CHUNK + 97 * a.prompts:
        sys.exit(f"--text {a.text} has {len(ids)} tokens, fewer than --chunks and --prompts need")

    ppl, top1 = {}, {}
    for name, model in models.items():
        nll, argmax = [], []
        for c in range(a.chunks):
            seq = ids[c * CHUNK : (c + 1) * CHUNK]
            logits = forward(model, model.new_cache(CHUNK), seq)
            nll.append(torch.nn.functional.cross_entropy(logits[:-1], seq[1:], reduction="none"))
            argmax.append(logits[:-1].argmax(-1))
        ppl[name], top1[name] = torch.cat(nll).mean().exp().item(), torch.cat(argmax)
    path = str(resolve_model_path(a.model))
    if peer_logits := llamacpp_logits(
        path, [ids[c * CHUNK : (c + 1) * CHUNK] for c in range(a.chunks)], a.threads
    ):
        nll = [
            torch.nn.functional.cross_entropy(
                lg[:-1], ids[c * CHUNK + 1 : (c + 1) * CHUNK], reduction="none"
            )
            for c, lg in enumerate(peer_logits)
        ]
        ppl["llama.cpp"], top1["llama.cpp"] = (
            torch.cat(nll).mean().exp().item(),
            torch.cat([lg[:-1].argmax(-1) for lg in peer_logits]),
        )
    print(
        f"perplexity / teacher-forced top-1 agreement with fp32, {a.chunks} x {CHUNK} tokens of {a.text} text:"
    )
    for name in ppl:
        agree = (top1[name] == top1["fp32"]).float().mean().item()
        print(
            f"  {name:9s} ppl {ppl[name]:8.4f} ({ppl[name] / ppl['fp32'] - 1:+.3%} vs fp32)  "
            f"top-1 agreement {agree:.4f}"
        )
    kv16_agree = (top1["gguf-kv16"] == top1["gguf"]).float().mean().item()
    print(
        f"  gguf-kv16 vs gguf: ppl {ppl['gguf-kv16'] / ppl['gguf'] - 1:+.4%}, top-1 agreement {kv16_agree:.4f}"
    )
    agree = {name: (t == top1["fp32"]).float().mean().item() for name, t in top1.items()}
    if "llama.cpp" in top1:
        print(
            f"  gguf-1pass vs llama.cpp: top-1 agreement {(top1['gguf-1pass'] == top1['llama.cpp']).float().mean().item():.4f}"
            f" (gguf vs llama.cpp {(top1['gguf'] == top1['llama.cpp']).float().mean().item():.4f})"
        )
    ppl_ok = (
        abs(ppl["gguf"] / ppl["fp32"] - 1) <= 0.01
        and abs(ppl["gguf-kv16"] / ppl["gguf"] - 1) <= 0.001
    )
    ppl_ok &= abs(ppl["gguf-1pass"] / ppl["fp32"] - 1) <= 0.01
    agree_ok = agree["gguf"] >= 0.97 and kv16_agree >= 0.99 and agree["gguf-1pass"] >= 0.95
    if "llama.cpp" in ppl:
        ppl_ok &= ppl["gguf-1pass"] <= ppl["llama.cpp"] * 1.005
        agree_ok &= agree["gguf-1pass"] >= agree["llama.cpp"] - 0.005

    start = a.chunks * CHUNK
    prompts = [ids[start + 97 * i : start + 97 * i + 32] for i in range(a.prompts)]
    outs = {name: [greedy(m, p) for p in prompts] for name, m in models.items()}
    peer = llamacpp_greedy(path, prompts, a.threads)
    refs = {"fp32": outs["fp32"]} | ({"llama.cpp": peer} if peer else {})
    print(
        f"greedy {GREEDY}-token continuations of {a.prompts} prompts (identical / mean common prefix):"
    )
    for ref_name, ref in refs.items():
        for name, out in outs.items():
            if name == ref_name:
                continue
            same = [common_prefix(x, y) for x, y in zip(out, ref)]
            print(
                f"  {name:9s} vs {ref_name:9s} {sum(s == GREEDY for s in same):2d}/{a.prompts} identical, "
                f"mean common prefix {sum(same) / len(same):5.1f} tokens"
            )
    if peer is None:
        print("  (llama-cpp-python not installed: no llama.cpp comparison)")
    print(
        f"gate: perplexity within 1% of fp32 (kv16: 0.1% of gguf; 1pass: <= llama.cpp's + 0.5%): "
        f"{'PASS' if ppl_ok else 'FAIL'}; top-1 agreement >= 97% (kv16: 99% with gguf; 1pass: 95% and "
        f">= llama.cpp's - 0.5 points): {'PASS' if agree_ok else 'FAIL'}"
    )
    return 0 if ppl_ok and agree_ok else 1


if __name__ == "__main__":
    sys.exit(main())
