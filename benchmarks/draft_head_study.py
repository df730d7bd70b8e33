"""Would a draft head trained here pay on open chat? An EAGLE-style head (arXiv 2401.15077, without
its attention layer) trained on a CPU on the real model's own hidden states, then replayed on the
model's greedy answers to MT-Bench first turns, scored as open_chat_drafts.py scores the
model-free sources: accepted tokens per step (MAT) and tokens per unit of forward cost.

    python benchmarks/draft_head_study.py --model qwen2.5-coder-1.5b --work /tmp/dh \
        --train-tokens 90000 --vocab 8192 --mlp 2048 --epochs 4 --n 24 \
        --cost '{"1":1,"2":1.09,"4":1.21,"8":1.86}'

The training is the product's (paraspec/draft_head_train.py, `paraspec draft-head`; --head FILE
replays a head file it wrote, skipping the training stages); this script replays a head without
the engine, to see what it could buy before its cost and the policy's:

1. features: ShareGPT first exchanges of the "train" split (never MT-Bench), prompt and reference
   answer prefilled teacher-forced; per answer row the last hidden state as the LM head sees it
   (normed), the token the row read and the model's argmax (--train-tokens rows); with --data
   self (or both) the model's own greedy answers to later first turns of the split instead (or
   too): the text the head will be asked to predict (Medusa-2's self-distillation);
2. the head: f(feature of row t, embedding of token t+1) -> the feature of row t+1, scored by the
   model's embedding rows of the --vocab commonest argmax tokens (frozen); trained on the argmax (cross-entropy) and the feature (smooth L1), unrolled two rows deep;
3. evaluation: the model's greedy answers to --n MT-Bench first turns (one in every 80/n), their
   features by the same teacher-forced prefill (the prefill's argmax equals the greedy text; the
   script checks it), and at every step the head's chain from the last row's feature and the
   root: fixed lengths, and cut where the chain's running probability falls under a threshold.

Each stage is kept in --work and read back when there. The modelled figure leaves out the head's
own time (printed beside it: one chained step of the engine's int8 head against a one-row
forward), so it is an upper bound. The engine's measured figure: `paraspec bench --systems
ar,hybrid,hybrid-head`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

from paraspec import LLM, SamplingParams
from paraspec.bench.workload_tasks import mtbench
from paraspec.decoding.drafters.draft_head import DraftHead
from paraspec.draft_heads import head_model
from paraspec.decoding.policy.cost import CostModel
from paraspec.draft_head_train import Head, features, own_answers, reference_features, train
from paraspec.model.transformer import SeqInput


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


def trainable(ck: dict) -> Head:
    """A head file's weights in the trainable form (fp32), for the replay."""
    w = ck["weights"]
    head = Head(w["gf"].numel(), w["up.weight"].shape[0] if "up.weight" in w else 0)
    head.load_state_dict({k: v.float() for k, v in w.items()})
    return head


@torch.no_grad()
def chains(llm: LLM, ck: dict, answers: list[dict], depth: int = 6) -> list[list[tuple]]:
    """Per answer, per row r: (tokens accepted from the head's chain drafted after the root at r,
    [(token, running probability)] of the chain)."""
    vocab = ck["vocab"].long()
    lm_rows = llm.model.embed(vocab).float()
    head = trainable(ck)
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


def head_cost(llm: LLM, path: str, reps: int = 50) -> float:
    """Median time of one chained step of the engine's head (int8 on the model's kernels,
    draft_head.DraftHead) over that of a one-row decode forward at a 500-token context."""
    import statistics

    m = llm.model
    cache = m.new_cache(600)
    llm.runner.prefill(cache, [0] * 500)
    head = DraftHead.load(path, head_model(m, llm.model_name))

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    one = [SeqInput(cache, 1)]
    step = timed(lambda: m.forward(torch.tensor([0]), torch.tensor([500]), one, torch.tensor([0])))
    f = torch.zeros(1, m.args.dim)
    e = head.embed(11)
    ratio = timed(lambda: head.step(f, e)) / step
    print(f"one-row forward {step * 1e3:.1f} ms; a chained head step costs {ratio:.3f} of it")
    return ratio


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
    ap.add_argument("--head", help="replay this head file instead of training one here")
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

    answers = stage(f"mtbench-{args.n}.pt", lambda: eval_features(llm, args.n))
    if args.head:  # replay a head trained elsewhere (`paraspec draft-head`)
        path = os.path.expanduser(args.head)
        ck = torch.load(path, weights_only=True)
    else:
        data = []
        if args.data in ("reference", "both"):
            data += stage(
                f"train-{args.train_tokens}.pt",
                lambda: reference_features(llm, args.train_tokens),
            )
        if args.data in ("self", "both"):
            data += own_answers(llm, args.self_tokens, stage)
        name = f"head-{args.data}-{args.train_tokens}-{args.self_tokens}-v{args.vocab}-m{args.mlp}-e{args.epochs}.pt"
        path = os.path.join(args.work, name)
        ck = stage(name, lambda: train(llm, data, args.vocab, args.mlp, args.epochs))
    cost = CostModel(
        {int(k): v for k, v in json.loads(args.cost).items()}
        if args.cost
        else llm.runner.forward_cost()
    )
    head_cost(llm, path)
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
