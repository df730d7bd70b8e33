"""Would a draft head trained here pay on open chat? An EAGLE-style head (arXiv 2401.15077, without
its attention layer) trained on a CPU on the real model's own hidden states, then replayed on the
model's greedy answers to MT-Bench first turns, scored as open_chat_drafts.py scores the
model-free sources: accepted tokens per step (MAT) and tokens per unit of forward cost.

    python benchmarks/draft_head_study.py --model qwen2.5-coder-1.5b --work /tmp/dh \
        --train-tokens 90000 --vocab 8192 --mlp 2048 --epochs 4 --n 24 \
        --cost '{"1":1,"2":1.09,"4":1.21,"8":1.86}'

1. features: ShareGPT first exchanges of the "train" split (never MT-Bench), prompt and reference
   answer prefilled teacher-forced; per answer row the last hidden state as the LM head sees it
   (normed), the token the row read and the model's argmax (--train-tokens rows); with --data
   self (or both) the model's own greedy answers to later first turns of the split instead (or
   too): the text the head will be asked to predict (Medusa-2's self-distillation);
2. the head: f(feature of row t, embedding of token t+1) -> the feature of row t+1, scored by the
   model's own LM head rows of the --vocab commonest argmax tokens (tied embeddings: frozen);
   trained on the argmax (cross-entropy) and the feature (smooth L1), unrolled two rows deep;
3. evaluation: the model's greedy answers to --n MT-Bench first turns (one in every 80/n), their
   features by the same teacher-forced prefill (the prefill's argmax equals the greedy text; the
   script checks it), and at every step the head's chain from the last row's feature and the
   root: fixed lengths, and cut where the chain's running probability falls under a threshold.

Each stage is kept in --work and read back when there. The modelled figure leaves out the head's
own time (printed beside it: one chained step against a one-row forward, with fp32 and bf16
weights), so it is an upper bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from paraspec import LLM, SamplingParams
from paraspec.bench.workload_tasks import mtbench
from paraspec.datasets import sharegpt_split
from paraspec.decoding.policy.cost import CostModel
from paraspec.model.linear import rms_norm
from paraspec.model.transformer import SeqInput

CHUNK = 256


class Head(nn.Module):
    def __init__(self, dim: int, mlp: int):
        super().__init__()
        self.gf = nn.Parameter(torch.ones(dim))
        self.ge = nn.Parameter(torch.ones(dim))
        self.fc = nn.Linear(2 * dim, dim)
        self.up = nn.Linear(dim, mlp) if mlp else None
        self.down = nn.Linear(mlp, dim) if mlp else None

    def forward(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gf
        e = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-6) * self.ge
        u = self.fc(torch.cat([f, e], -1))
        return u if self.up is None else u + self.down(F.silu(self.up(u)))


def features(llm: LLM, prompt: list[int], answer: list[int]) -> dict:
    """Teacher-forced prefill of prompt + answer: per row from the prompt's last one, the normed
    last hidden state, the token read and the model's argmax."""
    m, kept = llm.model, {}
    head = m.lm_head.norm_linear

    def grab(x, norm, eps, prompt_rows):
        kept["h"] = rms_norm(x.float(), norm, eps)
        return head(x, norm, eps, prompt_rows)

    m.lm_head.norm_linear = grab
    try:
        ids, first = prompt + answer, len(prompt) - 1
        cache = m.new_cache(len(ids) + 8)
        hs, am = [], []
        for s in range(0, len(ids), CHUNK):
            chunk = ids[s : s + CHUNK]
            lo = max(0, first - s)
            rows = (
                torch.arange(lo, len(chunk)) if lo < len(chunk) else torch.tensor([len(chunk) - 1])
            )
            logits = m.forward(
                torch.tensor(chunk),
                torch.arange(s, s + len(chunk)),
                [SeqInput(cache, len(chunk))],
                rows,
                prompt=True,
            )
            if lo < len(chunk):
                hs.append(kept["h"].half())
                am.append(logits.argmax(-1))
            cache.commit(range(len(chunk)))
    finally:
        m.lm_head.norm_linear = head
    return {"h": torch.cat(hs), "x": torch.tensor(ids[first:]), "a": torch.cat(am)}


def train_features(llm: LLM, goal: int) -> list[dict]:
    tok, out, total, t0 = llm.tokenizer, [], 0, time.time()
    end = tok.encode("<|im_end|>", add_bos=False)
    for c in sharegpt_split("train"):
        msgs = c.messages
        if len(msgs) < 2 or [m["role"] for m in msgs[:2]] != ["user", "assistant"]:
            continue
        if not msgs[0]["content"].strip() or not msgs[1]["content"].strip():
            continue
        prompt = tok.encode_chat([msgs[0]])[-CHUNK:]
        answer = tok.encode(msgs[1]["content"], add_bos=False)[:320] + end
        out.append(features(llm, prompt, answer))
        total += len(out[-1]["x"])
        if len(out) % 50 == 0:
            print(f"  {len(out)} answers, {total} rows, {total / (time.time() - t0):.0f} rows/s")
        if total >= goal:
            return out
    return out


def self_features(llm: LLM, goal: int, skip: int = 2000, batch: int = 16) -> list[dict]:
    """The model's own greedy answers (max 256 tokens) to "train" split first turns of at most
    CHUNK tokens, from the skip-th conversation on (past those the reference rows use), batched,
    then their features: the labels are the model's own text."""
    tok, prompts = llm.tokenizer, []
    for i, c in enumerate(sharegpt_split("train")):
        msgs = c.messages
        if i < skip or not msgs or msgs[0]["role"] != "user" or not msgs[0]["content"].strip():
            continue
        if len(ids := tok.encode_chat([msgs[0]])) <= CHUNK:
            prompts.append(ids)
    out, total, t0 = [], 0, time.time()
    for b in range(0, len(prompts), batch):
        part = prompts[b : b + batch]
        answers = llm.generate(part, SamplingParams(temperature=0, max_tokens=256))
        for ids, o in zip(part, answers):
            out.append(features(llm, ids, list(o.outputs[0].token_ids)))
            total += len(out[-1]["x"])
        print(f"  {len(out)} answers, {total} rows, {time.time() - t0:.0f} s")
        if total >= goal:
            break
    return out


def eval_features(llm: LLM, n: int) -> list[dict]:
    tasks = mtbench()
    tasks = tasks[:: max(1, len(tasks) // n)][:n]
    out = []
    for t in tasks:
        ids = t.prompt_ids(llm.tokenizer)
        o = llm.generate(
            ids, SamplingParams(temperature=0, max_tokens=t.max_new_tokens, stop=list(t.stop))
        )
        f = features(llm, ids, list(o[0].outputs[0].token_ids))
        agree = (f["a"][:-1] == f["x"][1:]).float().mean().item()
        print(f"  {t.task_id}: {len(f['x']) - 1} tokens, prefill argmax = greedy text {agree:.3f}")
        f["task"] = t.task_id
        out.append(f)
    return out


def train(llm: LLM, data: list[dict], vocab_size: int, mlp: int, epochs: int) -> dict:
    torch.manual_seed(0)
    H = torch.cat([d["h"] for d in data])
    X = torch.cat([d["x"] for d in data])
    A = torch.cat([d["a"] for d in data])
    counts = torch.bincount(A, minlength=llm.runner.vocab_size)
    vocab = torch.argsort(counts, descending=True)[:vocab_size]
    print(f"  the head's vocabulary holds {counts[vocab].sum().item() / len(A):.3f} of the labels")
    remap = torch.full((len(counts),), -100, dtype=torch.long)
    remap[vocab] = torch.arange(vocab_size)
    lm_rows = llm.model.embed(vocab).float()
    starts = torch.tensor([0] + [len(d["x"]) for d in data]).cumsum(0)
    # rows with two rows after them in the same answer (the unrolled second step)
    index = torch.cat([torch.arange(s, e - 2) for s, e in zip(starts[:-1], starts[1:])])
    table = torch.zeros(len(counts), H.shape[1])
    seen = torch.unique(X)
    table[seen] = llm.model.embed(seen).float()
    head = Head(H.shape[1], mlp)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=0.0)
    batch, step, t0 = 256, 0, time.time()
    total = epochs * (len(index) // batch)
    for epoch in range(epochs):
        order = index[torch.randperm(len(index))]
        hits = tries = 0
        for b in range(0, len(order) - batch + 1, batch):
            g = order[b : b + batch]
            for pg in opt.param_groups:
                pg["lr"] = 1e-3 * 0.5 * (1 + math.cos(math.pi * step / total))
            f, loss = H[g].float(), 0.0
            for d in (1, 2):
                u = head(f, table[X[g + d]])
                labels = remap[A[g + d]]
                logits = u @ lm_rows.T
                loss = loss + F.cross_entropy(logits, labels, ignore_index=-100)
                loss = loss + F.smooth_l1_loss(u, H[g + d].float())
                ok = labels != -100
                hits += (logits.argmax(-1)[ok] == labels[ok]).sum().item()
                tries += ok.sum().item()
                f = u
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        print(f"  epoch {epoch}: training accuracy {hits / tries:.3f}, {time.time() - t0:.0f} s")
    return {"head": head.state_dict(), "vocab": vocab, "mlp": mlp}


@torch.no_grad()
def chains(llm: LLM, ck: dict, answers: list[dict], depth: int = 6) -> list[list[tuple]]:
    """Per answer, per row r: (tokens accepted from the head's chain drafted after the root at r,
    [(token, running probability)] of the chain)."""
    vocab = ck["vocab"]
    lm_rows = llm.model.embed(vocab).float()
    head = Head(lm_rows.shape[1], ck["mlp"])
    head.load_state_dict(ck["head"])
    out = []
    for a in answers:
        H, X, rows = a["h"], a["x"], []
        for r in range(len(X) - 2):
            f, token, p, chain = H[r].float()[None], int(X[r + 1]), 1.0, []
            for _ in range(depth):
                f = head(f, llm.model.embed(torch.tensor([token])).float())
                q, i = F.softmax(f @ lm_rows.T, -1)[0].max(0)
                token, p = int(vocab[i]), p * q.item()
                chain.append((token, p))
            hits = 0
            while hits < depth and r + 2 + hits < len(X) and int(X[r + 2 + hits]) == chain[hits][0]:
                hits += 1
            rows.append((hits, chain))
        out.append(rows)
    return out


def score(per_answer: list[list[tuple]], cost: CostModel, policy) -> tuple[float, float]:
    tokens = steps = 0
    spent = 0.0
    for rows in per_answer:
        r, n = 0, len(rows) + 1  # the answer's rows; the last one only reads EOS
        while r < n:
            hits, chain = rows[r] if r < len(rows) else (0, [])
            k = policy(chain)
            accepted = min(hits, k)
            tokens, steps, spent = tokens + 1 + accepted, steps + 1, spent + cost(1 + k)
            r += 1 + accepted
    return tokens / steps, tokens / spent


def head_cost(llm: LLM, ck: dict, reps: int = 50) -> dict[str, float]:
    """Median time of one chained head step (fp32 and bf16 weights) over that of a one-row decode
    forward at a 500-token context."""
    import statistics

    m = llm.model
    cache = m.new_cache(600)
    llm.runner.prefill(cache, [0] * 500)

    def one_row() -> None:
        m.forward(torch.tensor([0]), torch.tensor([500]), [SeqInput(cache, 1)], torch.tensor([0]))

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    step = timed(one_row)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        lm_rows = m.embed(ck["vocab"]).to(dtype)
        head = Head(lm_rows.shape[1], ck["mlp"])
        head.load_state_dict(ck["head"])
        head = head.to(dtype)
        f = torch.zeros(1, lm_rows.shape[1], dtype=dtype)

        @torch.no_grad()
        def chained() -> None:
            u = head(f, m.embed(torch.tensor([11])).to(dtype))
            (u @ lm_rows.T).argmax(-1)

        out[str(dtype).split(".")[1]] = timed(chained) / step
    print(
        f"one-row forward {step * 1e3:.1f} ms; a chained head step costs "
        + ", ".join(f"{v:.3f} of it in {k}" for k, v in out.items())
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--work", required=True, help="folder for the stages (read back when there)")
    ap.add_argument("--train-tokens", type=int, default=90000)
    ap.add_argument(
        "--data",
        choices=("reference", "self", "both"),
        default="reference",
        help="train on ShareGPT's reference answers, the model's own greedy answers, or both",
    )
    ap.add_argument("--self-tokens", type=int, default=60000)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--mlp", type=int, default=2048, help="the head's MLP width (0: none)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--n", type=int, default=24, help="MT-Bench first turns to evaluate on")
    ap.add_argument("--cost", help="t(k)/t(1) as JSON (default: this machine's probe)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("PARASPEC_THREADS", "2")))
    llm = LLM(model=args.model)

    def stage(name: str, make):
        path = os.path.join(args.work, name)
        if os.path.exists(path):
            return torch.load(path)
        print(f"{name}:")
        value = make()
        torch.save(value, path)
        return value

    data = []
    if args.data in ("reference", "both"):
        data += stage(
            f"train-{args.train_tokens}.pt", lambda: train_features(llm, args.train_tokens)
        )
    if args.data in ("self", "both"):
        data += stage(f"self-{args.self_tokens}.pt", lambda: self_features(llm, args.self_tokens))
    answers = stage(f"mtbench-{args.n}.pt", lambda: eval_features(llm, args.n))
    name = f"head-{args.data}-{args.train_tokens}-{args.self_tokens}-v{args.vocab}-m{args.mlp}-e{args.epochs}.pt"
    ck = stage(name, lambda: train(llm, data, args.vocab, args.mlp, args.epochs))
    cost = CostModel(
        {int(k): v for k, v in json.loads(args.cost).items()}
        if args.cost
        else llm.runner.forward_cost()
    )
    head_cost(llm, ck)
    per_answer = chains(llm, ck, answers)
    rows = [row for a in per_answer for row in a]
    inside = set(ck["vocab"].tolist())
    nxt = [int(a["x"][r + 2]) for a in answers for r in range(len(a["x"]) - 2)]
    print(
        f"\n{len(answers)} MT-Bench answers, {len(rows)} rows; the next-but-one token is in the "
        f"head's vocabulary {sum(t in inside for t in nxt) / len(nxt):.3f} of the time"
    )
    first = sum(h >= 1 for h, _ in rows)
    print(
        f"first chained token accepted {first / len(rows):.3f}, the second after the first "
        f"{sum(h >= 2 for h, _ in rows) / max(1, first):.3f}"
    )
    for lo, hi in ((0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01)):
        sel = [h >= 1 for h, c in rows if lo <= c[0][1] < hi]
        if sel:
            print(
                f"  head's probability {lo:.1f}-{min(hi, 1):.1f}: {len(sel)} rows, "
                f"accepted {sum(sel) / len(sel):.2f}"
            )
    print("\npolicy: MAT, tokens per unit of forward cost")
    for k in range(6):
        print(f"  chain of {k}: %.2f, %.2f" % score(per_answer, cost, lambda c, k=k: k))
    for tau in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
        print(
            f"  chain while p >= {tau}: %.2f, %.2f"
            % score(per_answer, cost, lambda c, t=tau: sum(p >= t for _, p in c[:5]))
        )


if __name__ == "__main__":
    main()
