"""The decoder forward: Llama / Qwen2 / Qwen3, all of it in this file, readable top to bottom.

One forward takes the new tokens of one or more sequences (flattened), their position ids and,
per sequence, a boolean mask among its new tokens (a causal chain or a draft tree). Each new
token sees its sequence's whole committed KV cache plus the new tokens the mask allows (or,
with SeqInput.mask_from, the committed slots before mask_from and what the mask allows after).
Logits come back only for the rows asked for. Where every layer is GGUF on the compiled kernels,
a decode step's layer loop runs as one csrc call with the loop's bits (gguf_decoder.py).

Numerics: weights in bf16 or fp32 (or int8, quant.py, or GGUF blocks, ggml.py); the residual
stream, norms, RoPE and attention in fp32. Row invariance is the design goal: a token's logits must not depend on how
many other tokens share the forward, so that verifying a draft in one pass gives exactly what
one-token autoregressive steps give. Where compiled kernels run (kernels.py), every decode
linear and the attention are invariant by construction (csrc: each output one fixed sequence of
operations). Without them, the forward leans on measured behaviour: matmuls through oneDNN's
prepacked kernels on a multiple of ROW_MULTIPLE rows (the forward pads its tokens once; Linear
pads what is left), and the torch `attention` below (fp64 sums over fixed key chunks);
docs/design-notes.md has the measurements.
A prompt (prefill, forward(prompt=True)) needs none of that: every decoding mode, AR included,
starts from the same prefill, so prompts take torch's fastest matmuls and a plain fp32
attention (prompt_attention).
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from . import kernels as cpu_kernels
from .args import ModelArgs
from .ggml import EmbeddingRows, GGUFLinear, GGUFWeight
from .ggml_parts import GGUFParts, GGUFPartsLinear
from .gguf_decoder import EMPTY_MASK as _EMPTY, gguf_decoder
from .kv_cache import KEY_BUCKET, KVCache, round_up
from .seq_input import SeqInput

ROW_MULTIPLE = 4  # matmuls run on a multiple of this many rows (row invariance, see module doc)


MATMULS = ("wqkv", "wo", "w_gate_up", "w_down", "lm_head", "tok_embeddings")  # weights' short names


class Linear:
    """y = x @ W.T (+ b) for an fp32 or bf16 weight, exact per row where drafts are verified.

    Decode/verify rows (the default) go through the csrc linear of the model's kernels: fp32
    FMA over k in a fixed order, so a row's bits depend on that row alone (any row count, place
    or thread count) and are the same on AVX2 and AVX-512. Prompt chunks (prompt=True), which
    need no row invariance, take torch's fastest matmul: oneDNN's prepacked one for bf16 where it
    exists, MKL's F.linear for fp32. Without compiled kernels, decode rows take torch too, padded
    to a multiple of ROW_MULTIPLE rows and through oneDNN's prepacked matmul, which measured
    row-invariant from 2 rows on (MKL's sgemm is not on an Intel AVX-512 CPU: its blocking
    changes with the row count; benchmarks/kernels.py --only invariance prints what this CPU does)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 kernels: cpu_kernels.Kernels | None = None):
        self.weight = weight.contiguous()
        self.bias = bias
        self.out_features, self.in_features = weight.shape
        module = (kernels or cpu_kernels.default()).module
        self.kernel = None if module is None else module.linear
        self.bias32 = None if bias is None else bias.float().contiguous()
        self.packed = None
        # oneDNN's packed copy: for bf16 prompts, and for every decode row without kernels
        if hasattr(torch.ops.mkldnn, "_linear_pointwise") and (self.kernel is None or weight.dtype == torch.bfloat16):
            try:   # a torch build that cannot pack (or run) it keeps F.linear
                packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, 1)
                torch.ops.mkldnn._linear_pointwise(torch.zeros(1, self.in_features, dtype=weight.dtype), packed, None, "none", [], "")
                self.packed = packed
            except (RuntimeError, AttributeError):
                pass

    def _mm(self, x: torch.Tensor, prompt: bool) -> torch.Tensor:
        if self.packed is not None and not (prompt and x.dtype == torch.float32):
            y = torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
            return y if self.bias is None else y + self.bias
        if self.bias is not None and self.bias.dtype != x.dtype:   # fp32 bias beside bf16 weights
            return F.linear(x, self.weight) + self.bias            # added in fp32, as the packed road does
        return F.linear(x, self.weight, self.bias)

    def norm_linear(self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, prompt: bool = False) -> torch.Tensor:
        """self(rms_norm(x)): the csrc linear fuses the two (one call), torch runs two ops."""
        if self.kernel is not None and not prompt:
            return self.kernel(x, self.weight, self.bias32, norm_weight, eps)
        return self(rms_norm(x, norm_weight, eps), prompt)

    def __call__(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        if self.kernel is not None and not prompt:
            return self.kernel(x if x.dtype == torch.float32 else x.float(), self.weight, self.bias32)
        x = x.to(self.weight.dtype)
        m = x.shape[0]
        if m % ROW_MULTIPLE and not prompt:
            pad = ROW_MULTIPLE - m % ROW_MULTIPLE
            return self._mm(torch.cat([x, x[-1:].expand(pad, -1)]), prompt)[:m]
        return self._mm(x, prompt)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # x: [..., dim] fp32; one fused op (same math as HF's LlamaRMSNorm in fp32)
    return F.rms_norm(x, weight.shape, weight, eps)


def rope_tables(args: ModelArgs, max_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [max_pos, head_dim] for the rotate-half convention (HF layout)."""
    d = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    scaling = args.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old_ctx = scaling.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        inv_freq = torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
    elif kind == "freq_factors":  # GGUF llama3 files store the per-frequency divisors directly
        inv_freq = inv_freq / torch.tensor(scaling["factors"], dtype=torch.float64)
    elif kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind not in (None, "default"):
        raise ValueError(f"unsupported rope_scaling type {kind!r}")
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, head_dim]; cos/sin: [T, 1, head_dim]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def max_draft_rows(cache: KVCache) -> int:
    """How many draft rows may follow the root in the next verify pass without the root and
    drafts straddling a KEY_BUCKET boundary (the condition for bit-exact verification)."""
    return KEY_BUCKET - 1 - cache.length % KEY_BUCKET


def attention_bias(cache: KVCache, q: int, tree_mask: torch.Tensor | None, group: int,
                   mask_from: int | None = None) -> torch.Tensor:
    """Additive mask [group * q_rows, keys] (tiled for the query heads sharing a kv head): 0 where
    a row may attend, -inf elsewhere. Rows see slots [0, start) (start: mask_from, default the
    committed length) and what tree_mask allows of the slots from start to the new rows' end.

    Keys run to the committed length + q rounded up to KEY_BUCKET (slots past the end are
    zeros and masked); query rows are padded to a multiple of ROW_MULTIPLE (pad rows see key 0).
    """
    start = cache.length if mask_from is None else mask_from
    end = cache.length + q
    keys = min(cache.capacity, round_up(end, KEY_BUCKET))
    rows = round_up(q, ROW_MULTIPLE)
    visible = torch.zeros(rows, keys, dtype=torch.bool)
    visible[:q, :start] = True
    if tree_mask is None:
        if start != cache.length:
            raise ValueError("SeqInput.mask_from needs a tree_mask over the slots from mask_from on")
        visible[:q, start:end] = torch.ones(q, q, dtype=torch.bool).tril_()
    else:
        visible[:q, start:end] = tree_mask
    visible[q:, 0] = True
    bias = torch.zeros(rows, keys).masked_fill_(~visible, float("-inf"))
    return bias.repeat(group, 1)


def attention(q: torch.Tensor, cache: KVCache, layer: int, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """Softmax attention of q [q, n_heads, head_dim] (fp32) over one sequence's cache.

    Written for row invariance rather than with F.scaled_dot_product_attention, whose kernels
    block the key axis by the number of query rows and keys: a token's output must be the same
    bits whether it is the single token of an autoregressive step or one node of a draft tree,
    whose ancestors sit in slots with masked siblings between them. So:
    - query rows are padded to a ROW_MULTIPLE multiple (see the module docstring);
    - scores are q . k in fp64 (each product of fp32 values exact) rounded to fp32: a BLAS may
      sum head_dim in an order that depends on the row count (MKL's sgemm did, capped at AVX2),
      and in fp64 that regrouping stays below one fp32 rounding step (as for V below); exp is
      per element; the max is exact in any order;
    - the only sum over keys, exp(scores - max) @ [V | 1] (numerator and softmax denominator
      in one matmul), accumulates in fp64 on V widened from fp32. A tree's gaps move keys across
      the matmul's internal K-blocks, which regroups the sum; in fp64 that changes it by ~1e-16
      relative, far below one fp32 rounding step, so the rounded result keeps its bits (a flip
      needs the sum within 1e-16 of a rounding boundary: ~1e-9 per element). In fp32 the
      regrouping showed up as real flips of the greedy token at near-ties;
    - keys are split into KEY_BUCKET-slot chunks summed in order, and the root and draft rows
      never straddle a chunk boundary (max_draft_rows), so a longer key axis only adds all-zero
      chunks: for chain drafts the sum is then bit-identical by construction.
    Returns [q, n_heads * head_dim].
    """
    n_q, n_heads, head_dim = q.shape
    n_kv = cache.k.shape[1]
    group = n_heads // n_kv
    keys = bias.shape[1]
    rows = bias.shape[0] // group
    if rows > n_q:
        q = torch.cat([q, q.new_zeros(rows - n_q, n_heads, head_dim)])
    k = cache.k[layer, :, :keys]                                   # [kv_heads, keys, head_dim]
    v = cache.v_with_ones(layer, keys)                             # [kv_heads, keys, head_dim + 1] fp64
    # query heads sharing a kv head are consecutive, so they stack into one matmul per kv head
    qg = q.permute(1, 0, 2).reshape(n_kv, group * rows, head_dim)
    scores = torch.baddbmm(bias.double(), qg.double(), k.double().transpose(1, 2), alpha=scale).float()  # [kv, g*rows, keys]
    scores = scores.sub_(scores.amax(-1, keepdim=True)).exp_()
    # P @ [V | 1] per KEY_BUCKET chunk of keys, then summed over chunks: a longer key axis only
    # adds chunks of exact zeros, so the sum does not depend on how far the keys were padded
    chunks = keys // KEY_BUCKET
    e = scores.view(n_kv, group * rows, chunks, KEY_BUCKET).transpose(1, 2).double()  # [kv, chunks, g*rows, KB]
    out = torch.matmul(e, v.view(n_kv, chunks, KEY_BUCKET, head_dim + 1)).sum(1)  # [kv, g*rows, d + 1]
    out = (out[..., :head_dim] / out[..., head_dim:]).float()
    return out.view(n_heads, rows, head_dim)[:, :n_q].transpose(0, 1).reshape(n_q, n_heads * head_dim)


# Prompt chunks of at most PROMPT_ATTENTION_ROWS[kernels] rows (the default prefill chunk is 256)
# attend through the csrc kernel over any context: torch's op overhead dominates a short chunk, and
# one over a long cache (a new turn after a reused prefix) is a verify step's shape. The AVX2
# kernels also take chunks of any height over at most PROMPT_ATTENTION_KEYS keys. Measured with
# `benchmarks/prefill.py --attention-roads`; the figures are in docs/benchmarks.md ("The prompt
# road under one activation pass").
PROMPT_ATTENTION_ROWS = {"avx512": 256, "avx2": 64}
PROMPT_ATTENTION_KEYS = 1024
PROMPT_BLOCK = 64   # query rows per block of prompt_attention: a block's scores stay in cache


def prompt_bias(cache: KVCache, n: int, group: int) -> list[torch.Tensor]:
    """prompt_attention's additive causal masks for a chunk of n tokens after the committed ones,
    one per block of PROMPT_BLOCK query rows: [group * rows, keys up to the block's last row].
    Built once per forward, the same for every layer."""
    start = cache.length
    blocks = []
    for i0 in range(0, n, PROMPT_BLOCK):
        rows, keys = min(PROMPT_BLOCK, n - i0), start + min(n, i0 + PROMPT_BLOCK)
        visible = torch.ones(rows, keys, dtype=torch.bool).tril_(start + i0)   # row i sees keys <= start + i0 + i
        blocks.append(torch.zeros(rows, keys).masked_fill_(~visible, float("-inf")).repeat(group, 1))
    return blocks


def prompt_attention(q: torch.Tensor, cache: KVCache, layer: int, bias: list[torch.Tensor], scale: float) -> torch.Tensor:
    """Causal attention of a prompt chunk q [n, n_heads, head_dim] (fp32) over the cache's
    committed keys and its own, in plain fp32 (softmax, then one matmul), a block of
    PROMPT_BLOCK query rows at a time: a block reads only the keys it can see (half the work of
    a square mask) and its scores stay in cache (a whole chunk's score matrix does not). On a
    1k-token prompt much faster than `attention`, whose fp64 sum over key chunks exists for row
    invariance. A prompt does not need that: every decoding mode, AR included, starts from the
    same prefill, so greedy parallel decoding stays identical to greedy AR. (F.scaled_dot_product_attention was slower here, on 2 cores.)
    Returns [n, n_heads * head_dim]."""
    n, n_heads, head_dim = q.shape
    n_kv = cache.k.shape[1]
    group = n_heads // n_kv
    qg = q.permute(1, 0, 2).reshape(n_kv, group, n, head_dim)
    out = q.new_empty(n_kv, group, n, head_dim)
    for b, block_bias in enumerate(bias):
        i0 = b * PROMPT_BLOCK
        rows, keys = block_bias.shape[0] // group, block_bias.shape[1]
        k = cache.k[layer, :, :keys].float()                       # [kv_heads, keys, head_dim]
        v = cache.v[layer, :, :keys].float()                       # (a no-op on an fp32 cache)
        qb = qg[:, :, i0:i0 + rows].reshape(n_kv, group * rows, head_dim)
        probs = torch.baddbmm(block_bias, qb, k.transpose(1, 2), alpha=scale).softmax(-1)
        out[:, :, i0:i0 + rows] = torch.bmm(probs, v).view(n_kv, group, rows, head_dim)
    return out.view(n_heads, n, head_dim).transpose(0, 1).reshape(n, n_heads * head_dim)


def make_linear(weight: torch.Tensor | GGUFWeight, bias: torch.Tensor | None = None, quantization: str | None = None,
                kernels: cpu_kernels.Kernels | None = None, passes: int = 2):
    """A Linear in the weight's dtype, an Int8Linear (W8A8, see quant.py) built from it, or a
    GGUFLinear over GGUF blocks (ggml.py); passes: their int8 activation passes (1 or 2)."""
    if isinstance(weight, GGUFWeight):
        return GGUFLinear(weight, bias, kernels=kernels, residual=passes == 2)
    if isinstance(weight, GGUFParts):
        return GGUFPartsLinear(weight, bias, kernels=kernels, residual=passes == 2)
    if quantization == "w8a8":
        from .quant import Int8Linear
        return Int8Linear.from_float(weight.float(), bias, kernels=kernels, residual=passes == 2)
    return Linear(weight, bias, kernels)


class Layer:
    """Weights of one decoder block (fused q/k/v and fused gate/up)."""

    def __init__(self, args: ModelArgs, w: dict[str, torch.Tensor], quantization: str | None = None,
                 kernels: cpu_kernels.Kernels | None = None, passes: int = 2):
        self.attn_norm = w["attn_norm"]
        self.ffn_norm = w["ffn_norm"]
        self.wqkv = make_linear(w["wqkv"], w.get("bqkv"), quantization, kernels, passes)
        self.wo = make_linear(w["wo"], w.get("bo"), quantization, kernels, passes)
        self.w_gate_up = make_linear(w["w_gate_up"], None, quantization, kernels, passes)
        self.w_down = make_linear(w["w_down"], None, quantization, kernels, passes)
        self.q_norm = w.get("q_norm")
        self.k_norm = w.get("k_norm")


class Transformer:
    """Forward only. Weights are plain tensors; see loader.py for where they come from.
    kernels: the compiled CPU kernels to run (default: the process's choice, kernels.default())."""

    def __init__(self, args: ModelArgs, weights: dict[str, torch.Tensor], dtype: torch.dtype,
                 quantization: str | None = None, kernels: cpu_kernels.Kernels | None = None,
                 kv_dtype: torch.dtype = torch.float32, activation_passes: int | str | None = None):
        self.args = args
        self.kv_dtype = kv_dtype         # the caches' elements (kv_cache.py)
        self.quantization = quantization
        self.dtype = dtype
        self.kernels = kernels = kernels or cpu_kernels.default()
        # int8 activation passes of the quantised linears (kernels.resolve_activation_passes)
        self.activation_passes = passes = cpu_kernels.resolve_activation_passes(activation_passes, kernels, quantization)
        if quantization == "gguf":   # what no GGUF kernel runs is a plain linear in `dtype`
            weights = {k: w if isinstance(w, (GGUFWeight, GGUFParts)) or k.rsplit(".", 1)[-1] not in MATMULS else w.to(dtype)
                       for k, w in weights.items()}
        self.lm_head = make_linear(weights.get("lm_head", weights["tok_embeddings"]), None, quantization, kernels, passes)
        embed = weights["tok_embeddings"]   # [vocab, dim]; rows looked up (GGUF: dequantised at first use)
        self.tok_embeddings = EmbeddingRows(embed) if isinstance(embed, GGUFWeight) else embed.to(dtype)
        self.norm = weights["norm"]                                # [dim] fp32
        self.layers = [Layer(args, {k.split(".", 2)[2]: v for k, v in weights.items()
                                    if k.startswith(f"layers.{i}.")}, quantization, kernels, passes)
                       for i in range(args.n_layers)]
        self.rope_cos, self.rope_sin = rope_tables(args, args.max_seq_len)
        # Rows are padded to ROW_MULTIPLE for torch's matmuls (module doc). GGUF linears on the
        # compiled kernels (and the csrc attention and linear) are row-invariant at any row
        # count, so there the padding would only cost rows: a decode step runs 1 row, not 4.
        self.row_multiple = 1 if quantization == "gguf" and kernels.module is not None else ROW_MULTIPLE
        self.scale = args.head_dim ** -0.5
        self.decoder = gguf_decoder(kernels, args, self.layers, self.scale)   # None: the layer loop runs in Python

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if isinstance(self.tok_embeddings, EmbeddingRows):
            return self.tok_embeddings(tokens)
        return self.tok_embeddings[tokens].float()

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.args, capacity, self.kv_dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, seqs: list[SeqInput],
                logits_rows: torch.Tensor | None = None, prompt: bool = False) -> torch.Tensor:
        """tokens, positions: [T] (sequences' new tokens concatenated in the order of `seqs`).
        Returns fp32 logits [R, vocab] for rows `logits_rows` (default: every row).
        prompt: the tokens are a causal prompt chunk (prefill): attention through
        `prompt_attention`, fast but not row-invariant."""
        a = self.args
        n_heads, n_kv, hd = a.n_heads, a.n_kv_heads, a.head_dim
        if prompt and any(s.tree_mask is not None for s in seqs):
            raise ValueError("forward(prompt=True) takes causal chunks only (no tree mask)")
        for s in seqs:
            s.cache.reserve(s.cache.length + s.num_tokens)
            if s.tree_mask is not None and tuple(s.tree_mask.shape) != (s.num_tokens, s.cache.length + s.num_tokens - s.start):
                raise ValueError(f"tree_mask has shape {tuple(s.tree_mask.shape)}; it must cover the "
                                 f"{s.num_tokens} new rows and the slots from {s.start} to the last new one")
        n_tokens = tokens.shape[0]
        on_kernel = prompt and (n_tokens <= PROMPT_ATTENTION_ROWS.get(self.kernels.name, 0) or (  # prompt chunks
            self.kernels.name == "avx2" and all(s.cache.length + s.num_tokens <= PROMPT_ATTENTION_KEYS for s in seqs)))
        kernel = self.kernels.rope_attention if not prompt or on_kernel else None
        group = n_heads // n_kv
        biases = [None if kernel else prompt_bias(s.cache, s.num_tokens, group) if prompt else
                  attention_bias(s.cache, s.num_tokens, s.tree_mask, group, s.mask_from)
                  for s in seqs]
        pad = round_up(n_tokens, self.row_multiple) - n_tokens
        if pad:  # dummy rows (copies of the last token) keep every matmul at a multiple of 4 rows
            tokens = torch.cat([tokens, tokens[-1:].expand(pad)])
            positions = torch.cat([positions, positions[-1:].expand(pad)])
        ends = itertools.accumulate(s.num_tokens for s in seqs)
        rows = [slice(end - s.num_tokens, end) for s, end in zip(seqs, ends)]   # each sequence's rows
        cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)   # [T, 1, head_dim]

        x = self.embed(tokens)                                     # [T, dim] residual stream, fp32
        fused = not prompt and self.decoder is not None   # a decoder exists only with the csrc kernels
        if fused:   # the loop below in one csrc call: the same kernels in the same order (gguf_decoder.py)
            x = self.decoder(x, cos, sin, seqs)
        for i, layer in enumerate(() if fused else self.layers):
            # attention block
            qkv = layer.wqkv.norm_linear(x, layer.attn_norm, a.norm_eps, prompt).float().view(-1, n_heads + 2 * n_kv, hd)
            if layer.q_norm is not None:
                qkv = torch.cat([rms_norm(qkv[:, :n_heads], layer.q_norm, a.norm_eps),
                                 rms_norm(qkv[:, n_heads:n_heads + n_kv], layer.k_norm, a.norm_eps),
                                 qkv[:, n_heads + n_kv:]], dim=1)
            if kernel is not None:  # csrc: RoPE, the cache write and attention in one call per sequence
                outs = [kernel(qkv[r], cos[r], sin[r], s.cache.k[i], s.cache.v[i], s.cache.length, s.start,
                               _EMPTY if s.tree_mask is None else s.tree_mask, self.scale, s.key_order)
                        for s, r in zip(seqs, rows)]
            else:
                qk = apply_rope(qkv[:, :n_heads + n_kv], cos, sin)     # q and k rotated in one go
                q, k, v = qk[:, :n_heads], qk[:, n_heads:], qkv[:, n_heads + n_kv:]
                attend = prompt_attention if prompt else attention
                outs = []
                for s, bias, r in zip(seqs, biases, rows):
                    s.cache.write(i, k[r], v[r])
                    outs.append(attend(q[r], s.cache, i, bias, self.scale))
            if pad:
                outs.append(qkv.new_zeros(pad, n_heads * hd))
            o = outs[0] if len(outs) == 1 else torch.cat(outs)
            x += layer.wo(o, prompt)        # in place (x is this forward's own); a bf16 output promotes to fp32
            # feed-forward block (SwiGLU)
            gate, up = layer.w_gate_up.norm_linear(x, layer.ffn_norm, a.norm_eps, prompt).chunk(2, dim=-1)
            x += layer.w_down(F.silu(gate).mul_(up), prompt)

        x = x[:n_tokens] if logits_rows is None else x[logits_rows]
        return self.lm_head.norm_linear(x, self.norm, a.norm_eps, prompt).float()
