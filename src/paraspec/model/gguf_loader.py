"""A GGUF file -> LoadedModel: llama.cpp's tensor names and metadata keys read as transformer.py's.

The metadata and tensors come from gguf_file.read_gguf; a file that asks for math the forward
does not compute (architecture.py) is refused in one line. keep_quantized (quantization "gguf"):
Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K matmul weights come back as ggml.GGUFWeight (their stored
blocks) instead of dequantised; others are dequantised, with a log line. A fused weight whose parts
differ in format (Q4_K_M's Q6_K attn_v) is a ggml_parts.GGUFParts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .. import catalog
from ..errors import ModelLoadError
from . import architecture, ggml
from .args import ModelArgs
from .checkpoint import LoadedModel, check_arch, fuse_layer
from .ggml import GGUFWeight

logger = logging.getLogger("paraspec.loader")


def unpermute(w: np.ndarray | GGUFWeight, n_heads: int) -> np.ndarray | GGUFWeight:
    """llama.cpp stores Llama Q/K rows interleaved for its rotary layout; restore HF's halves.
    (A row's blocks lie along it, so GGUF blocks move with their rows.)"""
    if isinstance(w, GGUFWeight):
        return w.permute_rows(lambda a: unpermute(a, n_heads))
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tokenizer_source(fields: dict) -> dict:
    """What tokenizer.Tokenizer.from_source needs from a GGUF file's metadata (a vocabulary-only
    file, without tensors, has all of it)."""
    field = fields.get
    return {
        "kind": "gguf",
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens") or [],
        "merges": field("tokenizer.ggml.merges") or [],
        "scores": field("tokenizer.ggml.scores") or [],  # SentencePiece ('llama') vocabularies
        "add_space_prefix": field("tokenizer.ggml.add_space_prefix"),
        "token_type": field("tokenizer.ggml.token_type") or [],
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "eot_token_id": field("tokenizer.ggml.eot_token_id"),
        "add_bos_token": field("tokenizer.ggml.add_bos_token"),  # None: the pre-tokenizer's default
        "chat_template": field("tokenizer.chat_template"),
    }


def load_gguf(path: Path, keep_quantized: bool = False) -> LoadedModel:
    import gguf

    from .gguf_file import CutShort, read_gguf

    try:
        reader = read_gguf(path)
    except CutShort as e:
        fix = next(
            (
                catalog.fetch_hint(a.name) + " to fetch it again"
                for a in catalog.ARTIFACTS.values()
                if a.file == path.name
            ),
            "download or copy the whole file again",
        )
        raise ModelLoadError(
            f"{str(path)!r} is cut short ({e}; an interrupted download or copy?); {fix}"
        ) from None
    except Exception as e:  # struct / numpy / mmap raise assorted errors on bad files
        raise ModelLoadError(
            f"cannot read {str(path)!r} as GGUF ({type(e).__name__}: {e}); "
            "check that the file is complete and really a .gguf model"
        ) from None
    field = reader.get
    arch = field("general.architecture", "?")
    check_arch(arch, str(path))
    tensors = reader.tensors
    architecture.check_gguf_fields(reader.fields, str(path))
    architecture.check_tensors(tensors, "gguf", int(field(f"{arch}.block_count", 0)), str(path))

    dequantised: dict[str, int] = {}

    def tensor(
        name: str, required: bool = True, matmul: bool = False
    ) -> np.ndarray | GGUFWeight | None:
        t = tensors.get(name)
        if t is None:
            if required:
                raise ModelLoadError(
                    f"GGUF {str(path)!r} lacks tensor {name!r}; the file is "
                    "incomplete or not a decoder-only language model"
                )
            return None
        kind = t.tensor_type.name
        if keep_quantized and matmul:
            if kind in ggml.FORMATS and len(t.shape) == 2:
                return GGUFWeight(kind, t.data.reshape(int(t.shape[1]), -1))
            dequantised[kind] = dequantised.get(kind, 0) + 1
        try:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise ModelLoadError(
                f"tensor {name!r} uses quantisation type {t.tensor_type.name}, which "
                "paraspec cannot dequantise; use an F32/F16/BF16/Q8_0/Q4_x/Qx_K file"
            )
        return np.asarray(a, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])

    n_heads = int(field(f"{arch}.attention.head_count"))
    n_kv = int(field(f"{arch}.attention.head_count_kv", n_heads))
    dim = int(field(f"{arch}.embedding_length"))
    embed = tensor("token_embd.weight", matmul=True)
    head_dim = int(field(f"{arch}.attention.key_length", dim // n_heads))
    rope_freqs = tensor("rope_freqs.weight", required=False)
    scaling = architecture.gguf_rope_scaling(reader.fields, arch)
    if rope_freqs is not None:
        if scaling is not None:  # llama.cpp would apply both; paraspec's RoPE takes one
            raise architecture.refuse(
                str(path),
                f"rope_freqs.weight with {arch}.rope.scaling.factor {scaling['factor']}",
                "RoPE takes frequency factors or a linear scaling",
            )
        scaling = {"rope_type": "freq_factors", "factors": rope_freqs.tolist()}
    args = ModelArgs(
        arch=arch,
        vocab_size=embed.shape[0],
        dim=dim,
        n_layers=int(field(f"{arch}.block_count")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        hidden_dim=int(field(f"{arch}.feed_forward_length")),
        norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_seq_len=int(field(f"{arch}.context_length", 4096)),
        tie_embeddings="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        qk_norm="blk.0.attn_q_norm.weight" in tensors or arch == "qwen3",
    )
    w: dict[str, np.ndarray] = {"tok_embeddings": embed, "norm": tensor("output_norm.weight")}
    if not args.tie_embeddings:
        w["lm_head"] = tensor("output.weight", matmul=True)
    for i in range(args.n_layers):
        b = f"blk.{i}."
        q, k = tensor(b + "attn_q.weight", matmul=True), tensor(b + "attn_k.weight", matmul=True)
        qb, kb = tensor(b + "attn_q.bias", False), tensor(b + "attn_k.bias", False)
        if arch == "llama":  # convert_hf_to_gguf permutes llama's q/k biases with their rows
            q, k = unpermute(q, n_heads), unpermute(k, n_kv)
            qb, kb = (
                None if x is None else unpermute(x, h) for x, h in ((qb, n_heads), (kb, n_kv))
            )
        mm = [
            tensor(b + f"{n}.weight", matmul=True)
            for n in ("attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
        ]
        # Qwen3 always has them: a file without is incomplete, not another model
        qk_norm = arch == "qwen3"
        fuse_layer(
            w,
            i,
            q,
            k,
            *mm,
            tensor(b + "attn_norm.weight"),
            tensor(b + "ffn_norm.weight"),
            qb,
            kb,
            tensor(b + "attn_v.bias", qb is not None),
            tensor(b + "attn_q_norm.weight", qk_norm),
            tensor(b + "attn_k_norm.weight", qk_norm),
            tensor(b + "attn_output.bias", False),
        )
    if dequantised:
        logger.info(
            "paraspec: no GGUF kernel for %s; those tensors are dequantised (the Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K "
            "ones run as stored)",
            ", ".join(f"{k} ({n} tensors)" for k, n in sorted(dequantised.items())),
        )
    tok_source = gguf_tokenizer_source(reader.fields)
    return LoadedModel(args, w, path, path.stem, tok_source, reader.fields, tuple(tensors))
