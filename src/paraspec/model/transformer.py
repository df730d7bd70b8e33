"""The decoder forward: Llama / Qwen2 / Qwen3, readable top to bottom (Layer, Transformer.forward).

One forward takes the new tokens of one or more sequences (flattened), their position ids and,
per sequence, a boolean mask among its new tokens (a causal chain or a draft tree). Each new
token sees its sequence's whole committed KV cache plus the new tokens the mask allows (or,
with SeqInput.mask_from, the committed slots before mask_from and what the mask allows after).
Logits come back only for the rows asked for. Where every layer is GGUF on the compiled kernels,
a decode step's layer loop runs as one csrc call with the loop's bits (gguf_decoder.py).
What the forward calls lives beside it: the linears (linear.py), attention and its masks
(attention.py), RoPE (rope.py), the KV cache (kv_cache.py) and the shapes (args.py).

Numerics: weights in bf16 or fp32 (or int8, quant.py, or GGUF blocks, ggml.py); the residual
stream, norms, RoPE and attention in fp32. Row invariance is the design goal: a token's logits must not depend on how
many other tokens share the forward, so that verifying a draft in one pass gives exactly what
one-token autoregressive steps give. Where compiled kernels run (kernels.py), every decode
linear and the attention are invariant by construction (csrc: each output one fixed sequence of
operations). Without them, the forward leans on measured behaviour: matmuls through oneDNN's
prepacked kernels on a multiple of ROW_MULTIPLE rows (the forward pads its tokens once; Linear
pads what is left), and the torch `attention` (fp64 sums over fixed key chunks);
docs/design-notes.md has the measurements.
A prompt (prefill, forward(prompt=True)) needs none of that: every decoding mode, AR included,
starts from the same prefill, so prompts take torch's fastest matmuls and a plain fp32
attention (prompt_attention).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from . import kernels as cpu_kernels
from .args import ModelArgs
from .attention import attention, attention_bias, prompt_attention, prompt_bias, prompt_on_kernel
from .ggml import EmbeddingRows, GGUFWeight
from .gguf_decoder import EMPTY_MASK as _EMPTY, gguf_decoder
from .kv_cache import KVCache, round_up
from .linear import ROW_MULTIPLE, make_linear, plain_gguf_weights, rms_norm
from .rope import apply_rope, rope_tables
from .seq_input import SeqInput


class Layer:
    """Weights of one decoder block (fused q/k/v and fused gate/up)."""

    def __init__(
        self,
        args: ModelArgs,
        w: dict[str, torch.Tensor],
        quantization: str | None = None,
        kernels: cpu_kernels.Kernels | None = None,
        passes: int = 2,
    ):
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

    def __init__(
        self,
        args: ModelArgs,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        quantization: str | None = None,
        kernels: cpu_kernels.Kernels | None = None,
        kv_dtype: torch.dtype = torch.float32,
        activation_passes: int | str | None = None,
    ):
        self.args = args
        self.kv_dtype = kv_dtype  # the caches' elements (kv_cache.py)
        self.quantization = quantization
        self.dtype = dtype
        self.kernels = kernels = kernels or cpu_kernels.default()
        # int8 activation passes of the quantised linears (kernels.resolve_activation_passes)
        self.activation_passes = passes = cpu_kernels.resolve_activation_passes(
            activation_passes, kernels, quantization
        )
        if quantization == "gguf":  # what no GGUF kernel runs is a plain linear in `dtype`
            weights = plain_gguf_weights(weights, dtype)
        self.lm_head = make_linear(
            weights.get("lm_head", weights["tok_embeddings"]), None, quantization, kernels, passes
        )
        # [vocab, dim]; rows looked up (GGUF: dequantised at first use)
        embed = weights["tok_embeddings"]
        self.tok_embeddings = (
            EmbeddingRows(embed) if isinstance(embed, GGUFWeight) else embed.to(dtype)
        )
        self.norm = weights["norm"]  # [dim] fp32
        self.layers = [
            Layer(
                args,
                {k.split(".", 2)[2]: v for k, v in weights.items() if k.startswith(f"layers.{i}.")},
                quantization,
                kernels,
                passes,
            )
            for i in range(args.n_layers)
        ]
        self.rope_cos, self.rope_sin = rope_tables(args, args.max_seq_len)
        # Rows are padded to ROW_MULTIPLE for torch's matmuls (linear.py). GGUF linears on the
        # compiled kernels (and the csrc attention and linear) are row-invariant at any row
        # count, so there the padding would only cost rows: a decode step runs 1 row, not 4.
        self.row_multiple = (
            1 if quantization == "gguf" and kernels.module is not None else ROW_MULTIPLE
        )
        self.scale = args.head_dim**-0.5
        # None: the layer loop runs in Python
        self.decoder = gguf_decoder(kernels, args, self.layers, self.scale)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if isinstance(self.tok_embeddings, EmbeddingRows):
            return self.tok_embeddings(tokens)
        return self.tok_embeddings[tokens].float()

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.args, capacity, self.kv_dtype)

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        seqs: list[SeqInput],
        logits_rows: torch.Tensor | None = None,
        prompt: bool = False,
        features: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens, positions: [T] (sequences' new tokens concatenated in the order of `seqs`).
        Returns fp32 logits [R, vocab] for rows `logits_rows` (default: every row).
        prompt: the tokens are a causal prompt chunk (prefill): attention through
        `prompt_attention`, fast but not row-invariant.
        features: also return those rows' last hidden states, normed as the LM head sees them
        ([R, dim] fp32): what a draft head (decoding/drafters/draft_head.py) drafts from."""
        a = self.args
        n_heads, n_kv, hd = a.n_heads, a.n_kv_heads, a.head_dim
        if prompt and any(s.tree_mask is not None for s in seqs):
            raise ValueError("forward(prompt=True) takes causal chunks only (no tree mask)")
        for s in seqs:
            s.cache.reserve(s.cache.length + s.num_tokens)
            if s.tree_mask is not None and tuple(s.tree_mask.shape) != (
                s.num_tokens,
                s.cache.length + s.num_tokens - s.start,
            ):
                raise ValueError(
                    f"tree_mask has shape {tuple(s.tree_mask.shape)}; it must cover the "
                    f"{s.num_tokens} new rows and the slots from {s.start} to the last new one"
                )
        n_tokens = tokens.shape[0]
        on_kernel = prompt and prompt_on_kernel(self.kernels.name, n_tokens, seqs)
        kernel = self.kernels.rope_attention if not prompt or on_kernel else None
        group = n_heads // n_kv
        biases = [
            None
            if kernel
            else prompt_bias(s.cache, s.num_tokens, group)
            if prompt
            else attention_bias(s.cache, s.num_tokens, s.tree_mask, group, s.mask_from)
            for s in seqs
        ]
        pad = round_up(n_tokens, self.row_multiple) - n_tokens
        if pad:  # dummy rows (copies of the last token) keep every matmul at a multiple of 4 rows
            tokens = torch.cat([tokens, tokens[-1:].expand(pad)])
            positions = torch.cat([positions, positions[-1:].expand(pad)])
        ends = itertools.accumulate(s.num_tokens for s in seqs)
        # each sequence's rows
        rows = [slice(end - s.num_tokens, end) for s, end in zip(seqs, ends)]
        # [T, 1, head_dim]
        cos, sin = (
            self.rope_cos[positions].unsqueeze(1),
            self.rope_sin[positions].unsqueeze(1),
        )

        x = self.embed(tokens)  # [T, dim] residual stream, fp32
        # a decoder exists only with the csrc kernels
        fused = not prompt and self.decoder is not None
        # the loop below in one csrc call: the same kernels in the same order (gguf_decoder.py)
        if fused:
            x = self.decoder(x, cos, sin, seqs)
        for i, layer in enumerate(() if fused else self.layers):
            # attention block
            qkv = (
                layer.wqkv.norm_linear(x, layer.attn_norm, a.norm_eps, prompt)
                .float()
                .view(-1, n_heads + 2 * n_kv, hd)
            )
            if layer.q_norm is not None:
                qkv = torch.cat(
                    [
                        rms_norm(qkv[:, :n_heads], layer.q_norm, a.norm_eps),
                        rms_norm(qkv[:, n_heads : n_heads + n_kv], layer.k_norm, a.norm_eps),
                        qkv[:, n_heads + n_kv :],
                    ],
                    dim=1,
                )
            # csrc: RoPE, the cache write and attention in one call per sequence
            if kernel is not None:
                outs = [
                    kernel(
                        qkv[r],
                        cos[r],
                        sin[r],
                        s.cache.k[i],
                        s.cache.v[i],
                        s.cache.length,
                        s.start,
                        _EMPTY if s.tree_mask is None else s.tree_mask,
                        self.scale,
                        s.key_order,
                    )
                    for s, r in zip(seqs, rows)
                ]
            else:
                qk = apply_rope(qkv[:, : n_heads + n_kv], cos, sin)  # q and k rotated in one go
                q, k, v = qk[:, :n_heads], qk[:, n_heads:], qkv[:, n_heads + n_kv :]
                attend = prompt_attention if prompt else attention
                outs = []
                for s, bias, r in zip(seqs, biases, rows):
                    s.cache.write(i, k[r], v[r])
                    outs.append(attend(q[r], s.cache, i, bias, self.scale))
            if pad:
                outs.append(qkv.new_zeros(pad, n_heads * hd))
            o = outs[0] if len(outs) == 1 else torch.cat(outs)
            # in place (x is this forward's own); a bf16 output promotes to fp32
            x += layer.wo(o, prompt)
            # feed-forward block (SwiGLU)
            gate, up = layer.w_gate_up.norm_linear(x, layer.ffn_norm, a.norm_eps, prompt).chunk(
                2, dim=-1
            )
            x += layer.w_down(F.silu(gate).mul_(up), prompt)

        x = x[:n_tokens] if logits_rows is None else x[logits_rows]
        logits = self.lm_head.norm_linear(x, self.norm, a.norm_eps, prompt).float()
        return (logits, rms_norm(x.float(), self.norm, a.norm_eps)) if features else logits
