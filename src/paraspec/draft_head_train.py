"""Train a draft head (decoding/drafters/draft_head.py) for one model, on
this machine's CPU.

1. features: per answer row, the model's normed last hidden state (as its LM head sees it), the
   token the row read and the model's argmax. Two sources of answers, both from ShareGPT's
   "train" split (never MT-Bench, never the held-out split): the reference answers of first
   exchanges (--reference-tokens rows, from a teacher-forced prefill of prompt + answer), and the
   model's own greedy answers to later first turns (--self-tokens rows, taken as they are
   decoded; Medusa-2's self-distillation: the text the head will be asked to predict). Measured
   on the real 1.5B, the model's own answers teach more per row, the two together most, and the
   head still gains from more of them (docs/benchmarks.md);
2. the head: f(feature of row t, embedding of token t+1) -> the feature of row t+1, scored by the
   model's embedding rows of the --vocab commonest argmax tokens (frozen); trained
   on the argmax (cross-entropy) and the feature (smooth L1), unrolled two rows deep, AdamW with a
   cosine schedule.

Each stage is kept in --work and read back when there, so an interrupted run resumes. The head
file holds the weights, the vocabulary and the model's shape and embedding fingerprint (checked
when an engine loads it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .decoding.drafters.draft_head import HEAD_FORMAT, NORM_EPS
from .draft_heads import head_model

CHUNK = 256  # prefill chunk; prompts longer than this are cut to their last CHUNK tokens
ANSWER_TOKENS = 320  # reference answer tokens kept per conversation
SELF_SKIP = 2000  # the self-distilled prompts start past the conversations the reference rows use
SELF_MAX_TOKENS = 256
SELF_BLOCK = 48  # prompts decoded together, and kept as one stage
BATCH = 256


class Head(nn.Module):
    """The head's trainable form (draft_head.DraftHead runs the same math on int8 kernels)."""

    def __init__(self, dim: int, mlp: int):
        super().__init__()
        self.gf = nn.Parameter(torch.ones(dim))
        self.ge = nn.Parameter(torch.ones(dim))
        self.fc = nn.Linear(2 * dim, dim)
        self.up = nn.Linear(dim, mlp) if mlp else None
        self.down = nn.Linear(mlp, dim) if mlp else None

    def forward(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        f = F.rms_norm(f, self.gf.shape, self.gf, NORM_EPS)
        e = F.rms_norm(e, self.ge.shape, self.ge, NORM_EPS)
        u = self.fc(torch.cat([f, e], -1))
        return u if self.up is None else u + self.down(F.silu(self.up(u)))


def features(llm, prompt: list[int], answer: list[int]) -> dict:
    """Teacher-forced prefill of prompt + answer: per row from the prompt's last one, the normed
    last hidden state (fp16; the forward's `features`, what the engine hands a head), the token
    read and the model's argmax."""
    from .model.transformer import SeqInput

    m = llm.model
    ids, first = prompt + answer, len(prompt) - 1
    cache = m.new_cache(len(ids) + 8)
    hs, am = [], []
    for s in range(0, len(ids), CHUNK):
        chunk = ids[s : s + CHUNK]
        lo = max(0, first - s)
        rows = torch.arange(lo, len(chunk)) if lo < len(chunk) else torch.tensor([len(chunk) - 1])
        logits, h = m.forward(
            torch.tensor(chunk),
            torch.arange(s, s + len(chunk)),
            [SeqInput(cache, len(chunk))],
            rows,
            prompt=True,
            features=True,
        )
        if lo < len(chunk):
            hs.append(h.half())
            am.append(logits.argmax(-1))
        cache.commit(range(len(chunk)))
    return {"h": torch.cat(hs), "x": torch.tensor(ids[first:]), "a": torch.cat(am)}


def _first_turns(split: str):
    from .datasets import sharegpt_split

    for c in sharegpt_split(split):
        msgs = c.messages
        if msgs and msgs[0]["role"] == "user" and msgs[0]["content"].strip():
            yield msgs


def reference_features(llm, goal: int) -> list[dict]:
    """ShareGPT's reference answers to first turns: features of about `goal` rows."""
    tok, out, total, t0 = llm.tokenizer, [], 0, time.time()
    end = tok.encode("<|im_end|>", add_bos=False)
    for msgs in _first_turns("train"):
        if len(msgs) < 2 or msgs[1]["role"] != "assistant" or not msgs[1]["content"].strip():
            continue
        prompt = tok.encode_chat([msgs[0]])[-CHUNK:]
        answer = tok.encode(msgs[1]["content"], add_bos=False)[:ANSWER_TOKENS] + end
        out.append(features(llm, prompt, answer))
        total += len(out[-1]["x"])
        if len(out) % 50 == 0:
            print(f"  {len(out)} answers, {total} rows, {total / (time.time() - t0):.0f} rows/s")
        if total >= goal:
            break
    return out


def self_prompts(llm) -> list[list[int]]:
    """The prompts of the model's own answers: ShareGPT "train" first turns of at most CHUNK
    tokens, past the first SELF_SKIP conversations (which the reference rows use)."""
    tok, prompts = llm.tokenizer, []
    for i, msgs in enumerate(_first_turns("train")):
        if i >= SELF_SKIP and len(ids := tok.encode_chat([msgs[0]])) <= CHUNK:
            prompts.append(ids)
    return prompts


def self_features(llm, prompts: list[list[int]], max_tokens: int = SELF_MAX_TOKENS) -> list[dict]:
    """The model's greedy answers to `prompts`, decoded together one row each a step, with each
    row's feature taken as it is decoded (the rows a teacher-forced prefill of the answer would
    give, without running it): features()' dicts."""
    from .model.seq_input import SeqInput

    m, stops = llm.model, set(llm.tokenizer.eos_token_ids)
    seqs = []
    for ids in prompts:  # prefill: the prompt's last row chooses the first answer token
        cache = m.new_cache(len(ids) + max_tokens + 8)
        for s in range(0, len(ids), CHUNK):
            chunk = ids[s : s + CHUNK]
            logits, h = m.forward(
                torch.tensor(chunk),
                torch.arange(s, s + len(chunk)),
                [SeqInput(cache, len(chunk))],
                torch.tensor([len(chunk) - 1]),
                prompt=True,
                features=True,
            )
            cache.commit(range(len(chunk)))
        seqs.append({"cache": cache, "h": [h.half()], "x": [ids[-1]], "a": [logits.argmax(-1)]})
    live = list(seqs)
    for _ in range(max_tokens - 1):
        live = [q for q in live if int(q["a"][-1]) not in stops]
        if not live:
            break
        tokens = torch.cat([q["a"][-1] for q in live])
        logits, h = m.forward(
            tokens,
            torch.tensor([q["cache"].length for q in live]),
            [SeqInput(q["cache"], 1) for q in live],
            features=True,
        )
        for i, q in enumerate(live):
            q["cache"].commit([0])
            q["h"].append(h[i : i + 1].half())
            q["x"].append(int(tokens[i]))
            q["a"].append(logits[i : i + 1].argmax(-1))
    return [
        {"h": torch.cat(q["h"]), "x": torch.tensor(q["x"]), "a": torch.cat(q["a"])} for q in seqs
    ]


def own_answers(llm, goal: int, stage: Callable[[str, Callable[[], list]], list]) -> list[dict]:
    """self_features of about `goal` rows, in blocks of SELF_BLOCK prompts, each through
    `stage(name, make)` (which keeps a block and reads it back): a larger goal extends a run."""
    prompts, out, rows, t0 = self_prompts(llm), [], 0, time.time()
    for b in range(0, len(prompts), SELF_BLOCK):
        if rows >= goal:
            break
        part = prompts[b : b + SELF_BLOCK]
        block = stage(f"self-{b // SELF_BLOCK:04d}.pt", lambda: self_features(llm, part))
        out += block
        rows += sum(len(d["x"]) for d in block)
        print(f"  {rows} rows of its own answers, {time.time() - t0:.0f} s", flush=True)
    return out


def train(
    llm,
    data: list[dict],
    vocab_size: int,
    mlp: int,
    epochs: int,
    seed: int = 0,
    batch: int = BATCH,
    lr: float = 1e-3,
) -> dict:
    """The head trained on `data` (features()' dicts); returns its file's contents."""
    torch.manual_seed(seed)
    H = torch.cat([d["h"] for d in data])
    X = torch.cat([d["x"] for d in data])
    A = torch.cat([d["a"] for d in data])
    counts = torch.bincount(A, minlength=llm.runner.vocab_size)
    vocab = torch.argsort(counts, descending=True)[:vocab_size]
    print(f"  the head's vocabulary holds {counts[vocab].sum().item() / len(A):.3f} of the labels")
    remap = torch.full((len(counts),), -100, dtype=torch.long)
    remap[vocab] = torch.arange(len(vocab))
    lm_rows = llm.model.embed(vocab).float()
    starts = torch.tensor([0] + [len(d["x"]) for d in data]).cumsum(0)
    # rows with two rows after them in the same answer (the unrolled second step)
    index = torch.cat([torch.arange(s, e - 2) for s, e in zip(starts[:-1], starts[1:])])
    table = torch.zeros(len(counts), H.shape[1])
    seen = torch.unique(X)
    table[seen] = llm.model.embed(seen).float()
    head = Head(H.shape[1], mlp)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    step, t0, accuracy = 0, time.time(), 0.0
    total = max(1, epochs * (len(index) // batch))
    for epoch in range(epochs):
        order = index[torch.randperm(len(index))]
        hits = tries = 0
        for b in range(0, len(order) - batch + 1, batch):
            g = order[b : b + batch]
            for pg in opt.param_groups:
                pg["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total))
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
        accuracy = hits / max(1, tries)
        print(
            f"  epoch {epoch}: training accuracy {hits / max(1, tries):.3f}, {time.time() - t0:.0f} s"
        )
    return head_file(llm, head, vocab, rows=len(H), accuracy=accuracy)


def head_file(llm, head: Head, vocab: torch.Tensor, rows: int = 0, accuracy: float = 0.0) -> dict:
    """A head's file contents: bf16 weights (the engine runs them as int8), its vocabulary, and
    the model's shape and fingerprint (DraftHead.load checks them)."""
    m = head_model(llm.model)
    return {
        "format": HEAD_FORMAT,
        "model": llm.model_name,
        "dim": m.dim,
        "vocab_size": m.vocab_size,
        "fingerprint": m.fingerprint(),
        "vocab": vocab.to(torch.int32),
        "weights": {k: v.detach().to(torch.bfloat16) for k, v in head.state_dict().items()},
        "rows": rows,  # what it was trained on: rows, and its last epoch's accuracy on them
        "accuracy": accuracy,
    }
