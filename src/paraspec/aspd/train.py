"""Fine-tuning for ASPD (and its control): a small differentiable decoder forward, LoRA, the loop.

The forward (`TrainModel`) is transformer.py's math in autograd form for what loader.py loads
(Llama, Qwen2/2.5's q/k/v biases, Qwen3's per-head q/k norms, tied or untied heads): RMSNorm,
RoPE from the same tables, SwiGLU, F.scaled_dot_product_attention with a boolean mask per
sequence. What it cannot represent is refused (trainable.py). ASPD rows get markup-aware
positions and the branch-isolation mask from layout.layout (the contract's Same-Seq rules); the
control gets a causal mask and 0..n-1. tests/aspd/test_train.py checks it against paraspec's own
forward given the same mask and positions, and against transformers.

Trainable: LoRA A/B on every layer's wqkv, wo, w_gate_up and w_down, and the six new token
rows: embedding rows, which a tied head also uses as its output rows; an untied head's six new
rows are trained beside them ("new_head" in the adapter). Biases and norms stay frozen.

Branch tokens follow decode.py: the forced prefix is `<|branch|>` + title + ":", and the content
is tokenized as BPE writes it after ":" (the space joins the next word: ": The" is ":", " The").

Loss: next-token cross entropy on answer tokens, leaving out targets the engine forces or
inserts (each branch's "<|branch|>T:" prefix, `<|/para|>`) and the rows of `<|/branch|>`, whose
flattened successor (the next branch's start) is not a prediction the model ever makes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..model.args import ModelArgs
from ..model.rope import rope_tables
from .data import Example
from .layout import layout
from .lora import TARGETS, LoRALinear
from .markup import MarkupIds
from .trainable import check_weights


@dataclass
class Encoded:
    ids: list[int]
    positions: torch.Tensor  # [n] long
    visible: torch.Tensor  # [n, n] bool
    loss_rows: list[int]  # rows whose next token is a training target


def encode(ex: Example, tok, ids: MarkupIds | None) -> Encoded:
    """Prompt (chat template over the history and the prompt) + answer + EOS. ids=None: the control
    (labelled plain text, causal)."""
    prompt = tok.encode_chat(ex.messages)
    eos = min(tok.eos_token_ids)
    answer: list[int] = []
    skip_targets: set[int] = set()  # absolute indices whose token is not a target
    skip_rows: set[int] = set()
    if ids is None:
        answer = tok.encode(ex.labelled, add_bos=False)
    else:
        for seg in ex.segments:
            if isinstance(seg, str):
                answer += tok.encode(seg, add_bos=False) if seg else []
                continue
            titles = [tok.encode(b.title, add_bos=False) for b in seg.branches]
            for t in titles:
                answer += [ids.title, *t, ids.end_title]
            answer.append(ids.para)
            for b, t in zip(seg.branches, titles):
                at = len(prompt) + len(answer)
                forced = [ids.branch, *t, *ids.colon_space[:1]]
                skip_targets.update(range(at, at + len(forced)))
                answer += forced + _after_colon(tok, ids, b.content) + [ids.end_branch]
                skip_rows.add(len(prompt) + len(answer) - 1)
            skip_targets.add(len(prompt) + len(answer))
            answer.append(ids.end_para)
    seq = prompt + answer + [eos]
    rows = [
        i
        for i in range(len(prompt) - 1, len(seq) - 1)
        if i not in skip_rows and i + 1 not in skip_targets
    ]
    if ids is None:
        positions, visible = (
            torch.arange(len(seq)),
            torch.ones(len(seq), len(seq), dtype=torch.bool).tril_(),
        )
    else:
        positions, visible = layout(seq, ids)
    return Encoded(seq, positions, visible, rows)


def _after_colon(tok, ids: MarkupIds, content: str) -> list[int]:
    """The content's tokens as BPE writes them after the forced ":" (the engine forces
    `<|branch|>T:` and leaves the space to the next word, " The" being one token)."""
    joined = tok.encode(":" + " " + content, add_bos=False)
    if joined[:1] == ids.colon_space[:1]:
        return joined[1:]
    return ids.colon_space[1:] + tok.encode(content, add_bos=False)


class TrainModel(nn.Module):
    def __init__(
        self,
        args: ModelArgs,
        weights: dict[str, torch.Tensor],
        n_base_vocab: int,
        rank: int = 8,
        alpha: float = 16.0,
        targets: tuple[str, ...] = TARGETS,
    ):
        super().__init__()
        # a name this forward does not use would be another network
        check_weights(weights, args.n_layers)
        self.args = args
        emb = weights["tok_embeddings"].float()
        self.register_buffer("base_embed", emb[:n_base_vocab].contiguous(), persistent=False)
        self.new_embed = nn.Parameter(emb[n_base_vocab:].clone())  # the markup rows (may be empty)
        self.untied = "lm_head" in weights
        if self.untied:  # the head's own rows for the same new tokens, trained too
            head = weights["lm_head"].float()
            if head.shape[0] != emb.shape[0]:
                raise ValueError(
                    f"lm_head has {head.shape[0]} rows but tok_embeddings {emb.shape[0]}"
                )
            self.register_buffer("base_head", head[:n_base_vocab].contiguous(), persistent=False)
            self.new_head = nn.Parameter(head[n_base_vocab:].clone())
        self.norm = weights["norm"].float()
        self.layers = nn.ModuleList()
        for i in range(args.n_layers):
            layer = nn.Module()
            for name in ("wqkv", "wo", "w_gate_up", "w_down"):
                w = weights[f"layers.{i}.{name}"].float()
                mod = LoRALinear(w, rank, alpha) if name in targets else _Frozen(w)
                setattr(layer, name, mod)
            # the last four: None if absent
            for name in (
                "attn_norm",
                "ffn_norm",
                "bqkv",
                "bo",
                "q_norm",
                "k_norm",
            ):
                w = weights.get(f"layers.{i}.{name}")
                setattr(layer, name, None if w is None else w.float())
            self.layers.append(layer)
        self.cos, self.sin = rope_tables(args, args.max_seq_len)

    def embedding(self) -> torch.Tensor:
        return (
            torch.cat([self.base_embed, self.new_embed])
            if self.new_embed.numel()
            else self.base_embed
        )

    def head(self) -> torch.Tensor:
        if not self.untied:
            return self.embedding()
        return (
            torch.cat([self.base_head, self.new_head]) if self.new_head.numel() else self.base_head
        )

    def hidden(
        self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """tokens, positions [B, T]; visible [B, T, T] bool -> final-norm hidden states [B, T, dim]."""
        a = self.args
        B, T = tokens.shape
        nh, nkv, hd = a.n_heads, a.n_kv_heads, a.head_dim
        x = F.embedding(tokens, self.embedding())
        # [B, T, 1, hd]
        cos, sin = (
            self.cos[positions].unsqueeze(2),
            self.sin[positions].unsqueeze(2),
        )
        mask = visible.unsqueeze(1)
        for layer in self.layers:
            # attention block: q/k/v (+ bias), Qwen3's per-head q/k norms, RoPE on q and k, SDPA under the mask
            qkv = _plus(
                layer.wqkv(F.rms_norm(x, (a.dim,), layer.attn_norm, a.norm_eps)), layer.bqkv
            )
            qkv = qkv.view(B, T, nh + 2 * nkv, hd)
            if layer.q_norm is not None:
                qkv = torch.cat(
                    [
                        F.rms_norm(qkv[:, :, :nh], (hd,), layer.q_norm, a.norm_eps),
                        F.rms_norm(qkv[:, :, nh : nh + nkv], (hd,), layer.k_norm, a.norm_eps),
                        qkv[:, :, nh + nkv :],
                    ],
                    dim=2,
                )
            qk = _rope(qkv[:, :, : nh + nkv], cos, sin)
            q, k, v = (
                t.transpose(1, 2) for t in (qk[:, :, :nh], qk[:, :, nh:], qkv[:, :, nh + nkv :])
            )
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=nh != nkv)
            x = x + _plus(layer.wo(o.transpose(1, 2).reshape(B, T, nh * hd)), layer.bo)
            # feed-forward block (SwiGLU)
            gate, up = layer.w_gate_up(F.rms_norm(x, (a.dim,), layer.ffn_norm, a.norm_eps)).chunk(
                2, dim=-1
            )
            x = x + layer.w_down(F.silu(gate) * up)
        return F.rms_norm(x, (a.dim,), self.norm, a.norm_eps)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head())

    def adapter_tensors(self) -> dict[str, torch.Tensor]:
        out = {"new_embed": self.new_embed, **({"new_head": self.new_head} if self.untied else {})}
        for i, layer in enumerate(self.layers):
            for name in TARGETS:
                mod = getattr(layer, name)
                if isinstance(mod, LoRALinear):
                    out[f"layers.{i}.{name}.lora_A"] = mod.lora_A
                    out[f"layers.{i}.{name}.lora_B"] = mod.lora_B
        return out

    @torch.no_grad()
    def load_adapter(self, tensors: dict[str, torch.Tensor]) -> None:
        """Continue from saved adapter tensors (adapter_tensors' names)."""
        own = self.adapter_tensors()
        missing = sorted(set(own) - set(tensors))
        if missing:
            raise ValueError(f"adapter lacks {missing[0]} (saved with another rank or model?)")
        for k, p in own.items():
            if p.shape != tensors[k].shape:
                raise ValueError(
                    f"adapter tensor {k} has shape {tuple(tensors[k].shape)}, expected {tuple(p.shape)}"
                )
            p.copy_(tensors[k])


class _Frozen(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)

    def forward(self, x):
        return F.linear(x, self.weight)


def _plus(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return y if bias is None else y + bias


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def collate(batch: list[Encoded]) -> tuple[torch.Tensor, ...]:
    """Right-padded tensors; a pad row sees only itself (SDPA needs one visible key per row)."""
    T = max(len(e.ids) for e in batch)
    B = len(batch)
    tokens = torch.zeros(B, T, dtype=torch.long)
    positions = torch.zeros(B, T, dtype=torch.long)
    visible = torch.eye(T, dtype=torch.bool).repeat(B, 1, 1)
    rows, targets = [], []
    for b, e in enumerate(batch):
        n = len(e.ids)
        tokens[b, :n] = torch.tensor(e.ids)
        positions[b, :n] = e.positions
        visible[b, :n, :n] = e.visible
        rows += [b * T + r for r in e.loss_rows]
        targets += [e.ids[r + 1] for r in e.loss_rows]
    return tokens, positions, visible, torch.tensor(rows), torch.tensor(targets)


def loss_on(model: TrainModel, batch: list[Encoded]) -> torch.Tensor:
    tokens, positions, visible, rows, targets = collate(batch)
    h = model.hidden(tokens, positions, visible).flatten(0, 1)[rows]
    return F.cross_entropy(model.logits(h).float(), targets)


@dataclass
class TrainConfig:
    """A run is fixed by its steps (or epochs), never by the clock: two variants trained side by
    side, or on machines of different speed, see the same batches in the same order (the seed)."""

    epochs: float = 1.0
    steps: int = 0  # optimizer steps; 0: epochs * examples / batch
    batch: int = 8
    lr: float = 1e-3
    warmup: float = 0.1
    max_len: int = 384
    max_minutes: float = 0.0  # 0: no cap; a cap makes the run depend on the machine's speed
    seed: int = 0
    log_every: int = 10
    # "bf16": the forward's and backward's matmuls in bfloat16 (autocast), LoRA and optimizer
    # state in fp32. Several times faster where the CPU multiplies bf16 natively (AVX512_BF16,
    # AMX); not bit-identical to an fp32 run, so the committed adapters' recipe stays fp32.
    dtype: str = "fp32"


def fit(model: TrainModel, data: list[Encoded], cfg: TrainConfig, log=print) -> dict:
    """AdamW with linear warmup and cosine decay over cfg.steps (or the epochs' steps); stops early
    only at a cfg.max_minutes cap when one is set. Returns stats."""
    g = torch.Generator().manual_seed(cfg.seed)
    max_len = min(cfg.max_len, model.args.max_seq_len)  # the RoPE tables end at max_seq_len
    data = [e for e in data if len(e.ids) <= max_len]
    if not data:
        raise ValueError(f"no training example fits --max-len {max_len}")
    steps = cfg.steps or max(1, math.ceil(len(data) * cfg.epochs / cfg.batch))
    passes = math.ceil(steps * cfg.batch / len(data))
    order = torch.cat([torch.randperm(len(data), generator=g) for _ in range(passes)]).tolist()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    warm = max(1, int(steps * cfg.warmup))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(
            (s + 1) / warm,
            0.5 * (1 + math.cos(math.pi * min(1.0, max(0, s - warm) / max(1, steps - warm)))),
        ),
    )
    t0, tokens, losses = time.perf_counter(), 0, []
    step = 0
    for step in range(steps):
        batch = [data[i] for i in order[step * cfg.batch : (step + 1) * cfg.batch]]
        if not batch:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
            loss = loss_on(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        tokens += sum(len(e.ids) for e in batch)
        losses.append(loss.item())
        elapsed = time.perf_counter() - t0
        if step % cfg.log_every == 0 or step == steps - 1:
            log(
                f"step {step + 1}/{steps} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
                f"{tokens / elapsed:.0f} tok/s {elapsed / 60:.1f} min"
            )
        if cfg.max_minutes and elapsed > cfg.max_minutes * 60:
            log(f"stopping at the {cfg.max_minutes} min budget (step {step + 1}/{steps})")
            break
    elapsed = time.perf_counter() - t0
    return {
        "steps": step + 1,
        "planned_steps": steps,
        "examples": len(data),
        "tokens": tokens,
        "seed": cfg.seed,
        "dtype": cfg.dtype,
        "seconds": round(elapsed, 1),
        "tokens_per_s": round(tokens / elapsed, 1),
        "first_loss": losses[0] if losses else None,
        "last_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
    }
